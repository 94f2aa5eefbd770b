"""A small run of each benchmark: the results have their shape and positive numbers. Timings are
not asserted; `make bench` measures them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import containers, dispatch, ladder, ledger, overhead, saves, stitch, store
from bench.common import ROOT, LocalFarm, Row


def _rows_ok(rows: list[Row], bench: str) -> None:
    assert rows and all(r.bench == bench and r.case and r.farm and r.baseline for r in rows)
    assert all(r.ratio is None or r.ratio > 0 for r in rows)


def test_overhead_smoke(bench_farm: LocalFarm) -> None:
    result, rows = overhead.run(bench_farm, quick=True)
    _rows_ok(rows, "overhead")
    case = result["cases"][0]
    assert case["direct"]["total_s"] > 0 and case["direct"]["scene_load_s"] > 0
    assert 0 < case["direct"]["first_frame_s"] < case["direct"]["blender_s"]
    before, after = case["direct"]["runs"]  # the baseline is the mean of runs either side
    assert case["direct"]["total_s"] == round((before["total_s"] + after["total_s"]) / 2, 3)
    assert case["direct"]["drift"] == round(after["total_s"] / before["total_s"], 3)
    assert 0 < case["farm"]["first_frame_s"] <= case["farm"]["first_thumbnail_s"]
    assert case["farm"]["first_frame_s"] < case["farm"]["total_s"]
    farm = case["farm"]
    assert farm["total_s"] > 0 and farm["chunks"] == len(farm["per_chunk"]) >= 2
    assert farm["chunk_size_chosen"] not in ("", "auto") and farm["chunk_plan"].startswith("auto")
    assert sum(c["frames"] for c in farm["per_chunk"]) == case["frames"]
    assert all(c["render_frames"] > 0 and c["encode"] > 0 for c in farm["per_chunk"])
    shown = bench_farm.farm("status", farm["job"]).stdout
    assert f"chunk size {farm['chunk_size_chosen']}: auto: S=" in shown


def test_overhead_rounds_share_their_direct_runs_and_print_medians(bench_farm: LocalFarm) -> None:
    """Two rounds: direct, farm, direct, farm, direct; each round's baseline is the direct runs
    either side of it (the middle one serves both) and the row's ratio is the rounds' median."""
    result, rows = overhead.run(bench_farm, quick=True, rounds=2, frame_counts=[8])
    first, second = result["cases"]
    assert (first["round"], second["round"]) == (1, 2)
    assert first["direct"]["runs"][1] == second["direct"]["runs"][0]
    ratios = sorted(c["farm"]["total_s"] / c["direct"]["total_s"] for c in (first, second))
    whole = next(r for r in rows if "spp" in r.case)
    assert whole.ratio == pytest.approx(sum(ratios) / 2)
    assert "median of 2 rounds: " in whole.note
    # The second job of the same scene and settings is sized from the first one's probe.
    assert "(probe)" not in whole.note.split("rounds: ")[1].split(";")[0].split(", ")[1]


def test_dispatch_smoke(bench_farm: LocalFarm) -> None:
    result, rows = dispatch.run(bench_farm, quick=True)
    _rows_ok(rows, "dispatch")
    assert result["farm_chunks_per_s"] > 0 and result["bare_tasks_per_s"] > 0
    assert result["farm_chunk_latency_ms_median"] > 0
    # Where the CPU went: each chunk's three objects cost the store CPU that no bare task does.
    chunk, bare = result["cpu_ms_per_chunk"], result["cpu_ms_per_bare_task"]
    assert chunk["workers"] > bare["workers"] > 0 and chunk["store"] > bare["store"]
    assert "ms CPU (workers " in rows[0].note


def test_ladder_farm_smoke(bench_farm: LocalFarm) -> None:
    """One round on the tests' farm, the separate jobs' CRFs given (matching them to the rungs'
    bitrates is the full run's work): the ladder job and one transcode job per rung all done, each
    side's seconds and each rung's bytes recorded."""
    result, rows = ladder.run_farm(quick=True, rounds=1, farm=bench_farm, crfs=[27, 24, 21])
    _rows_ok(rows, "ladder")
    (first,) = result["rounds"]
    assert first["order"] == ["ladder", "separate"]
    assert len(first["ladder"]["jobs"]) == 1 and len(first["separate"]["jobs"]) == 3
    for side in (first["ladder"], first["separate"]):
        assert side["wall_s"] > 0 and side["encode_s"] > 0 and side["stitch_s"] > 0
        assert len(side["rung_bytes"]) == 3 and all(b > 0 for b in side["rung_bytes"])
    # Largest rung first on both sides: 640x360, then 426x240 and 256x144.
    assert result["separate"][0].startswith("640x360 crf 27")
    assert first["ladder"]["rung_bytes"] == sorted(first["ladder"]["rung_bytes"], reverse=True)
    assert result["ratio_min"] == result["ratio_median"] == first["ratio"] > 0


def test_ledger_smoke() -> None:
    result, rows = ledger.run(quick=True)
    _rows_ok(rows, "ledger")
    assert result["transitions_per_s"] > 0 and result["ping_round_trips_per_s"] > 0
    assert result["round_trips_per_chunk"] == 6  # see bench.ledger.chunk_life


def test_containers_smoke() -> None:
    """The container farm beside the process farm, once: both ran the job, a stopped worker
    handed its chunk back, and the images were measured."""
    result, rows = containers.run(quick=True)
    _rows_ok(rows, "containers")
    assert len(result["process_s"]) == 2 and len(result["container_s"]) == 1
    assert all(s > 0 for s in result["process_s"] + result["container_s"])
    assert result["stop_to_handback_s"] >= 0
    assert set(result["image_sizes_mb"]) == {
        "farm-redis:dev",
        "farm-seaweedfs:dev",
        "farm-worker:dev",
    }


def test_stitch_smoke() -> None:
    result, rows = stitch.run(quick=True)
    _rows_ok(rows, "stitch")
    assert [c["segments"] for c in result["cases"]] == [2, 5]
    assert all(c["concat_s"] > 0 and c["cp_s"] > 0 and c["bytes"] > 0 for c in result["cases"])


def test_saves_smoke() -> None:
    result, rows = saves.run(quick=True)
    _rows_ok(rows, "saves")
    assert result["linked"] == [True]  # the demo's RGBA PNG, its film opaque: the preview
    assert all(s > 0 for s in (*result["save_s"], *result["blender_save_s"]))


def test_store_smoke(bench_farm: LocalFarm) -> None:
    result, rows = store.run(bench_farm, quick=True)
    _rows_ok(rows, "store")
    assert {(c["kind"], c["threads"]) for c in result["cases"]} == {
        ("frame", 1), ("frame", 8), ("segment", 1), ("segment", 8)
    }  # fmt: skip
    assert all(c["upload_mib_s"] > 0 and c["download_mib_s"] > 0 for c in result["cases"])


def test_python_m_bench_writes_one_results_file_and_a_table(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "simulate", "--quick", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=600, check=True,
    )  # fmt: skip
    files = list(tmp_path.glob("bench-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["machine"]["cores"] >= 1 and data["rows"][0]["bench"] == "simulate"
    assert "| simulate |" in out.stdout and "auto" in out.stdout

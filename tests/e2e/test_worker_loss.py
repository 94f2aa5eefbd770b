"""Workers vanish mid-chunk (kill -9, a paused host, chaos): no chunk lost, no frame duplicated."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from farm.adapters.settings import load_settings
from farm.core.pipeline import Phase
from farm.dispatch import Dispatcher, make_app
from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import (
    frame_count,
    kill_group,
    spawn_worker,
    status,
    submit,
    wait_final,
    wait_for,
)

pytestmark = pytest.mark.e2e

LEASE_S, RECONCILE_S = 6.0, 1.0  # as tests/conftest.py sets them


def _rendering_chunk(farm: LocalFarm, job_id: str, min_frames: int) -> bool:
    return any(
        c["state"] == "rendering" and c["frames_rendered"] >= min_frames
        for c in status(farm, job_id)["chunks"]
    )


def test_killed_worker_loses_no_chunk_and_finished_frames_are_not_rendered_again(
    tmp_path: Path,
) -> None:
    farm = start_farm(tmp_path, workers=0)
    try:
        first = spawn_worker(farm, "doomed@test")
        job_id = submit(farm, DEMO, "--frames", "1-16", "--chunk-size", "16", "--samples", "8")
        wait_for(
            "the chunk to render 4 frames", lambda: _rendering_chunk(farm, job_id, 4), 120, farm
        )
        kill_group(first)
        killed_at = time.monotonic()
        done_before = set(farm.ledger().frame_records(job_id))
        second = spawn_worker(farm, "rescuer@test")
        wait_for(
            "the chunk to be taken back",
            lambda: status(farm, job_id)["chunks"][0]["worker"] == "rescuer@test",
            LEASE_S + RECONCILE_S + 15,  # the bound, plus the rescuer's start-up
            farm,
        )
        recovered_s = time.monotonic() - killed_at
        summary = wait_final(farm, job_id, 180)
        assert summary["state"] == "done", summary["error"]
        assert frame_count(farm, job_id, tmp_path) == 16
        counts = farm.ledger().render_counts(job_id)
        assert sorted(counts) == list(range(1, 17))
        assert all(counts[f] == 1 for f in done_before), counts
        chunk = farm.ledger().chunk(job_id, 0)
        assert int(chunk["frames_reused"]) >= len(done_before) >= 4
        assert int(chunk["lost_leases"]) == 1 and int(chunk.get("failures", 0)) == 0
        print(f"recovered in {recovered_s:.1f} s (bound {LEASE_S + RECONCILE_S:.0f} s + start-up)")
        kill_group(second)
    finally:
        farm.down()


def test_paused_worker_and_its_replacement_leave_one_manifest_and_one_stitch(
    tmp_path: Path,
) -> None:
    """The same chunk runs on two workers at once: the first is frozen past its lease, the second
    takes the chunk, then the first wakes up and tries to carry on."""
    farm = start_farm(tmp_path, workers=0)
    try:
        frozen = spawn_worker(farm, "frozen@test")
        job_id = submit(farm, DEMO, "--frames", "1-12", "--chunk-size", "12", "--samples", "8")
        wait_for(
            "the chunk to render 2 frames", lambda: _rendering_chunk(farm, job_id, 2), 120, farm
        )
        kill_group(frozen, signal.SIGSTOP)
        other = spawn_worker(farm, "other@test")
        wait_for(
            "the other worker to take the chunk",
            lambda: status(farm, job_id)["chunks"][0]["worker"] == "other@test",
            60,
            farm,
        )
        kill_group(frozen, signal.SIGCONT)
        summary = wait_final(farm, job_id, 180)
        assert summary["state"] == "done", summary["error"]
        assert frame_count(farm, job_id, tmp_path) == 12
        store = farm.store()
        # One manifest per chunk (once awake, an idle worker may split the running chunk's
        # tail off into a second chunk), each the winning attempt's, whichever worker that was.
        total = int(farm.ledger().job(job_id)["chunks_total"])
        assert len(store.keys(f"jobs/{job_id}/manifests/")) == total
        for index in range(total):
            manifest = store.get_json(f"jobs/{job_id}/manifests/{index:05d}.json")
            chunk = farm.ledger().chunk(job_id, index)
            assert manifest["attempt"] == int(chunk["token"].split(":")[0])
            assert manifest["worker"] == chunk["worker"]
        gates = [e for e in farm.ledger().events(job_id) if e["event"] == "stitch-gate"]
        assert len(gates) == 1
        for worker in (frozen, other):
            kill_group(worker)
    finally:
        farm.down()


def test_duplicate_chunk_messages_change_nothing(local_farm: LocalFarm, tmp_path: Path) -> None:
    job_id = submit(local_farm, DEMO, "--frames", "1-12", "--chunk-size", "4", "--samples", "2")
    dispatch = Dispatcher(make_app(load_settings(env={}, config_path=local_farm.config)))
    for _ in range(2):
        for chunk in range(3):
            dispatch.send(Phase.RENDER, job_id, chunk)
            dispatch.send(Phase.SEGMENT, job_id, chunk)
        dispatch.stitch(job_id)
    summary = wait_final(local_farm, job_id, 180)
    assert summary["state"] == "done", summary["error"]
    time.sleep(2)  # let the duplicates drain through the workers
    assert frame_count(local_farm, job_id, tmp_path) == 12
    # One manifest per chunk: three, and one more for each running chunk whose tail an idle
    # worker split off; the duplicates add none.
    total = int(local_farm.ledger().job(job_id)["chunks_total"])
    assert total >= 3
    assert len(local_farm.store().keys(f"jobs/{job_id}/manifests/")) == total
    assert set(local_farm.ledger().render_counts(job_id).values()) == {1}
    gates = [e for e in local_farm.ledger().events(job_id) if e["event"] == "stitch-gate"]
    assert len(gates) == 1
    assert json.loads(local_farm.farm("status", job_id, "--json").stdout)["state"] == "done"


def test_chaos_random_kills_still_give_an_exact_video(tmp_path: Path) -> None:
    farm = start_farm(tmp_path, workers=0)
    rng = random.Random(7)
    workers = [spawn_worker(farm, f"chaos{i}@test") for i in range(2)]
    kills = 0
    started = time.monotonic()
    try:
        job_id = submit(farm, DEMO, "--frames", "1-48", "--chunk-size", "4", "--samples", "6")
        while (
            status(farm, job_id)["state"] not in ("done", "failed")
            and time.monotonic() - started < 400
        ):
            time.sleep(4)
            if kills < 6 and status(farm, job_id)["state"] == "running":
                victim = workers.pop(rng.randrange(len(workers)))
                kill_group(victim)
                kills += 1
                workers.append(spawn_worker(farm, f"chaos{kills + 1}@test"))
        summary = wait_final(farm, job_id, 300)
        wall_s = time.monotonic() - started
        assert summary["state"] == "done", summary["error"]
        assert kills >= 5
        # 12 chunks, plus one for each split of a tail by an idle worker (farm.core.split); their
        # frames still cover 1-48 once each.
        ledger = farm.ledger()
        splits = sum(1 for e in ledger.events(job_id) if e["event"] == "split")
        assert summary["chunks_total"] == 12 + splits
        chunks = ledger.chunks(job_id)
        assert sorted(f for c in chunks for f in json.loads(c["frames"])) == list(range(1, 49))
        assert frame_count(farm, job_id, tmp_path) == 48
        counts = ledger.render_counts(job_id)
        assert sorted(counts) == list(range(1, 49))
        requeues = sum(int(c.get("lost_leases", 0)) for c in chunks)
        duplicates = sum(counts.values()) - 48
        figures = {"kills": kills, "requeues": requeues, "duplicate_renders": duplicates,
                   "wall_s": round(wall_s, 1)}  # fmt: skip
        print("chaos:", json.dumps(figures))
        (tmp_path.parent / "chaos-figures.json").write_text(json.dumps(figures))
    finally:
        for worker in workers:
            kill_group(worker)
        farm.down()

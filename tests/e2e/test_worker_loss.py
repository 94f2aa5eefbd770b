"""Workers vanish mid-chunk (kill -9, a paused host, chaos): no chunk lost, no frame duplicated."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from farm.adapters.settings import load_settings
from farm.core import keys
from farm.core.pipeline import Phase, Queue
from farm.core.queues import queued_work
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
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
KILLS = 6
"""Workers the chaos test kills, each while it renders one of the job's chunks."""


def _rendering_chunk(farm: LocalFarm, job_id: str, min_frames: int) -> bool:
    return any(
        c["state"] == "rendering" and c["frames_rendered"] >= min_frames
        for c in status(farm, job_id)["chunks"]
    )


def _rendering_on(ledger: Ledger, job_id: str, workers: set[str], min_frames: int) -> list[str]:
    """The workers of `workers` rendering one of the job's chunks, `min_frames` of it stored."""
    return sorted(
        c["worker"]
        for c in ledger.chunks(job_id)
        if c["state"] == "rendering"
        and c.get("worker") in workers
        and int(c.get("frames_rendered") or 0) >= min_frames
    )


def _messages_for(farm: LocalFarm, job_id: str) -> list[tuple[str, str, int]]:
    """The job's messages the broker still holds, waiting or in a worker's hands (acks late)."""
    held = farm.ledger().broker_messages(str(q) for q in Queue)
    return [work for work in queued_work(held) if work[1] == job_id]


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
            180,  # the bound (LEASE_S + RECONCILE_S) plus the rescuer's start-up, on a busy host
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
            180,
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
            chunk = farm.ledger().chunk(job_id, index)
            manifest = store.get_json(keys.chunk_manifest_key(job_id, chunk))
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
    wait_for(
        "the duplicates to drain through the workers",
        lambda: not _messages_for(local_farm, job_id),
        120,
        local_farm,
    )
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
    """Each kill at an event, never on a timer: a live worker holds one of the job's chunks in
    its render (by the draw, from its claim or from its first frame stored), so every kill hits
    a running chunk and a fast machine gets as many as a slow one. Each loses that chunk's
    lease and leaves its stored frames to be reused."""
    farm = start_farm(tmp_path, workers=0)
    rng = random.Random(7)
    live = {f"chaos{i}@test": spawn_worker(farm, f"chaos{i}@test") for i in range(2)}
    started = time.monotonic()
    try:
        job_id = submit(farm, DEMO, "--frames", "1-48", "--chunk-size", "4", "--samples", "6")
        ledger = farm.ledger()
        for kill in range(1, KILLS + 1):
            min_frames = rng.choice((0, 1))
            holders: list[str] = []

            def found(min_frames: int = min_frames, holders: list[str] = holders) -> bool:
                holders[:] = _rendering_on(ledger, job_id, set(live), min_frames)
                return bool(holders)

            wait_for(f"kill {kill}: a live worker rendering a chunk", found, 180, farm)
            victim = rng.choice(sorted(holders))
            kill_group(live.pop(victim))
            live[f"chaos{kill + 1}@test"] = spawn_worker(farm, f"chaos{kill + 1}@test")
        summary = wait_final(farm, job_id, 600)
        wall_s = time.monotonic() - started
        assert summary["state"] == "done", summary["error"]
        # 12 chunks, plus one for each split of a tail by an idle worker (farm.core.split); their
        # frames still cover 1-48 once each.
        splits = sum(1 for e in ledger.events(job_id) if e["event"] == "split")
        assert summary["chunks_total"] == 12 + splits
        chunks = ledger.chunks(job_id)
        assert sorted(f for c in chunks for f in json.loads(c["frames"])) == list(range(1, 49))
        assert frame_count(farm, job_id, tmp_path) == 48
        counts = ledger.render_counts(job_id)
        assert sorted(counts) == list(range(1, 49))
        # Every kill hit a running chunk, which lost its lease for it.
        requeues = sum(int(c.get("lost_leases", 0)) for c in chunks)
        assert requeues >= KILLS, chunks
        duplicates = sum(counts.values()) - 48
        figures = {"kills": KILLS, "requeues": requeues, "duplicate_renders": duplicates,
                   "wall_s": round(wall_s, 1)}  # fmt: skip
        print("chaos:", json.dumps(figures))
        (tmp_path.parent / "chaos-figures.json").write_text(json.dumps(figures))
    finally:
        for worker in live.values():
            kill_group(worker)
        farm.down()

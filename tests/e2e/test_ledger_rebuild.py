"""The store is the record: a ledger that lost its jobs is rebuilt from the store, by the running
reconciler as soon as it notices, or by hand with `farm reconcile --rebuild`. Done chunks stay done
(never encoded again), stored frames are reused (never rendered again), the rest is rendered, and
a job that was done stays fetchable."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from farm.control.processes import Farm
from farm.core import keys
from tests.conftest import DEMO, LocalFarm, ffprobe, start_farm
from tests.e2e.farmtools import kill_group, spawn_worker, submit, wait_final, wait_for

pytestmark = pytest.mark.e2e


def _frame_objects(farm: LocalFarm, job_id: str) -> dict[int, set[str]]:
    """Each frame's stored objects' writers (one per attempt that stored it)."""
    prefix = keys.frames_prefix(job_id)
    found: dict[int, set[str]] = {}
    for key in farm.store().keys(prefix):
        parsed = keys.frame_from_key(key, prefix)
        if parsed is not None:
            found.setdefault(parsed[0], set()).add(str(parsed[1]))
    return found


def _half_done(farm: LocalFarm) -> tuple[str, dict[int, object], list[int]]:
    """A job of 12 frames in chunks of 4, its first chunk done and at least one frame of another
    stored, its only worker killed there: (job, the frame records, the done chunks)."""
    worker = spawn_worker(farm, "first@test")
    job_id = submit(farm, DEMO, "--frames", "1-12", "--chunk-size", "4", "--samples", "4",
                    "--priority", "70", "--max-cost", "1000")  # fmt: skip
    ledger = farm.ledger()

    def progress() -> bool:
        chunks = ledger.chunks(job_id)
        done = [c for c in chunks if c.get("state") == "done"]
        return bool(done) and len(ledger.frame_records(job_id)) > 4 * len(done)

    wait_for("a chunk done and a frame of the next stored", progress, 300, farm)
    kill_group(worker)
    records = ledger.frame_records(job_id)
    done = [int(c["index"]) for c in ledger.chunks(job_id) if c.get("state") == "done"]
    return job_id, records, done


def _wipe(farm: LocalFarm) -> None:
    """Everything Redis held, gone, as an operator would meet a ledger that came back empty."""
    farm.ledger().r.flushall()


def _rebuild_by_hand(farm: LocalFarm) -> str:
    """`farm reconcile --rebuild` as the operator runs it, with the control plane's config."""
    done = subprocess.run(
        [sys.executable, "-m", "farm", "reconcile", "--rebuild"],
        env=farm.role_env("control"), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _check_whole(farm: LocalFarm, job_id: str, before: dict[int, object], tmp: Path) -> None:
    """The job ended done with every frame; the frames stored before the loss were not rendered
    again (each still has its one object, the one its record names)."""
    summary = wait_final(farm, job_id, 600)
    assert summary["state"] == "done", summary
    out = tmp / "out.mp4"
    done = farm.farm("fetch", job_id, str(out), check=True)
    assert str(out) in done.stdout
    assert int(ffprobe(out)["streams"][0]["nb_read_frames"]) == 12
    objects = _frame_objects(farm, job_id)
    after = farm.ledger().frame_records(job_id)
    for frame, record in before.items():
        assert objects[frame] == {record.writer}, (frame, objects[frame])  # type: ignore[attr-defined]
        assert after[frame] == record


def test_the_reconciler_rebuilds_a_ledger_that_came_back_empty(tmp_path: Path) -> None:
    """GIVEN a job half done WHEN every key in Redis is lost THEN the reconciler notices within
    a pass, puts the job back from the store (done chunk done, stored frames recorded, priority
    and budget kept) and sends its waiting chunks, and the job ends whole without rendering a
    stored frame again."""
    farm = start_farm(tmp_path, workers=0)
    try:
        job_id, records, done = _half_done(farm)
        _wipe(farm)
        ledger = farm.ledger()
        wait_for("the reconciler to rebuild the job", lambda: bool(ledger.job(job_id)), 60, farm)
        job = ledger.job(job_id)
        assert (job["priority"], float(job["max_cost"])) == ("70", 1000.0)
        assert int(job["chunks_done"]) == len(done)
        # Every frame recorded before is recorded again, as it was (a frame stored as the
        # worker was killed, before its record, has one now too).
        rebuilt = ledger.frame_records(job_id)
        assert {f: rebuilt.get(f) for f in records} == records
        events = [e["event"] for e in ledger.events(job_id)]
        assert "rebuilt" in events
        spawn_worker(farm, "second@test")
        _check_whole(farm, job_id, records, tmp_path)
        # The done chunk's segment was never made again: one segment per chunk.
        segments = farm.store().keys(f"jobs/{job_id}/segments/")
        assert len(segments) == int(ledger.job(job_id)["chunks_total"]), segments
    finally:
        farm.down()


def test_redis_killed_mid_job_with_its_data_wiped_and_farm_up_the_job_finishes(
    tmp_path: Path,
) -> None:
    """The operator's story from the issue: a render job half done, Redis killed and its data
    wiped, `farm up` run. Redis comes back (the rest kept running), the reconciler rebuilds the
    ledger from the store, and the job ends whole, no stored frame rendered again."""
    farm = start_farm(tmp_path, workers=0)
    try:
        job_id, records, _ = _half_done(farm)
        state = Farm.load(farm.data)
        os.killpg(state.pids["redis"], signal.SIGKILL)
        wait_for("Redis to die", lambda: not Farm.load(farm.data).ours("redis"), 30)
        shutil.rmtree(farm.data / "redis")

        up = farm.farm("up", "--data", str(farm.data), "--workers", "0", timeout=180)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "brought back: redis" in up.stdout.splitlines(), up.stdout
        ledger = farm.ledger()
        wait_for("the reconciler to rebuild the job", lambda: bool(ledger.job(job_id)), 60, farm)
        spawn_worker(farm, "second@test")
        _check_whole(farm, job_id, records, tmp_path)
    finally:
        farm.down()


def test_farm_reconcile_rebuild_says_what_it_found(tmp_path: Path) -> None:
    """GIVEN a job done and a job half done, the reconciler stopped WHEN the ledger is lost and
    the operator runs `farm reconcile --rebuild` THEN it says which job it rebuilt and how far
    it was, and which was done; the done job's video is still fetched, and the half-done job
    ends whole once a worker comes."""
    farm = start_farm(tmp_path, workers=0)
    try:
        worker = spawn_worker(farm, "first@test")
        finished = submit(farm, DEMO, "--frames", "1-4", "--chunk-size", "4", "--samples", "2")
        assert wait_final(farm, finished, 300)["state"] == "done"
        kill_group(worker)
        job_id, records, done = _half_done(farm)
        os.kill(Farm.load(farm.data).pids["reconciler"], signal.SIGKILL)
        _wipe(farm)

        out = _rebuild_by_hand(farm)
        lines = out.splitlines()
        said = next((line for line in lines if line.startswith(f"{job_id}: ")), "")
        found = re.fullmatch(
            rf"{job_id}: rebuilt, {len(done)} of 3 chunks done, (\d+) stored frames kept, "
            r"(\d+) frames to render",
            said,
        )
        assert found is not None, out
        # The frames of the chunks still to run: those recorded before are kept (one more
        # where the worker was killed between storing a frame and recording it).
        left = 12 - 4 * len(done)
        assert int(found[1]) >= len(records) - 4 * len(done), out
        assert int(found[1]) + int(found[2]) == left, out
        assert any(line.startswith(f"{finished}: done") for line in lines), out
        assert lines[-1].startswith("2 jobs in the store: 1 rebuilt, 1 done"), out
        # A second run finds the job in the ledger and changes nothing.
        again = _rebuild_by_hand(farm)
        assert f"{job_id}: in the ledger already" in again.splitlines(), again

        video = tmp_path / "finished.mp4"
        farm.farm("fetch", finished, str(video), check=True)
        assert int(ffprobe(video)["streams"][0]["nb_read_frames"]) == 4

        spawn_worker(farm, "second@test")
        _check_whole(farm, job_id, records, tmp_path)
    finally:
        farm.down()

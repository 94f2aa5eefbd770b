"""A stale writer on a whole farm: a worker frozen mid-render past its lease wakes after the chunk's
new owner finished the job, and carries on uploading; nothing the job is made of changes."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.conftest import DEMO, LocalFarm, start_farm
from tests.e2e.farmtools import kill_group, spawn_worker, status, submit, wait_final, wait_for

pytestmark = pytest.mark.e2e

_WRITER = re.compile(r"\.c(\d+-\d+)[./]|/(\d{5})-(?:\w+-attempt\d+-)?claim(\d+)\.")
"""The claim an object's key names, as `CHUNK-CLAIM` (farm.core.keys.writer): frames,
thumbnails, frame folders; logs and segments."""


_GAVE_UP = re.compile(r"chunk 0: lease|chunk 0 is another attempt's now")
"""What the stale worker logs as its attempt ends (workers.attempt.policy, LeaseLost)."""


def _writer_of(key: str) -> str | None:
    found = _WRITER.search(key)
    if found is None:
        return None
    return found[1] or f"{int(found[2])}-{found[3]}"


def _objects(farm: LocalFarm, job_id: str) -> dict[str, tuple[int, str] | None]:
    """Every object of the job: its size and ETag."""
    store = farm.store()
    return {key: store.head(key) for key in store.keys(f"jobs/{job_id}/")}


def test_a_stale_attempt_waking_after_the_job_is_done_changes_none_of_its_objects(
    tmp_path: Path,
) -> None:
    """GIVEN a worker frozen mid-render past its lease, the chunk rendered, encoded and the job
    stitched by the worker it was handed to WHEN the frozen worker wakes and carries on THEN
    every object the job had keeps its bytes (the delivered video, frames, masters, thumbnails,
    manifests, segments), the frame records are unchanged, and whatever the stale attempt wrote
    lies under its own claim's names."""
    farm = start_farm(tmp_path, workers=0)
    try:
        stale = spawn_worker(farm, "stale@test")
        job_id = submit(farm, DEMO, "--frames", "1-8", "--chunk-size", "8", "--samples", "8")
        wait_for(
            "the chunk to render 2 frames",
            lambda: any(c["frames_rendered"] >= 2 for c in status(farm, job_id)["chunks"]),
            180,
            farm,
        )
        claim = int(farm.ledger().chunk(job_id, 0)["token"].split(":")[1].split("-")[0])
        stale_writer = f"0-{claim}"
        kill_group(stale, signal.SIGSTOP)
        winner = spawn_worker(farm, "winner@test")
        summary = wait_final(farm, job_id, 300)
        assert summary["state"] == "done", summary["error"]
        kill_group(winner)  # only the stale attempt writes from here on
        before, records = _objects(farm, job_id), farm.ledger().frame_records(job_id)

        kill_group(stale, signal.SIGCONT)
        stale_log = farm.data / "logs" / "stale.log"
        wait_for(
            "the stale attempt to give its chunk up",
            lambda: _GAVE_UP.search(stale_log.read_text(errors="replace")) is not None,
            120,
            farm,
        )
        after = _objects(farm, job_id)
        assert farm.ledger().frame_records(job_id) == records
        # Every object the job had is as it was, but the stale attempt's own log, which it
        # uploads again as it ends.
        its_log = {k for k in before if "/logs/" in k and _writer_of(k) == stale_writer}
        assert {k: after.get(k) for k in before if k not in its_log} == {
            k: v for k, v in before.items() if k not in its_log
        }
        # Whatever the stale attempt wrote since (a frame it finished, its log) is its own.
        written = {key for key, found in after.items() if before.get(key) != found}
        assert {_writer_of(key) for key in written} <= {stale_writer}, written
        assert farm.ledger().job(job_id)["output"] in before
        kill_group(stale)
    finally:
        farm.down()

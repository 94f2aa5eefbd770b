"""`farm retry --frames` against a real Redis and SeaweedFS (farm.control.fixes): the ledger's
one step that reopens a done job for a fix, and what a job in another state gets."""

from __future__ import annotations

import json

import pytest

from farm.adapters.store import Store
from farm.control.fixes import fix_frames
from farm.control.rebuild import read_control
from farm.core import keys
from farm.core.errors import FarmError, SpecError
from farm.core.state import ChunkState, JobState
from farm.ledger import EARLY_PART, EARLY_UPLOAD, FrameRecord, Ledger
from tests.integration.test_retry_remake import _done_job
from tests.integration.test_retry_scene import _settings


def _finished(ledger: Ledger, store: Store, job_id: str) -> str:
    """A done job of frames 1-8 in two chunks, each frame recorded, its video in the store."""
    _done_job(ledger, store, job_id)
    ledger.add_frame_records(
        job_id, {f: FrameRecord(3, "0" * 64, keys.writer((f - 1) // 4, 1)) for f in range(1, 9)}
    )
    ledger.r.hset(keys.r_chunk(job_id, 0), EARLY_PART, "1 etag")
    ledger.r.hset(keys.r_job(job_id), EARLY_UPLOAD, "upload-1")
    output = keys.output_key(job_id)
    store.put_bytes(output, b"the first video")
    ledger.move_job(job_id, JobState.STITCHING)
    ledger.move_job(job_id, JobState.DONE, output=output, finished=1.0)
    return output


def test_a_done_job_reopens_with_only_the_chunk_holding_the_frame(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    # GIVEN a done job WHEN frame 6 is fixed
    output = _finished(ledger, store, "fix-done")
    fixed = fix_frames(_settings(redis_url, store), "fix-done", "6", reason="", by="ann")
    # THEN chunk 1 waits to render it, chunk 0 stays done, frame 6 alone is forgotten
    assert fixed.waiting == [1]
    job = ledger.job("fix-done")
    assert (job["state"], job["chunks_done"], job["output"]) == (JobState.RUNNING, "1", "")
    assert [ledger.chunk("fix-done", i)["state"] for i in (0, 1)] == [
        ChunkState.DONE,
        ChunkState.QUEUED,
    ]
    assert sorted(ledger.frame_records("fix-done")) == [1, 2, 3, 4, 5, 7, 8]
    # the completed early upload and its parts are forgotten
    assert EARLY_UPLOAD not in job and EARLY_PART not in ledger.chunk("fix-done", 0)
    # the fix names the video it replaces, kept as version 1, in the ledger and the store
    etag = store.head(output)[1]
    expected = {
        "frames": [6], "reason": "fixed by ann/farm retry --frames", "by": "ann", "chunks": [1],
        "version": 1, "version_key": keys.output_version_key("fix-done", 1), "output_etag": etag,
    }  # fmt: skip
    recorded = json.loads(job["fixes"])
    assert [{k: f[k] for k in expected} for f in recorded] == [expected]
    assert read_control(store, "fix-done")["fixes"] == recorded
    assert "frames-fixed" in [e["event"] for e in ledger.events("fix-done")]


def test_a_running_job_is_refused_and_left_alone(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    _done_job(ledger, store, "fix-running")
    with pytest.raises(FarmError, match="is running; --frames fixes frames of a done or failed"):
        fix_frames(_settings(redis_url, store), "fix-running", "2", by="ann")
    assert ledger.job("fix-running")["chunks_done"] == "2"


def test_frames_outside_the_job_change_nothing(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    _finished(ledger, store, "fix-outside")
    with pytest.raises(SpecError, match="--frames 9-12: not frames of the job"):
        fix_frames(_settings(redis_url, store), "fix-outside", "2,9-12", by="ann")
    assert ledger.job("fix-outside")["state"] == JobState.DONE


def test_a_failed_jobs_fix_retries_it_with_the_frame_forgotten(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    # GIVEN a job that failed at the stitch, both chunks done
    _done_job(ledger, store, "fix-failed")
    ledger.add_frame_records(
        "fix-failed", {f: FrameRecord(3, "0" * 64, keys.writer(0, 1)) for f in range(1, 5)}
    )
    ledger.move_job("fix-failed", JobState.FAILED, error="stitch failed")
    # WHEN frame 2 is fixed THEN chunk 0 renders it again, and the job runs
    fixed = fix_frames(_settings(redis_url, store), "fix-failed", "2", reason="noise", by="bo")
    assert fixed.waiting == [0] and fixed.fix.version is None
    assert ledger.job("fix-failed")["state"] == JobState.RUNNING
    assert ledger.chunk("fix-failed", 0)["state"] == ChunkState.QUEUED
    assert sorted(ledger.frame_records("fix-failed")) == [1, 3, 4]
    assert json.loads(ledger.job("fix-failed")["fixes"])[0]["reason"] == "noise"

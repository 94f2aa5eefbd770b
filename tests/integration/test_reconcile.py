"""The reconciler against a real Redis: lost leases come back, lost messages are sent again."""

from __future__ import annotations

import time

import pytest

from farm.adapters.settings import Settings
from farm.control.reconcile import Pass, Reconciler
from farm.core import keys
from farm.core.errors import StoreError
from farm.core.state import ChunkState, JobState
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from farm.ledger.jobs import EARLY_UPLOAD
from tests.integration.conftest import make_job
from tests.integration.test_ledger import _job


def _reconciler(ledger: Ledger, redis_url: str) -> Reconciler:
    app = make_app(Settings(redis_url=redis_url))
    return Reconciler(ledger, Dispatcher(app), max_lost_leases=6, orphan_after_s=60)


def test_expired_lease_is_requeued_and_sent_again(ledger: Ledger, redis_url: str) -> None:
    _job(ledger)
    ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=0.01, worker="gone")
    time.sleep(0.05)
    result = Pass()
    _reconciler(ledger, redis_url).expire_leases(result)
    assert result.requeued == [("j1", 0)]
    assert ledger.chunk("j1", 0)["state"] == ChunkState.QUEUED
    assert ledger.queue_length("render") == 1


def test_chunks_whose_message_was_lost_are_sent_again_once_the_queue_is_empty(
    ledger: Ledger, redis_url: str
) -> None:
    _job(ledger)  # recorded, but no message was ever sent (the submitter died)
    rec = _reconciler(ledger, redis_url)
    early = Pass()
    rec.resend_orphans(early, now=time.time() + 10)
    assert early.resent == []  # too soon to call them lost
    late = Pass()
    rec.resend_orphans(late, now=time.time() + 120)
    assert sorted(late.resent) == [("j1", 0), ("j1", 1)]
    assert ledger.queue_length("render") == 2
    again = Pass()
    rec.resend_orphans(again, now=time.time() + 120)
    assert again.resent == []  # their messages are waiting now


class _RefusingStore:
    """Aborts uploads, but the store refuses those of job `a`."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def abort_multipart(self, key: str, upload_id: str) -> None:
        self.asked.append((key, upload_id))
        if key.startswith("jobs/a/"):
            raise StoreError(f"cannot abort the upload of {key}: AccessDenied")


def test_an_early_upload_the_store_will_not_abort_leaves_the_others_aborted(
    ledger: Ledger, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    for job_id in ("a", "b"):
        _job(ledger, job_id=job_id)
        ledger.job_field_once(job_id, EARLY_UPLOAD, f"upload-{job_id}")
        ledger.cancel_job(job_id)
    store = _RefusingStore()
    rec = Reconciler(ledger, Dispatcher(make_app(Settings(redis_url=redis_url))),
                     max_lost_leases=6, store=store, early_upload_keep_s=0)  # type: ignore[arg-type]  # fmt: skip
    result = Pass()
    rec.abort_early_uploads(result)
    assert sorted(store.asked) == [
        ("jobs/a/output.mp4", "upload-a"),
        ("jobs/b/output.mp4", "upload-b"),
    ]
    assert result.aborted == ["b"]
    assert "could not abort the early upload of a" in caplog.text  # left to the lifecycle rule
    assert EARLY_UPLOAD not in ledger.job("a") and EARLY_UPLOAD not in ledger.job("b")


def test_a_job_older_than_a_thousand_others_is_still_watched(
    ledger: Ledger, redis_url: str
) -> None:
    """Found by a review: the reconciler read only the newest 1,000 jobs, so a long job on a busy
    farm whose worker died before sending the stitch stayed running for ever."""
    make_job(ledger, "old", frames="1-2", chunk_size=1)
    for i in range(2):  # every chunk done, the stitch never sent (the gate left shut)
        claim = ledger.move_chunk("old", i, ChunkState.RENDERING, mode="claim", lease_s=30)
        ledger.move_chunk("old", i, ChunkState.RENDERED, token=claim.token)
        claim = ledger.move_chunk("old", i, ChunkState.ENCODING, mode="claim", lease_s=30)
        ledger.move_chunk("old", i, ChunkState.DONE, token=claim.token)
    for n in range(1000):  # then a thousand newer jobs, every one of them over
        make_job(ledger, f"new{n:04d}", frames="1", chunk_size=1)
        ledger.move_job(f"new{n:04d}", JobState.CANCELLED)
    assert "old" not in ledger.job_ids(limit=1000)

    result = Pass()
    _reconciler(ledger, redis_url).open_gates(result)
    assert result.stitched == ["old"]
    assert ledger.job("old")["state"] == JobState.STITCHING
    # The ended ones left the live set as the pass met them.
    assert ledger.r.zrange(keys.r_live_jobs(), 0, -1) == ["old"]


def test_a_farm_from_before_the_live_set_fills_it_once(ledger: Ledger) -> None:
    make_job(ledger, "a")
    make_job(ledger, "b")
    ledger.move_job("b", JobState.CANCELLED)
    ledger.r.delete(keys.r_live_jobs(), keys.r_live_jobs_seeded())  # as an older farm left it
    assert ledger.live_job_ids() == ["a"]
    assert ledger.r.get(keys.r_live_jobs_seeded()) == "1"
    ledger.reopen_job("b", every_unfinished=True)  # a retry watches it again
    assert ledger.live_job_ids() == ["a", "b"]


def test_the_reconciler_never_drops_a_lease_taken_since_it_read_it_expired(
    ledger: Ledger,
) -> None:
    """Found by a review: between the reconciler listing a chunk's lease as expired and reading
    the chunk (rendered, no longer running), the chunk's encode claimed it with a fresh lease,
    which the reconciler then dropped: a worker dying before its first renewal left the chunk
    encoding with no lease, and nothing to bring it back."""
    _job(ledger)
    render = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=0.01)
    time.sleep(0.05)
    read_at = time.time()
    assert ledger.expired_leases(read_at) == [("j1", 0)]
    ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=render.token)
    ledger.move_chunk("j1", 0, ChunkState.ENCODING, mode="claim", lease_s=30)
    ledger.drop_lease("j1", 0, expired_by=read_at)
    assert ledger.r.zscore(keys.r_leases(), keys.lease_member("j1", 0)) > read_at + 20
    assert ledger.expired_leases(read_at + 40) == [("j1", 0)]  # the reconciler still sees it

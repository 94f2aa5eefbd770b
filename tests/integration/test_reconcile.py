"""The reconciler against a real Redis: lost leases come back, lost messages are sent again."""

from __future__ import annotations

import time

import pytest

from farm.dispatch import Dispatcher, make_app
from farm.errors import StoreError
from farm.ledger import Ledger
from farm.ledger_jobs import EARLY_UPLOAD
from farm.reconcile import Pass, Reconciler
from farm.settings import Settings
from farm.state import ChunkState
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

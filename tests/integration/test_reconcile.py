"""The reconciler against a real Redis: lost leases come back, lost messages are sent again."""

from __future__ import annotations

import time

from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
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

"""Lost messages on a busy farm, against a real Redis and real Celery messages: the reconciler
re-sends a waiting chunk whose message is gone even while its queue holds other jobs' work,
and a pass that meets any error logs it and carries on."""

from __future__ import annotations

import logging
import time

import pytest

from farm.adapters.settings import Settings
from farm.control.reconcile import Pass, Reconciler
from farm.core import queues
from farm.core.pipeline import Phase
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from tests.integration.test_ledger import _job


def _reconciler(ledger: Ledger, redis_url: str) -> Reconciler:
    app = make_app(Settings(redis_url=redis_url))
    return Reconciler(ledger, Dispatcher(app), max_lost_leases=6, orphan_after_s=60)


def test_a_lost_message_is_resent_while_the_queue_is_busy(ledger: Ledger, redis_url: str) -> None:
    """GIVEN a busy render queue (50 messages of another job) and job j1 whose chunk 0 has its
    message but chunk 1's was lost, WHEN the reconciler sweeps, THEN only chunk 1 is re-sent."""
    rec = _reconciler(ledger, redis_url)
    _job(ledger)
    for index in range(50):
        rec.dispatch.send(Phase.RENDER, "busy", index)
    rec.dispatch.send(Phase.RENDER, "j1", 0)
    before = ledger.queue_length("render")
    result = Pass()
    rec.resend_orphans(result, now=time.time() + 120)
    assert result.resent == [("j1", 1)]
    assert ledger.queue_length("render") == before + 1
    again = Pass()
    rec.resend_orphans(again, now=time.time() + 120)
    assert again.resent == []


def test_the_broker_messages_name_their_task_job_and_chunk(ledger: Ledger, redis_url: str) -> None:
    rec = _reconciler(ledger, redis_url)
    rec.dispatch.send(Phase.RENDER, "j9", 3)
    rec.dispatch.stitch("j9")
    held = queues.queued_work(ledger.broker_messages(["render", "stitch"]))
    assert ("farm.render_chunk", "j9", 3) in held or any(w[1:] == ("j9", 3) for w in held)
    assert any(w[1:] == ("j9", -1) for w in held)


def test_a_stitch_whose_worker_is_gone_is_sent_again_at_once(
    ledger: Ledger, redis_url: str
) -> None:
    """Found by a review: a stitch whose worker was killed stayed unacknowledged in the broker
    until its visibility timeout, so the job sat stitching for up to 12 hours."""
    rec = _reconciler(ledger, redis_url)
    _job(ledger)
    ledger.r.hset("farm:job:j1", mapping={"state": "stitching", "stitch_started": time.time()})
    rec.dispatch.stitch("j1")  # its message: in the broker all along
    ledger.heartbeat("alive@w", {"queues": ["stitch"]})
    ledger.stitch_taken("j1", "alive@w")
    quiet = Pass()
    rec.resend_orphans(quiet)
    assert quiet.resent == []  # its worker is there: the stitch runs
    ledger.stitch_taken("j1", "killed@w")  # never heard from
    result = Pass()
    rec.resend_orphans(result)
    assert result.resent == [("j1", -1)]
    assert ledger.job("j1")["stitch_worker"] == ""  # the next stitch says who runs it
    again = Pass()
    rec.resend_orphans(again)
    assert again.resent == []  # once


class Exploding(Ledger):
    """A ledger whose expired-lease read raises something no one expected."""

    def expired_leases(self, now: float | None = None) -> list[tuple[str, int]]:
        raise RuntimeError("boom")


def test_a_pass_that_meets_any_error_logs_it_and_does_the_rest(
    ledger: Ledger, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    broken = Exploding(ledger.r)
    rec = Reconciler(
        broken, _reconciler(ledger, redis_url).dispatch, max_lost_leases=6, orphan_after_s=0
    )
    _job(broken)
    with caplog.at_level(logging.ERROR):
        result = rec.run_once()
    assert "boom" in caplog.text
    assert sorted(result.resent) == [("j1", 0), ("j1", 1)]

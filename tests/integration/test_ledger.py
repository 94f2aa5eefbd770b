"""Ledger transitions against a real Redis: atomic, idempotent, token-guarded."""

from __future__ import annotations

import time

import pytest

from farm.core import keys
from farm.core.errors import LedgerError, UnreachableError
from farm.core.state import ChunkState, JobState
from farm.ledger import Claim, Ledger, Move
from tests.integration.conftest import make_job

_job = make_job


def _finish(ledger: Ledger, job_id: str, index: int) -> None:
    render = ledger.move_chunk(
        job_id, index, ChunkState.RENDERING, mode="claim", lease_s=30, worker="w"
    )
    ledger.move_chunk(job_id, index, ChunkState.RENDERED, token=render.token)
    encode = ledger.move_chunk(
        job_id, index, ChunkState.ENCODING, mode="claim", lease_s=30, worker="w"
    )
    assert ledger.move_chunk(job_id, index, ChunkState.DONE, token=encode.token).moved


def test_claim_moves_job_to_running_and_takes_a_lease(ledger: Ledger) -> None:
    _job(ledger)
    claim = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30, worker="w1")
    assert claim.moved and claim.token.startswith("1:")
    assert ledger.job("j1")["state"] == JobState.RUNNING
    assert ledger.chunk("j1", 0)["worker"] == "w1"
    assert ledger.expired_leases(now=10**10) == [("j1", 0)]


def test_a_chunk_cannot_be_claimed_twice(ledger: Ledger) -> None:
    _job(ledger)
    ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    second = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    assert second.status == "refused"


def test_finishing_twice_changes_nothing_the_second_time(ledger: Ledger) -> None:
    _job(ledger)
    _finish(ledger, "j1", 0)
    token = ledger.chunk("j1", 0)["token"]
    again = ledger.move_chunk("j1", 0, ChunkState.DONE, token=token)
    assert again.status == "same"
    assert ledger.job("j1")["chunks_done"] == "1"


def test_a_stale_token_cannot_move_the_chunk(ledger: Ledger) -> None:
    _job(ledger)
    old = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, token=old.token, mode="fail", max_failures=3)
    new = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    late = ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=old.token)
    assert late.status == "stale"
    assert ledger.renew("j1", 0, old.token, 30) == "lost"
    assert ledger.renew("j1", 0, new.token, 30) == "ok"


def test_done_never_moves_backwards(ledger: Ledger) -> None:
    _job(ledger)
    _finish(ledger, "j1", 0)
    back = ledger.move_chunk("j1", 0, ChunkState.QUEUED, mode="fail", max_failures=3)
    assert back.status == "refused"
    assert ledger.chunk("j1", 0)["state"] == ChunkState.DONE


def test_failure_budget_fails_the_job_with_the_reason(ledger: Ledger) -> None:
    _job(ledger)
    for _ in range(3):
        claim = ledger.move_chunk("j1", 1, ChunkState.RENDERING, mode="claim", lease_s=30)
        move = ledger.move_chunk(
            "j1", 1, ChunkState.QUEUED, token=claim.token, mode="fail", max_failures=3, error="boom"
        )
    assert move.target == ChunkState.FAILED
    job = ledger.job("j1")
    assert job["state"] == JobState.FAILED
    assert "chunk 1 failed 3 times: boom" in job["error"]
    assert (
        ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30).status
        == "refused"
    )


@pytest.mark.parametrize(
    ("mode", "times", "reason"),
    [
        ("expire", 2, "chunk 1 lost its worker 2 times: spot reclaim"),
        ("interrupt", 6, "chunk 1 was interrupted 6 times"),
    ],
)
def test_lost_workers_and_interruptions_have_budgets_of_their_own(
    ledger: Ledger, mode: str, times: int, reason: str
) -> None:
    """A lost lease spends its own budget (max_failures here is the lost-lease one); an
    interruption none, until three times that; the job that fails says which and how often, and a
    job paused when it fails has its pause ended."""
    _job(ledger)
    for n in range(times):
        claim = ledger.move_chunk("j1", 1, ChunkState.RENDERING, mode="claim", lease_s=0)
        if n == times - 1:
            assert ledger.pause_job("j1", "for the night").moved
        move = ledger.move_chunk(
            "j1", 1, ChunkState.QUEUED, token=claim.token, mode=mode, max_failures=2,
            error="spot reclaim",
        )  # fmt: skip
        assert move.target == (ChunkState.FAILED if n == times - 1 else ChunkState.QUEUED)
    job = ledger.job("j1")
    assert job["state"] == JobState.FAILED
    assert job["error"] == reason
    assert float(job["paused_s"]) >= 0  # the pause ended as the job failed


def test_completion_gate_opens_once(ledger: Ledger) -> None:
    _job(ledger)
    _finish(ledger, "j1", 0)
    assert not ledger.try_start_stitch("j1")
    _finish(ledger, "j1", 1)
    assert [ledger.try_start_stitch("j1") for _ in range(5)] == [True, False, False, False, False]
    assert ledger.job("j1")["state"] == JobState.STITCHING


def test_frame_records_round_trip(ledger: Ledger) -> None:
    ledger.record_frame("j1", 7, 1234, "ab" * 32)
    assert ledger.frame_records("j1") == {7: (1234, "ab" * 32, None)}


def test_unreachable_redis_is_one_clear_error() -> None:
    ledger = Ledger.from_url("redis://127.0.0.1:1/0")
    with pytest.raises(UnreachableError, match="Redis does not answer"):
        ledger.ping()


def test_a_stray_encode_message_cannot_claim_an_unrendered_chunk(ledger: Ledger) -> None:
    _job(ledger)
    stray = ledger.move_chunk(
        "j1", 0, ChunkState.ENCODING, mode="claim", lease_s=30,
        only_from=frozenset({ChunkState.RENDERED}),
    )  # fmt: skip
    assert stray.status == "refused"
    assert ledger.chunk("j1", 0)["state"] == ChunkState.QUEUED


def test_an_expired_lease_spends_its_own_budget_not_the_failure_budget(ledger: Ledger) -> None:
    _job(ledger)
    claim = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=0.01)
    time.sleep(0.05)
    move = ledger.move_chunk(
        "j1", 0, ChunkState.QUEUED, token=claim.token, mode="expire", max_failures=6
    )
    chunk = ledger.chunk("j1", 0)
    assert move.moved and chunk["state"] == ChunkState.QUEUED
    assert (chunk["lost_leases"], chunk["failures"]) == ("1", "0")


def test_a_lease_renewed_after_the_reconciler_looked_is_not_taken(ledger: Ledger) -> None:
    _job(ledger)
    claim = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    move = ledger.move_chunk(
        "j1", 0, ChunkState.QUEUED, token=claim.token, mode="expire", max_failures=6
    )
    assert (move.status, move.token) == ("refused", "renewed")
    assert ledger.chunk("j1", 0)["state"] == ChunkState.RENDERING


def test_queue_length_counts_celery_messages(ledger: Ledger) -> None:
    ledger.r.lpush("render", "m1", "m2")
    ledger.r.lpush("render\x06\x163", "m3")
    assert ledger.queue_length("render") == 3
    assert ledger.queue_length("encode") == 0


def test_a_plain_retry_of_a_cancelled_job_is_refused_rather_than_left_running(
    ledger: Ledger,
) -> None:
    """Found by a walkthrough: `farm retry` (failed chunks only) of a cancelled job moved it to
    running with every chunk still cancelled, so it never ended and `retry --all` was refused."""
    make_job(ledger, "j1", frames="1-20", chunk_size=10)
    ledger.cancel_job("j1")
    with pytest.raises(LedgerError, match=r"2 cancelled chunks.*farm retry j1 --all"):
        ledger.reopen_job("j1", every_unfinished=False)
    assert ledger.job("j1")["state"] == JobState.CANCELLED
    assert ledger.reopen_job("j1", every_unfinished=True) == [0, 1]
    assert ledger.job("j1")["state"] == JobState.RUNNING


def test_the_time_a_job_stood_ended_is_not_its_running_time(ledger: Ledger) -> None:
    """Found by a review: a job failed after an hour and retried the next morning showed 13
    hours elapsed, and an ETA at that pace."""
    from farm.core.report import job_summary

    make_job(ledger, "j1", frames="1-20", chunk_size=10)
    ledger.r.hset(keys.r_job("j1"), mapping={"created": time.time() - 3 * 3600, "paused_s": 60})
    ledger.cancel_job("j1")
    ledger.r.hset(keys.r_job("j1"), "finished", time.time() - 2 * 3600)  # cancelled 2 h ago
    ledger.r.hset(keys.r_job("j1"), "stitch_transients", 11)  # a stitch that gave up
    ledger.reopen_job("j1", every_unfinished=True)
    job = ledger.job("j1")
    assert job["stitch_transients"] == "0"  # found by a review: the retry's stitch had no tries
    assert float(job["paused_s"]) == pytest.approx(2 * 3600 + 60, abs=5)
    summary = job_summary(job, ledger.chunks("j1"))
    assert summary["active_s"] == pytest.approx(3600 - 60, abs=5)


def _rendered_then_claimed(ledger: Ledger, token: str) -> tuple[Move, Claim | None]:
    return ledger.move_then_claim(
        "j1", 0, ChunkState.RENDERED, token=token, fields={"render_s": 1.5},
        then=ChunkState.ENCODING, then_from=frozenset({ChunkState.RENDERED}), lease_s=30,
        worker="w1", phase="segment",
    )  # fmt: skip


def test_a_done_move_claims_the_next_phase_in_the_same_round_trip(ledger: Ledger) -> None:
    _job(ledger)
    render = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30,
                               worker="w1")  # fmt: skip
    ledger.record_frame("j1", 1, 10, "ab" * 32)
    move, claim = _rendered_then_claimed(ledger, render.token)
    assert move.moved and claim is not None and claim.move.moved
    # The same try (attempt 1), its second claim.
    chunk = ledger.chunk("j1", 0)
    assert chunk["state"] == ChunkState.ENCODING and chunk["render_s"] == "1.5"
    assert chunk["token"] == claim.move.token != render.token
    assert claim.move.token.startswith("1:2-")
    assert claim.frames == list(range(1, 11)) and claim.records[1][0] == 10
    events = [e["event"] for e in ledger.events("j1")]
    assert events[-2:] == ["chunk-rendered", "chunk-encoding"]
    assert ledger.renew("j1", 0, render.token, 30) == "lost"  # the render's lease is gone


def test_the_next_phase_is_claimed_only_from_the_attempts_own_move(ledger: Ledger) -> None:
    _job(ledger)
    old = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, token=old.token, mode="fail", max_failures=3)
    new = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=new.token)
    # A late attempt whose lease was lost: the chunk is rendered (by another) and claimable,
    # yet neither its move nor its claim may take it.
    move, claim = _rendered_then_claimed(ledger, old.token)
    assert move.status == "stale" and claim is None
    assert ledger.chunk("j1", 0)["state"] == ChunkState.RENDERED


def test_a_budgeted_job_or_lost_scripts_leave_the_claim_to_the_caller(ledger: Ledger) -> None:
    _job(ledger)
    ledger.r.hset(keys.r_job("j1"), "max_cost", "5")
    render = ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim", lease_s=30)
    move, claim = _rendered_then_claimed(ledger, render.token)
    assert move.moved and claim is None  # a budget to price first: nothing claimed
    assert ledger.chunk("j1", 0)["state"] == ChunkState.RENDERED
    again = ledger.move_chunk("j1", 1, ChunkState.RENDERING, mode="claim", lease_s=30)
    ledger.r.script_flush()  # a Redis restarted without its scripts
    move = ledger.move_then_claim(
        "j1", 1, ChunkState.RENDERED, token=again.token, fields={},
        then=ChunkState.ENCODING, then_from=frozenset({ChunkState.RENDERED}), lease_s=30,
        worker="w1",
    )[0]  # fmt: skip
    assert move.moved and ledger.chunk("j1", 1)["state"] == ChunkState.RENDERED

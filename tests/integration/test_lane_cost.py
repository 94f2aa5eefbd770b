"""What an encode in the lane costs, however its attempt ends, against a real Redis: the failure
policy (workers.attempt.policy) and the lifecycle hand every move that ends a lane attempt its
seconds alone (workers.host.alongside.LaneRun.end_fields), and the ledger prices the attempt
from them alone; a render outside the lane is priced from its own seconds. The store and the
dispatcher are test_attempt's fakes; the lane's paid attempts are a fake Paid."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from farm.adapters.settings import Settings
from farm.core.errors import ChunkInterrupted, LeaseLost, PermanentError, TransientError
from farm.core.pipeline import PHASES, Phase
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger
from tests.integration.conftest import make_job
from tests.integration.test_attempt import FakeDispatch, FakeStore
from tests.integration.test_cost_ledger import METER
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt, Outcome, Work
from workers.attempt.policy import MAX_TRANSIENT, run_chunk_phase
from workers.host.alongside import LaneRun
from workers.host.gpu import Capabilities

RENDER, SEGMENT = PHASES[Phase.RENDER], PHASES[Phase.SEGMENT]
PRICE_PER_S = float(METER["price_per_s"])
ALONE_S = 0.05
"""The lane's seconds with no paid attempt beside it, as its Paid reports them."""
WORK_S = 0.15
"""How long each attempt's work takes: longer than ALONE_S (the ledger keeps no more seconds
alone than the attempt lasted), so an encode priced from its whole time costs three times more."""


class KnownAlone:
    """The paid attempts beside the lane (alongside.Paid's interface): ALONE_S of any span with
    none of them running."""

    def alone_s(self, since: float, until: float) -> float:
        return ALONE_S


@pytest.fixture
def ctx(ledger: Ledger, tmp_path: Path) -> WorkerContext:
    """A worker whose ledger meters every claim at METER's price, with job j1's chunk 0 rendered
    outside the lane (a paid attempt of WORK_S)."""
    ledger.meter = METER
    make_job(ledger)
    ctx = WorkerContext(
        settings=Settings(lease_s=30, max_attempts=2),
        ledger=ledger,
        store=FakeStore(),  # type: ignore[arg-type]
        dispatch=FakeDispatch(),  # type: ignore[arg-type]
        caps=Capabilities(),
        name="w1",
        scratch=tmp_path,
    )
    rendered = run_chunk_phase(ctx, "j1", 0, RENDER, {Phase.RENDER: taking(Outcome())})
    assert rendered["done"] is True
    return ctx


def taking(then: Outcome | Exception) -> Work:
    """Work that takes WORK_S, then returns `then` or raises it."""

    def work(attempt: ChunkAttempt) -> Outcome:
        time.sleep(WORK_S)
        if isinstance(then, Exception):
            raise then
        return then

    return work


def encode_in_the_lane(ctx: WorkerContext, work: Work) -> dict[str, object]:
    """One attempt of chunk 0's segment in the encode lane, as alongside.Alongside.hand runs it."""
    lane = LaneRun(since=time.time(), paid=KnownAlone())  # type: ignore[arg-type]
    return run_chunk_phase(ctx, "j1", 0, SEGMENT, {Phase.SEGMENT: work}, lane=lane)


def records(ctx: WorkerContext, phase: ChunkState) -> list[dict[str, Any]]:
    return [r for r in ctx.ledger.attempt_records("j1") if r["phase"] == phase]


def assert_each_encode_is_priced_from_its_seconds_alone(ctx: WorkerContext, ends: int) -> None:
    """`ends` encode attempts, each lasting WORK_S yet priced at ALONE_S; the render beside
    them priced from its own seconds."""
    encodes = records(ctx, ChunkState.ENCODING)
    assert len(encodes) == ends
    assert all(r["s"] >= WORK_S for r in encodes)
    assert [r["cost"] for r in encodes] == pytest.approx([ALONE_S * PRICE_PER_S] * ends)
    [render] = records(ctx, ChunkState.RENDERING)
    assert render["s"] >= WORK_S
    assert render["cost"] == pytest.approx(render["s"] * PRICE_PER_S)


def test_a_lane_encode_that_succeeds_is_priced_from_its_seconds_alone(
    ctx: WorkerContext,
) -> None:
    """GIVEN a rendered chunk WHEN its encode succeeds in the lane THEN the done move priced the
    attempt from the lane's seconds alone, and the render from its own seconds."""
    result = encode_in_the_lane(ctx, taking(Outcome()))
    assert result["done"] is True and ctx.ledger.chunk("j1", 0)["state"] == ChunkState.DONE
    [encode] = records(ctx, ChunkState.ENCODING)
    assert encode["end"] == ChunkState.DONE
    assert_each_encode_is_priced_from_its_seconds_alone(ctx, 1)


def test_a_lane_encode_that_fails_is_priced_from_its_seconds_alone(ctx: WorkerContext) -> None:
    """GIVEN a rendered chunk WHEN its encode in the lane raises a permanent error THEN the
    failure move (one of the chunk's attempts spent) priced it from the lane's seconds alone."""
    result = encode_in_the_lane(ctx, taking(PermanentError("ffmpeg exited 1")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert "failed" in result and (chunk["state"], chunk["failures"]) == ("rendered", "1")
    [encode] = records(ctx, ChunkState.ENCODING)
    assert encode["mode"] == "fail"
    assert_each_encode_is_priced_from_its_seconds_alone(ctx, 1)


def test_lane_encodes_handed_back_until_they_count_as_a_failure_are_each_priced_alone(
    ctx: WorkerContext,
) -> None:
    """GIVEN a rendered chunk WHEN its encode in the lane raises a transient error, try after try,
    until the transients outlast MAX_TRANSIENT THEN every hand-back, and the failure they turn
    into, priced its attempt from the lane's seconds alone."""
    for _ in range(MAX_TRANSIENT + 1):
        encode_in_the_lane(ctx, taking(TransientError("S3 timed out")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["failures"]) == ("rendered", "1")
    encodes = records(ctx, ChunkState.ENCODING)
    assert [r["mode"] for r in encodes] == ["handback"] * MAX_TRANSIENT + ["fail"]
    assert "gave up after" in chunk["error"]
    assert_each_encode_is_priced_from_its_seconds_alone(ctx, MAX_TRANSIENT + 1)


def test_an_interrupted_lane_encode_is_priced_from_its_seconds_alone(ctx: WorkerContext) -> None:
    """GIVEN a rendered chunk WHEN the worker is going away and its encode in the lane is
    interrupted THEN the interrupt move priced it from the lane's seconds alone."""
    result = encode_in_the_lane(ctx, taking(ChunkInterrupted("chunk 0: ffmpeg was stopped")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert "handed_back" in result
    assert (chunk["state"], chunk["failures"], chunk["interruptions"]) == ("rendered", "0", "1")
    [encode] = records(ctx, ChunkState.ENCODING)
    assert encode["mode"] == "interrupt"
    assert_each_encode_is_priced_from_its_seconds_alone(ctx, 1)


def test_a_lane_encode_stopped_by_its_failed_job_is_priced_from_its_seconds_alone(
    ctx: WorkerContext,
) -> None:
    """GIVEN a rendered chunk WHEN another chunk fails the job while its encode runs in the lane
    (the encode stops: lease lost) THEN the release that puts the chunk back for `farm retry`
    priced it from the lane's seconds alone."""

    def job_failed(attempt: ChunkAttempt) -> Outcome:
        time.sleep(WORK_S)
        assert ctx.ledger.move_job("j1", JobState.FAILED, error="chunk 1 failed").moved
        raise LeaseLost("chunk 0: lease failed while ffmpeg ran")

    result = encode_in_the_lane(ctx, job_failed)
    assert "lost" in result and ctx.ledger.chunk("j1", 0)["state"] == ChunkState.RENDERED
    [encode] = records(ctx, ChunkState.ENCODING)
    assert encode["end"] == ChunkState.RENDERED
    assert_each_encode_is_priced_from_its_seconds_alone(ctx, 1)

"""The failure policy, one wrapper around the attempt lifecycle: a chunk's phases run here, each
attempt's claim held as a value, and whatever an attempt raised turned into the ledger move and
the message it calls for.

Permanent errors spend one of the chunk's attempts (and are retried with backoff until the budget
is spent); transient errors and interruptions hand the chunk back without spending one; a lost
lease means another attempt owns the chunk, so this one just stops.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

from farm.core.backoff import backoff_s
from farm.core.errors import (
    ChunkInterrupted,
    FramesMissing,
    LeaseLost,
    NotHere,
    PermanentError,
    Refused,
    StoreRefused,
    TransientError,
)
from farm.core.pipeline import PHASES, Phase, PhaseSpec, first_phase, kind_of
from farm.core.state import ChunkState, JobState
from farm.ledger import Claim
from workers.attempt import lifecycle
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import Ended, Work
from workers.attempt.ports import AttemptLedger
from workers.host import alongside
from workers.host.alongside import LaneRun

log = logging.getLogger(__name__)

BLOCK_AFTER = 2
"""Permanent failures on one job after which a worker leaves that job's chunks to others."""
MAX_KEPT_OFF = 30
"""Times one chunk is handed on by workers on the job's blocklist (every KEPT_OFF_S) before one of
them takes it after all: the blocklist prefers a healthy worker, it must not stall the chunk when
that worker, alive by its heartbeat, takes nothing (its consumer stuck, its queues not served)."""
KEPT_OFF_S = 2.0
MAX_TRANSIENT = 20
"""Transient hand-backs of one chunk before it counts as a failure (an outage of ~an hour)."""
RETRY_CAP_S = 120.0
"""The longest wait before a chunk's (or a stitch's) next try: farm.core.backoff from 2 s."""


def retry_in_s(failures: int) -> float:
    """When to try again after `failures`, jittered: chunks that failed together (a store outage)
    do not all come back in the same second."""
    return backoff_s(failures, cap_s=RETRY_CAP_S, jitter=random.random())


def run_chunk_phase(
    ctx: WorkerContext,
    job_id: str,
    chunk: int,
    phase: PhaseSpec,
    works: Mapping[Phase, Work],
    lane: LaneRun | None = None,
) -> dict[str, object]:
    """Run one attempt of a chunk's phase under the failure policy; the task's small result.
    When the chunk's next phase is on a queue this worker serves (a host that renders and can
    encode), it runs here at once: one hop through the broker per chunk, and the frames are
    still on disk; after a render on a worker with an encode lane, in that lane, beside the next
    render. `works`: each phase's work (workers.tasks.PHASE_WORK, or a test's); `lane`: this
    runs in the encode lane (workers.host.alongside hands it its LaneRun)."""
    with ctx.jobs_here.using(job_id):  # its folder stays while this runs (workers.janitor)
        return ChunkPolicy(ctx=ctx, job_id=job_id, chunk=chunk, lane=lane).walk(phase, works)


def kept_off(ctx: WorkerContext, job_id: str, queue: str) -> bool:
    """True when this worker failed the job's chunks repeatedly and another healthy worker that
    serves the queue is alive to take them; with no one else, it keeps trying (the budget ends it).
    Asked only once a claim stopped at the blocklist (Ledger.claim's `block_after`), so a
    worker in good standing reads neither the blocklist nor the workers for it."""
    ledger: AttemptLedger = ctx.ledger
    blocked = ledger.blocked(job_id)
    if blocked.get(ctx.name, 0) < BLOCK_AFTER:
        return False
    return any(
        name != ctx.name
        and queue in info.get("queues", [])
        and not info.get("draining")
        and blocked.get(name, 0) < BLOCK_AFTER
        for name, info in ledger.workers().items()
    )


def _ours(phase: PhaseSpec) -> frozenset[ChunkState]:
    """Where a move that ends an attempt may start: the phase it ran, never a chunk cancelled
    meanwhile (a cancel keeps the token, and those moves' targets accept a cancelled chunk)."""
    return frozenset({phase.running})


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkPolicy:
    """The failure policy for one chunk on this worker: `walk` runs its phases, `attempt` one
    phase's attempt; the claim's token is `attempt`'s local, handed to the move that ends it."""

    ctx: WorkerContext
    job_id: str
    chunk: int
    lane: LaneRun | None = None

    @property
    def ledger(self) -> AttemptLedger:
        return self.ctx.ledger

    def walk(self, phase: PhaseSpec, works: Mapping[Phase, Work]) -> dict[str, object]:
        """The chunk's phases from `phase` on, as far as they run on this worker (see
        run_chunk_phase); each attempt's next claim handed to the next, as a value."""
        ctx = self.ctx
        claimed: Claim | None = None
        while True:
            nxt = PHASES[phase.next] if phase.next is not None else None
            inline = nxt is not None and str(nxt.queue) in ctx.queues and nxt.phase in works
            # The next phase runs here, not in the encode lane: the done move claims it too.
            here = inline and not (phase.phase is Phase.RENDER and ctx.alongside is not None)
            # An encode in the lane is paid for by the attempts beside it: each one outside is
            # timed.
            beside = ctx.alongside if self.lane is None else None
            with beside.paid.running() if beside is not None else nullcontext():
                ended = self.attempt(
                    phase, works[phase.phase], send_next=not inline, claimed=claimed,
                    then=nxt if here else None,
                )  # fmt: skip
            claimed = ended.next_claim
            if nxt is None or not inline or not ended.result.get("done"):
                return ended.result
            # The encode runs beside this worker's next render (workers.host.alongside); a
            # draining worker goes on here, where the next phase is sent back for another worker.
            draining = ctx.drain.active.is_set()
            lane = ctx.alongside if phase.phase is Phase.RENDER and not draining else None
            if lane is not None:
                # The lane calls it with its LaneRun: run_chunk_phase's `lane`.
                encode = partial(run_chunk_phase, ctx, self.job_id, self.chunk, nxt, works)
                if lane.hand(f"chunk {self.job_id}/{self.chunk} {nxt.phase}", encode):
                    return {**ended.result, "next": f"{nxt.phase} alongside"}
            phase = nxt

    def attempt(
        self,
        phase: PhaseSpec,
        work: Work,
        *,
        send_next: bool,
        claimed: Claim | None = None,
        then: PhaseSpec | None = None,
    ) -> Ended:
        """One phase's attempt under the policy. `claimed`: the chunk is this worker's already
        (the phase before claimed it with its done move), so it runs even on a drain: it is the
        chunk in hand. `then`: see lifecycle.run_attempt."""
        ctx, job_id, chunk = self.ctx, self.job_id, self.chunk
        if ctx.drain.active.is_set() and claimed is None:
            # The message reached a worker that is going away: send it on for another to take.
            self._resend(phase)
            return self._ended(handed_back=f"draining: {ctx.drain.reason}")
        token = claimed.move.token if claimed is not None else ""  # a failure is this claim's
        block_after = BLOCK_AFTER
        try:
            if claimed is None:
                claimed = lifecycle.claim(ctx, job_id, chunk, phase, block_after=BLOCK_AFTER,
                                          lane=self.lane)  # fmt: skip
            if claimed.move.status == "blocked":
                if kept_off(ctx, job_id, phase.queue):
                    handed = self.ledger.bump(job_id, chunk, "kept_off")
                    if handed <= MAX_KEPT_OFF:
                        self._resend(phase, KEPT_OFF_S)
                        return self._ended(handed_back="blocklisted on this job")
                    log.warning("chunk %s/%d was handed on %d times and no other worker took it; "
                                "taking it here", job_id, chunk, handed - 1)  # fmt: skip
                # No claim ahead here: the next phase's claim keeps its own blocklist check.
                block_after, then = 0, None
                claimed = lifecycle.claim(ctx, job_id, chunk, phase, lane=self.lane)
            if not claimed.move.moved:
                return Ended(result=lifecycle.unclaimed(job_id, chunk, phase, claimed))
            token = claimed.move.token
            return lifecycle.run_attempt(
                ctx, job_id, chunk, phase, work, claimed=claimed, send_next=send_next,
                block_after=block_after, then=then, lane=self.lane,
            )  # fmt: skip
        except LeaseLost as exc:
            log.warning("%s", exc)
            self._release_if_job_failed(phase, token)
            return self._ended(lost=str(exc))
        except (ChunkInterrupted, TransientError) as exc:
            return self._hand_back(phase, token, exc)
        except PermanentError as exc:
            return self._fail(phase, token, exc)
        except Exception as exc:  # a bug or an unclassified error: a failure with a budget
            log.exception("chunk %s/%d %s raised", job_id, chunk, phase.phase)
            return self._fail(phase, token, PermanentError(f"{type(exc).__name__}: {exc}"))

    def _ended(self, **result: object) -> Ended:
        return Ended(result={"job_id": self.job_id, "chunk": self.chunk, **result})

    def _resend(self, phase: PhaseSpec, countdown_s: float = 0) -> None:
        self.ctx.dispatch.send(phase.phase, self.job_id, self.chunk, countdown_s)

    def _ending(self) -> dict[str, Any]:
        return alongside.end_fields(self.lane)

    def _hand_back(
        self, phase: PhaseSpec, token: str, exc: ChunkInterrupted | TransientError
    ) -> Ended:
        """An interruption or a transient error: the chunk goes back unspent (an outage that
        outlasts MAX_TRANSIENT hand-backs counts as a failure)."""
        interrupted = isinstance(exc, ChunkInterrupted)
        if not token:  # failed before the claim: the chunk is untouched, the message is not
            self._resend(phase, retry_in_s(2))
            return self._ended(handed_back=str(exc))
        counted = not interrupted and not isinstance(exc, NotHere)
        transients = self.ledger.bump(self.job_id, self.chunk, "transients") if counted else 0
        if transients > MAX_TRANSIENT:
            return self._fail(phase, token, PermanentError(
                f"gave up after {transients} transient errors; the last: {exc}"
            ))  # fmt: skip
        if interrupted:
            move = self.ledger.move_chunk(
                self.job_id, self.chunk, phase.on_interrupt, token=token, mode="interrupt",
                max_failures=self.ctx.settings.max_lost_leases, only_from=_ours(phase),
                **self._ending(), error=str(exc),
            )  # fmt: skip
        else:
            move = self.ledger.move_chunk(
                self.job_id, self.chunk, phase.on_failure, token=token, mode="handback",
                only_from=_ours(phase), **self._ending(), error=f"transient: {exc}",
            )  # fmt: skip
        if move.moved and move.target != ChunkState.FAILED:
            self._resend(phase, 0 if interrupted else retry_in_s(max(transients, 1)))
        return self._ended(handed_back=str(exc))

    def _release_if_job_failed(self, phase: PhaseSpec, token: str) -> None:
        """Stopped because another chunk failed the job: put ours back unspent for `farm retry`."""
        if token and self.ledger.job(self.job_id).get("state") == JobState.FAILED:
            self.ledger.move_chunk(
                self.job_id, self.chunk, phase.on_failure, token=token, only_from=_ours(phase),
                **self._ending(), error="stopped: the job failed",
            )  # fmt: skip

    def _fail(self, phase: PhaseSpec, token: str, exc: PermanentError) -> Ended:
        """Spend one attempt of the chunk's budget, then retry with backoff or fail the job."""
        ctx, job_id, chunk = self.ctx, self.job_id, self.chunk
        self.ledger.blame(job_id, ctx.name)
        retry = phase
        if isinstance(exc, FramesMissing):  # the frames, not the encode, need doing again
            retry = first_phase(kind_of(self.ledger.job(job_id)))
        back_to = retry.on_failure if retry is phase else retry.on_lost
        if not token:
            log.error("chunk %s/%d %s failed before it was claimed: %s", job_id, chunk,
                      phase.phase, exc)  # fmt: skip
            self._resend(phase, retry_in_s(3))
            return self._ended(failed=str(exc)[-500:])
        move = self.ledger.move_chunk(
            job_id, chunk, back_to, token=token, mode="fail", only_from=_ours(phase),
            # A store refusal (denied, no bucket, disk full) or one of the farm's own rules
            # fails the same way on every try.
            max_failures=1 if isinstance(exc, StoreRefused | Refused) else ctx.settings.max_attempts,
            **self._ending(), error=str(exc)[-4000:], failed_at=time.time(),
        )  # fmt: skip
        if move.moved and move.target == str(back_to):
            failures = int(self.ledger.chunk(job_id, chunk).get("failures", 1))
            ctx.dispatch.send(retry.phase, job_id, chunk, retry_in_s(failures))
            log.warning("chunk %s/%d %s failed (%d so far), retrying: %s", job_id, chunk,
                        phase.phase, failures, exc)  # fmt: skip
        else:
            log.error("chunk %s/%d failed for good: %s", job_id, chunk, exc)
        return self._ended(failed=str(exc)[-500:])

"""Thin Celery tasks: decode the payload, call the work, turn its errors into ledger moves.

Permanent errors spend one of the chunk's attempts (and are retried with backoff until the budget is
spent); transient errors and interruptions hand the chunk back without spending one; a lost lease
means another attempt owns the chunk, so this one just stops.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from functools import partial
from typing import Any

from celery import Celery

from farm.core.errors import (
    ChunkInterrupted,
    FarmError,
    FramesMissing,
    LeaseLost,
    NotHere,
    PermanentError,
    StoreRefused,
    TransientError,
)
from farm.core.pipeline import PHASES, STITCH, Phase, PhaseSpec, first_phase, kind_of
from farm.core.spec import JobKind, JobSpec
from farm.core.state import ChunkState, JobState
from farm.ledger import Claim
from workers.attempt import lifecycle as attempt
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import Work
from workers.host import alongside
from workers.phases.render import render_frames
from workers.phases.segment import segment_chunk
from workers.phases.stitch import stitch_frames
from workers.phases.transcode import transcode_segment
from workers.phases.transcode_stitch import stitch_master

log = logging.getLogger(__name__)


def backoff_s(
    failures: int, base_s: float = 2.0, cap_s: float = 120.0, jitter: float = 0.5
) -> float:
    """Exponential backoff for the next attempt after `failures` failures, with "equal jitter":
    between half and all of the exponential step, so chunks that failed together (a store
    outage) do not all come back in the same second. `jitter` is a uniform draw in [0, 1); the
    default is the middle, so the function stays pure for callers that pass none."""
    step = min(cap_s, base_s * 2 ** max(failures - 1, 0))
    return float(step / 2 + step / 2 * jitter)


def jittered_backoff_s(failures: int) -> float:
    return backoff_s(failures, jitter=random.random())


BLOCK_AFTER = 2
"""Permanent failures on one job after which a worker leaves that job's chunks to others."""


def kept_off(ctx: WorkerContext, job_id: str, queue: str) -> bool:
    """True when this worker failed the job's chunks repeatedly and another healthy worker that
    serves the queue is alive to take them; with no one else, it keeps trying (the budget ends it).
    Asked only once a claim stopped at the blocklist (Ledger.claim's `block_after`), so a
    worker in good standing reads neither the blocklist nor the workers for it."""
    blocked = ctx.ledger.blocked(job_id)
    if blocked.get(ctx.name, 0) < BLOCK_AFTER:
        return False
    return any(
        name != ctx.name
        and queue in info.get("queues", [])
        and not info.get("draining")
        and blocked.get(name, 0) < BLOCK_AFTER
        for name, info in ctx.ledger.workers().items()
    )


def run_chunk_phase(
    ctx: WorkerContext,
    job_id: str,
    chunk: int,
    phase: PhaseSpec,
    works: Mapping[Phase, Work] | None = None,
    *,
    claim_fields: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """Run one attempt of a chunk's phase and apply the failure policy to its outcome. When the
    chunk's next phase is on a queue this worker serves (a host that renders and can encode), it
    runs here at once: one hop through the broker per chunk, and the frames are still on disk;
    after a render on a worker with an encode lane, in that lane, beside the next render.
    `works`: each phase's work (PHASE_WORK unless a test gives its own); `claim_fields`: what
    the claims record beside the worker's meter (the lane's price)."""
    with ctx.jobs_here.using(job_id):  # its folder stays while this runs (workers.janitor)
        return _run_chunk_phases(ctx, job_id, chunk, phase, works, claim_fields)


def _run_chunk_phases(
    ctx: WorkerContext,
    job_id: str,
    chunk: int,
    phase: PhaseSpec,
    works: Mapping[Phase, Work] | None,
    claim_fields: Mapping[str, str] | None,
) -> dict[str, object]:
    works = PHASE_WORK if works is None else works
    claimed: Claim | None = None
    while True:
        nxt = PHASES[phase.next] if phase.next is not None else None
        inline = nxt is not None and str(nxt.queue) in ctx.queues and nxt.phase in works
        # The next phase runs here, not in the encode lane: the done move claims it too.
        here = inline and not (phase.phase is Phase.RENDER and ctx.alongside is not None)
        # An encode in the lane is paid for by the attempts beside it: each one outside is timed.
        beside = ctx.alongside if not alongside.in_lane() else None
        with beside.paid.running() if beside is not None else nullcontext():
            result = _run_phase(
                ctx, job_id, chunk, phase, works[phase.phase], send_next=not inline,
                claim_fields=claim_fields, claimed=claimed, then=nxt if here else None,
            )  # fmt: skip
        claimed = attempt.take_next_claim(result)
        if nxt is None or not inline or not result.get("done"):
            return result
        # The encode runs beside this worker's next render (workers.host.alongside); a draining
        # worker goes on here, where the next phase is sent back for another worker.
        draining = ctx.drain.active.is_set()
        lane = ctx.alongside if phase.phase is Phase.RENDER and not draining else None
        if lane is not None:
            encode = partial(
                run_chunk_phase, ctx, job_id, chunk, nxt, works,
                claim_fields=alongside.claim_fields(ctx.ledger.meter),
            )  # fmt: skip
            if lane.hand(f"chunk {job_id}/{chunk} {nxt.phase}", encode):
                return {**result, "next": f"{nxt.phase} alongside"}
        phase = nxt


def _run_phase(
    ctx: WorkerContext,
    job_id: str,
    chunk: int,
    phase: PhaseSpec,
    work: Work,
    *,
    send_next: bool,
    claim_fields: Mapping[str, str] | None = None,
    claimed: Claim | None = None,
    then: PhaseSpec | None = None,
) -> dict[str, object]:
    """One phase's attempt under the failure policy. `claimed`: the chunk is this worker's
    already (the phase before claimed it with its done move), so it runs even on a drain: it is
    the chunk in hand. `then`: see attempt.run_attempt."""

    def resend(countdown_s: float = 0) -> None:
        ctx.dispatch.send(phase.phase, job_id, chunk, countdown_s)

    if ctx.drain.active.is_set() and claimed is None:
        # The message reached a worker that is going away: send it on for another to take.
        resend()
        return {"job_id": job_id, "chunk": chunk, "handed_back": f"draining: {ctx.drain.reason}"}
    attempt.release()
    if claimed is not None:
        attempt.hold(claimed.move.token)  # a failure before the work starts is this claim's
    try:
        result = attempt.run_attempt(
            ctx, job_id, chunk, phase, work, send_next=send_next, block_after=BLOCK_AFTER,
            claim_fields=claim_fields, claimed=claimed, then=then,
        )  # fmt: skip
        if "blocked" not in result:
            return result
        if kept_off(ctx, job_id, phase.queue):
            resend(2.0)
            return {"job_id": job_id, "chunk": chunk, "handed_back": "blocklisted on this job"}
        # No claim ahead here: the next phase's claim keeps its own blocklist check.
        return attempt.run_attempt(
            ctx, job_id, chunk, phase, work, send_next=send_next, claim_fields=claim_fields
        )
    except LeaseLost as exc:
        log.warning("%s", exc)
        _release_if_job_failed(ctx, job_id, chunk, phase)
        return {"job_id": job_id, "chunk": chunk, "lost": str(exc)}
    except (ChunkInterrupted, TransientError) as exc:
        token = attempt.held()
        interrupted = isinstance(exc, ChunkInterrupted)
        if not token:  # failed before the claim: the chunk is untouched, the message is not
            resend(jittered_backoff_s(2))
            return {"job_id": job_id, "chunk": chunk, "handed_back": str(exc)}
        counted = not interrupted and not isinstance(exc, NotHere)
        transients = ctx.ledger.bump(job_id, chunk, "transients") if counted else 0
        if transients > MAX_TRANSIENT:
            return _fail(ctx, job_id, chunk, phase, token, PermanentError(
                f"gave up after {transients} transient errors; the last: {exc}"
            ))  # fmt: skip
        if interrupted:
            move = ctx.ledger.move_chunk(
                job_id, chunk, phase.on_interrupt, token=token, mode="interrupt", error=str(exc),
                max_failures=ctx.settings.max_lost_leases, only_from=_ours(phase),
            )  # fmt: skip
        else:
            move = ctx.ledger.move_chunk(
                job_id, chunk, phase.on_failure, token=token, mode="handback",
                error=f"transient: {exc}", only_from=_ours(phase),
            )  # fmt: skip
        if move.moved and move.target != ChunkState.FAILED:
            resend(0 if interrupted else jittered_backoff_s(max(transients, 1)))
        return {"job_id": job_id, "chunk": chunk, "handed_back": str(exc)}
    except PermanentError as exc:
        return _fail(ctx, job_id, chunk, phase, attempt.held(), exc)
    except Exception as exc:  # a bug or an unclassified error: a failure with a budget, not a hang
        log.exception("chunk %s/%d %s raised", job_id, chunk, phase.phase)
        wrapped = PermanentError(f"{type(exc).__name__}: {exc}")
        return _fail(ctx, job_id, chunk, phase, attempt.held(), wrapped)


MAX_TRANSIENT = 20
"""Transient hand-backs of one chunk before it counts as a failure (an outage of ~an hour)."""
MAX_STITCH_TRANSIENT = 10
"""Transient errors of a job's stitch before the job fails with the last (about 15 minutes)."""


def _ours(phase: PhaseSpec) -> frozenset[ChunkState]:
    """Where a move that ends an attempt may start: the phase it ran, never a chunk cancelled
    meanwhile (a cancel keeps the token, and those moves' targets accept a cancelled chunk)."""
    return frozenset({phase.running})


def _release_if_job_failed(ctx: WorkerContext, job_id: str, chunk: int, phase: PhaseSpec) -> None:
    """Stopped because another chunk failed the job: put ours back unspent for `farm retry`."""
    token = attempt.held()
    if token and ctx.ledger.job(job_id).get("state") == JobState.FAILED:
        ctx.ledger.move_chunk(
            job_id, chunk, phase.on_failure, token=token, error="stopped: the job failed",
            only_from=_ours(phase),
        )  # fmt: skip


def _fail(
    ctx: WorkerContext,
    job_id: str,
    chunk: int,
    phase: PhaseSpec,
    token: str,
    exc: PermanentError,
) -> dict[str, object]:
    """Spend one attempt of the chunk's budget, then retry with backoff or fail the job."""
    ctx.ledger.blame(job_id, ctx.name)
    retry = phase
    if isinstance(exc, FramesMissing):  # the frames, not the encode, need doing again
        retry = first_phase(kind_of(ctx.ledger.job(job_id)))
    back_to = retry.on_failure if retry is phase else retry.on_lost
    if not token:
        log.error("chunk %s/%d %s failed before it was claimed: %s", job_id, chunk, phase.phase,
                  exc)  # fmt: skip
        ctx.dispatch.send(phase.phase, job_id, chunk, jittered_backoff_s(3))
        return {"job_id": job_id, "chunk": chunk, "failed": str(exc)[-500:]}
    move = ctx.ledger.move_chunk(
        job_id, chunk, back_to, token=token, mode="fail", error=str(exc)[-4000:],
        only_from=_ours(phase),
        # A store refusal (denied, no bucket, disk full) fails the same way on every try.
        max_failures=1 if isinstance(exc, StoreRefused) else ctx.settings.max_attempts,
        failed_at=time.time(),
    )  # fmt: skip
    if move.moved and move.target == str(back_to):
        failures = int(ctx.ledger.chunk(job_id, chunk).get("failures", 1))
        ctx.dispatch.send(retry.phase, job_id, chunk, jittered_backoff_s(failures))
        log.warning("chunk %s/%d %s failed (%d so far), retrying: %s", job_id, chunk, phase.phase,
                    failures, exc)  # fmt: skip
    else:
        log.error("chunk %s/%d failed for good: %s", job_id, chunk, exc)
    return {"job_id": job_id, "chunk": chunk, "failed": str(exc)[-500:]}


PHASE_WORK: dict[Phase, Work] = {
    Phase.RENDER: render_frames,
    Phase.SEGMENT: segment_chunk,
    Phase.TRANSCODE: transcode_segment,
}
"""Each chunk phase's work; the pipeline table says everything else about it."""

STITCHERS: dict[
    JobKind, Callable[[WorkerContext, str, dict[str, str], JobSpec], dict[str, Any]]
] = {
    JobKind.RENDER: stitch_frames,
    JobKind.TRANSCODE: stitch_master,
}


def stitch_job(ctx: WorkerContext, job_id: str) -> dict[str, Any]:
    job = ctx.ledger.job(job_id)
    if not job or job.get("state") != JobState.STITCHING:
        return {"skipped": f"job is {job.get('state', 'unknown')}"}
    spec = JobSpec.from_json(json.loads(job["spec"]))
    ctx.ledger.stitch_taken(job_id, ctx.name)  # should this worker vanish (farm.control.reconcile)
    with ctx.jobs_here.using(job_id):  # its work folder is in the job's (workers.janitor)
        return STITCHERS[spec.kind](ctx, job_id, job, spec)


def register(app: Celery, get_ctx: Callable[[], WorkerContext]) -> None:
    for spec in PHASES.values():
        _register_phase(app, get_ctx, spec)

    @app.task(name=STITCH.task, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def stitch(job_id: str) -> dict[str, Any]:
        ctx = get_ctx()
        try:
            return stitch_job(ctx, job_id)
        except TransientError as exc:
            # The job stays STITCHING; try again with backoff, a bounded number of times.
            tries = ctx.ledger.bump_job(job_id, "stitch_transients")
            if tries > MAX_STITCH_TRANSIENT:
                ctx.ledger.move_job(job_id, JobState.FAILED, finished=time.time(),
                                    error=f"stitch gave up after {tries} tries: {exc}")  # fmt: skip
                return {"job_id": job_id, "failed": str(exc)[-500:]}
            log.warning("stitch of %s hit a transient error, retrying: %s", job_id, exc)
            ctx.dispatch.stitch(job_id, countdown_s=jittered_backoff_s(tries))
            return {"job_id": job_id, "retrying": str(exc)[-500:]}
        except FarmError as exc:
            if isinstance(exc, PermanentError):  # the workspace already failed it, if inside
                ctx.ledger.move_job(job_id, JobState.FAILED, error=f"stitch failed: {exc}",
                                    finished=time.time())  # fmt: skip
            return {"job_id": job_id, "failed": str(exc)[-500:]}
        except Exception as exc:  # never leave a job in STITCHING with nothing to drive it
            log.exception("stitch of %s raised", job_id)
            ctx.ledger.move_job(job_id, JobState.FAILED, error=f"stitch failed: {exc}",
                                finished=time.time())  # fmt: skip
            return {"job_id": job_id, "failed": str(exc)[-500:]}


def _register_phase(app: Celery, get_ctx: Callable[[], WorkerContext], spec: PhaseSpec) -> None:
    @app.task(name=spec.task, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def chunk_phase(job_id: str, chunk: int) -> dict[str, object]:
        return run_chunk_phase(get_ctx(), job_id, chunk, spec)

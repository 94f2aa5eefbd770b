"""Thin Celery tasks: decode the payload, call the work, turn its errors into ledger moves.

Permanent errors spend one of the chunk's attempts (and are retried with backoff until the budget is
spent); transient errors and interruptions hand the chunk back without spending one; a lost lease
means another attempt owns the chunk, so this one just stops.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from farm.dispatch import ENCODE_TASK, RENDER_TASK, STITCH_TASK, TRANSCODE_TASK
from farm.errors import (
    ChunkInterrupted,
    FarmError,
    FramesMissing,
    LeaseLost,
    PermanentError,
    TransientError,
)
from farm.state import ChunkState, JobState
from workers import attempt
from workers.context import WorkerContext
from workers.encode import encode_chunk
from workers.render import render_chunk
from workers.stitch import stitch_job
from workers.transcode import transcode_segment

log = logging.getLogger(__name__)


def backoff_s(failures: int, base_s: float = 2.0, cap_s: float = 120.0) -> float:
    """Exponential backoff for the next attempt after `failures` failures (pure)."""
    return float(min(cap_s, base_s * 2 ** max(failures - 1, 0)))


BLOCK_AFTER = 2
"""Permanent failures on one job after which a worker leaves that job's chunks to others."""


def kept_off(ctx: WorkerContext, job_id: str, queue: str) -> bool:
    """True when this worker failed the job's chunks repeatedly and another healthy worker that
    serves the queue is alive to take them; with no one else, it keeps trying (the budget ends it)."""
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
    phase: str,
    work: Callable[[WorkerContext, str, int], dict[str, object]],
) -> dict[str, object]:
    """Run the render, encode or transcode phase of a chunk and apply the failure policy to its
    outcome. A transcode (encode job) has no render to keep, so it goes back to QUEUED."""
    back_to = ChunkState.RENDERED if phase == "encode" else ChunkState.QUEUED
    resend = {
        "render": ctx.dispatch.render,
        "encode": ctx.dispatch.encode,
        "transcode": ctx.dispatch.transcode,
    }[phase]
    if ctx.drain.active.is_set():
        # The message reached a worker that is going away: send it on for another to take.
        resend(job_id, chunk)
        return {"job_id": job_id, "chunk": chunk, "handed_back": f"draining: {ctx.drain.reason}"}
    if kept_off(ctx, job_id, "render" if phase == "render" else "encode"):
        resend(job_id, chunk, 2.0)
        return {"job_id": job_id, "chunk": chunk, "handed_back": "blocklisted on this job"}
    attempt.release()
    try:
        return work(ctx, job_id, chunk)
    except LeaseLost as exc:
        log.warning("%s", exc)
        _release_if_job_failed(ctx, job_id, chunk, back_to)
        return {"job_id": job_id, "chunk": chunk, "lost": str(exc)}
    except (ChunkInterrupted, TransientError) as exc:
        token = attempt.held()
        interrupted = isinstance(exc, ChunkInterrupted)
        if not token:  # failed before the claim: the chunk is untouched, the message is not
            resend(job_id, chunk, backoff_s(2))
            return {"job_id": job_id, "chunk": chunk, "handed_back": str(exc)}
        transients = 0 if interrupted else ctx.ledger.bump(job_id, chunk, "transients")
        if transients > MAX_TRANSIENT:
            return _fail(ctx, job_id, chunk, phase, back_to, resend, token, PermanentError(
                f"gave up after {transients} transient errors; the last: {exc}"
            ))  # fmt: skip
        if interrupted:
            # Marked interrupted and sent again at once; the next claim takes it from there.
            move = ctx.ledger.move_chunk(
                job_id, chunk, ChunkState.INTERRUPTED, token=token, mode="interrupt", error=str(exc),
                max_failures=ctx.settings.max_lost_leases,
            )  # fmt: skip
            resend = ctx.dispatch.transcode if phase == "transcode" else ctx.dispatch.render
        elif phase == "transcode":
            # ENCODING -> QUEUED is a failure move only; hand back through INTERRUPTED instead.
            move = ctx.ledger.move_chunk(
                job_id, chunk, ChunkState.INTERRUPTED, token=token, error=f"transient: {exc}"
            )
            if move.moved:
                move = ctx.ledger.move_chunk(job_id, chunk, ChunkState.QUEUED)
        else:
            move = ctx.ledger.move_chunk(
                job_id, chunk, back_to, token=token, error=f"transient: {exc}"
            )
        if move.moved and move.target != ChunkState.FAILED:
            resend(job_id, chunk, 0 if interrupted else backoff_s(transients))
        return {"job_id": job_id, "chunk": chunk, "handed_back": str(exc)}
    except PermanentError as exc:
        return _fail(ctx, job_id, chunk, phase, back_to, resend, attempt.held(), exc)
    except Exception as exc:  # a bug or an unclassified error: a failure with a budget, not a hang
        log.exception("chunk %s/%d %s raised", job_id, chunk, phase)
        wrapped = PermanentError(f"{type(exc).__name__}: {exc}")
        return _fail(ctx, job_id, chunk, phase, back_to, resend, attempt.held(), wrapped)


MAX_TRANSIENT = 20
"""Transient hand-backs of one chunk before it counts as a failure (an outage of ~an hour)."""


def _release_if_job_failed(
    ctx: WorkerContext, job_id: str, chunk: int, back_to: ChunkState
) -> None:
    """Stopped because another chunk failed the job: put ours back unspent for `farm retry`."""
    token = attempt.held()
    if token and ctx.ledger.job(job_id).get("state") == "failed":
        ctx.ledger.move_chunk(job_id, chunk, back_to, token=token, error="stopped: the job failed")


def _fail(
    ctx: WorkerContext,
    job_id: str,
    chunk: int,
    phase: str,
    back_to: ChunkState,
    resend: Callable[[str, int, float], str],
    token: str,
    exc: PermanentError,
) -> dict[str, object]:
    """Spend one attempt of the chunk's budget, then retry with backoff or fail the job."""
    ctx.ledger.blame(job_id, ctx.name)
    if isinstance(exc, FramesMissing):  # the frames, not the encode, need doing again
        back_to, resend = ChunkState.QUEUED, ctx.dispatch.render
    if not token:
        log.error("chunk %s/%d %s failed before it was claimed: %s", job_id, chunk, phase, exc)
        resend(job_id, chunk, backoff_s(3))
        return {"job_id": job_id, "chunk": chunk, "failed": str(exc)[-500:]}
    move = ctx.ledger.move_chunk(
        job_id, chunk, back_to, token=token, mode="fail", max_failures=ctx.settings.max_attempts,
        error=str(exc)[-4000:], failed_at=time.time(),
    )  # fmt: skip
    if move.moved and move.target == str(back_to):
        failures = int(ctx.ledger.chunk(job_id, chunk).get("failures", 1))
        resend(job_id, chunk, backoff_s(failures))
        log.warning("chunk %s/%d %s failed (%d so far), retrying: %s", job_id, chunk, phase,
                    failures, exc)  # fmt: skip
    else:
        log.error("chunk %s/%d failed for good: %s", job_id, chunk, exc)
    return {"job_id": job_id, "chunk": chunk, "failed": str(exc)[-500:]}


def register(app: Celery, get_ctx: Callable[[], WorkerContext]) -> None:
    @app.task(name=RENDER_TASK, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def render(job_id: str, chunk: int) -> dict[str, object]:
        return run_chunk_phase(get_ctx(), job_id, chunk, "render", render_chunk)

    @app.task(name=ENCODE_TASK, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def encode(job_id: str, chunk: int) -> dict[str, object]:
        return run_chunk_phase(get_ctx(), job_id, chunk, "encode", encode_chunk)

    @app.task(name=TRANSCODE_TASK, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def transcode(job_id: str, chunk: int) -> dict[str, object]:
        return run_chunk_phase(get_ctx(), job_id, chunk, "transcode", transcode_segment)

    @app.task(name=STITCH_TASK, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def stitch(job_id: str) -> dict[str, Any]:
        ctx = get_ctx()
        try:
            return stitch_job(ctx, job_id)
        except TransientError as exc:
            # The job stays STITCHING; try again shortly (the reconciler re-sends it too).
            log.warning("stitch of %s hit a transient error, retrying: %s", job_id, exc)
            ctx.dispatch.stitch(job_id, countdown_s=backoff_s(2))
            return {"job_id": job_id, "retrying": str(exc)[-500:]}
        except FarmError as exc:
            return {"job_id": job_id, "failed": str(exc)[-500:]}
        except Exception as exc:  # never leave a job in STITCHING with nothing to drive it
            log.exception("stitch of %s raised", job_id)
            ctx.ledger.move_job(job_id, JobState.FAILED, error=f"stitch failed: {exc}",
                                finished=time.time())  # fmt: skip
            return {"job_id": job_id, "failed": str(exc)[-500:]}

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
from farm.errors import ChunkInterrupted, FarmError, LeaseLost, PermanentError, TransientError
from farm.state import ChunkState
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
    token = ""
    try:
        return work(ctx, job_id, chunk)
    except LeaseLost as exc:
        log.warning("%s", exc)
        return {"job_id": job_id, "chunk": chunk, "lost": str(exc)}
    except (ChunkInterrupted, TransientError) as exc:
        token = ctx.ledger.chunk(job_id, chunk).get("token", "")
        interrupted = isinstance(exc, ChunkInterrupted)
        if interrupted:
            # Marked interrupted and sent again at once; the next claim takes it from there.
            move = ctx.ledger.move_chunk(
                job_id, chunk, ChunkState.INTERRUPTED, token=token, mode="interrupt", error=str(exc)
            )
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
        if move.moved:
            resend(job_id, chunk, 0 if interrupted else backoff_s(1))
        return {"job_id": job_id, "chunk": chunk, "handed_back": str(exc)}
    except PermanentError as exc:
        ctx.ledger.blame(job_id, ctx.name)
        token = ctx.ledger.chunk(job_id, chunk).get("token", "")
        move = ctx.ledger.move_chunk(
            job_id,
            chunk,
            back_to,
            token=token,
            mode="fail",
            max_failures=ctx.settings.max_attempts,
            error=str(exc)[-4000:],
            failed_at=time.time(),
        )
        if move.moved and move.target == str(back_to):
            failures = int(ctx.ledger.chunk(job_id, chunk).get("failures", 1))
            resend(job_id, chunk, backoff_s(failures))
            log.warning(
                "chunk %s/%d %s failed (%d so far), retrying: %s",
                job_id,
                chunk,
                phase,
                failures,
                exc,
            )
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
        try:
            return stitch_job(get_ctx(), job_id)
        except FarmError as exc:
            return {"job_id": job_id, "failed": str(exc)[-500:]}

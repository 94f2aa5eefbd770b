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

from farm.dispatch import ENCODE_TASK, RENDER_TASK, STITCH_TASK
from farm.errors import ChunkInterrupted, FarmError, LeaseLost, PermanentError, TransientError
from farm.state import ChunkState
from workers.context import WorkerContext
from workers.encode import encode_chunk
from workers.render import render_chunk
from workers.stitch import stitch_job

log = logging.getLogger(__name__)


def backoff_s(failures: int, base_s: float = 2.0, cap_s: float = 120.0) -> float:
    """Exponential backoff for the next attempt after `failures` failures (pure)."""
    return float(min(cap_s, base_s * 2 ** max(failures - 1, 0)))


def run_chunk_phase(
    ctx: WorkerContext,
    job_id: str,
    chunk: int,
    phase: str,
    work: Callable[[WorkerContext, str, int], dict[str, object]],
) -> dict[str, object]:
    """Run the render or encode phase of a chunk and apply the failure policy to its outcome."""
    back_to = ChunkState.QUEUED if phase == "render" else ChunkState.RENDERED
    resend = ctx.dispatch.render if phase == "render" else ctx.dispatch.encode
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
            ctx.ledger.move_chunk(
                job_id, chunk, ChunkState.INTERRUPTED, token=token, mode="interrupt", error=str(exc)
            )
            move = ctx.ledger.move_chunk(job_id, chunk, ChunkState.QUEUED)
        else:
            move = ctx.ledger.move_chunk(
                job_id, chunk, back_to, token=token, error=f"transient: {exc}"
            )
        if move.moved:
            resend(job_id, chunk, 0 if interrupted else backoff_s(1))
        return {"job_id": job_id, "chunk": chunk, "handed_back": str(exc)}
    except PermanentError as exc:
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

    @app.task(name=STITCH_TASK, acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
    def stitch(job_id: str) -> dict[str, Any]:
        try:
            return stitch_job(get_ctx(), job_id)
        except FarmError as exc:
            return {"job_id": job_id, "failed": str(exc)[-500:]}

"""The claim a task's thread holds. Its token travels with the thread, never re-read from Redis:
an error handler must only ever move the chunk it claimed, not a newer attempt's."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from farm.ledger import Move
from farm.state import ChunkState

if TYPE_CHECKING:
    from workers.context import WorkerContext

_local = threading.local()


def hold(token: str) -> None:
    _local.token = token


def held() -> str:
    """This thread's claim token, or '' when the task never claimed its chunk."""
    token: str = getattr(_local, "token", "")
    return token


def release() -> None:
    _local.token = ""


def claim(
    ctx: WorkerContext,
    job_id: str,
    index: int,
    target: ChunkState,
    *,
    phase: str,
    only_from: frozenset[ChunkState],
) -> Move:
    """Claim the chunk for this worker with a fresh lease; on success this thread holds the token."""
    move = ctx.ledger.move_chunk(
        job_id,
        index,
        target,
        mode="claim",
        only_from=only_from,
        lease_s=ctx.settings.lease_s,
        worker=ctx.name,
        phase=phase,
    )
    if move.moved:
        hold(move.token)
    return move

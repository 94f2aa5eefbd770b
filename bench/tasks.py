"""Benchmark-only Celery tasks, registered by a worker started with FARM_TASK_PLUGINS=bench.tasks
(bench/common.py does); production code never imports this module.

`farm.bench.render` / `farm.bench.encode` move a chunk through the same ledger transitions and
store writes as a real chunk (claim, one tiny frame, rendered, claim, segment, manifest, done)
with no Blender or ffmpeg; `farm.bench.noop` is the bare Celery baseline.
"""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery

from farm import keys
from farm.pipeline import Queue
from farm.state import ChunkState, JobState
from workers.context import WorkerContext

BENCH_RENDER = "farm.bench.render"
BENCH_ENCODE = "farm.bench.encode"
BENCH_NOOP = "farm.bench.noop"
TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def trivial_render(ctx: WorkerContext, job_id: str, index: int) -> str:
    claim = ctx.ledger.move_chunk(
        job_id,
        index,
        ChunkState.RENDERING,
        mode="claim",
        only_from=frozenset({ChunkState.QUEUED, ChunkState.INTERRUPTED}),
        lease_s=30,
        worker=ctx.name,
    )
    if not claim.moved:
        return claim.status
    frame = index + 1
    ctx.store.put_bytes(keys.frame_key(job_id, frame), TINY_PNG, "image/png")
    ctx.ledger.record_frame(job_id, frame, len(TINY_PNG), "0" * 64)
    ctx.ledger.move_chunk(job_id, index, ChunkState.RENDERED, token=claim.token)
    ctx.dispatch.app.send_task(
        BENCH_ENCODE, kwargs={"job_id": job_id, "chunk": index}, queue=str(Queue.ENCODE)
    )
    return "rendered"


def trivial_encode(ctx: WorkerContext, job_id: str, index: int) -> str:
    claim = ctx.ledger.move_chunk(
        job_id,
        index,
        ChunkState.ENCODING,
        mode="claim",
        only_from=frozenset({ChunkState.RENDERED}),
        lease_s=30,
        worker=ctx.name,
    )
    if not claim.moved:
        return claim.status
    ctx.store.put_bytes(keys.segment_key(job_id, index), TINY_PNG)
    ctx.store.put_json(keys.manifest_key(job_id, index), {"chunk": index, "frame_count": 1})
    ctx.ledger.move_chunk(job_id, index, ChunkState.DONE, token=claim.token)
    if ctx.ledger.try_start_stitch(job_id):
        ctx.ledger.move_job(job_id, JobState.DONE, output="(bench: no stitch)")
    return "done"


def register(app: Celery, get_ctx: Callable[[], WorkerContext]) -> None:
    @app.task(name=BENCH_RENDER, acks_late=True)  # type: ignore[untyped-decorator]
    def render(job_id: str, chunk: int) -> str:
        return trivial_render(get_ctx(), job_id, chunk)

    @app.task(name=BENCH_ENCODE, acks_late=True)  # type: ignore[untyped-decorator]
    def encode(job_id: str, chunk: int) -> str:
        return trivial_encode(get_ctx(), job_id, chunk)

    @app.task(name=BENCH_NOOP, acks_late=True)  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

"""Benchmark-only Celery tasks, registered as Celery imports this module on a worker whose settings
include it (worker_include = bench.tasks: bench/common.py's farm); production code never imports
this module.

`farm.bench.render` runs a chunk through the worker's own phase runner (workers.attempt.policy
run_chunk_phase: claim, lease, work, manifest, done, the next phase in the same task on a
worker that also encodes, the completion gate) with trivial work in place of Blender and ffmpeg:
one tiny frame through the render phase's FrameUploader (stored, then recorded), one tiny
segment stored, the manifest written last. `farm.bench.noop` is the bare Celery baseline.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

from celery import Celery, Task, shared_task

from farm.core.errors import FramesMissing
from farm.core.pipeline import PHASES, Phase
from farm.core.state import JobState
from farm.dispatch import Dispatcher
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt, Outcome, Work
from workers.attempt.policy import run_chunk_phase
from workers.phases.frames import FrameUploader, frames_to_render
from workers.tasks import worker_context

BENCH_RENDER = "farm.bench.render"
BENCH_ENCODE = "farm.bench.encode"
BENCH_NOOP = "farm.bench.noop"
TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def trivial_render(attempt: ChunkAttempt) -> Outcome:
    """The render phase's store and ledger work for tiny frames, with no Blender."""
    ctx, job_id, index = attempt.ctx, attempt.job_id, attempt.index
    started = time.monotonic()
    todo = frames_to_render(ctx, job_id, attempt.frames, attempt.records)
    uploader = FrameUploader(ctx.store, ctx.ledger, job_id, index)
    workspace = attempt.fresh_workspace()
    if todo:
        uploader.starting(todo[0], 0.0)
        uploader.start()
        for frame in todo:
            path = workspace / f"frame_{frame:06d}.png"
            path.write_bytes(TINY_PNG)
            uploader.add(frame, path)
        uploader.finish()
        uploader.raise_errors()
    return Outcome(
        fields={
            "render_s": round(time.monotonic() - started, 3),
            "upload_s": round(uploader.upload_s, 3),
            "frames_rendered": len(attempt.frames),
            "frames_reused": len(attempt.frames) - len(todo),
            "rendered_by": ctx.name,
        },
        summary={"rendered": len(todo)},
    )


def trivial_segment(attempt: ChunkAttempt) -> Outcome:
    """The segment phase's store and ledger work for a tiny segment, with no ffmpeg."""
    ctx, job_id, index = attempt.ctx, attempt.job_id, attempt.index
    missing = [f for f in attempt.frames if f not in attempt.records]
    if missing:
        raise FramesMissing(f"frames {missing} have no record in the ledger")
    segment = attempt.fresh_workspace() / f"{index:05d}.mp4"
    segment.write_bytes(TINY_PNG)
    key = attempt.segment_key("mp4")
    ctx.store.put_file(key, segment, intermediate=True)
    return Outcome(
        fields={"encoder": "none", "segment_bytes": len(TINY_PNG)},
        manifest={
            "job_id": job_id,
            "chunk": index,
            "attempt": attempt.number,
            "frames": [{"frame": f, "size": attempt.records[f][0]} for f in attempt.frames],
            "frame_count": len(attempt.frames),
            "segment": {"key": key, "size": len(TINY_PNG)},
        },
    )


WORKS: dict[Phase, Work] = {Phase.RENDER: trivial_render, Phase.SEGMENT: trivial_segment}
TASKS = {Phase.RENDER: BENCH_RENDER, Phase.SEGMENT: BENCH_ENCODE}


class BenchDispatch(Dispatcher):
    """The worker's dispatcher with the benchmark's tasks: a chunk sent on (a worker that does
    not encode, a retry) goes to the bench task of its phase, and the stitch, with no video to
    join, just finishes the job."""

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx.dispatch.app)
        self.ledger = ctx.ledger

    def send(self, phase: Phase, job_id: str, chunk: int, countdown_s: float = 0) -> str:
        result = self.app.send_task(
            TASKS[phase],
            kwargs={"job_id": job_id, "chunk": chunk},
            queue=str(PHASES[phase].queue),
            countdown=countdown_s or None,
        )
        return str(result.id)

    def stitch(self, job_id: str, countdown_s: float = 0) -> str:
        self.ledger.move_job(job_id, JobState.DONE, output="(bench: no stitch)")
        return ""


def bench_context(ctx: WorkerContext) -> WorkerContext:
    return dataclasses.replace(ctx, dispatch=BenchDispatch(ctx))


@functools.cache
def _context(app: Celery) -> WorkerContext:
    """The worker's context with the benchmark's dispatcher, made once per worker."""
    return bench_context(worker_context(app))


@shared_task(name=BENCH_RENDER, bind=True, acks_late=True)  # type: ignore[untyped-decorator]
def render(task: Task, job_id: str, chunk: int) -> dict[str, Any]:
    return run_chunk_phase(_context(task.app), job_id, chunk, PHASES[Phase.RENDER], WORKS)


@shared_task(name=BENCH_ENCODE, bind=True, acks_late=True)  # type: ignore[untyped-decorator]
def encode(task: Task, job_id: str, chunk: int) -> dict[str, Any]:
    return run_chunk_phase(_context(task.app), job_id, chunk, PHASES[Phase.SEGMENT], WORKS)


@shared_task(name=BENCH_NOOP, acks_late=True, ignore_result=False)  # type: ignore[untyped-decorator]
def noop() -> None:
    return None

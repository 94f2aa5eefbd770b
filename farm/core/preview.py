"""Preview frames (pure): the frames `farm submit --preview N` renders first, spread over the job's
range; the chunks that put them ahead of the rest; whether a job is held after them; and the
estimate of the rest from what the preview frames really took.

farm.control.preview acts on it: it moves a job to `held`, and releases it on `farm resume`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from farm.core.chunking import Measurement, Pool, choose_chunk_size, expected_makespan_s
from farm.core.errors import SpecError
from farm.core.plan import Chunk
from farm.core.spec import FrameRange

MAX_PREVIEW = 100
"""The most preview frames a job may ask for: each is a chunk (a Blender start) of its own."""
PREVIEW_PRIORITY = 100
"""The farm's top priority (farm.dispatch.broker_priority: kombu's step 0): preview chunks are
taken before any other job's chunks on a busy farm."""
HOLD = "hold"
"""The job field set ("1") for a job submitted with `--hold`."""
HOLD_RELEASED = "hold_released"
"""The job field (the time) set once `farm resume` released a held job: it is never held again."""
PREVIEW_FRAMES = "preview_frames"
"""The job field with its preview frames (a JSON list)."""
REST_ESTIMATE = "rest_estimate"
"""The job field with the estimate of the rest, from the preview's timings (a JSON object)."""


def check_preview(count: int, hold: bool) -> None:
    """SpecError for a preview count out of range, or a hold without a preview."""
    if count < 0 or count > MAX_PREVIEW:
        raise SpecError(f"--preview {count}: choose 1 to {MAX_PREVIEW} frames (0: no preview)")
    if hold and count == 0:
        raise SpecError("--hold stops a job after its preview frames: add --preview N")


def preview_frames(frames: FrameRange, count: int) -> tuple[int, ...]:
    """`count` frames of the range, the first and the last among them and the others evenly
    between (to the nearest frame); every frame where `count` is the range's length or more."""
    every = frames.frames
    if count <= 0:
        return ()
    if count >= len(every):
        return every
    if count == 1:
        return (every[0],)
    last, gaps = len(every) - 1, count - 1
    # Rounded half up in integers: gaps of a frame or more stay distinct frames.
    return tuple(every[(2 * i * last + gaps) // (2 * gaps)] for i in range(count))


def preview_chunks(frames: Iterable[int]) -> tuple[Chunk, ...]:
    """One chunk a preview frame, numbered from 0: they are sent, and claimed, first."""
    return tuple(Chunk(index=i, frames=(f,)) for i, f in enumerate(frames))


def rest_chunks(
    frames: FrameRange, taken: Iterable[int], size: int, start: int
) -> tuple[Chunk, ...]:
    """The range's frames no chunk holds yet (`taken`), in order, cut into chunks of at most
    `size` that never span a taken frame (the stitch joins segments by their first frames, so a
    segment must not straddle another), numbered from `start`."""
    held = set(taken)
    runs: list[list[int]] = []
    previous_taken = True
    for frame in frames.frames:
        if frame in held:
            previous_taken = True
            continue
        if previous_taken or len(runs[-1]) >= max(size, 1):
            runs.append([])
        runs[-1].append(frame)
        previous_taken = False
    return tuple(Chunk(index=start + i, frames=tuple(run)) for i, run in enumerate(runs))


def hold_pending(job: Mapping[str, str]) -> bool:
    """A job submitted with `--hold` whose rest has not been released: its preview chunks are
    all it has, and it stops `held` once they are done."""
    return job.get(HOLD) == "1" and not job.get(HOLD_RELEASED)


def frames_of(job: Mapping[str, str]) -> list[int]:
    """The job's preview frames, as its record lists them ([] for a job without a preview)."""
    try:
        found = json.loads(job.get(PREVIEW_FRAMES) or "[]")
    except ValueError:
        return []
    return [int(f) for f in found] if isinstance(found, list) else []


@dataclass(frozen=True, slots=True, kw_only=True)
class RestEstimate:
    """What the rest of a held job is expected to take, from its preview's real timings."""

    frames: int
    chunks: int
    chunk_size: int
    time_s: float
    """From the first of the rest's chunks to the last (farm.core.chunking's makespan model)."""
    gpu_s: float
    cost: float
    """At the rate the job's own preview attempts were charged."""
    frame_s: float
    startup_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "chunks": self.chunks,
            "chunk_size": self.chunk_size,
            "time_s": round(self.time_s, 1),
            "gpu_s": round(self.gpu_s, 3),
            "cost": round(self.cost, 6),
            "frame_s": round(self.frame_s, 3),
            "startup_s": round(self.startup_s, 3),
        }


def rest_estimate(
    m: Measurement, *, frames_left: int, chunk_size: int, pool: Pool, paid_per_gpu_s: float
) -> RestEstimate:
    """The rest's chunks (a fixed size as asked; auto: chunking's rule over `m`), its expected
    time, its busy GPU time (start-up once per worker, as warm Blenders pay it, and F a frame)
    and its cost at `paid_per_gpu_s`, what the preview was charged a GPU-second."""
    if frames_left <= 0:
        return RestEstimate(frames=0, chunks=0, chunk_size=0, time_s=0.0, gpu_s=0.0, cost=0.0,
                            frame_s=m.frame_s, startup_s=m.startup_s)  # fmt: skip
    if chunk_size > 0:
        n = chunk_size
        time_s = expected_makespan_s(n, frames=frames_left, m=m, pool=pool, frame_cv=0.25)
    else:
        choice = choose_chunk_size(frames=frames_left, m=m, pool=pool)
        n, time_s = choice.chunk_size, choice.expected_makespan_s
    chunks = math.ceil(frames_left / n)
    starts = min(chunks, max(pool.workers, 1))
    gpu_s = starts * m.startup_s + frames_left * m.frame_s
    return RestEstimate(
        frames=frames_left, chunks=chunks, chunk_size=n, time_s=time_s, gpu_s=gpu_s,
        cost=gpu_s * paid_per_gpu_s, frame_s=m.frame_s, startup_s=m.startup_s,
    )  # fmt: skip


def initial_plan(
    frames: FrameRange,
    chunk_size: int,
    shown: tuple[int, ...],
    *,
    hold: bool,
    pool: Pool,
    measured: Measurement | None,
) -> tuple[tuple[Chunk, ...], dict[str, str]]:
    """A previewed job's chunks at submit and its plan fields: the preview frames first, one
    chunk each, then, unless the job holds after them, the rest in chunks that never span a
    preview frame. The rest waits (plan_pending: the completion gate stays shut) while the job
    holds, or while an auto size has nothing to go on: then the first preview frame to render
    measures the scene and sizes it (workers.phases.autochunk)."""
    first = preview_chunks(shown)
    fields = {PREVIEW_FRAMES: json.dumps(list(shown)), **({HOLD: "1"} if hold else {})}
    left = frames.count - len(shown)
    size = chunk_size
    if chunk_size == 0 and measured is not None and left > 0:
        size = choose_chunk_size(frames=left, m=measured, pool=pool).chunk_size
    said = f"preview: {len(shown)} frames first, a chunk each, at the top priority"
    if hold or (size == 0 and left > 0):
        why = "on `farm resume`" if hold else "once the first preview frame is timed"
        return first, fields | {
            "chunk_size": str(chunk_size or "auto"),
            "plan_pending": "1",
            "chunk_plan": f"{said}; the rest is planned {why}",
        }
    rest = rest_chunks(frames, shown, max(size, 1), start=len(first))
    how = "fixed, as asked" if chunk_size else "auto, sized from an earlier measurement"
    return first + rest, fields | {
        "chunk_size": str(max(size, 1)),
        "chunk_plan": f"{said}; then {len(rest)} chunks of up to {size} frames ({how})",
    }

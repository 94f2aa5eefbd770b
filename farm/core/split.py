"""No idle tail (pure): which rendering chunk a worker with nothing to do splits, and at which frame.

The ledger's split.lua makes the split atomic and checks it again; the worker's
side (workers/phases/splitter.py) decides when to look. bench/sim.py runs these same functions.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from farm.core.pipeline import PHASES, Phase, kind_of
from farm.core.spec import JobKind
from farm.core.state import ChunkState, JobState

MIN_REST = 1
"""Fewest frames a new chunk takes. Whether moving them pays for the new chunk's Blender start-up
is split_point's test: the chunk must end sooner split than whole."""
UNKNOWN_FRAME_S = 1.0
"""Frame time assumed for an owner that has not finished a frame yet (sets the margin)."""
SLACK_S = 1.5
"""Beyond the renewal interval: a lease tick, the permit write, Redis round trips."""
WAKE_LAG_S = 0.25
"""How long an owner that is woken (workers.attempt.wake) takes to hear of a split and pass it to
Blender: a publish, a renewal and the permit write, with room for a busy host."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    """Split chunk `index` of `job_id` (held under `token`): it keeps frames <= `last_frame`; a new
    chunk numbered `chunks_total` takes the `moved` frames after it."""

    job_id: str
    index: int
    token: str
    last_frame: int
    chunks_total: int
    moved: int


def margin_frames(frame_s: float, lag_s: float, left_s: float | None = None) -> int:
    """Frames after the one it is on that the owner may start before it hears of a split: as many
    as begin within `lag_s` (how long it may take to hear). `left_s`: what is left of the frame it
    is on, by its mean frame time (None: unknown, taken as ending now); none when that frame ends
    after the lag, so the owner stops after it, else at least one."""
    frame_s = frame_s if frame_s > 0 else UNKNOWN_FRAME_S
    if left_s is not None and left_s > lag_s:
        return 0
    left = max(left_s or 0.0, 0.0)
    return max(1, math.ceil((lag_s - left) / frame_s - 1e-9))


def split_point(
    frames: Sequence[int],
    frame_on: int | None,
    *,
    margin: int,
    startup_frames: float = 0.0,
    min_rest: int = MIN_REST,
    on_left: float = 0.0,
) -> int | None:
    """The last frame the owner keeps, or None when the chunk is too short to split.

    Of the frames after the one the owner is on (all of them before it starts one), it keeps at
    least `margin`, else the whole number k that ends both soonest: the owner finishes the frame
    it is on (`on_left`, in frames) and renders k, the new chunk starts Blender
    (`startup_frames`) and renders the rest, so k is about half of them plus half the start-up,
    less half of what is left of the current frame. k may be 0 (the owner stops after the frame
    it is on) but not before it has started one. The new chunk takes the rest, at least
    `min_rest`, and only if the later of the two ends before the owner alone would: one frame
    moves where the start-up is shorter than a frame, none where it is longer than what the owner
    would save."""
    ahead = [f for f in frames if frame_on is None or f > frame_on]
    even = (len(ahead) + startup_frames - on_left) / 2
    keep = min(
        (math.floor(even), math.ceil(even)),
        key=lambda k: (max(on_left + k, startup_frames + len(ahead) - k), -k),
    )
    keep = max(margin, keep, 0 if frame_on is not None else 1)
    rest = len(ahead) - keep
    if rest < min_rest or max(on_left + keep, startup_frames + rest) >= on_left + len(ahead):
        return None
    return ahead[keep - 1] if keep else frame_on


def owner_split(
    frames: Sequence[int],
    frame_on: int | None,
    *,
    frame_s: float,
    began_s: float | None,
    now: float,
    lag_s: float,
    startup_s: float,
    min_rest: int = MIN_REST,
) -> int | None:
    """split_point for an owner timed in seconds: its mean frame time so far `frame_s`, when it
    began the frame it is on `began_s` (None: unknown), how long it takes to hear `lag_s`, and
    the new chunk's start-up `startup_s` (farm.core.split.choose and bench/simsplit.py)."""
    # What is left of the frame the owner is on, by its mean frame time.
    left_s = frame_s - (now - began_s) if frame_on is not None and began_s and frame_s else None
    return split_point(
        frames,
        frame_on,
        margin=margin_frames(frame_s, lag_s, left_s),
        startup_frames=startup_s / frame_s if frame_s > 0 else 0.0,
        min_rest=min_rest,
        on_left=max(left_s or 0.0, 0.0) / frame_s if frame_s > 0 else 0.0,
    )


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value not in (None, "") else None
    except ValueError:
        return None


def _float(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else 0.0
    except ValueError:
        return 0.0


def choose(
    jobs: Sequence[tuple[Mapping[str, str], Sequence[Mapping[str, str]]]],
    *,
    lag_s: float,
    min_rest: int = MIN_REST,
    lag_of: Mapping[str, float] | None = None,
    now: float | None = None,
    warm_jobs: Collection[str] = (),
) -> Split | None:
    """The split that moves the most frames, across the running render jobs given as (job record,
    its chunk records); None while any of them still has a chunk waiting for a render (there is
    work to take) or no rendering chunk has enough frames left. `lag_s`: how long an owner may
    take to hear of a split; `lag_of`: a shorter one for owners (by worker name) that hear at
    once (workers.attempt.wake); `now`: the wall clock the owners' `frame_on_at` is read against;
    `warm_jobs`: jobs whose scene the splitting worker holds open (workers.host.warm), whose new
    chunk starts with no Blender start-up."""
    now = time.time() if now is None else now
    render = PHASES[Phase.RENDER]
    best: Split | None = None
    for job, chunks in jobs:
        if job.get("state") != JobState.RUNNING or kind_of(dict(job)) is not JobKind.RENDER:
            continue
        if any(c.get("state") in render.claim_from for c in chunks):
            return None
        if job.get("plan_pending") == "1":
            continue
        # Blender start-up as the job's finished chunks measured it: what the new chunk pays.
        startups = [
            _float(c.get("blender_startup_s")) for c in chunks if c.get("blender_startup_s")
        ]
        startup_s = statistics.median(startups) if startups else 0.0
        if job["id"] in warm_jobs:
            startup_s = 0.0
        # A chunk that has not finished a frame yet (a split's new chunk, a reclaimed chunk's
        # rest) is timed as its job's finished chunks were, not by UNKNOWN_FRAME_S.
        timed = [_float(c.get("frame_s")) for c in chunks if _float(c.get("frame_s")) > 0]
        job_frame_s = statistics.median(timed) if timed else 0.0
        for chunk in chunks:
            if chunk.get("state") != ChunkState.RENDERING or not chunk.get("token"):
                continue
            frames: list[int] = json.loads(chunk.get("frames") or "[]")
            frame_s = _float(chunk.get("frame_s_live")) or job_frame_s
            lag = (lag_of or {}).get(chunk.get("worker") or "", lag_s)
            last = owner_split(
                frames,
                _int(chunk.get("frame_on")),
                frame_s=frame_s,
                began_s=_float(chunk.get("frame_on_at")) or None,
                now=now,
                lag_s=lag,
                startup_s=startup_s,
                min_rest=min_rest,
            )
            if last is None:
                continue
            moved = sum(1 for f in frames if f > last)
            if best is None or moved > best.moved:
                best = Split(
                    job_id=job["id"],
                    index=int(chunk["index"]),
                    token=chunk["token"],
                    last_frame=last,
                    chunks_total=int(job["chunks_total"]),
                    moved=moved,
                )
    return best

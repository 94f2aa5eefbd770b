"""Choosing a render job's chunk size from what the farm measured (pure): the probe wave, the
makespan model, the rule. The simulator in bench/ runs this same code.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from farm.core.plan import Chunk, plan_chunks
from farm.core.spec import FrameRange

AUTO = 0
"""JobSpec.chunk_size for `--chunk-size auto`."""
PROBE_FRAMES = 2
"""Frames in each probe chunk: two Saved: lines give one frame-to-frame interval."""
EFFICIENCY = 0.9
"""n >= EFFICIENCY/(1-EFFICIENCY) * (S+O)/F = 9·(S+O)/F keeps a chunk's start-up (Blender's and
the farm's own) under 10% of it."""
CHUNK_OVERHEAD_S = 0.25
"""O: the farm's own work per chunk, whatever Blender's start-up: the claim and ledger calls, the
segment's encode (an ffmpeg start) and upload, its place in the stitch. 0.2 to 0.3 s measured
on a local farm (`python -m bench overhead`: per chunk, encode plus ledger). A worker's ready or
warm Blender leaves S near 0; without O every frame would become a chunk of its own."""
TARGET_CHUNK_S = 3600.0
"""Longest chunk the rule aims for (an hour): a chunk never holds a job for long, even where the
makespan model would take longer ones; shorter targets cost waves of Blender start-ups."""
FRAME_CV = 0.25
"""Assumed spread of per-frame times (standard deviation / mean) when sizing the tail."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """Blender start-up and scene load per chunk (S) and render+save time per frame (F)."""

    startup_s: float
    frame_s: float
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """The workers a job will run on, as the sizing rule sees them."""

    workers: int
    interruption_per_h: float = 0.05
    """Spot reclaims per instance-hour (0.05: 5%/h)."""
    detect_s: float = 35.0
    """Reclaim to requeue: lease expiry plus a reconcile pass."""
    boot_s: float = 120.0
    """A replacement instance's start-up, lost capacity for every reclaim."""
    frame_factors: tuple[float, ...] = ()
    """Each worker's frame time relative to a typical worker's, as measured (worker_factors);
    empty: equal workers. 1.3 is a worker 30% slower, 0.8 one 20% faster."""

    splits: bool = False
    """Idle workers split running chunks (farm.core.split): the tail is a few frames, not a chunk."""
    warm_blender: bool = True
    """Workers keep Blender warm between a job's chunks (workers.host.warm, the default): each pays
    the start-up once per job, not once per chunk (farm.core.cost.estimate's busy time)."""

    @property
    def capacity(self) -> float:
        """Workers counted in typical-worker units (a worker twice as slow counts half)."""
        if not self.frame_factors:
            return float(max(self.workers, 1))
        return sum(1.0 / f for f in self.frame_factors)

    @property
    def slowest(self) -> float:
        """The slowest worker's frame-time factor (1.0 for equal workers)."""
        return max(self.frame_factors, default=1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    chunk_size: int
    reason: str
    expected_makespan_s: float
    efficiency: float
    """n·F / (S + n·F): the share of a chunk spent rendering rather than starting Blender."""


def measure_saved_times(launch_to_saved_s: Sequence[float], source: str = "") -> Measurement:
    """S and F from the seconds between Blender's launch and each `Saved:` line of one run.

    F is the median gap between consecutive saves (render + save of one frame); S is the time to
    the first save less one F. A single frame cannot separate them: F is then its whole time less
    nothing and S is 0, which errs toward smaller chunks.
    """
    times = sorted(launch_to_saved_s)
    if not times:
        raise ValueError("no frames were saved; nothing to measure")
    gaps = [b - a for a, b in itertools.pairwise(times)]
    frame_s = statistics.median(gaps) if gaps else times[0]
    frame_s = max(frame_s, 1e-3)
    return Measurement(startup_s=max(times[0] - frame_s, 0.0), frame_s=frame_s, source=source)


def efficiency_floor(m: Measurement) -> int:
    """Smallest n with n·F/(S+O+n·F) >= EFFICIENCY, i.e. n >= 9·(S+O)/F."""
    paid = m.startup_s + CHUNK_OVERHEAD_S
    return max(1, math.ceil(EFFICIENCY / (1 - EFFICIENCY) * paid / m.frame_s - 1e-9))


def expected_makespan_s(
    n: int, *, frames: int, m: Measurement, pool: Pool, frame_cv: float
) -> float:
    """Expected time for `frames` frames in chunks of n on the pool (start-up and stitch aside).

    c = S + O + n·F per chunk (O: CHUNK_OVERHEAD_S), K = ceil(frames/n) chunks. Each reclaim costs the fleet B + S + F/2
    GPU-seconds (a new instance boots; Blender restarts; the frame in flight is lost; frames
    already saved are reused), so capacity is G·(1-r), r = λ·(B + S + F/2), and the bulk is
    the larger of ceil(K/G) whole waves of c and K·c/(G·(1-r)). The tail adds the slowest GPU:
    its share of frames, frames/G of them, runs F·cv·√(frames/G)·√(2·ln G) over the mean, though
    never more than one chunk, c, since a GPU that finishes early takes the next chunk. When a
    chunk is reclaimed near the end (p = 1 - e^(-μ), μ = G·λ·c reclaims per chunk-time), it adds
    the requeue delay and a restart, D + S, plus the wait for a GPU: a replacement's boot B when
    the job is one wave, else the rest of the chunk that was running, c·μ/(1+μ) (every GPU is
    busy until the bulk ends, then the remainder runs). Where workers split (`pool.splits`) the
    tail is at most S + 2F, and a reclaim costs the end only if it comes in the last D + S + F:
    with μ = G·λ·(D + S + F)/2 such reclaims, the latest adds (D + S + F)·(1 - (1 - e^(-μ))/μ).
    """
    lam = pool.interruption_per_h / 3600.0
    c = m.startup_s + CHUNK_OVERHEAD_S + n * m.frame_s
    chunks = math.ceil(frames / n)
    rho = min(lam * (pool.boot_s + m.startup_s + m.frame_s / 2), 0.9)
    slow = pool.slowest
    # Unequal workers (measured): capacity in typical-worker units; one wave waits for the
    # slowest, and later waves end with it half a chunk behind (a fast worker takes more chunks).
    one_wave = chunks <= pool.workers
    waves = math.ceil(chunks / pool.workers) * c * (slow if one_wave and not pool.splits else 1.0)
    bulk = max(waves, chunks * c / (pool.capacity * (1 - rho)))
    lanes = min(chunks, pool.workers)
    share = m.frame_s * frame_cv * math.sqrt(frames / lanes) * math.sqrt(2 * math.log(lanes))
    behind = c * (slow - 1.0) / 2 if not one_wave else 0.0
    spread = min(share + behind, c * slow) if lanes > 1 else 0.0
    if pool.splits and lanes > 1:
        # Workers that run out split the longest chunks left, down to one frame: the tail is
        # the owner's frame and the one it keeps, or a new chunk's start-up and its frame.
        spread = min(spread, m.startup_s + 2 * m.frame_s * slow)
        # A reclaimed chunk's rest is split like any other, so a reclaim delays the end only in
        # its last D + S + F (requeue, restart, a frame), whatever n: the latest of those, with
        # about half the GPUs still busy then.
        window = pool.detect_s + m.startup_s + m.frame_s * slow
        mu = pool.workers * lam * window / 2
        late = window * (1 - (1 - math.exp(-mu)) / mu) if mu > 0 else 0.0
        return bulk + spread + late
    mu = pool.workers * lam * c
    wait = pool.boot_s if chunks <= pool.workers else c * mu / (1 + mu)
    return bulk + spread + (1 - math.exp(-mu)) * (pool.detect_s + m.startup_s + wait)


def choose_chunk_size(
    *,
    frames: int,
    m: Measurement,
    pool: Pool,
    target_chunk_s: float = TARGET_CHUNK_S,
    frame_cv: float = FRAME_CV,
) -> Choice:
    """The chunk size with the least expected makespan within [lo, hi], where

    hi = min(ceil(frames/G), (target - S)/F): every worker gets work, no chunk runs past the target;
    lo = min(9·(S+O)/F, hi): at least 90% of each chunk is rendering, unless that would idle
    workers.
    Ties go to the larger n (fewer chunks, less Blender start-up).
    """
    workers = max(pool.workers, 1)
    frames = max(frames, 1)
    per_worker = math.ceil(frames / workers)
    by_target = max(1, math.floor((target_chunk_s - m.startup_s) / m.frame_s))
    hi = max(1, min(per_worker, by_target))
    floor = efficiency_floor(m)
    lo = min(floor, hi)
    best, best_t = hi, math.inf
    for n in range(hi, lo - 1, -1):
        t = expected_makespan_s(n, frames=frames, m=m, pool=pool, frame_cv=frame_cv)
        if t < best_t - 1e-9:
            best, best_t = n, t
    limits = []
    if per_worker < floor:
        limits.append(f"below 9·(S+O)/F={floor} so all {workers} workers get work")
    if by_target < per_worker:
        limits.append(f"at most {by_target} to keep chunks under {target_chunk_s:.0f} s")
    eff = best * m.frame_s / (m.startup_s + CHUNK_OVERHEAD_S + best * m.frame_s)
    reason = (
        f"S={m.startup_s:.2f} s start-up, F={m.frame_s:.3f} s/frame"
        + (f" ({m.source})" if m.source else "")
        + f"; {workers} workers"
        + (
            f" (frame times x{min(pool.frame_factors):.2f} to x{pool.slowest:.2f} of a typical one)"
            if pool.frame_factors
            else ""
        )
        + f", {pool.interruption_per_h:.0%}/h reclaims; "
        + f"range {lo}..{hi}"
        + (f" ({'; '.join(limits)})" if limits else f" (9·(S+O)/F={floor})")
        + f"; least expected makespan {best_t:.0f} s; efficiency {eff:.0%}"
    )
    return Choice(chunk_size=best, reason=reason, expected_makespan_s=best_t, efficiency=eff)


def worker_factors(jobs: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each worker's frame time relative to its peers', from jobs it rendered beside them: each
    mapping is one job's worker -> its mean frame time there. Within a job a worker's time is
    divided by the job's median (scenes differ; workers on one scene compare); a worker's factor
    is the median of its ratios. Jobs rendered by one worker say nothing and are skipped."""
    ratios: dict[str, list[float]] = {}
    for job in jobs:
        times = {w: t for w, t in job.items() if t > 0}
        if len(times) < 2:
            continue
        typical = statistics.median(times.values())
        for worker, t in times.items():
            ratios.setdefault(worker, []).append(t / typical)
    return {w: statistics.median(r) for w, r in ratios.items()}


def probe_wave(frames: FrameRange, workers: int) -> tuple[Chunk, ...]:
    """The first chunks of an auto-sized job: one of PROBE_FRAMES frames per worker."""
    all_frames = frames.frames[: max(workers, 1) * PROBE_FRAMES]
    return tuple(
        Chunk(index=i, frames=all_frames[start : start + PROBE_FRAMES])
        for i, start in enumerate(range(0, len(all_frames), PROBE_FRAMES))
    )


def rest_after(frames: FrameRange, probed: tuple[Chunk, ...], chunk_size: int) -> tuple[Chunk, ...]:
    """The frames the probe wave did not take, in chunks of `chunk_size`, numbered after it."""
    taken = sum(len(c.frames) for c in probed)
    rest = frames.frames[taken:]
    if not rest:
        return ()
    step = frames.step
    tail = FrameRange(first=rest[0], last=rest[-1], step=step)
    return tuple(
        Chunk(index=len(probed) + c.index, frames=c.frames) for c in plan_chunks(tail, chunk_size)
    )


def initial_plan(
    frames: FrameRange, chunk_size: int, pool: Pool, measured: Measurement | None = None
) -> tuple[tuple[Chunk, ...], dict[str, str]]:
    """The chunks to create at submit and the ledger's plan fields for them.

    A fixed size plans everything now. AUTO with an earlier job's measurement of the same scene
    and settings sizes everything now too; without one it plans the probe wave and marks the plan
    pending: the first probe chunk to finish rendering measures S and F and plans the rest.
    """
    workers = max(pool.workers, 1)
    if chunk_size == AUTO and measured is not None:
        choice = choose_chunk_size(frames=frames.count, m=measured, pool=pool)
        return plan_chunks(frames, choice.chunk_size), {
            "chunk_size": str(choice.chunk_size),
            "chunk_plan": "auto: " + choice.reason,
        }
    if chunk_size != AUTO:
        return plan_chunks(frames, chunk_size), {
            "chunk_size": str(chunk_size),
            "chunk_plan": f"fixed: {chunk_size} frames per chunk, as asked",
        }
    probe = probe_wave(frames, workers)
    if sum(len(c.frames) for c in probe) >= frames.count:
        return probe, {
            "chunk_size": str(PROBE_FRAMES),
            "chunk_plan": f"auto: {frames.count} frames fit in one chunk of at most "
            f"{PROBE_FRAMES} per worker ({workers} workers)",
        }
    return probe, {
        "chunk_size": "auto",
        "plan_pending": "1",
        "chunk_plan": f"auto: probing with {len(probe)} chunks of {PROBE_FRAMES} frames (one "
        "per worker); the first to finish measures Blender start-up and frame time, then the "
        "rest is sized",
    }

"""The simulator's no-idle-tail model (farm.core.split's own rule): splits shorten the tail, every
frame is still rendered once, and nothing splits while work waits."""

from __future__ import annotations

from bench.sim import Fleet, Sim, Workload, simulate
from farm.core.chunking import AUTO

WORK = Workload(frames=400, startup_s=10, frame_s=5, stitch_s=5)
LONG = Workload(frames=2000, startup_s=2, frame_s=5, frame_cv=0.5, stitch_s=5)
"""One 100-frame chunk per GPU, wide frame-time spread: the first done wait long for the last."""


def test_splitting_one_chunk_per_gpu_shortens_the_makespan() -> None:
    fleet = Fleet(gpus=20, boot_s=0)
    plain = simulate(LONG, fleet, 100)
    split = simulate(LONG, fleet, 100, splits=True)
    assert split.splits > 0 and split.chunks == 20 + split.splits
    assert split.makespan_s < plain.makespan_s
    assert split.makespan_s >= split.ideal_s


def test_split_chunks_still_cover_every_frame_once() -> None:
    sim = Sim(LONG, Fleet(gpus=20, boot_s=0), 100, splits=True)
    assert sim.run().splits > 0
    frames = sorted(f for c in sim.chunks.values() for f in c.frames)
    assert frames == list(range(1, 2001))
    assert sim.saved == set(range(1, 2001))


def test_no_split_is_needed_when_the_queue_outlasts_the_fleet() -> None:
    o = simulate(WORK, Fleet(gpus=2, boot_s=0), 10, splits=True)
    assert o.splits <= 2  # only at the very end, never while chunks wait


def test_auto_sizes_and_splits_from_fleet_up() -> None:
    o = simulate(WORK, Fleet(gpus=20), AUTO, splits=True)
    assert not o.failed and 0 < o.fleet_up_s < 200
    assert o.ratio_up < o.ratio

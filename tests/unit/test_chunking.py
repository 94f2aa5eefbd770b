"""Auto chunk sizing: the measurement, the bounds, the probe wave and the rest of the plan."""

from __future__ import annotations

import pytest

from farm.core import chunking
from farm.core.chunking import Measurement, Pool, choose_chunk_size, expected_makespan_s
from farm.core.spec import FrameRange


def test_saved_times_give_startup_and_frame_time() -> None:
    m = chunking.measure_saved_times([4.1, 4.6, 5.1])
    assert m.frame_s == pytest.approx(0.5)
    assert m.startup_s == pytest.approx(3.6)


def test_one_saved_frame_errs_toward_no_startup() -> None:
    m = chunking.measure_saved_times([2.0])
    assert (m.startup_s, m.frame_s) == (0.0, 2.0)


def test_efficiency_floor_is_nine_startups_per_frame() -> None:
    o = chunking.CHUNK_OVERHEAD_S  # the farm's own work per chunk counts as start-up
    assert chunking.efficiency_floor(Measurement(startup_s=10 - o, frame_s=5)) == 18
    n = chunking.efficiency_floor(Measurement(startup_s=7, frame_s=3))
    assert n * 3 / (7 + o + n * 3) >= 0.9 > (n - 1) * 3 / (7 + o + (n - 1) * 3)


def test_a_ready_blender_s_near_zero_still_makes_chunks_of_several_frames() -> None:
    """A worker's ready Blender leaves S at a few milliseconds: the farm's own cost per chunk
    (claim, ledger, the segment's encode) still keeps one-frame chunks out (the 48-frame bench
    went to 48 chunks and 1.27 of the direct run without it)."""
    m = Measurement(startup_s=0.0, frame_s=1.1)
    assert chunking.efficiency_floor(m) == 3
    choice = choose_chunk_size(frames=44, m=m, pool=Pool(workers=2, splits=True))
    assert choice.chunk_size == 22, choice.reason
    # What `farm submit` prints counts O as the floor does: 22·1.1/(0 + 0.25 + 22·1.1).
    assert choice.efficiency == pytest.approx(24.2 / 24.45)
    assert choice.reason.endswith("efficiency 99%")


def test_no_worker_is_left_idle_even_below_the_floor() -> None:
    choice = choose_chunk_size(
        frames=48, m=Measurement(startup_s=3.6, frame_s=0.5), pool=Pool(workers=2)
    )
    assert choice.chunk_size == 24
    assert "so all 2 workers get work" in choice.reason


def test_chunks_stay_under_the_target_runtime() -> None:
    m = Measurement(startup_s=20, frame_s=30)
    choice = choose_chunk_size(frames=100_000, m=m, pool=Pool(workers=10), target_chunk_s=900)
    assert 20 + choice.chunk_size * 30 <= 900
    assert choice.chunk_size >= chunking.efficiency_floor(m)


def test_reclaims_never_make_chunks_longer() -> None:
    m = Measurement(startup_s=20, frame_s=30)
    sizes = [
        choose_chunk_size(
            frames=98_000, m=m, pool=Pool(workers=1000, interruption_per_h=r)
        ).chunk_size
        for r in (0.0, 0.05, 0.2)
    ]
    assert sizes == sorted(sizes, reverse=True)


def test_probe_wave_is_one_small_chunk_per_worker_and_the_rest_follows() -> None:
    frames = FrameRange(first=1, last=23, step=2)
    probe = chunking.probe_wave(frames, workers=2)
    assert [c.frames for c in probe] == [(1, 3), (5, 7)]
    rest = chunking.rest_after(frames, probe, chunk_size=3)
    assert [(c.index, c.frames) for c in rest] == [
        (2, (9, 11, 13)),
        (3, (15, 17, 19)),
        (4, (21, 23)),
    ]


def test_initial_plan_fixed_and_auto() -> None:
    frames = FrameRange(first=1, last=40)
    pool = Pool(workers=3)
    fixed, fields = chunking.initial_plan(frames, 8, pool)
    assert len(fixed) == 5 and fields["chunk_size"] == "8" and "plan_pending" not in fields
    probe, fields = chunking.initial_plan(frames, chunking.AUTO, pool)
    assert len(probe) == 3 and fields["plan_pending"] == "1"
    small, fields = chunking.initial_plan(FrameRange(first=1, last=5), chunking.AUTO, pool)
    assert sum(len(c.frames) for c in small) == 5 and "plan_pending" not in fields


def test_an_earlier_measurement_sizes_the_whole_job_at_submit() -> None:
    m = Measurement(startup_s=2, frame_s=1, source="probe chunk 0 of j-1")
    chunks, fields = chunking.initial_plan(
        FrameRange(first=1, last=40), chunking.AUTO, Pool(workers=2), m
    )
    assert [len(c.frames) for c in chunks] == [20, 20] and "plan_pending" not in fields
    assert fields["chunk_size"] == "20" and "j-1" in fields["chunk_plan"]


def test_with_splits_the_tail_is_a_startup_and_two_frames() -> None:
    # One wave of 100-frame chunks (c = 20 + O + 100·30 s); idle workers split down to one frame, so
    # the last to end has its own frame and the one it kept, or a new chunk's start-up and frame.
    m = Measurement(startup_s=20, frame_s=30)
    pool = Pool(workers=1000, interruption_per_h=0.0, splits=True)
    t = expected_makespan_s(100, frames=100_000, m=m, pool=pool, frame_cv=0.25)
    assert t == pytest.approx(3020 + chunking.CHUNK_OVERHEAD_S + 20 + 2 * 30)


def test_with_splits_reclaims_do_not_shrink_one_wave_chunks() -> None:
    # Without splits a reclaimed chunk's rest waits for a replacement to boot, so reclaims push
    # a small fleet toward many short chunks; with splits its rest is shared out like any other
    # and one chunk per GPU, one Blender start each, stays best (bench/sim.py agrees).
    m = Measurement(startup_s=20, frame_s=30)
    for rate in (0.05, 0.2):
        whole = Pool(workers=50, interruption_per_h=rate)
        split = Pool(workers=50, interruption_per_h=rate, splits=True)
        assert choose_chunk_size(frames=2000, m=m, pool=whole).chunk_size < 20
        assert choose_chunk_size(frames=2000, m=m, pool=split).chunk_size == 40

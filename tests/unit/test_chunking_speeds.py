"""`--chunk-size auto` learns each worker's speed: measured factors, and sizing with them."""

from __future__ import annotations

import pytest

from farm.core.chunking import (
    Measurement,
    Pool,
    choose_chunk_size,
    expected_makespan_s,
    worker_factors,
)


def test_each_workers_factor_is_its_frame_time_over_the_jobs_median() -> None:
    factors = worker_factors(
        [
            {"a": 10.0, "b": 13.0, "c": 10.0},  # one scene: b is 30% slower than typical
            {"a": 2.0, "b": 2.6, "c": 2.0},  # another scene, the same workers
            {"a": 5.0},  # rendered alone: says nothing about speed
        ]
    )
    assert factors == pytest.approx({"a": 1.0, "b": 1.3, "c": 1.0})


def test_equal_measured_workers_size_as_before() -> None:
    m = Measurement(startup_s=3.6, frame_s=0.5)
    plain = choose_chunk_size(frames=192, m=m, pool=Pool(workers=2))
    equal = choose_chunk_size(frames=192, m=m, pool=Pool(workers=2, frame_factors=(1.0, 1.0)))
    assert (plain.chunk_size, plain.expected_makespan_s) == (
        equal.chunk_size,
        equal.expected_makespan_s,
    )


def test_a_slow_worker_makes_one_chunk_per_worker_take_longer() -> None:
    m = Measurement(startup_s=20, frame_s=30)
    equal = Pool(workers=100)
    spread = Pool(workers=100, frame_factors=(1.0,) * 90 + (1.3,) * 10)
    assert expected_makespan_s(100, frames=10_000, m=m, pool=spread, frame_cv=0.25) > (
        1.25 * expected_makespan_s(100, frames=10_000, m=m, pool=equal, frame_cv=0.25)
    )


def test_without_splits_a_measured_spread_chooses_smaller_chunks() -> None:
    m = Measurement(startup_s=20, frame_s=30)
    equal = choose_chunk_size(frames=100_000, m=m, pool=Pool(workers=1000))
    spread = choose_chunk_size(
        frames=100_000, m=m, pool=Pool(workers=1000, frame_factors=(1.0,) * 900 + (1.3,) * 100)
    )
    assert spread.chunk_size < equal.chunk_size
    assert "frame times x1.00 to x1.30" in spread.reason


def test_with_splits_the_slow_workers_tail_is_split_away() -> None:
    m = Measurement(startup_s=20, frame_s=30)
    factors = (1.0,) * 900 + (1.3,) * 100
    no = Pool(workers=1000, frame_factors=factors)
    yes = Pool(workers=1000, frame_factors=factors, splits=True)
    t_no = expected_makespan_s(100, frames=100_000, m=m, pool=no, frame_cv=0.25)
    t_yes = expected_makespan_s(100, frames=100_000, m=m, pool=yes, frame_cv=0.25)
    assert t_yes < t_no
    assert choose_chunk_size(frames=100_000, m=m, pool=yes).chunk_size == 100

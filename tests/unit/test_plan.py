import pytest

from farm.core.plan import plan_chunks
from farm.core.spec import parse_frames


def test_even_split() -> None:
    chunks = plan_chunks(parse_frames("1-48"), 8)
    assert next(c.frames for c in chunks) == tuple(range(1, 9))
    assert len(chunks) == 6
    assert [c.index for c in chunks] == list(range(6))


def test_uneven_last_chunk_takes_the_rest() -> None:
    chunks = plan_chunks(parse_frames("1-10"), 4)
    assert [c.frames for c in chunks] == [(1, 2, 3, 4), (5, 6, 7, 8), (9, 10)]


def test_step_applies_before_chunking() -> None:
    chunks = plan_chunks(parse_frames("1-20:3"), 3)
    assert [c.frames for c in chunks] == [(1, 4, 7), (10, 13, 16), (19,)]


def test_one_frame_job_is_one_chunk() -> None:
    chunks = plan_chunks(parse_frames("42"), 10)
    assert len(chunks) == 1
    assert chunks[0].frames == (42,)
    assert chunks[0].first == chunks[0].last == 42


def test_every_frame_lands_in_exactly_one_chunk() -> None:
    frames = parse_frames("0-997:7")
    chunks = plan_chunks(frames, 9)
    flat = [f for c in chunks for f in c.frames]
    assert flat == list(frames.frames)


def test_chunk_size_below_one_is_a_bug() -> None:
    with pytest.raises(ValueError):
        plan_chunks(parse_frames("1-2"), 0)

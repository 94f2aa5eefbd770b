"""Cutting a job's frames into chunks (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from farm.core.spec import FrameRange


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One unit of work: the frames one worker renders and encodes into one segment."""

    index: int
    frames: tuple[int, ...]

    @property
    def first(self) -> int:
        return self.frames[0]

    @property
    def last(self) -> int:
        return self.frames[-1]


def plan_chunks(frames: FrameRange, chunk_size: int) -> tuple[Chunk, ...]:
    """Consecutive chunks of `chunk_size` frames in order; the last one takes what is left."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    all_frames = frames.frames
    return tuple(
        Chunk(index=i, frames=all_frames[start : start + chunk_size])
        for i, start in enumerate(range(0, len(all_frames), chunk_size))
    )

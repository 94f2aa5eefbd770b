"""Job and chunk states and the one table of transitions between them (pure)."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    """Recorded, chunks sent; no chunk has started yet."""
    RUNNING = "running"
    """At least one chunk has started."""
    STITCHING = "stitching"
    """Every chunk is done; the one stitch task owns the job."""
    DONE = "done"
    """The deliverable is in the store and verified."""
    FAILED = "failed"
    """A chunk spent its failure budget or the stitch failed; see the job's error."""
    CANCELLED = "cancelled"
    """Stopped by a user; finished frames are kept for a retry."""

    @property
    def final(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class ChunkState(StrEnum):
    QUEUED = "queued"
    """Waiting for a render worker."""
    RENDERING = "rendering"
    """A worker holds the render lease and Blender is running."""
    RENDERED = "rendered"
    """Every frame is in the store; waiting for an encode worker."""
    ENCODING = "encoding"
    """A worker holds the encode lease and ffmpeg is running."""
    DONE = "done"
    """The segment and its manifest are in the store and verified."""
    INTERRUPTED = "interrupted"
    """Handed back by a worker that is going away; requeued without spending a failure."""
    FAILED = "failed"
    """The chunk spent its failure budget."""
    CANCELLED = "cancelled"
    """The job was cancelled before this chunk finished."""


CHUNK_TRANSITIONS: dict[ChunkState, frozenset[ChunkState]] = {
    # Encode-job chunks have nothing to render: they go from QUEUED straight to ENCODING.
    ChunkState.QUEUED: frozenset({ChunkState.RENDERING, ChunkState.ENCODING, ChunkState.CANCELLED}),
    ChunkState.RENDERING: frozenset(
        {
            ChunkState.RENDERED,
            ChunkState.QUEUED,
            ChunkState.INTERRUPTED,
            ChunkState.FAILED,
            ChunkState.CANCELLED,
        }
    ),
    ChunkState.RENDERED: frozenset(
        {ChunkState.ENCODING, ChunkState.INTERRUPTED, ChunkState.CANCELLED}
    ),
    ChunkState.ENCODING: frozenset(
        {
            ChunkState.DONE,
            ChunkState.RENDERED,
            ChunkState.INTERRUPTED,
            ChunkState.FAILED,
            ChunkState.CANCELLED,
        }
    ),
    # An interrupted chunk is requeued at once and stays marked until a worker claims it.
    ChunkState.INTERRUPTED: frozenset(
        {ChunkState.RENDERING, ChunkState.ENCODING, ChunkState.QUEUED, ChunkState.CANCELLED}
    ),
    ChunkState.FAILED: frozenset({ChunkState.QUEUED}),
    ChunkState.CANCELLED: frozenset({ChunkState.QUEUED}),
    ChunkState.DONE: frozenset(),
}
"""Allowed moves. DONE is terminal: a late or duplicate result can never move a chunk backwards."""

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.STITCHING, JobState.FAILED, JobState.CANCELLED}),
    JobState.STITCHING: frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED}),
    JobState.FAILED: frozenset({JobState.RUNNING}),
    JobState.CANCELLED: frozenset({JobState.RUNNING}),
    JobState.DONE: frozenset(),
}


def can_move(current: ChunkState, target: ChunkState) -> bool:
    """Whether a chunk may go from `current` to `target`."""
    return target in CHUNK_TRANSITIONS[current]


def sources_of(target: ChunkState) -> frozenset[ChunkState]:
    """Every state from which a chunk may move to `target` (what the ledger's script checks)."""
    return frozenset(s for s, targets in CHUNK_TRANSITIONS.items() if target in targets)


def job_sources_of(target: JobState) -> frozenset[JobState]:
    """Every job state from which a job may move to `target`."""
    return frozenset(s for s, targets in JOB_TRANSITIONS.items() if target in targets)

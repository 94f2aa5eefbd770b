"""Job and chunk states (pure). Which moves between them are allowed follows from the pipeline:
see farm.core.pipeline."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    WAITING = "waiting"
    """Recorded, nothing sent: it waits for its parent jobs (`farm submit --after`) and is
    queued by the reconciler once they are done (farm.control.depends)."""
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
    HELD = "held"
    """Its preview frames are done (`farm submit --preview N --hold`); the rest is not planned,
    sent or charged until `farm resume` releases it (farm.control.preview)."""
    PAUSED = "paused"
    """No new chunk starts (`farm pause`, or the budget would be passed; see the job's
    `paused_reason`); running chunks finish and every frame is kept. `farm resume` continues."""

    @property
    def final(self) -> bool:
        return self in ENDED


ENDED = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})
"""The job states that never change again (a retry makes the job run anew); as they are str,
a state read from the ledger ('' for a job that is gone) can be looked up as it is."""


class ChunkState(StrEnum):
    QUEUED = "queued"
    """Waiting for a render worker."""
    RENDERING = "rendering"
    """A worker holds the render lease and Blender is running."""
    RENDERED = "rendered"
    """Every frame is in the store; waiting for an encode worker."""
    ENCODING = "encoding"
    """A worker holds the encode lease and ffmpeg makes the segment from the frames."""
    TRANSCODING = "transcoding"
    """A worker holds the lease and ffmpeg transcodes the chunk's part of the master."""
    DONE = "done"
    """The segment and its manifest are in the store and verified."""
    INTERRUPTED = "interrupted"
    """Handed back by a worker that is going away; requeued without spending a failure."""
    FAILED = "failed"
    """The chunk spent its failure budget."""
    CANCELLED = "cancelled"
    """The job was cancelled before this chunk finished."""

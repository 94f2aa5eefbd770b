"""Caps on what one job may ask of the farm, checked before anything is uploaded or recorded.

Each chunk costs the ledger a Redis hash (about 1.5 KB with its frame list and history) and one
message at submit: a million one-frame chunks is 1.5 GB of Redis (a cache.t4g.micro holds 0.5 GB)
and over an hour of sending.
"""

from __future__ import annotations

from farm.core.errors import SpecError

CHUNK_BYTES = 1536
"""About what one chunk costs the ledger in Redis memory."""


def check_chunks(frame_count: int, chunk_size: int, max_chunks: int) -> None:
    """Refuse a job of more than `max_chunks` chunks (a fixed `chunk_size`; 0: auto, checked once
    planned) with a message that says why and what to change."""
    if chunk_size <= 0:
        return
    chunks = -(-frame_count // chunk_size)
    if chunks <= max_chunks:
        return
    need = -(-frame_count // max_chunks)
    raise SpecError(
        f"{frame_count} frames in chunks of {chunk_size} is {chunks} chunks; a job may have at "
        f"most {max_chunks} (each chunk holds about {CHUNK_BYTES / 1024:.1f} KB of the ledger's "
        f"Redis memory, {chunks * CHUNK_BYTES / 1e6:.0f} MB here). Use --chunk-size {need} or "
        "more, split the range into several jobs, or raise FARM_MAX_CHUNKS"
    )


def check_planned(chunks: int, max_chunks: int) -> None:
    """The same cap on a plan made by auto sizing."""
    if chunks > max_chunks:
        raise SpecError(
            f"the plan has {chunks} chunks; a job may have at most {max_chunks} (each holds "
            f"about {CHUNK_BYTES / 1024:.1f} KB of the ledger's Redis memory). Give a larger "
            "--chunk-size, split the range into several jobs, or raise FARM_MAX_CHUNKS"
        )

"""The stitch's join done by the object store: one multipart upload whose first part is the
merged index and the first segment's samples (sent from here) and whose every other part is a
ranged copy of one later segment's samples (UploadPartCopy), so the video's bytes never pass
through the worker. The layout is workers.mp4join's, so the object is byte for byte its file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from farm.errors import FarmError, ObjectChanged, PermanentError
from farm.probe import (
    Streams,
    input_options,
    option_args,
)
from farm.store import Store
from workers.join import probe_header
from workers.mp4join import Joined, JoinIndex
from workers.mp4track import CannotJoin, Track, scan_track

log = logging.getLogger(__name__)

S3COPY = "s3copy"
MIN_PART_BYTES = 5 << 20
"""S3's least part size, for every part but the last (SeaweedFS does not insist; S3 does)."""
MAX_PARTS = 10_000
HEAD_BYTES = 64 << 10
"""The first read of a segment: its ftyp, moov and mdat header, the index being written first."""
COPIES = 8
"""Parts copied at once."""
URL_TTL_S = 600


class Segment(Protocol):
    """A stored segment as its manifest gives it (workers.stitch.SegmentRef)."""

    @property
    def index(self) -> int: ...
    @property
    def key(self) -> str: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def frames(self) -> int: ...
    @property
    def etag(self) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The output object, part by part."""

    header: bytes
    """The bytes before the samples: ftyp, the merged moov, free room, the mdat header."""
    pieces: list[tuple[str, int, int, str]]
    """Each segment's samples, in order: (its key, offset, bytes, its ETag). One part each."""
    joined: Joined


def unfit(refs: Sequence[Segment]) -> str:
    """Why the manifests alone rule the store's join out ('' when it may be tried): too many
    segments for one upload's parts, or one but the last too small to be a part."""
    if not refs:
        return "no segments"
    if len(refs) >= MAX_PARTS:
        return f"{len(refs)} segments; one multipart upload holds {MAX_PARTS} parts"
    small = next((r for r in refs[:-1] if r.size_bytes < MIN_PART_BYTES), None)
    if small is not None:
        return f"segment {small.index} has {small.size_bytes} bytes, under a part's 5 MiB"
    unnamed = next((r for r in refs if not r.etag), None)
    if unnamed is not None:
        return f"segment {unnamed.index}'s manifest has no ETag to copy its bytes by"
    return ""


def read_segment_track(store: Store, ref: Segment) -> Track:
    """A stored segment's track, from ranged reads of its index (the first 64 KiB, and more
    only where its boxes reach further). The object must be the one its manifest names: the
    same ETag (the store's name for those bytes, recorded by the worker that uploaded and
    checked them) and size. Its sha256 is not read again (its bytes are never fetched here);
    every later read and copy insists on the same ETag, so a segment replaced meanwhile (a late
    attempt of its chunk) is refused, never joined."""
    try:
        head, size_bytes, etag = store.get_range(ref.key, 0, HEAD_BYTES, etag=ref.etag)
    except ObjectChanged:
        size_bytes, etag = -1, "another"
    if size_bytes != ref.size_bytes or etag != ref.etag:
        raise PermanentError(
            f"segment {ref.index} does not match its manifest ({size_bytes} bytes stored, "
            f"{ref.size_bytes} recorded; ETag {etag}, recorded {ref.etag}); retry chunk "
            f"{ref.index}"
        )

    def read(at: int, n: int) -> bytes:
        if at + n <= len(head) or len(head) >= size_bytes:
            return head[at : at + n]
        return store.get_range(ref.key, at, n, etag=ref.etag)[0]

    return scan_track(read, size_bytes, f"segment {ref.index}")


def plan(store: Store, refs: Sequence[Segment], frames: int) -> Plan:
    """The object to assemble from `refs` (in join order, `frames` in all): CannotJoin when a
    segment's samples are not one run, a part would be under 5 MiB, or mp4join would refuse."""
    reason = unfit(refs)
    if reason:
        raise CannotJoin(reason)
    with ThreadPoolExecutor(COPIES, thread_name_prefix="moov") as pool:
        tracks = list(pool.map(lambda r: read_segment_track(store, r), refs))
    index = JoinIndex(frames=frames)
    pieces = []
    for n, (ref, track) in enumerate(zip(refs, tracks, strict=True)):
        runs = index.add(track, ref.frames, f"segment {ref.index}")
        if len(runs) != 1:
            raise CannotJoin(f"segment {ref.index}'s samples lie in {len(runs)} runs, not one")
        start, _, length = runs[0]
        if n < len(refs) - 1 and length < MIN_PART_BYTES:
            raise CannotJoin(f"segment {ref.index} has {length} sample bytes, under 5 MiB")
        pieces.append((ref.key, start, length, ref.etag))
    header, joined = index.header()
    return Plan(header=header, pieces=pieces, joined=joined)


def assemble(store: Store, the_plan: Plan, key: str) -> None:
    """Make object `key` as `the_plan` lays it out; on any failure the upload is aborted (no
    parts left behind) and the error goes on."""
    upload_id = store.create_multipart(key)
    pool = ThreadPoolExecutor(COPIES, thread_name_prefix="part")
    try:
        first: Future[str] = pool.submit(_first_part, store, the_plan, key, upload_id)
        copies = [
            pool.submit(store.upload_part_copy, key, upload_id, n, source, start, length, etag=etag)
            for n, (source, start, length, etag) in enumerate(the_plan.pieces[1:], 2)
        ]
        etags = [first.result(), *(c.result() for c in copies)]
        store.complete_multipart(key, upload_id, etags)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        try:
            store.abort_multipart(key, upload_id)
        except FarmError as exc:
            log.warning("could not abort upload %s of %s: %s", upload_id, key, exc)
        raise
    finally:
        pool.shutdown(wait=True)


def _first_part(store: Store, the_plan: Plan, key: str, upload_id: str) -> str:
    source, start, length, etag = the_plan.pieces[0]
    samples = store.get_range(source, start, length, etag=etag)[0]
    if len(samples) != length:
        raise PermanentError(f"{source} ended before its samples did")
    return store.upload_part(key, upload_id, 1, the_plan.header + samples)


def probe_object(store: Store, key: str, joined: Joined, *, ffprobe: str, ca_file: str) -> Streams:
    """The assembled object checked as mp4join's file is: its size the plan's, and ffprobe of
    its header (over a presigned URL) for the frame count its index gives."""
    size_bytes = store.size(key)
    if size_bytes != joined.size_bytes:
        raise PermanentError(
            f"the joined video {key} has {size_bytes} bytes in the store, not {joined.size_bytes}"
        )
    url = store.presign_get(key, URL_TTL_S)
    options = option_args(input_options(url, ca_file))
    return probe_header(ffprobe, url, name=key, options=options)

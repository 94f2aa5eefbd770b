"""The stitch's join done by the object store: one multipart upload whose first part is the
merged index and the first segment's samples (sent from here) and whose every other part is a
ranged copy of one later segment's samples (UploadPartCopy), so the video's bytes never pass
through the worker. The layout is farm.media.mp4join's, so the object is byte for byte its file.

Most of it is done before the stitch: the worker that makes a segment copies its samples into the
job's upload at once (`copy_early`, begun by the first such segment), in the part its first frame
gives it (`part_number`: parts rise with the frames, gaps allowed, so a split's new chunk has one
too). The stitch then copies only the parts not done or no longer right (a segment made again),
sends the first part and completes the upload: seconds after the last segment, whatever the
video's length.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from farm.adapters.store import Store
from farm.core.errors import FarmError, ObjectChanged, ObjectMissing, PermanentError
from farm.ledger import EARLY_PART, EARLY_UPLOAD, Ledger
from farm.media.join import probe_header
from farm.media.mp4join import Joined, JoinIndex
from farm.media.mp4track import CannotJoin, Track, scan_track
from farm.media.probe import (
    Streams,
    input_options,
    option_args,
)

log = logging.getLogger(__name__)

S3COPY = "s3copy"
UNJOINABLE = (
    "the video cannot be joined without it: `farm retry` makes that chunk again (a lifecycle "
    "rule that expires segments before the stitch, or a deletion, does this)"
)
MIN_PART_BYTES = 5 << 20
"""S3's least part size, for every part but the last (SeaweedFS does not insist; S3 does)."""
MAX_PARTS = 10_000
MAX_PART_BYTES = 5 << 30
"""S3's largest part, copied or uploaded: a larger segment is joined on a worker."""
MAX_FIRST_PART_BYTES = 512 << 20
"""The first part (the index and the first segment's samples) is built in memory: a larger
first segment is joined on a worker, on disk."""
HEAD_BYTES = 64 << 10
"""The first read of a segment: its ftyp, moov and mdat header, the index being written first."""
COPIES = 8
"""Parts copied at once."""
URL_TTL_S = 600


class Segment(Protocol):
    """A stored segment as its manifest gives it (workers.phases.stitch.SegmentRef)."""

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


@dataclass(frozen=True, slots=True, kw_only=True)
class EarlyPart:
    number: int
    etag: str
    source_etag: str
    start: int
    length: int

    def __str__(self) -> str:
        return f"{self.number} {self.etag} {self.source_etag} {self.start} {self.length}"

    @classmethod
    def parse(cls, text: str) -> EarlyPart | None:
        try:
            number, etag, source_etag, start, length = text.split(" ")
            return cls(number=int(number), etag=etag, source_etag=source_etag,
                       start=int(start), length=int(length))  # fmt: skip
        except ValueError:
            return None


def sample_run(segment: Path) -> tuple[int, int] | None:
    """Where a local segment's samples lie (offset, bytes) when they are one run big enough to
    be a part; else None (the stitch then decides how to join it)."""
    try:
        with segment.open("rb") as fh:

            def read(at: int, n: int) -> bytes:
                fh.seek(at)
                return fh.read(n)

            track = scan_track(read, segment.stat().st_size, segment.name)
        runs = JoinIndex(frames=len(track.sizes)).add(track, len(track.sizes), segment.name)
    except (CannotJoin, OSError) as exc:
        log.info("%s is not copied before the stitch: %s", segment.name, exc)
        return None
    if len(runs) != 1 or runs[0][2] < MIN_PART_BYTES:
        return None
    return runs[0][0], runs[0][2]


def part_number(position: int, total: int) -> int:
    """The part of the segment whose first frame is the job's `position`-th (from 0) of `total`:
    part 1 is the index and the first segment; the others spread over 2..MAX_PARTS by where
    they start, so each is known when its segment is made and they rise with the frames (two
    segments starting within total/9998 frames of each other share one: then none is reused)."""
    return 2 + position * (MAX_PARTS - 2) // max(total, 1)


def copy_early(
    store: Store, ledger: Ledger, *, job_id: str, output_key: str, segment: Path, key: str,
    etag: str, position: int, total: int,
) -> dict[str, str]:  # fmt: skip
    """Copy a segment just stored (`key`, its `etag`; `segment` its local file) into the job's
    upload, begun here if it is the first; returns the chunk's EARLY_PART field, or nothing
    when it cannot be a part (the first segment, under 5 MiB of samples, not one run) or the
    store would not. Never fails the chunk: the stitch copies what is not here."""
    found = sample_run(segment) if position > 0 else None
    if found is None or found[1] > MAX_PART_BYTES:
        return {}
    start, length = found
    number = part_number(position, total)
    try:
        upload_id = ledger.job_field_once(job_id, EARLY_UPLOAD, "")
        if not upload_id:
            mine = store.create_multipart(output_key)
            upload_id = ledger.job_field_once(job_id, EARLY_UPLOAD, mine)
            if upload_id != mine:  # another segment's worker began it first
                store.abort_multipart(output_key, mine)
        part = store.upload_part_copy(output_key, upload_id, number, key, start, length, etag=etag)
    except FarmError as exc:
        log.warning("segment %s is not copied early (the stitch will): %s", key, exc)
        return {}
    early = EarlyPart(number=number, etag=part, source_etag=etag, start=start, length=length)
    return {EARLY_PART: str(early)}


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
    except ObjectMissing as exc:  # no retry of the read brings it back
        raise PermanentError(f"segment {ref.index} is gone from the store; {UNJOINABLE}") from exc
    if size_bytes != ref.size_bytes or etag != ref.etag:
        raise PermanentError(
            f"segment {ref.index} does not match its manifest ({size_bytes} bytes stored, "
            f"{ref.size_bytes} recorded; ETag {etag}, recorded {ref.etag}); {UNJOINABLE}"
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
        limit = MAX_FIRST_PART_BYTES if n == 0 else MAX_PART_BYTES
        if length > limit:
            raise CannotJoin(
                f"segment {ref.index} has {length} sample bytes, over what its part may hold "
                f"({limit})"
            )
        pieces.append((ref.key, start, length, ref.etag))
    header, joined = index.header()
    return Plan(header=header, pieces=pieces, joined=joined)


def assemble(
    store: Store,
    the_plan: Plan,
    key: str,
    *,
    upload_id: str = "",
    numbers: Sequence[int] = (),
    done: Mapping[int, str] | None = None,
) -> bool:
    """Make object `key` as `the_plan` lays it out, only where it holds no object yet: False
    (the upload aborted) when one was there, which stays: the delivered output is written once,
    by the stitch that won. On any failure the upload is aborted (no parts left behind) and the
    error goes on. `upload_id`: the job's early upload, where each piece goes in its part of
    `numbers` and `done` (part number: ETag) are there already."""
    upload_id = upload_id or store.create_multipart(key)
    numbers = list(numbers) or list(range(1, len(the_plan.pieces) + 1))
    done = done or {}
    pool = ThreadPoolExecutor(COPIES, thread_name_prefix="part")
    try:
        first: Future[str] = pool.submit(_first_part, store, the_plan, key, upload_id)
        copies = [
            _done(done[n])
            if n in done
            else pool.submit(
                store.upload_part_copy, key, upload_id, n, source, start, length, etag=etag
            )
            for n, (source, start, length, etag) in zip(
                numbers[1:], the_plan.pieces[1:], strict=True
            )
        ]
        etags = [first.result(), *(c.result() for c in copies)]
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        abort_upload(store, key, upload_id)
        raise
    finally:
        pool.shutdown(wait=True)
    try:
        store.complete_multipart(key, upload_id, etags, numbers, only_new=True)
    except BaseException as exc:
        abort_upload(store, key, upload_id)
        if isinstance(exc, ObjectChanged):  # an earlier stitch of the job delivered it: it stays
            return False
        raise
    return True


def assemble_job(
    store: Store,
    the_plan: Plan,
    key: str,
    *,
    early_upload: str,
    early: tuple[list[int], dict[int, str]] | None,
) -> bool:
    """`assemble` into the job's early upload where its parts fit the plan (`early`, as
    early_parts gives them), else into a new one; an early upload that does not fit, or
    fails, is aborted. False: `key` held an object already (assemble)."""
    if early_upload and early is not None:
        numbers, done = early
        try:
            return assemble(
                store, the_plan, key, upload_id=early_upload, numbers=numbers, done=done
            )
        except FarmError as exc:  # aborted by assemble: an upload of its own, from scratch
            log.warning("the early upload of %s failed (%s); joining anew", key, exc)
    elif early_upload:
        abort_upload(store, key, early_upload)
    return assemble(store, the_plan, key)


def abort_upload(store: Store, key: str, upload_id: str) -> None:
    """Drop an upload and its parts, as far as the store lets this worker (the bucket's
    lifecycle rule is the backstop)."""
    try:
        store.abort_multipart(key, upload_id)
    except FarmError as exc:
        log.warning("could not abort upload %s of %s: %s", upload_id, key, exc)


def _done(etag: str) -> Future[str]:
    future: Future[str] = Future()
    future.set_result(etag)
    return future


def early_parts(
    the_plan: Plan, positions: Sequence[int], fields: Sequence[str], total: int
) -> tuple[list[int], dict[int, str]] | None:
    """Each piece's part in the job's early upload, from its first frame's `positions` (of
    `total`), and the parts whose copy, made with the segment, is still right by its chunk's
    EARLY_PART field in `fields` (the same segment ETag and samples); None when two pieces
    would share a part (the stitch then numbers an upload of its own from 1)."""
    if any(not 0 <= p < total for p in positions):
        return None
    numbers = [1, *(part_number(p, total) for p in positions[1:])]
    if any(b <= a for a, b in itertools.pairwise(numbers)):
        return None
    done = {}
    for text, number, (_, start, length, etag) in zip(
        fields, numbers, the_plan.pieces, strict=True
    ):
        early = EarlyPart.parse(text)
        if early and (early.number, early.source_etag, early.start, early.length) == (
            number, etag, start, length,
        ):  # fmt: skip
            done[number] = early.etag
    return numbers, done


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

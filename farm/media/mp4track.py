"""A segment's one video track, read from its moov for farm.media.mp4join: the sample tables, and
every reason the join must leave it to ffmpeg (CannotJoin)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from farm.media import mp4box as m
from farm.media.mp4box import Atom, AtomError

TOP_LEVEL = frozenset({b"ftyp", b"free", b"skip", b"wide", b"mdat", b"moov"})
ALLOWED = {
    b"moov": frozenset({b"mvhd", b"trak", b"udta", b"iods"}),
    b"trak": frozenset({b"tkhd", b"edts", b"mdia", b"udta"}),
    b"mdia": frozenset({b"mdhd", b"hdlr", b"minf", b"udta"}),
    b"minf": frozenset({b"vmhd", b"hdlr", b"dinf", b"stbl"}),
    b"stbl": frozenset({
        b"stsd", b"stts", b"ctts", b"cslg", b"stss", b"sdtp", b"stsc", b"stsz", b"stco", b"co64"
    }),
}  # fmt: skip
"""Boxes this joiner understands. Anything else (sample groups, fragments, a second track)
may mean something it would lose, so the join falls back instead."""
NORMAL_RATE = 0x10000


class CannotJoin(Exception):
    """The segments are not ones this joiner can join exactly; the message says why. It never
    leaves the stitch, which falls back to ffmpeg."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Track:
    """One segment's video track, as its moov describes it."""

    ftyp: bytes
    moov: bytes
    movie_timescale: int
    timescale: int
    entry: bytes
    """The sample entry as the joined file writes it."""
    entry_key: bytes
    """What must be the same in every segment for one sample entry to decode them all."""
    start: int
    """The earliest presentation time, in the media timescale (the edit list's media_time)."""
    durations: list[int]
    offsets: list[int]
    """Composition offsets (all 0 without ctts)."""
    sync: list[int] | None
    """Sync sample numbers from 1; None when every sample is one."""
    depends: bytes | None
    """sdtp's byte per sample, when there is one."""
    sizes: list[int]
    chunks: list[tuple[int, int, int]]
    """(file offset, bytes, samples) of every chunk, in order."""


def _payload(data: bytes, b: Atom) -> bytes:
    return data[b.body : b.end]


def _children(data: bytes, parent: Atom) -> dict[bytes, Atom]:
    found = m.boxes(data, parent.body, parent.end)
    allowed = ALLOWED[parent.kind]
    for b in found:
        if b.kind not in allowed:
            raise CannotJoin(
                f"{parent.kind.decode()} holds a {b.kind.decode(errors='replace')} box"
            )
    if parent.kind == b"moov" and sum(b.kind == b"trak" for b in found) != 1:
        raise CannotJoin("the segment has more than one track (audio?)")
    return {b.kind: b for b in found}


Read = Callable[[int, int], bytes]
"""read(at, n): up to `n` bytes of a segment from offset `at` (a file, or ranged GETs)."""


def scan_top_level(read: Read, size_bytes: int) -> tuple[bytes, bytes, list[tuple[int, int]]]:
    """A segment's ftyp and moov boxes, and the (start, end) of each mdat's payload, reading
    only box headers and those two boxes through `read`."""
    ftyp = moov = b""
    mdats: list[tuple[int, int]] = []
    at = 0
    while at < size_bytes:
        head = read(at, 16)
        size, kind = struct.unpack_from(">I4s", head)
        body = at + 8
        if size == 1:
            (size,) = struct.unpack_from(">Q", head, 8)
            body = at + 16
        elif size == 0:
            size = size_bytes - at
        if size < body - at or at + size > size_bytes:
            raise CannotJoin(f"a damaged {kind!r} box at byte {at}")
        if kind not in TOP_LEVEL:
            raise CannotJoin(f"a top-level {kind.decode(errors='replace')} box (fragmented?)")
        if kind in (b"ftyp", b"moov"):
            raw = read(at, size)
            ftyp, moov = (raw, moov) if kind == b"ftyp" else (ftyp, raw)
        elif kind == b"mdat":
            mdats.append((body, at + size))
        at += size
    if not moov or not ftyp:
        raise CannotJoin("no ftyp or moov box")
    return ftyp, moov, mdats


def read_top_level(path: Path) -> tuple[bytes, bytes, list[tuple[int, int]]]:
    """A file's ftyp and moov boxes, and the (start, end) of each mdat's payload."""
    with path.open("rb") as fh:
        return scan_top_level(_file_reader(fh), path.stat().st_size)


def read_track(path: Path) -> Track:
    """The segment's video track; CannotJoin for anything the join would not carry exactly."""
    with path.open("rb") as fh:
        return scan_track(_file_reader(fh), path.stat().st_size, path.name)


def scan_track(read: Read, size_bytes: int, name: str) -> Track:
    """`read_track` of a segment of `size_bytes` read through `read` (a file, ranged GETs)."""
    with _readable(name):
        return _track(*scan_top_level(read, size_bytes))


def track_from_boxes(
    ftyp: bytes, moov: bytes, mdats: list[tuple[int, int]], name: str = "the segment"
) -> Track:
    """The track of a segment given its ftyp and moov boxes and its mdat payloads' (start, end)
    offsets in the segment, as `read_track` finds them in a file."""
    with _readable(name):
        return _track(ftyp, moov, mdats)


def _file_reader(fh: BinaryIO) -> Read:
    def read(at: int, n: int) -> bytes:
        fh.seek(at)
        return fh.read(n)

    return read


@contextmanager
def _readable(name: str) -> Iterator[None]:
    try:
        yield
    except KeyError as exc:  # a box every track needs is not there
        raise CannotJoin(f"{name} has no {exc.args[0]!r} box where one belongs") from exc
    except (AtomError, struct.error, IndexError) as exc:
        raise CannotJoin(f"{name} has boxes this joiner cannot read ({exc})") from exc


def _track(ftyp: bytes, moov: bytes, mdats: list[tuple[int, int]]) -> Track:
    root = m.boxes(moov)[0]
    top = _children(moov, root)
    trak = _children(moov, top[b"trak"])
    mdia = _children(moov, trak[b"mdia"])
    hdlr = _payload(moov, mdia[b"hdlr"])
    if hdlr[8:12] != b"vide":
        raise CannotJoin(f"the track is {hdlr[8:12].decode(errors='replace')}, not video")
    minf = _children(moov, mdia[b"minf"])
    _check_self_contained(moov, minf)
    stbl = _children(moov, minf[b"stbl"])
    table = {kind: _payload(moov, b) for kind, b in stbl.items()}
    entry, entry_key = m.sample_entry(table[b"stsd"])
    durations = m.read_stts(table[b"stts"])
    sizes = m.read_stsz(table[b"stsz"])
    count = len(sizes)
    offsets = m.read_ctts(table[b"ctts"]) if b"ctts" in table else [0] * count
    sync = m.read_stss(table[b"stss"]) if b"stss" in table else None
    depends = table[b"sdtp"][4:] if b"sdtp" in table else None
    if not count or len(durations) != count or len(offsets) != count:
        raise CannotJoin(f"tables disagree on the sample count ({count}, {len(durations)})")
    if sync is not None and (not sync or sync[0] != 1):
        raise CannotJoin("the segment does not start on a sync sample")
    if depends is not None and len(depends) != count:
        depends = None  # sdtp only helps trick play; a short one is dropped, not trusted
    timescale = m.header_timescale(b"mdhd", _payload(moov, mdia[b"mdhd"]))
    movie_timescale = m.header_timescale(b"mvhd", _payload(moov, top[b"mvhd"]))
    start = _presentation_start(durations, offsets)
    edts = trak.get(b"edts")
    if edts is not None:
        _check_edit(moov, edts, start, sum(durations) * movie_timescale, timescale)
    return Track(
        ftyp=ftyp,
        moov=moov,
        movie_timescale=movie_timescale,
        timescale=timescale,
        entry=entry,
        entry_key=entry_key,
        start=start,
        durations=durations,
        offsets=offsets,
        sync=sync,
        depends=depends,
        sizes=sizes,
        chunks=_chunks(table, stbl, sizes, mdats),
    )


def _check_self_contained(moov: bytes, minf: dict[bytes, Atom]) -> None:
    dref = m.child(moov, minf[b"dinf"], b"dref")
    entries = m.boxes(moov, dref.body + 8, dref.end) if dref else []
    if len(entries) != 1 or m.version_flags(_payload(moov, entries[0]))[1] & 1 != 1:
        raise CannotJoin("the samples are not in the file itself (data reference)")


def _presentation_start(durations: list[int], offsets: list[int]) -> int:
    """The earliest composition time; and every sample shown once, back to back from it, as a
    closed-GOP segment of constant-rate frames is (else the join would not be frame-exact)."""
    dts, shown = 0, []
    for duration, offset in zip(durations, offsets, strict=True):
        shown.append(dts + offset)
        dts += duration
    shown.sort()
    start = shown[0]
    expected, at = [], start
    for duration in durations:
        expected.append(at)
        at += duration
    if shown != expected:
        raise CannotJoin("the samples' presentation times are not back to back")
    return start


def _check_edit(moov: bytes, edts: Atom, start: int, scaled_media: int, timescale: int) -> None:
    """One edit, at normal speed, showing the whole track from its first frame."""
    elst = m.child(moov, edts, b"elst")
    edits = m.read_elst(_payload(moov, elst)) if elst else []
    if len(edits) != 1 or edits[0].rate != NORMAL_RATE or edits[0].media_time != start:
        raise CannotJoin(f"an edit list this joiner does not carry ({edits})")
    if abs(edits[0].duration * timescale - scaled_media) >= timescale:
        raise CannotJoin("the edit list shows part of the track, not all of it")


def _chunks(
    table: dict[bytes, bytes],
    stbl: dict[bytes, Atom],
    sizes: list[int],
    mdats: list[tuple[int, int]],
) -> list[tuple[int, int, int]]:
    kind = b"co64" if b"co64" in stbl else b"stco"
    starts = m.read_chunk_offsets(kind, table[kind])
    runs = m.read_stsc(table[b"stsc"])
    if any(desc != 1 for _, _, desc in runs) or not runs or runs[0][0] != 1:
        raise CannotJoin("chunks refer to more than one sample description")
    chunks, sample, run = [], 0, 0
    for n, start in enumerate(starts, 1):
        while run + 1 < len(runs) and runs[run + 1][0] <= n:
            run += 1
        per_chunk = runs[run][1]
        length = sum(sizes[sample : sample + per_chunk])
        if not any(lo <= start and start + length <= hi for lo, hi in mdats):
            raise CannotJoin(f"chunk {n} lies outside the media data")
        chunks.append((start, length, per_chunk))
        sample += per_chunk
    if sample != len(sizes):
        raise CannotJoin(f"chunks hold {sample} samples, the tables {len(sizes)}")
    return chunks

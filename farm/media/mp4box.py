"""ISO-BMFF boxes (MP4 and QuickTime .mov): finding them, reading a track's sample tables and
writing boxes back. Pure, over bytes; farm.media.mp4join puts it to use.

Hand-made: no maintained Python library merges sample tables, and pymp4 (construct) parses a
file whole, mdat included, where the stitch must only ever read the moov.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

CONTAINERS = frozenset({b"moov", b"trak", b"edts", b"mdia", b"minf", b"dinf", b"stbl"})
U32_MAX = 0xFFFF_FFFF


class AtomError(ValueError):
    """The bytes are not the boxes they claim to be."""


@dataclass(frozen=True, slots=True)
class Atom:
    """One box of the file, where it lies (QuickTime's word for it: farm.adapters.sandbox.Box is
    the box a scene runs in)."""

    kind: bytes
    start: int
    """Offset of the box's header."""
    body: int
    """Offset of its payload (after the header)."""
    end: int


def boxes(data: bytes | memoryview, start: int = 0, end: int | None = None) -> list[Atom]:
    """The boxes laid end to end in data[start:end]."""
    end = len(data) if end is None else end
    found, at = [], start
    while at < end:
        if at + 8 > end:
            raise AtomError(f"a truncated box header at {at}")
        size, kind = struct.unpack_from(">I4s", data, at)
        body = at + 8
        if size == 1:
            if at + 16 > end:
                raise AtomError(f"a truncated box header at {at}")
            (size,) = struct.unpack_from(">Q", data, at + 8)
            body = at + 16
        elif size == 0:
            size = end - at
        if size < body - at or at + size > end:
            raise AtomError(f"box {kind!r} at {at} runs past its parent")
        found.append(Atom(kind, at, body, at + size))
        at += size
    return found


def child(data: bytes, parent: Atom, kind: bytes) -> Atom | None:
    return next((b for b in boxes(data, parent.body, parent.end) if b.kind == kind), None)


def box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def full_box(kind: bytes, version: int, flags: int, payload: bytes) -> bytes:
    return box(kind, struct.pack(">I", (version << 24) | flags) + payload)


def version_flags(payload: bytes) -> tuple[int, int]:
    (word,) = struct.unpack_from(">I", payload)
    return word >> 24, word & 0xFFFFFF


def _u32s(payload: bytes, at: int, count: int) -> list[int]:
    values = array("I", payload[at : at + 4 * count])
    if len(values) != count:
        raise AtomError("a table shorter than its entry count")
    if sys.byteorder == "little":  # tables are big-endian on disk
        values.byteswap()
    return values.tolist()


def _u32s_bytes(values: Iterable[int]) -> bytes:
    packed = array("I", values)
    if sys.byteorder == "little":
        packed.byteswap()
    return packed.tobytes()


# Full-box headers whose duration the join rewrites: the fields before the duration, v0 and v1.
_HEADS = {
    b"mvhd": (">III", ">QQI"),  # creation, modification, timescale
    b"mdhd": (">III", ">QQI"),
    b"tkhd": (">IIII", ">QQII"),  # creation, modification, track id, reserved
}


def header_timescale(kind: bytes, payload: bytes) -> int:
    """mvhd's or mdhd's timescale."""
    version, _ = version_flags(payload)
    return int(struct.unpack_from(_HEADS[kind][version == 1], payload, 4)[2])


def header_duration(kind: bytes, payload: bytes) -> int:
    version, _ = version_flags(payload)
    head = _HEADS[kind][version == 1]
    return int(
        struct.unpack_from(">Q" if version == 1 else ">I", payload, 4 + struct.calcsize(head))[0]
    )


def with_duration(kind: bytes, payload: bytes, duration: int) -> bytes:
    """A mvhd, tkhd or mdhd box like `payload`'s with another duration (version 1 if it must)."""
    version, flags = version_flags(payload)
    head_fmt = _HEADS[kind][version == 1]
    head = struct.unpack_from(head_fmt, payload, 4)
    rest = payload[4 + struct.calcsize(head_fmt) + (8 if version == 1 else 4) :]
    if version == 0 and duration > U32_MAX:
        version = 1
    fmt = _HEADS[kind][1] + "Q" if version == 1 else _HEADS[kind][0] + "I"
    return full_box(kind, version, flags, struct.pack(fmt, *head, duration) + rest)


@dataclass(frozen=True, slots=True)
class Edit:
    duration: int
    """In the movie's timescale."""
    media_time: int
    """Where in the media's time presentation starts; -1 is an empty edit."""
    rate: int
    """Media rate, 16.16 fixed point: 0x10000 is normal speed."""


def read_elst(payload: bytes) -> list[Edit]:
    version, _ = version_flags(payload)
    (count,) = struct.unpack_from(">I", payload, 4)
    fmt = ">QqI" if version == 1 else ">IiI"
    size = struct.calcsize(fmt)
    return [Edit(*struct.unpack_from(fmt, payload, 8 + n * size)) for n in range(count)]


def elst(edit: Edit) -> bytes:
    if edit.duration > U32_MAX or not -(2**31) <= edit.media_time < 2**31:
        return full_box(b"elst", 1, 0, struct.pack(">IQqI", 1, *_edit_fields(edit)))
    return full_box(b"elst", 0, 0, struct.pack(">IIiI", 1, *_edit_fields(edit)))


def _edit_fields(edit: Edit) -> tuple[int, int, int]:
    return edit.duration, edit.media_time, edit.rate


def _pairs(payload: bytes) -> list[tuple[int, int]]:
    (count,) = struct.unpack_from(">I", payload, 4)
    flat = _u32s(payload, 8, 2 * count)
    return list(zip(flat[0::2], flat[1::2], strict=True))


def read_stts(payload: bytes) -> list[int]:
    """Every sample's duration."""
    return [delta for count, delta in _pairs(payload) for _ in range(count)]


def read_ctts(payload: bytes) -> list[int]:
    """Every sample's composition offset (signed in version 1 and, in practice, in version 0)."""
    return [
        offset - (1 << 32) if offset >= 1 << 31 else offset
        for count, offset in _pairs(payload)
        for _ in range(count)
    ]


def read_stss(payload: bytes) -> list[int]:
    """The sync samples' numbers, from 1."""
    (count,) = struct.unpack_from(">I", payload, 4)
    return _u32s(payload, 8, count)


def read_stsz(payload: bytes) -> list[int]:
    size, count = struct.unpack_from(">II", payload, 4)
    return [size] * count if size else _u32s(payload, 12, count)


def read_stsc(payload: bytes) -> list[tuple[int, int, int]]:
    """(first chunk, samples per chunk, sample description) runs."""
    (count,) = struct.unpack_from(">I", payload, 4)
    flat = _u32s(payload, 8, 3 * count)
    return list(zip(flat[0::3], flat[1::3], flat[2::3], strict=True))


def read_chunk_offsets(kind: bytes, payload: bytes) -> list[int]:
    (count,) = struct.unpack_from(">I", payload, 4)
    if kind == b"stco":
        return _u32s(payload, 8, count)
    return list(struct.unpack_from(f">{count}Q", payload, 8))


def run_lengths(values: Iterable[int]) -> list[tuple[int, int]]:
    """[5, 5, 5, 7] -> [(3, 5), (1, 7)]."""
    runs: list[list[int]] = []
    for value in values:
        if runs and runs[-1][1] == value:
            runs[-1][0] += 1
        else:
            runs.append([1, value])
    return [(count, value) for count, value in runs]


def stts(durations: Iterable[int]) -> bytes:
    runs = run_lengths(durations)
    return full_box(b"stts", 0, 0, _u32s_bytes([len(runs), *(v for r in runs for v in r)]))


def ctts(offsets: Iterable[int]) -> bytes:
    runs = run_lengths(offsets)
    version = 1 if any(offset < 0 for _, offset in runs) else 0
    flat = [v & U32_MAX for r in runs for v in r]
    return full_box(b"ctts", version, 0, _u32s_bytes([len(runs), *flat]))


def stss(numbers: list[int]) -> bytes:
    return full_box(b"stss", 0, 0, _u32s_bytes([len(numbers), *numbers]))


def stsz(sizes: list[int]) -> bytes:
    if sizes and all(s == sizes[0] for s in sizes):
        return full_box(b"stsz", 0, 0, struct.pack(">II", sizes[0], len(sizes)))
    return full_box(b"stsz", 0, 0, _u32s_bytes([0, len(sizes), *sizes]))


def stsc(runs: list[tuple[int, int, int]]) -> bytes:
    return full_box(b"stsc", 0, 0, _u32s_bytes([len(runs), *(v for r in runs for v in r)]))


def chunk_offsets(offsets: list[int]) -> bytes:
    """stco, or co64 once an offset passes 4 GiB."""
    if offsets and max(offsets) > U32_MAX:
        return full_box(b"co64", 0, 0, struct.pack(f">I{len(offsets)}Q", len(offsets), *offsets))
    return full_box(b"stco", 0, 0, _u32s_bytes([len(offsets), *offsets]))


def free(size: int) -> bytes:
    """A `free` box of exactly `size` bytes (at least 8): room nobody reads."""
    if size < 8:
        raise AtomError(f"no free box fits in {size} bytes")
    return struct.pack(">I4s", size, b"free") + bytes(size - 8)


VISUAL_ENTRY_FIELDS = 78
"""Bytes of a visual sample entry (MP4) or video sample description (QuickTime) between its
header and its child boxes."""
INFORMATIVE = frozenset({b"btrt"})
"""Sample-entry boxes that describe the bytes (bit rates), not how to decode them: each segment
has its own, and the joined file carries none."""
_HEVC_SEI = frozenset({39, 40})


def sample_entry(stsd_payload: bytes) -> tuple[bytes, bytes]:
    """A one-entry stsd's sample entry as the joined file writes it (informative boxes dropped),
    and the part of it that must be the same in every segment: without those boxes and without
    the SEI messages that x265 copies into hvcC (its version and options, which name keyint)."""
    (count,) = struct.unpack_from(">I", stsd_payload, 4)
    entries = boxes(stsd_payload, 8)
    if count != 1 or len(entries) != 1:
        raise AtomError(f"{count} sample descriptions")
    entry = entries[0]
    fixed_end = entry.body + VISUAL_ENTRY_FIELDS
    fixed = stsd_payload[entry.body : fixed_end]
    kept, key = [], []
    for sub in boxes(stsd_payload, fixed_end, entry.end):
        raw = stsd_payload[sub.start : sub.end]
        if sub.kind in INFORMATIVE:
            continue
        kept.append(raw)
        key.append(box(b"hvcC", hvcc_without_sei(raw[8:])) if sub.kind == b"hvcC" else raw)
    written = box(entry.kind, fixed + b"".join(kept))
    return written, box(entry.kind, fixed + b"".join(key))


def hvcc_without_sei(payload: bytes) -> bytes:
    """An HEVCDecoderConfigurationRecord without its SEI arrays."""
    at = 23
    arrays = []
    for _ in range(payload[22]):
        nal_type = payload[at] & 0x3F
        (count,) = struct.unpack_from(">H", payload, at + 1)
        end = at + 3
        for _ in range(count):
            (length,) = struct.unpack_from(">H", payload, end)
            end += 2 + length
        if nal_type not in _HEVC_SEI:
            arrays.append(payload[at:end])
        at = end
    return payload[:22] + bytes([len(arrays)]) + b"".join(arrays)

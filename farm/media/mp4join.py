"""Join segments of one video track into one MP4/MOV, index first, in one pass.

Each segment's sample bytes are copied in the kernel (`os.copy_file_range`) as soon as it is
there, never parsed; once all are in, one moov merged from their sample tables (farm.media.mp4track)
goes into room kept for it at the front, so every byte is written once and a player can start
before the download ends. CannotJoin: the stitch falls back to ffmpeg's concat demuxer.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from farm.media import mp4box as m
from farm.media.mp4track import NORMAL_RATE, CannotJoin, Track, read_track

TABLE_BYTES_PER_SAMPLE = 45
"""The most a sample adds to the merged tables: stts 8, ctts 8, stss 4, sdtp 1, stsz 4, and at
worst one chunk per sample, stsc 12 and co64 8."""
HEADER_SLACK_BYTES = 1024
"""The edit list, version-1 headers and the new tables' box headers."""
MDAT_HEADER_BYTES = 16
"""A 64-bit mdat header, or `free` (8) then a 32-bit one: the same room either way."""
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL})
_COPY_BLOCK = 8 << 20
_Patch = Callable[[bytes], bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """What the joined file holds, from the tables written into it."""

    frames: int
    timescale: int
    duration_ticks: int
    frame_ticks: frozenset[int]
    """Every distinct sample duration: one value for a constant-rate video."""
    size_bytes: int


def moov_room(first_moov_bytes: int, frames: int) -> int:
    """Bytes kept at the front for the merged moov: the first segment's moov (every box but the
    tables is taken from it) plus the most `frames` samples can add. The unused rest is a
    `free` box; at 45 bytes a frame that is under 0.1% of any 4K video."""
    return first_moov_bytes + TABLE_BYTES_PER_SAMPLE * frames + HEADER_SLACK_BYTES


def copy_range(src: int, dst: int, src_at: int, dst_at: int, length: int) -> None:
    """`length` bytes from `src` at `src_at` to `dst` at `dst_at`, in the kernel where it can
    (a reflink on XFS or btrfs), else by pread/pwrite."""
    while length > 0:
        try:
            n = os.copy_file_range(src, dst, length, src_at, dst_at)
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
            n = os.pwrite(dst, os.pread(src, min(length, _COPY_BLOCK), src_at), dst_at)
        if n <= 0:
            raise CannotJoin("a segment ended before its samples did")
        src_at, dst_at, length = src_at + n, dst_at + n, length - n


Run = tuple[int, int, int]
"""(offset in the segment, offset in the output, bytes): samples that move as one piece."""


class JoinIndex:
    """The joined file's layout, without its bytes: where every segment's samples go, and the
    headers (ftyp, merged moov, free room, mdat header) in front of them. Mp4Join copies the
    samples on this host; workers.phases.s3join has the object store copy them."""

    def __init__(self, *, frames: int) -> None:
        self.frames = frames
        self.tracks: list[Track] = []
        self._placed: list[int] = []
        """Every chunk's offset in the output."""
        self._room = 0
        self.data_start = 0
        """Where the first sample goes: the header's length."""
        self.data_bytes = 0
        """Sample bytes placed so far."""

    @property
    def frames_added(self) -> int:
        return sum(len(t.sizes) for t in self.tracks)

    def add(self, track: Track, frames: int, name: str) -> list[Run]:
        """Place a segment of `frames` frames (its manifest's count) after those before it;
        CannotJoin if it has another count or cannot follow them. Returns its samples' runs:
        chunks that lie back to back in the segment move in one piece."""
        if len(track.sizes) != frames:
            raise CannotJoin(f"{name} has {len(track.sizes)} samples, not {frames}")
        if self.frames_added + frames > self.frames:
            raise CannotJoin(f"the segments hold more than the {self.frames} frames asked for")
        if self.tracks:
            _check_alike(self.tracks[0], track, name)
        else:
            self._room = moov_room(len(track.moov), self.frames)
            self.data_start = len(track.ftyp) + self._room + MDAT_HEADER_BYTES
        runs: list[Run] = []
        for start, length, _ in track.chunks:
            dst = self.data_start + self.data_bytes
            self._placed.append(dst)
            if runs and runs[-1][0] + runs[-1][2] == start:
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + length)
            else:
                runs.append((start, dst, length))
            self.data_bytes += length
        self.tracks.append(track)
        return runs

    def header(self) -> tuple[bytes, Joined]:
        """The bytes before the samples (the merged index), and what the joined file holds."""
        if not self.tracks:
            raise CannotJoin("no segments")
        first, tracks = self.tracks[0], self.tracks
        start = max(t.start for t in tracks)
        durations = [d for t in tracks for d in t.durations]
        media_ticks = sum(durations)
        movie_ticks = -(-media_ticks * first.movie_timescale // first.timescale)
        stbl = m.box(b"stbl", _tables(tracks, start, self._placed))
        edts = m.box(b"edts", m.elst(m.Edit(movie_ticks, start, NORMAL_RATE)))
        moov = _rebuild(first.moov, m.boxes(first.moov)[0], {
            b"mvhd": lambda p: m.with_duration(b"mvhd", p, movie_ticks),
            b"tkhd": lambda p: m.with_duration(b"tkhd", p, movie_ticks) + edts,
            b"edts": lambda p: b"",  # written after tkhd, whether the first segment had one or not
            b"mdhd": lambda p: m.with_duration(b"mdhd", p, media_ticks),
            b"stbl": lambda p: stbl,
        })  # fmt: skip
        pad = self._room - len(moov)
        if pad < 8:
            raise CannotJoin(f"the index ({len(moov)} bytes) outgrew its room ({self._room})")
        if self.data_bytes + 8 <= m.U32_MAX:
            mdat = m.free(8) + struct.pack(">I4s", self.data_bytes + 8, b"mdat")
        else:
            mdat = struct.pack(">I4sQ", 1, b"mdat", self.data_bytes + 16)
        joined = Joined(
            frames=len(durations),
            timescale=first.timescale,
            duration_ticks=media_ticks,
            frame_ticks=frozenset(durations),
            size_bytes=self.data_start + self.data_bytes,
        )
        return first.ftyp + moov + m.free(pad) + mdat, joined


class Mp4Join:
    """One output file, joined from segments given in presentation order:

    with Mp4Join(out, frames=240) as join:
        for path, frames in segments:
            join.add(path, frames)
        joined = join.finish()
    """

    def __init__(self, out: Path, *, frames: int) -> None:
        self.out = out
        self.frames = frames
        self.index = JoinIndex(frames=frames)
        self._fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def __enter__(self) -> Mp4Join:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        os.close(self._fd)

    @property
    def frames_added(self) -> int:
        return self.index.frames_added

    def add(self, path: Path, frames: int) -> None:
        """Append a segment of `frames` frames (its manifest's count): CannotJoin if it has
        another count or cannot follow the segments before it."""
        runs = self.index.add(read_track(path), frames, path.name)
        with path.open("rb") as src:
            for src_at, dst_at, length in runs:
                copy_range(src.fileno(), self._fd, src_at, dst_at, length)

    def finish(self) -> Joined:
        """Write the merged index and the headers in front of the samples."""
        head, joined = self.index.header()
        os.pwrite(self._fd, head, 0)
        return joined


def _check_alike(first: Track, track: Track, name: str) -> None:
    if track.entry_key != first.entry_key:
        raise CannotJoin(f"{name}'s sample description differs from the first segment's")
    if track.timescale != first.timescale:
        raise CannotJoin(f"{name}'s timescale {track.timescale} is not {first.timescale}")


def _tables(tracks: list[Track], start: int, placed: list[int]) -> bytes:
    """stsd (the first segment's entry) and every table, merged. Each segment's composition
    offsets move by the difference between its first presentation time and the latest one
    (x264 delays the first frame less in a one- or two-frame segment), so one edit list
    shows every segment whole."""
    offsets = [o + start - t.start for t in tracks for o in t.offsets]
    sizes = [s for t in tracks for s in t.sizes]
    parts = [
        m.full_box(b"stsd", 0, 0, struct.pack(">I", 1) + tracks[0].entry),
        m.stts(d for t in tracks for d in t.durations),
    ]
    if any(t.sync is not None for t in tracks):
        numbers, before = [], 0
        for t in tracks:
            numbers += [before + n for n in (t.sync or range(1, len(t.sizes) + 1))]
            before += len(t.sizes)
        parts.append(m.stss(numbers))
    if all(t.depends is not None for t in tracks):
        parts.append(m.full_box(b"sdtp", 0, 0, b"".join(t.depends or b"" for t in tracks)))
    if any(offsets):
        parts.append(m.ctts(offsets))
    per_chunk = [n for t in tracks for _, _, n in t.chunks]
    runs, chunk = [], 1
    for count, samples in m.run_lengths(per_chunk):
        runs.append((chunk, samples, 1))
        chunk += count
    parts += [m.stsc(runs), m.stsz(sizes), m.chunk_offsets(placed)]
    return b"".join(parts)


def _rebuild(data: bytes, parent: m.Atom, new: dict[bytes, _Patch]) -> bytes:
    """`parent`'s payload with the boxes named in `new` replaced by what it makes of them."""
    out = []
    for b in m.boxes(data, parent.body, parent.end):
        if b.kind in new:
            out.append(new[b.kind](data[b.body : b.end]))
        elif b.kind in m.CONTAINERS:
            out.append(_rebuild(data, b, new))
        else:
            out.append(data[b.start : b.end])
    return m.box(parent.kind, b"".join(out))

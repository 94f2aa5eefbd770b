"""farm.media.mp4join on segments built box by box: tables merged exactly, sample bytes where the
index says, and a refusal (CannotJoin, so the stitch falls back to ffmpeg) for what it cannot join."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from farm.media import mp4box as m
from farm.media.mp4join import Mp4Join
from farm.media.mp4track import NORMAL_RATE, CannotJoin, read_track

TIMESCALE = 24000
TICK = 1001  # 23.976 fps
FIELDS = (
    bytes(6) + struct.pack(">H", 1) + bytes(16) + struct.pack(">HHII", 64, 48, 0x480000, 0x480000)
    + bytes(4) + struct.pack(">H", 1) + bytes(32) + struct.pack(">Hh", 24, -1)
)  # fmt: skip
"""A visual sample entry's 78 bytes: 64x48, 72 dpi, depth 24."""


def segment(
    path: Path,
    offsets: list[int],
    *,
    sync: list[int] | None = None,
    config: bytes = b"\x01\x64\x00\x1fsps-pps",
    bitrate: int = 0,
    per_chunk: int = 0,
    tracks: int = 1,
) -> list[bytes]:
    """A segment of len(offsets) frames of TICK, with B-frame style composition offsets (and the
    edit list ffmpeg writes for them); returns each sample's bytes, all different."""
    count = len(offsets)
    samples = [f"{path.name}#{n};".encode() * (n + 1) for n in range(count)]
    ftyp = m.box(b"ftyp", b"isom\0\0\2\0isomiso2avc1mp41")
    per_chunk = per_chunk or count
    chunk_starts, at = [], len(ftyp) + 8
    for n, sample in enumerate(samples):
        if n % per_chunk == 0:
            chunk_starts.append(at)
        at += len(sample)
    mdat = m.box(b"mdat", b"".join(samples))
    children = m.box(b"avcC", config) + (
        m.box(b"btrt", struct.pack(">III", 0, bitrate, bitrate)) if bitrate else b""
    )
    entry = m.box(b"avc1", FIELDS + children)
    stbl = [
        m.full_box(b"stsd", 0, 0, struct.pack(">I", 1) + entry),
        m.stts([TICK] * count),
        m.stss(sync) if sync else b"",
        m.ctts(offsets) if any(offsets) else b"",
        m.stsc(
            [(1, per_chunk, 1)]
            + ([(len(chunk_starts), count % per_chunk, 1)] if count % per_chunk else [])
        ),
        m.stsz([len(s) for s in samples]),
        m.chunk_offsets(chunk_starts),
    ]
    media = TICK * count
    movie = -(-media * 1000 // TIMESCALE)
    start = min(n * TICK + o for n, o in enumerate(offsets))
    trak = m.box(b"trak", b"".join([
        m.full_box(b"tkhd", 0, 3, struct.pack(">IIIII", 0, 0, 1, 0, movie) + bytes(60)),
        m.box(b"edts", m.elst(m.Edit(movie, start, NORMAL_RATE))),
        m.box(b"mdia", b"".join([
            m.full_box(b"mdhd", 0, 0, struct.pack(">IIIIHH", 0, 0, TIMESCALE, media, 0x55C4, 0)),
            m.full_box(b"hdlr", 0, 0, bytes(4) + b"vide" + bytes(12) + b"VideoHandler\0"),
            m.box(b"minf", b"".join([
                m.full_box(b"vmhd", 0, 1, bytes(8)),
                m.box(b"dinf", m.full_box(b"dref", 0, 0, struct.pack(">I", 1) + m.full_box(b"url ", 0, 1, b""))),
                m.box(b"stbl", b"".join(stbl)),
            ])),
        ])),
    ]))  # fmt: skip
    mvhd = m.full_box(b"mvhd", 0, 0, struct.pack(">IIII", 0, 0, 1000, movie) + bytes(80))
    path.write_bytes(ftyp + mdat + m.box(b"moov", mvhd + trak * tracks))
    return samples


def join(out: Path, parts: list[Path]) -> None:
    frames = [len(read_track(p).sizes) for p in parts]
    with Mp4Join(out, frames=sum(frames)) as joining:
        for part, count in zip(parts, frames, strict=True):
            joining.add(part, count)
        joining.finish()


def boxes_at_top(path: Path) -> list[bytes]:
    return [b.kind for b in m.boxes(path.read_bytes())]


def test_b_frame_segments_of_different_lengths_join_into_one_index(tmp_path: Path) -> None:
    # GIVEN x264's shapes: 5 frames shown from 2 ticks in, 2 frames from 1 tick in, 3 frames
    five = segment(tmp_path / "a.mp4", [2 * TICK, 4 * TICK, TICK, TICK, 2 * TICK], sync=[1])
    two = segment(tmp_path / "b.mp4", [TICK, TICK], sync=[1], per_chunk=1)
    three = segment(tmp_path / "c.mp4", [2 * TICK, 3 * TICK, TICK], sync=[1])
    out = tmp_path / "out.mp4"
    # WHEN they are joined
    join(out, [tmp_path / n for n in ("a.mp4", "b.mp4", "c.mp4")])
    # THEN one track of 10 frames, shown back to back from 2 ticks in, index first
    track = read_track(out)
    assert track.durations == [TICK] * 10
    assert track.start == 2 * TICK
    assert track.offsets == [2 * TICK, 4 * TICK, TICK, TICK, 2 * TICK, 2 * TICK, 2 * TICK,
                             2 * TICK, 3 * TICK, TICK]  # fmt: skip
    assert track.sync == [1, 6, 8]
    assert boxes_at_top(out) == [b"ftyp", b"moov", b"free", b"free", b"mdat"]
    # AND every sample's bytes are where the index says
    data = out.read_bytes()
    got: list[bytes] = []
    for start, length, count in track.chunks:
        chunk, sizes = data[start : start + length], track.sizes[len(got) : len(got) + count]
        for size in sizes:
            got.append(chunk[:size])
            chunk = chunk[size:]
    assert got == five + two + three


def test_the_headers_carry_the_summed_duration(tmp_path: Path) -> None:
    for name in ("a", "b"):
        segment(tmp_path / f"{name}.mp4", [0] * 12)
    out = tmp_path / "out.mp4"
    join(out, [tmp_path / "a.mp4", tmp_path / "b.mp4"])
    moov = next(b for b in m.boxes(out.read_bytes()) if b.kind == b"moov")
    data = out.read_bytes()[moov.start : moov.end]
    trak = m.child(data, m.boxes(data)[0], b"trak")
    mdia = m.child(data, trak, b"mdia") if trak else None
    mvhd = m.child(data, m.boxes(data)[0], b"mvhd")
    mdhd = m.child(data, mdia, b"mdhd") if mdia else None
    assert mvhd and mdhd
    assert m.header_duration(b"mdhd", data[mdhd.body : mdhd.end]) == 24 * TICK
    assert m.header_duration(b"mvhd", data[mvhd.body : mvhd.end]) == 1001  # ms, rounded up


def test_segments_with_other_decoder_settings_are_refused(tmp_path: Path) -> None:
    segment(tmp_path / "a.mp4", [0] * 3, config=b"\x01\x64\x00\x1fsps-1")
    segment(tmp_path / "b.mp4", [0] * 3, config=b"\x01\x64\x00\x28sps-2")
    with pytest.raises(CannotJoin, match=r"b\.mp4's sample description differs"):
        join(tmp_path / "out.mp4", [tmp_path / "a.mp4", tmp_path / "b.mp4"])


def test_bit_rates_alone_do_not_make_segments_differ(tmp_path: Path) -> None:
    segment(tmp_path / "a.mp4", [0] * 3, bitrate=1_000_000)
    segment(tmp_path / "b.mp4", [0] * 3, bitrate=2_000_000)
    join(tmp_path / "out.mp4", [tmp_path / "a.mp4", tmp_path / "b.mp4"])
    assert b"btrt" not in read_track(tmp_path / "out.mp4").entry


def test_a_segment_with_a_second_track_is_refused(tmp_path: Path) -> None:
    segment(tmp_path / "a.mp4", [0] * 3, tracks=2)
    with pytest.raises(CannotJoin, match="more than one track"):
        read_track(tmp_path / "a.mp4")


def test_a_segment_that_does_not_start_on_a_keyframe_is_refused(tmp_path: Path) -> None:
    segment(tmp_path / "a.mp4", [0] * 3, sync=[2])
    with pytest.raises(CannotJoin, match="sync sample"):
        read_track(tmp_path / "a.mp4")


def test_a_segment_with_other_than_its_manifests_frame_count_is_refused(tmp_path: Path) -> None:
    segment(tmp_path / "a.mp4", [0] * 3)
    with Mp4Join(tmp_path / "out.mp4", frames=4) as joining, pytest.raises(CannotJoin, match="3"):
        joining.add(tmp_path / "a.mp4", 4)


def test_chunk_offsets_past_4_gib_are_64_bit() -> None:
    written = m.chunk_offsets([48, 2**32 + 5])
    found = m.boxes(written)[0]
    assert found.kind == b"co64"
    assert m.read_chunk_offsets(b"co64", written[found.body :]) == [48, 2**32 + 5]
    assert m.boxes(m.chunk_offsets([48]))[0].kind == b"stco"


def hvcc(vps: bytes, sei: bytes) -> bytes:
    arrays = [(32, vps), (39, sei)]
    body = b"".join(bytes([0x80 | t]) + struct.pack(">HH", 1, len(n)) + n for t, n in arrays)
    return bytes(22) + bytes([len(arrays)]) + body


def test_x265_option_messages_in_hvcc_are_not_decoder_settings() -> None:
    assert m.hvcc_without_sei(hvcc(b"vps", b"keyint=12")) == m.hvcc_without_sei(
        hvcc(b"vps", b"keyint=7")
    )
    assert m.hvcc_without_sei(hvcc(b"vps-1", b"x")) != m.hvcc_without_sei(hvcc(b"vps-2", b"x"))


def test_a_segment_missing_a_box_every_track_needs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CannotJoin (the stitch falls back to ffmpeg), not a KeyError that would fail the job."""
    from farm.media import mp4track

    segment(tmp_path / "a.mp4", [0] * 3)
    children = mp4track._children

    def without_hdlr(*args: object) -> dict[bytes, object]:
        found = dict(children(*args))  # type: ignore[arg-type]
        found.pop(b"hdlr", None)
        return found

    monkeypatch.setattr(mp4track, "_children", without_hdlr)
    with pytest.raises(CannotJoin, match="no b'hdlr' box"):
        read_track(tmp_path / "a.mp4")

"""Masters made at test time with ffmpeg's lavfi sources, and what the encode tests measure."""

from __future__ import annotations

import re
import struct
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

from farm.media.ffgraph import EncodeSettings
from farm.media.master import probe_master
from farm.media.transcode_graph import SegmentCut, default_quality, segment_argv
from tests.conftest import ffprobe

FFMPEG = ["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]


def has_drawtext() -> bool:
    out = subprocess.run(["ffmpeg", "-hide_banner", "-filters"], capture_output=True, text=True)
    return " drawtext " in out.stdout


def make_master(
    path: Path,
    *,
    size: str,
    rate: str,
    seconds: float,
    audio_codec: str = "aac",
    start_s: float = 0.0,
    drop_every: int = 0,
) -> Path:
    """Moving content with a visible frame counter (where drawtext exists) and a sine tone.

    The video is long-GOP H.264 with open GOPs and B-frames, the hard case for frame-exact cuts;
    `drop_every` drops every Nth frame to make a variable frame rate.
    """
    video = f"testsrc2=s={size}:r={rate}:d={seconds}"
    if has_drawtext():
        video += ",drawtext=text='%{n}':fontsize=96:fontcolor=white:box=1:boxcolor=black:x=40:y=40"
    if drop_every:
        video += f",select='not(eq(mod(n\\,{drop_every})\\,2))'"
    argv = [
        *FFMPEG,
        "-f",
        "lavfi",
        "-i",
        video,
        "-f",
        "lavfi",
        "-i",
        f"sine=f=440:r=48000:d={seconds}",
    ]
    argv += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
    argv += ["-x264-params", "open-gop=1:keyint=30:bframes=3:b-adapt=0"]
    argv += ["-c:a", audio_codec, "-shortest"]
    if drop_every:
        argv += ["-fps_mode", "vfr"]
    if start_s:
        argv += ["-output_ts_offset", str(start_s)]
    subprocess.run([*argv, str(path)], check=True)
    return path


def streams(path: Path) -> dict[str, Any]:
    return ffprobe(path, count="packets")


def duration_s(stream: dict[str, Any]) -> float:
    """A stream's duration: the container's figure, or Matroska's DURATION tag."""
    if stream.get("duration") not in (None, "N/A"):
        return float(stream["duration"])
    tag = (stream.get("tags") or {}).get("DURATION", "")
    match = re.fullmatch(r"(\d+):(\d+):([\d.]+)", tag)
    assert match, f"no duration for stream {stream.get('index')}"
    hours, minutes, seconds = match.groups()
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def single_pass(
    master: Path, out: Path, *, codec: str, encoder: str, size: tuple[int, int], quality: int = 0
) -> Path:
    """The same master, filters and encoder settings, in one ffmpeg run: the reference."""
    info = probe_master("ffprobe", "ffmpeg", master).info
    argv = segment_argv(
        ffmpeg_bin="ffmpeg",
        source=str(master),
        out=str(out),
        cut=SegmentCut(
            first=0,
            end=info.frame_count,
            total=info.frame_count,
            rate=info.rate,
            start_pts=info.start_pts,
        ),
        width=size[0],
        height=size[1],
        settings=EncodeSettings(
            codec=codec,
            encoder=encoder,
            fps=info.rate,
            quality=quality or default_quality(encoder),
            preset="ultrafast",
        ),
    )
    subprocess.run(argv, check=True)
    return out


def psnr_per_frame(video: Path, master: Path, size: tuple[int, int], work: Path) -> list[float]:
    """PSNR (Y) of each frame of `video` against the master's frame of the same index, scaled
    the same way: a dropped, doubled or swapped frame shows as a deep dip at its index."""
    stats = work / f"{video.stem}.psnr.log"
    scale = f"scale=w={size[0]}:h={size[1]}:flags=lanczos,format=yuv420p"
    ref = f"[1:v]{scale},settb=1/1000,setpts=N[ref]"
    graph = f"[0:v]settb=1/1000,setpts=N[out];{ref};[out][ref]psnr=stats_file={stats}"
    subprocess.run(
        # fatal: the null muxer complains of the renumbered timestamps, which only the stats need
        [
            *FFMPEG,
            "-loglevel",
            "fatal",
            "-i",
            str(video),
            "-i",
            str(master),
            "-lavfi",
            graph,
            "-f",
            "null",
            "-",
        ],
        check=True,
    )
    values = []
    for line in stats.read_text().splitlines():
        match = re.search(r"psnr_y:(\S+)", line)
        assert match
        values.append(float(match.group(1)) if match.group(1) != "inf" else 100.0)
    return values


def frame_s(rate: str) -> float:
    return float(1 / Fraction(rate))


SUBTITLES = """1
00:00:00,500 --> 00:00:01,000
Hello there

2
00:00:01,250 --> 00:00:01,750
Second line
"""
CHAPTERS = """;FFMETADATA1

[CHAPTER]
TIMEBASE=1/1000
START=0
END=1000
title=Opening

[CHAPTER]
TIMEBASE=1/1000
START=1000
END=2000
title=Ending
"""


def make_streams_master(path: Path, *, font: Path | None = None) -> Path:
    """A 2 s 320x180 MKV master with every kind of stream a delivery carries: English 'Main'
    (default) and French 'Commentary' audio, an English SRT, two chapters and a 01:00:00:00
    timecode; with `font`, a font attachment as an MKV with ASS subtitles holds one."""
    srt, meta = path.with_suffix(".srt"), path.with_suffix(".ffmeta")
    srt.write_text(SUBTITLES)
    meta.write_text(CHAPTERS)
    argv = [*FFMPEG, "-f", "lavfi", "-i", "testsrc2=s=320x180:r=24:d=2",
            "-f", "lavfi", "-i", "sine=f=440:r=48000:d=2",
            "-f", "lavfi", "-i", "sine=f=660:r=48000:d=2", "-i", str(srt), "-i", str(meta),
            "-map", "0:v", "-map", "1:a", "-map", "2:a", "-map", "3:s",
            "-map_metadata", "4", "-map_chapters", "4",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
            "-x264-params", "open-gop=1:keyint=24:bframes=3:b-adapt=0",
            "-c:a", "aac", "-c:s", "srt",
            "-metadata:s:a:0", "language=eng", "-metadata:s:a:0", "title=Main",
            "-disposition:a:0", "default",
            "-metadata:s:a:1", "language=fra", "-metadata:s:a:1", "title=Commentary",
            "-disposition:a:1", "0",
            "-metadata:s:s:0", "language=eng", "-metadata:s:s:0", "title=English",
            "-disposition:s:0", "0", "-timecode", "01:00:00:00"]  # fmt: skip
    if font is not None:
        argv += ["-attach", str(font), "-metadata:s:t:0", "mimetype=application/x-truetype-font"]
    subprocess.run([*argv, str(path)], check=True)
    return path


def make_interlaced_master(path: Path, *, seconds: float = 1) -> Path:
    """Interlaced H.264 (top field first, coded as fields: ffprobe's field_order tt), 25 fps."""
    argv = [*FFMPEG, "-f", "lavfi", "-i", f"testsrc2=s=320x180:r=25:d={seconds}",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
            "-flags", "+ilme+ildct", "-top", "1", "-x264-params", "tff=1"]  # fmt: skip
    subprocess.run([*argv, str(path)], check=True)
    return path


def make_edit_list_master(path: Path, source: Path, *, cut_s: float) -> Path:
    """`source` cut at `cut_s` by stream copy: an MP4 whose edit list hides the frames from the
    keyframe before the cut up to it (their packets are marked discard)."""
    argv = [*FFMPEG, "-ss", str(cut_s), "-i", str(source), "-map", "0:v", "-c", "copy"]
    subprocess.run([*argv, str(path)], check=True)
    return path


def decoded_frames(path: Path) -> int:
    """Frames a player shows: decoded, the edit list honoured."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
         "stream=nb_read_frames", "-of", "csv=p=0", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(out.stdout.strip().rstrip(","))


def _spu(duration_ticks: int) -> bytes:
    """One DVD subtitle (SPU): a 16x2 bar in colour 1, shown at once, hidden after
    `duration_ticks` (1024/90000 s each)."""
    rle = bytes([0x00, 0x01, 0x00, 0x01])  # each field's line: colour 1 to the end of the line
    first, second = 4 + len(rle), 4 + len(rle) + 24
    show = struct.pack(">HH", 0, second) + bytes([
        0x01,  # start display
        0x03, 0x01, 0x23,  # palette
        0x04, 0xFF, 0xF0,  # alpha
        0x05, 0x00, 0x00, 0x0F, 0x00, 0x00, 0x01,  # x 0-15, y 0-1
        0x06, 0x00, 0x04, 0x00, 0x06,  # the two fields' RLE offsets
        0xFF,
    ])  # fmt: skip
    hide = struct.pack(">HH", duration_ticks, second) + bytes([0x02, 0xFF])
    body = rle + show + hide
    return struct.pack(">HH", 4 + len(body), first) + body


def _pts(ticks: int) -> bytes:
    return bytes([0x21 | ((ticks >> 29) & 0x0E), (ticks >> 22) & 0xFF,
                  0x01 | ((ticks >> 14) & 0xFE), (ticks >> 7) & 0xFF,
                  0x01 | ((ticks << 1) & 0xFE)])  # fmt: skip


def make_dvd_subtitle_master(path: Path, *, durations: bool = True) -> Path:
    """A 2 s 320x180 MKV with a German DVD (bitmap) subtitle track of two cues, at 0.5 s and
    1.25 s. ffmpeg encodes DVD subtitles only from bitmaps, so the cues are written by hand as
    a VobSub (MPEG-PS private stream 1); `durations`: each cue's 0.5 s on its packet, as
    mkvmerge writes them (ffmpeg's own remux leaves them unset)."""
    pack = bytes.fromhex("000001BA4400040004010189C3F8")
    stream = bytearray()
    for start_s in (0.5, 1.25):
        payload = bytes([0x20]) + _spu(int(0.5 * 90000 / 1024))
        header = bytes([0x81, 0x80, 0x05]) + _pts(int(start_s * 90000))
        size = struct.pack(">H", len(header) + len(payload))
        stream += pack + b"\x00\x00\x01\xbd" + size + header + payload
    sub = path.with_suffix(".sub")
    sub.write_bytes(bytes(stream + b"\x00\x00\x01\xb9"))
    argv = [*FFMPEG, "-f", "lavfi", "-i", "testsrc2=s=320x180:r=24:d=2", "-f", "mpeg",
            "-i", str(sub), "-map", "0:v", "-map", "1:s", "-c:v", "libx264",
            "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:s", "copy",
            "-metadata:s:s:0", "language=deu"]  # fmt: skip
    if durations:
        argv += ["-bsf:s", "setts=duration=500"]
    subprocess.run([*argv, str(path)], check=True)
    return path

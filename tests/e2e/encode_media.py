"""Masters made at test time with ffmpeg's lavfi sources, and what the encode tests measure."""

from __future__ import annotations

import re
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

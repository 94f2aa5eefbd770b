"""Reading video files with ffprobe: frame count, size, rate, codec."""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from farm import proc
from farm.errors import PermanentError
from workers.ffgraph import probe_argv


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoInfo:
    codec: str
    width: int
    height: int
    fps: Fraction
    frames: int
    duration_s: float
    pix_fmt: str


def probe_video(ffprobe: str, path: Path) -> VideoInfo:
    result = proc.capture(probe_argv(ffprobe_bin=ffprobe, path=path), 300)
    if result.returncode != 0:
        raise PermanentError(f"ffprobe cannot read {path.name}: {result.stderr.strip()[-400:]}")
    data = json.loads(result.stdout)
    streams = data.get("streams") or []
    if not streams:
        raise PermanentError(f"{path.name} has no video stream")
    stream = streams[0]
    return VideoInfo(
        codec=stream.get("codec_name", ""),
        width=int(stream.get("width", 0)),
        height=int(stream.get("height", 0)),
        fps=Fraction(stream.get("r_frame_rate", "0/1")),
        frames=int(stream.get("nb_read_packets", 0)),
        duration_s=float(data.get("format", {}).get("duration", 0.0)),
        pix_fmt=stream.get("pix_fmt", ""),
    )

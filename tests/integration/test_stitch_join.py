"""The stitch's join with real ffmpeg: frame-exact, and the index written once, at the front."""

from __future__ import annotations

import struct
import subprocess
from fractions import Fraction
from pathlib import Path

import ffmpeg

from farm.probe import probe_streams
from farm.proc import run
from workers.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options, concat_argv, concat_list

FPS = Fraction(24)


def segment(out: Path, frames: int, colour: str) -> Path:
    settings = EncodeSettings(codec="h264", encoder="libx264", fps=FPS, preset="ultrafast")
    stream = ffmpeg.input(f"color=c={colour}:size=64x48:rate={FPS}", f="lavfi").output(
        str(out), vframes=frames, **codec_options(settings, frames)
    )
    subprocess.run(stream.global_args(*GLOBAL_ARGS).compile(), check=True, capture_output=True)
    return out


def top_level_boxes(path: Path) -> list[str]:
    """The MP4's top-level box types in file order (ftyp, free, moov, mdat, ...)."""
    boxes, data, at = [], path.read_bytes(), 0
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        if size == 1:
            size = struct.unpack(">Q", data[at + 8 : at + 16])[0]
        boxes.append(kind.decode())
        at += size if size else len(data)
    return boxes


def test_segments_join_frame_exact_with_the_index_before_the_media(tmp_path: Path) -> None:
    parts = [segment(tmp_path / f"{i}.mp4", 12, c) for i, c in enumerate(("red", "blue", "red"))]
    list_file = tmp_path / "list.txt"
    list_file.write_text(concat_list([(p, Fraction(12) / FPS) for p in parts]))
    out = tmp_path / "out.mp4"
    assert run(concat_argv(ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=36)).ok
    info = probe_streams("ffprobe", out)
    assert (info.frames, info.fps) == (36, FPS)
    boxes = top_level_boxes(out)
    assert boxes.index("moov") < boxes.index("mdat")  # a player can start before the end arrives

"""Frames that look broken (`farm submit --check-frames`): black, or one flat colour, found by
ffmpeg's signalstats over the frames a segment is made of; NaN pixels, found in an EXR master
decoded by ffmpeg to 32-bit floats (the argv and the reading of what ffmpeg wrote are here)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

BLACK_MAX = 8
"""A frame whose brightest pixel is at most this (of 255, full range: about 3% grey) is black."""
FLAT_SPREAD = 2
"""A frame whose every plane (Y, U, V) spans at most this is one flat colour."""

BLACK = "black"
FLAT = "one flat colour"
NAN = "NaN pixels"

EXR_FORMATS = frozenset({"OPEN_EXR", "OPEN_EXR_MULTILAYER"})
"""Scene output formats whose masters hold floats, and so can hold NaN."""

_FRAME = re.compile(r"^frame:(\d+)\s")
_STAT = re.compile(r"^lavfi\.signalstats\.([YUV])(MIN|MAX)=([\d.]+)$")


def stats_argv(*, ffmpeg_bin: str, pattern: Path, stats: Path) -> list[str]:
    """ffmpeg reading the numbered frames at `pattern` and writing each one's plane minimum and
    maximum (full range, so black is 0) to `stats`; nothing else is written."""
    graph = (
        "scale=out_range=full,format=yuv444p,signalstats,"
        f"metadata=mode=print:file={_escaped(stats)}"
    )
    return [ffmpeg_bin, "-hide_banner", "-nostdin", "-v", "error", "-i", str(pattern),
            "-vf", graph, "-f", "null", "-"]  # fmt: skip


def _escaped(path: Path) -> str:
    """A path as a filter option's value inside a graph: escaped for the option (`\\`, `:`,
    `'`), then for the graph (`\\`, `'`, `[`, `]`, `,`, `;`), as ffmpeg-filters says."""
    option = re.sub(r"([\\:'])", r"\\\1", str(path))
    return re.sub(r"([\\'\[\],;])", r"\\\1", option)


def read_stats(text: str) -> dict[int, dict[str, int]]:
    """signalstats' printed metadata: each frame's number in the sequence (from 0) and its
    YMIN, YMAX, UMIN, ... values."""
    found: dict[int, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        if match := _FRAME.match(line):
            current = found.setdefault(int(match[1]), {})
        elif (match := _STAT.match(line.strip())) and current is not None:
            current[match[1] + match[2]] = round(float(match[3]))
    return found


def flag(stats: Mapping[str, int]) -> str:
    """What is wrong with a frame by its stats: BLACK, FLAT, or "" for a frame that looks like
    a picture."""
    if stats.get("YMAX", 255) <= BLACK_MAX:
        return BLACK
    if all(stats.get(f"{p}MAX", 255) - stats.get(f"{p}MIN", 0) <= FLAT_SPREAD for p in "YUV"):
        return FLAT
    return ""


def flagged(frames: Sequence[int], text: str) -> tuple[dict[int, str], list[int]]:
    """Each flagged frame of `frames` (the sequence's order) with why, and the frames the stats
    left out (not checked: said, never taken as fine)."""
    stats = read_stats(text)
    flags = {f: why for n, f in enumerate(frames) if n in stats and (why := flag(stats[n]))}
    return flags, [f for n, f in enumerate(frames) if n not in stats]


def floats_argv(*, ffmpeg_bin: str, source: Path, out: Path) -> list[str]:
    """ffmpeg decoding an EXR master (its first part) to raw 32-bit float planes at `out`."""
    return [ffmpeg_bin, "-hide_banner", "-nostdin", "-v", "error", "-y", "-i", str(source),
            "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "gbrapf32le", str(out)]  # fmt: skip


def nan_count(raw: Path, block_floats: int = 1 << 22) -> int:
    """NaN values in a file of raw little-endian 32-bit floats (floats_argv's), read a block at
    a time: a 4K frame's planes are some 130 MB."""
    import numpy as np  # the workers' numpy (the bpy wheel's): only the check needs it

    found = 0
    with raw.open("rb") as fh:
        while block := fh.read(block_floats * 4):
            usable = len(block) - len(block) % 4
            found += int(np.isnan(np.frombuffer(block[:usable], dtype="<f4")).sum())
    return found

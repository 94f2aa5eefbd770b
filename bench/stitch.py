"""Stitch: joining N 4K segments by stream copy with the farm's own concat list and argv, and
verifying the result as the stitch task does, against `cp` of the same bytes.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import ffmpeg

from bench.common import Row
from farm.probe import probe_streams
from farm.proc import run as run_program
from workers.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options, concat_argv, concat_list

FPS = Fraction(24)


def make_segment(out: Path, *, width: int, height: int, frames: int) -> None:
    """One closed-GOP segment from ffmpeg's test source, with the farm's segment options."""
    settings = EncodeSettings(codec="h264", encoder="libx264", fps=FPS, preset="ultrafast")
    stream = ffmpeg.input(f"testsrc2=size={width}x{height}:rate={FPS}", f="lavfi")
    stream = stream.output(str(out), vframes=frames, **codec_options(settings, frames))
    argv = ["ffmpeg", *GLOBAL_ARGS, *stream.compile(cmd="ffmpeg")[1:]]
    subprocess.run(argv, check=True, capture_output=True, timeout=600)


def _median_s(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        fn()
        times.append(time.monotonic() - started)
    return statistics.median(times)


def measure(n: int, seg_dir: Path, work: Path, frames: int, repeats: int) -> dict[str, Any]:
    source = seg_dir / "seg.mp4"
    segments = []
    for i in range(n):
        path = seg_dir / f"{i:05d}.mp4"
        if not path.exists():
            shutil.copyfile(source, path)
        segments.append(path)
    total_bytes = sum(p.stat().st_size for p in segments)
    list_file = work / f"list-{n}.txt"
    list_file.write_text(concat_list([(p, Fraction(frames) / FPS) for p in segments]))
    out = work / f"out-{n}.mp4"
    copies = work / f"cp-{n}"

    def concat() -> None:
        result = run_program(
            concat_argv(ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=n * frames)
        )
        if not result.ok:
            raise RuntimeError("\n".join(result.tail))

    def concat_two_pass() -> None:
        """Before: the same join with `+faststart`, which writes the file a second time."""
        argv = concat_argv(ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=n * frames)
        at = argv.index("-moov_size")
        result = run_program([*argv[:at], "-movflags", "+faststart", *argv[at + 2 :]])
        if not result.ok:
            raise RuntimeError("\n".join(result.tail))

    def concat_and_verify() -> None:
        concat()
        info = probe_streams("ffprobe", out)
        if info.frames != n * frames:
            raise RuntimeError(f"stitched {info.frames} frames, expected {n * frames}")

    def cp() -> None:
        shutil.rmtree(copies, ignore_errors=True)
        copies.mkdir()
        subprocess.run(["cp", *map(str, segments), str(copies)], check=True)

    cp()  # both read from the page cache: the comparison is of the work, not the disk
    concat_s = _median_s(concat, repeats)
    two_pass_s = _median_s(concat_two_pass, repeats)
    stitch_s = _median_s(concat_and_verify, repeats)
    cp_s = _median_s(cp, repeats)
    shutil.rmtree(copies, ignore_errors=True)
    out.unlink(missing_ok=True)
    return {
        "segments": n,
        "bytes": total_bytes,
        "concat_s": round(concat_s, 3),
        "concat_faststart_s": round(two_pass_s, 3),
        "concat_verify_s": round(stitch_s, 3),
        "cp_s": round(cp_s, 3),
        "concat_over_cp": round(concat_s / cp_s, 2),
        "stitch_over_cp": round(stitch_s / cp_s, 2),
    }


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    width, height, frames = (320, 180, 4) if quick else (3840, 2160, 12)
    counts, repeats = ((2, 5), 1) if quick else ((10, 100), 3)
    with tempfile.TemporaryDirectory(prefix="farm-bench-stitch-") as tmp:
        seg_dir, work = Path(tmp) / "segments", Path(tmp) / "work"
        seg_dir.mkdir()
        work.mkdir()
        make_segment(seg_dir / "seg.mp4", width=width, height=height, frames=frames)
        cases = [measure(n, seg_dir, work, frames, repeats) for n in counts]
    rows = [
        Row(
            bench="stitch",
            case=f"{c['segments']} x {width}x{height} segments of {frames} frames "
            f"({c['bytes'] / 2**20:.0f} MiB)",
            farm=f"{c['concat_verify_s']:.2f} s (concat {c['concat_s']:.2f} s; with "
            f"+faststart as before {c['concat_faststart_s']:.2f} s)",
            baseline=f"cp {c['cp_s']:.2f} s",
            ratio=c["stitch_over_cp"],
            note="stitch = concat by stream copy + ffprobe frame count",
        )
        for c in cases
    ]
    return {"resolution": f"{width}x{height}", "frames": frames, "cases": cases}, rows

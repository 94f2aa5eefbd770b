"""Stitch: joining N 4K segments by stream copy with the stitch task's own join and checks
(workers.join: mp4join, then the tables and a header-only ffprobe), against `cp` of the same
bytes; beside it, ffmpeg's concat demuxer and a packet count, the join the stitch falls back to.
"""

from __future__ import annotations

import os
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
from workers.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options, concat_argv
from workers.join import CONCAT, MP4JOIN, JoinResult, join_segments, probe_joined

FPS = Fraction(24)


def make_segment(out: Path, *, width: int, height: int, frames: int) -> None:
    """One closed-GOP segment from ffmpeg's test source, with the farm's segment options."""
    settings = EncodeSettings(codec="h264", encoder="libx264", fps=FPS, preset="ultrafast")
    stream = ffmpeg.input(f"testsrc2=size={width}x{height}:rate={FPS}", f="lavfi")
    stream = stream.output(str(out), vframes=frames, **codec_options(settings, frames))
    argv = ["ffmpeg", *GLOBAL_ARGS, *stream.compile(cmd="ffmpeg")[1:]]
    subprocess.run(argv, check=True, capture_output=True, timeout=600)


def _medians_s(variants: dict[str, tuple[Any, Any]], repeats: int) -> dict[str, float]:
    """Each variant's median time, run in turns so none meets the page cache or the disk's
    writeback in a state the others did not. Each variant is (setup, work); the setup (removing
    the last run's output, flushing dirty pages) is not timed."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, (setup, work) in variants.items():
            setup()
            os.sync()
            started = time.monotonic()
            work()
            times[name].append(time.monotonic() - started)
    return {name: statistics.median(t) for name, t in times.items()}


def measure(n: int, seg_dir: Path, work: Path, frames: int, repeats: int) -> dict[str, Any]:
    source = seg_dir / "seg.mp4"
    segments = []
    for i in range(n):
        path = seg_dir / f"{i:05d}.mp4"
        if not path.exists():
            shutil.copyfile(source, path)
        segments.append(path)
    total_bytes = sum(p.stat().st_size for p in segments)
    total = n * frames
    out = work / f"out-{n}.mp4"
    copies = work / f"cp-{n}"
    methods: set[str] = set()

    def join(skip: str = "") -> JoinResult:
        result = join_segments(
            paths=iter(segments),
            lengths=[(frames, Fraction(frames) / FPS)] * n,
            out=out,
            concat=lambda list_file, _: concat_argv(
                ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=total
            ),
            skip=skip,
        )
        methods.add(result.method)
        return result

    def stitch() -> None:
        """What the stitch task does once the segments are local."""
        info = probe_joined("ffprobe", out, join(), total, FPS)
        if info.frames != total or info.fps != FPS:
            raise RuntimeError(f"stitched {info.frames} frames at {info.fps}, expected {total}")

    def concat_and_count() -> None:
        """The join before: ffmpeg's concat demuxer, then ffprobe counting every packet."""
        join(skip="the benchmark's old join")
        info = probe_streams("ffprobe", out)
        if info.frames != total:
            raise RuntimeError(f"stitched {info.frames} frames, expected {total}")

    def cp() -> None:
        subprocess.run(["cp", *map(str, segments), str(copies)], check=True)

    def fresh_copies() -> None:
        shutil.rmtree(copies, ignore_errors=True)
        copies.mkdir()

    def fresh_out() -> None:
        out.unlink(missing_ok=True)

    fresh_copies()
    cp()  # all read from the page cache: the comparison is of the work, not the disk
    medians = _medians_s(
        {
            "cp": (fresh_copies, cp),
            "join": (fresh_out, join),
            "stitch": (fresh_out, stitch),
            "concat": (fresh_out, lambda: join(skip="the benchmark's old join")),
            "concat_verify": (fresh_out, concat_and_count),
        },
        repeats,
    )
    shutil.rmtree(copies, ignore_errors=True)
    out.unlink(missing_ok=True)
    join_s, stitch_s, cp_s = medians["join"], medians["stitch"], medians["cp"]
    concat_s, concat_verify_s = medians["concat"], medians["concat_verify"]
    return {
        "segments": n,
        "bytes": total_bytes,
        "methods": sorted(methods),
        "join_s": round(join_s, 3),
        "stitch_s": round(stitch_s, 3),
        "concat_s": round(concat_s, 3),
        "concat_verify_s": round(concat_verify_s, 3),
        "cp_s": round(cp_s, 3),
        "stitch_over_cp": round(stitch_s / cp_s, 2),
        "concat_verify_over_cp": round(concat_verify_s / cp_s, 2),
    }


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    width, height, frames = (320, 180, 4) if quick else (3840, 2160, 12)
    counts, repeats = ((2, 5), 1) if quick else ((10, 100), 5)
    with tempfile.TemporaryDirectory(prefix="farm-bench-stitch-") as tmp:
        seg_dir, work = Path(tmp) / "segments", Path(tmp) / "work"
        seg_dir.mkdir()
        work.mkdir()
        make_segment(seg_dir / "seg.mp4", width=width, height=height, frames=frames)
        cases = [measure(n, seg_dir, work, frames, repeats) for n in counts]
    assert all(c["methods"] == [CONCAT, MP4JOIN] for c in cases), "mp4join fell back"
    rows = []
    for c in cases:
        case = (
            f"{c['segments']} x {width}x{height} segments of {frames} frames "
            f"({c['bytes'] / 2**20:.0f} MiB)"
        )
        rows += [
            Row(
                bench="stitch",
                case=case,
                farm=f"{c['stitch_s']:.2f} s (join {c['join_s']:.2f} s)",
                baseline=f"cp {c['cp_s']:.2f} s",
                ratio=c["stitch_over_cp"],
                note="mp4join + checks of its tables + header-only ffprobe",
            ),
            Row(
                bench="stitch",
                case=f"{case}, ffmpeg concat (the fallback)",
                farm=f"{c['concat_verify_s']:.2f} s (concat {c['concat_s']:.2f} s)",
                baseline=f"cp {c['cp_s']:.2f} s",
                ratio=c["concat_verify_over_cp"],
                note="concat demuxer + ffprobe packet count",
            ),
        ]
    return {"resolution": f"{width}x{height}", "frames": frames, "cases": cases}, rows

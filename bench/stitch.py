"""Stitch: joining N 4K segments by stream copy with the stitch task's own join and checks
(farm.media.join: mp4join, then the tables and a header-only ffprobe), against `cp` of the same
bytes; beside it, ffmpeg's concat demuxer and a packet count, the join the stitch falls back to;
and, on a local farm's SeaweedFS, the join done by the store (workers.phases.s3join) against the stitch
through the worker (download, mp4join, upload).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any

import ffmpeg

from bench.common import Row, start_farm
from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options, concat_argv
from farm.media.join import (
    CONCAT,
    MP4JOIN,
    JoinResult,
    check_tables,
    join_segments,
    probe_joined,
)
from farm.media.probe import probe_streams
from workers.host.box import media_box
from workers.phases import s3join
from workers.phases.stitch import DOWNLOADS, SegmentRef

FPS = Fraction(24)


def make_segment(
    out: Path, *, width: int, height: int, frames: int, noise: bool = False, quality: int = 20
) -> None:
    """One closed-GOP segment from ffmpeg's test source (or noise, which compresses badly), with
    the farm's segment options."""
    settings = EncodeSettings(
        codec="h264", encoder="libx264", fps=FPS, preset="ultrafast", quality=quality
    )
    source = f"testsrc2=size={width}x{height}:rate={FPS}"
    if noise:
        source = f"nullsrc=s={width}x{height}:r={FPS},geq=random(1)*255:128:128"
    stream = ffmpeg.input(source, f="lavfi")
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
    box = media_box(Settings(), writable=(work,), readable=(seg_dir,))  # as the stitch runs them

    def join(skip: str = "") -> JoinResult:
        result = join_segments(
            paths=iter(segments),
            lengths=[(frames, Fraction(frames) / FPS)] * n,
            out=out,
            concat=lambda list_file, _: concat_argv(
                ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=total
            ),
            skip=skip,
            box=box,
        )
        methods.add(result.method)
        return result

    def stitch() -> None:
        """What the stitch task does once the segments are local."""
        info = probe_joined("ffprobe", out, join(), total, FPS, box)
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


def measure_store(
    store: Store, n: int, source: Path, work: Path, frames: int, repeats: int
) -> dict[str, Any]:
    """The stitch of `n` stored copies of `source`: joined by the store (s3copy, with its checks:
    the tables, the object's size, ffprobe of its header over a presigned URL), against the
    stitch through the worker (downloads overlapping mp4join, its checks, the upload), and
    `cp` of the same bytes here."""
    run_id = time.time_ns()
    size_bytes, total = source.stat().st_size, n * frames
    refs = []
    for i in range(n):
        key = f"bench/{run_id}/segments/{i:05d}.mp4"
        etag = store.put_file(key, source)
        refs.append(SegmentRef(
            index=i, key=key, size_bytes=size_bytes, sha256="", frames=frames, fps=FPS,
            encoder={"name": "libx264"}, first=(i * frames, i), etag=etag,
        ))  # fmt: skip
    s3_key, local_key = f"bench/{run_id}/s3copy.mp4", f"bench/{run_id}/local.mp4"
    down, out, copies = work / f"down-{n}", work / f"local-{n}.mp4", work / f"cp-store-{n}"
    box = media_box(Settings(), writable=(work,))
    local_copies = [work / f"src-{i:05d}.mp4" for i in range(n)]
    for path in local_copies:
        shutil.copyfile(source, path)

    def in_store() -> None:
        plan = s3join.plan(store, refs, total)
        check_tables(plan.joined, total, FPS)
        s3join.assemble(store, plan, s3_key)
        info = s3join.probe_object(store, s3_key, plan.joined, ffprobe="ffprobe", ca_file="")
        if info.frames != total:
            raise RuntimeError(f"the store joined {info.frames} frames, expected {total}")

    early_key = f"bench/{run_id}/early.mp4"
    run = s3join.sample_run(source)
    early: dict[str, Any] = {}

    def copy_early() -> None:
        """What the segments' workers do as each is made: its part copied into the upload."""
        if run is None:
            raise RuntimeError(f"{source} cannot be a part")
        early["upload"] = store.create_multipart(early_key)
        numbers = [1, *(s3join.part_number(r.first[0], total) for r in refs[1:])]
        copied = time.monotonic()
        with ThreadPoolExecutor(s3join.COPIES) as pool:
            etags = pool.map(
                lambda nr: store.upload_part_copy(
                    early_key, early["upload"], nr[0], nr[1].key, *run, etag=nr[1].etag
                ),
                zip(numbers[1:], refs[1:], strict=True),
            )
            early["done"] = dict(zip(numbers[1:], etags, strict=True))
        early["numbers"], early["copies_s"] = numbers, time.monotonic() - copied

    def after_early() -> None:
        """The stitch once every later segment's part is there: indexes, part 1, complete."""
        plan = s3join.plan(store, refs, total)
        check_tables(plan.joined, total, FPS)
        s3join.assemble(
            store, plan, early_key, upload_id=early["upload"], numbers=early["numbers"],
            done=early["done"],
        )  # fmt: skip
        info = s3join.probe_object(store, early_key, plan.joined, ffprobe="ffprobe", ca_file="")
        if info.frames != total:
            raise RuntimeError(f"the store joined {info.frames} frames, expected {total}")

    def through_worker() -> None:
        with ThreadPoolExecutor(DOWNLOADS) as pool:
            landed = [
                pool.submit(_download, store, r.key, down / f"{r.index:05d}.mp4") for r in refs
            ]
            result = join_segments(
                paths=(f.result() for f in landed),
                lengths=[(frames, Fraction(frames) / FPS)] * n,
                out=out,
                concat=lambda list_file, _: concat_argv(
                    ffmpeg_bin="ffmpeg", list_file=list_file, out=out, frames=total
                ),
                box=box,
            )
        if (
            result.method != MP4JOIN
            or probe_joined("ffprobe", out, result, total, FPS, box).frames != total
        ):
            raise RuntimeError(f"the worker's stitch went wrong ({result.fallback})")
        store.put_file(local_key, out)

    def fresh_local() -> None:
        shutil.rmtree(down, ignore_errors=True)
        down.mkdir()
        out.unlink(missing_ok=True)

    def fresh_copies() -> None:
        shutil.rmtree(copies, ignore_errors=True)
        copies.mkdir()

    medians = _medians_s(
        {
            "cp": (
                fresh_copies,
                lambda: subprocess.run(["cp", *map(str, local_copies), str(copies)], check=True),
            ),
            "s3copy": (lambda: None, in_store),
            "early": (copy_early, after_early),
            "worker": (fresh_local, through_worker),
        },
        repeats,
    )
    for key in [*(r.key for r in refs), s3_key, local_key, early_key]:
        store.delete(key)
    for path in [*local_copies, out]:
        path.unlink(missing_ok=True)
    shutil.rmtree(down, ignore_errors=True)
    shutil.rmtree(copies, ignore_errors=True)
    s3_s, worker_s, cp_s = medians["s3copy"], medians["worker"], medians["cp"]
    return {
        "segments": n,
        "bytes": n * size_bytes,
        "s3copy_s": round(s3_s, 3),
        "early_finish_s": round(medians["early"], 3),
        "early_copies_s": round(early["copies_s"], 3),
        "early_finish_over_cp": round(medians["early"] / cp_s, 2),
        "worker_s": round(worker_s, 3),
        "cp_s": round(cp_s, 3),
        "s3copy_over_cp": round(s3_s / cp_s, 2),
        "worker_over_cp": round(worker_s / cp_s, 2),
    }


def _download(store: Store, key: str, path: Path) -> Path:
    store.get_file(key, path)
    return path


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    width, height, frames = (320, 180, 4) if quick else (3840, 2160, 12)
    counts, repeats = ((2, 5), 1) if quick else ((10, 100), 5)
    with tempfile.TemporaryDirectory(prefix="farm-bench-stitch-") as tmp:
        seg_dir, work = Path(tmp) / "segments", Path(tmp) / "work"
        seg_dir.mkdir()
        work.mkdir()
        make_segment(seg_dir / "seg.mp4", width=width, height=height, frames=frames)
        cases = [measure(n, seg_dir, work, frames, repeats) for n in counts]
        store_source, store_note = seg_dir / "seg.mp4", ""
        if store_source.stat().st_size < s3join.MIN_PART_BYTES:
            # A store's part is 5 MiB at least: noise at 720p, 8 frames, is about 6.5 MiB.
            store_source = seg_dir / "noise.mp4"
            make_segment(store_source, width=1280, height=720, frames=8, noise=True, quality=10)
            store_note = "1280x720 noise segments of 8 frames: the ones above are under 5 MiB"
        store_frames = 8 if store_note else frames
        farm = start_farm(workers=1, base=Path(tmp) / "farm")
        try:
            store = farm.store()
            store_cases = [
                measure_store(store, n, store_source, work, store_frames, repeats) for n in counts
            ]
        finally:
            farm.close()
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
    for c in store_cases:
        case = f"{c['segments']} stored segments ({c['bytes'] / 2**20:.0f} MiB)"
        variants = [
            (", joined by the store", f"s3copy {c['s3copy_s']:.2f} s", c["s3copy_over_cp"],
             store_note or "multipart upload of ranged part copies + size + URL ffprobe"),
            (", joined by the store, parts copied as the segments were made",
             f"{c['early_finish_s']:.2f} s after the last segment", c["early_finish_over_cp"],
             f"the copies, made by the segments' workers before: {c['early_copies_s']:.2f} s in "
             "all; after the last: index reads, part 1, complete, size, URL ffprobe"),
            (", joined through the worker", f"{c['worker_s']:.2f} s", c["worker_over_cp"],
             "download + mp4join + checks + upload, as before s3copy"),
        ]  # fmt: skip
        rows += [
            Row(bench="stitch", case=case + suffix, farm=farm, baseline=f"cp {c['cp_s']:.2f} s",
                ratio=ratio, note=note)
            for suffix, farm, ratio, note in variants
        ]  # fmt: skip
    return {
        "resolution": f"{width}x{height}",
        "frames": frames,
        "cases": cases,
        "store_cases": store_cases,
    }, rows

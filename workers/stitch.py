"""Join a job's segments by stream copy into the deliverable, and prove it has the frames asked for.

Runs once per job: only the caller that won the ledger's completion gate sends this task.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

from farm import keys
from farm.errors import PermanentError
from farm.probe import probe_streams
from farm.proc import run
from farm.spec import JobSpec
from farm.state import JobState
from farm.store import sha256_file
from workers.context import WorkerContext
from workers.ffgraph import concat_argv, concat_list, fps_fraction

log = logging.getLogger(__name__)


DOWNLOADS = 8
"""Segments fetched at once: the store serves many streams faster than one."""


def verified_segments(
    ctx: WorkerContext, job_id: str, chunks_total: int, work: Path
) -> list[tuple[Path, Fraction]]:
    """Download every segment named by a manifest, in parallel, and check each against it.
    Returned in the order of their first frames: a split chunk's rest has a later index than
    chunks after it in the video (farm.split)."""
    with ThreadPoolExecutor(DOWNLOADS, thread_name_prefix="segment") as pool:
        fetched = list(
            pool.map(lambda i: _fetch_segment(ctx, job_id, i, work), range(chunks_total))
        )
    fetched.sort(key=lambda f: f[3])
    encoders = {encoder for _, _, encoder, _ in fetched}
    if len(encoders) > 1:
        raise PermanentError(
            f"segments were made by different encoders ({', '.join(sorted(encoders))}); they cannot "
            "be joined by stream copy. Retry the job with --encoder set to one of them"
        )
    return [(path, duration) for path, duration, _, _ in fetched]


def first_frame(manifest: dict[str, Any], index: int) -> tuple[int, int]:
    """Where a segment goes in the video: its first frame (a render chunk's frame list, or a
    transcode cut's `first`), then its chunk index."""
    frames = manifest.get("frames")
    if isinstance(frames, dict) and isinstance(frames.get("first"), int):
        return frames["first"], index
    if isinstance(frames, list) and frames and isinstance(frames[0], dict):
        return int(frames[0].get("frame", 0)), index
    return 0, index


def _fetch_segment(
    ctx: WorkerContext, job_id: str, index: int, work: Path
) -> tuple[Path, Fraction, str, tuple[int, int]]:
    manifest = ctx.store.get_json(keys.manifest_key(job_id, index))
    seg = manifest["segment"]
    local = work / Path(seg["key"]).name
    ctx.store.get_file(seg["key"], local)
    if local.stat().st_size != seg["size"] or sha256_file(local) != seg["sha256"]:
        raise PermanentError(f"segment {index} does not match its manifest; retry chunk {index}")
    if seg["frames"] != manifest["frame_count"]:
        raise PermanentError(
            f"segment {index} has {seg['frames']} of {manifest['frame_count']} frames"
        )
    duration = Fraction(seg["frames"]) / Fraction(seg["fps"])
    return local, duration, manifest["encoder"]["name"], first_frame(manifest, index)


def stitch_frames(
    ctx: WorkerContext, job_id: str, job: dict[str, str], spec: JobSpec
) -> dict[str, object]:
    """A render job's stitch: its segments joined by stream copy, checked frame for frame."""
    started = time.monotonic()
    with stitch_workspace(ctx, job_id) as work:
        segments = verified_segments(ctx, job_id, int(job["chunks_total"]), work)
        list_file = work / "segments.txt"
        list_file.write_text(concat_list(segments))
        out = work / f"output.{spec.codec.container}"
        result = run(
            concat_argv(
                ffmpeg_bin=ctx.settings.ffmpeg,
                list_file=list_file,
                out=out,
                frames=spec.frames.count,
            )
        )
        if not result.ok:
            raise PermanentError(
                "ffmpeg could not join the segments:\n" + "\n".join(result.tail[-15:])
            )
        info = probe_streams(ctx.settings.ffprobe, out)
        expected = (
            spec.frames.count,
            spec.resolution.width,
            spec.resolution.height,
            fps_fraction(spec.fps),
        )
        got = (info.frames, info.width, info.height, info.fps)
        if got != expected:
            raise PermanentError(
                f"the joined video has {info.frames} frames at {info.width}x{info.height}, "
                f"{info.fps} fps; asked for {expected[0]} frames at {expected[1]}x{expected[2]}, "
                f"{expected[3]} fps"
            )
        output_key = deliver(ctx, job_id, out, started)
    return {"job_id": job_id, "output": output_key, "frames": info.frames}


@contextmanager
def stitch_workspace(ctx: WorkerContext, job_id: str) -> Iterator[Path]:
    """A clean work folder for the stitch, removed after; a permanent error fails the job."""
    work = ctx.job_dir(job_id) / "stitch"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        yield work
    except PermanentError as exc:
        ctx.ledger.move_job(
            job_id, JobState.FAILED, error=f"stitch failed: {exc}", finished=time.time()
        )
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def deliver(ctx: WorkerContext, job_id: str, out: Path, started: float, **timings: float) -> str:
    """Upload the verified deliverable and mark the job done; returns its key."""
    output_key = keys.output_key(job_id, out.suffix.lstrip("."))
    ctx.store.put_file(output_key, out)
    ctx.ledger.move_job(
        job_id,
        JobState.DONE,
        output=output_key,
        output_size=out.stat().st_size,
        stitch_s=round(time.monotonic() - started, 3),
        finished=time.time(),
        **timings,
    )
    return output_key

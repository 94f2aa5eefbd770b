"""Join a job's segments by stream copy into the deliverable, and prove it has the frames asked for.

Runs once per job: only the caller that won the ledger's completion gate sends this task.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

from farm import keys
from farm.errors import PermanentError
from farm.proc import run
from farm.spec import JobKind, JobSpec
from farm.state import JobState
from farm.store import sha256_file
from workers.context import WorkerContext
from workers.ffgraph import concat_argv, concat_list, fps_fraction
from workers.media import probe_video

log = logging.getLogger(__name__)


def verified_segments(
    ctx: WorkerContext, job_id: str, chunks_total: int, work: Path
) -> list[tuple[Path, Fraction]]:
    """Download every segment named by a manifest and check it against the manifest."""
    segments = []
    encoders = set()
    for index in range(chunks_total):
        manifest = ctx.store.get_json(keys.manifest_key(job_id, index))
        seg = manifest["segment"]
        encoders.add(manifest["encoder"]["name"])
        local = work / f"{index:05d}.mp4"
        ctx.store.get_file(seg["key"], local)
        if local.stat().st_size != seg["size"] or sha256_file(local) != seg["sha256"]:
            raise PermanentError(
                f"segment {index} does not match its manifest; retry chunk {index}"
            )
        if seg["frames"] != manifest["frame_count"]:
            raise PermanentError(
                f"segment {index} has {seg['frames']} of {manifest['frame_count']} frames"
            )
        segments.append((local, Fraction(seg["frames"]) / Fraction(seg["fps"])))
    if len(encoders) > 1:
        raise PermanentError(
            f"segments were made by different encoders ({', '.join(sorted(encoders))}); they cannot "
            "be joined by stream copy. Retry the job with --encoder set to one of them"
        )
    return segments


def stitch_job(ctx: WorkerContext, job_id: str) -> dict[str, object]:
    job = ctx.ledger.job(job_id)
    if not job or job.get("state") != JobState.STITCHING:
        return {"skipped": f"job is {job.get('state', 'unknown')}"}
    started = time.monotonic()
    spec = JobSpec.from_json(json.loads(job["spec"]))
    if spec.kind is JobKind.ENCODE:
        from workers.transcode_stitch import stitch_master  # it builds on verified_segments

        return stitch_master(ctx, job_id, job, spec)
    with stitch_workspace(ctx, job_id) as work:
        segments = verified_segments(ctx, job_id, int(job["chunks_total"]), work)
        list_file = work / "segments.txt"
        list_file.write_text(concat_list(segments))
        out = work / "output.mp4"
        result = run(concat_argv(ffmpeg_bin=ctx.settings.ffmpeg, list_file=list_file, out=out))
        if not result.ok:
            raise PermanentError(
                "ffmpeg could not join the segments:\n" + "\n".join(result.tail[-15:])
            )
        info = probe_video(ctx.settings.ffprobe, out)
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
    output_key = keys.output_key(job_id)
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

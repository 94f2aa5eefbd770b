"""Join a job's segments by stream copy into the deliverable, and prove it has the frames asked for.

Runs once per job: only the caller that won the ledger's completion gate sends this task.
Segments download in parallel, in the order they join, while the join takes each as it lands.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from farm.adapters.store import sha256_file
from farm.core import keys
from farm.core.errors import FarmError, ObjectMissing, PermanentError
from farm.core.spec import JobSpec, fps_fraction
from farm.core.state import JobState
from farm.ledger import EARLY_PART, EARLY_UPLOAD
from farm.media.ffgraph import concat_argv
from farm.media.join import check_tables, join_segments, probe_joined
from farm.media.mp4track import CannotJoin
from farm.media.probe import Streams
from workers.attempt.context import WorkerContext
from workers.host.box import media_box
from workers.phases import s3join, versions
from workers.phases.s3join import UNJOINABLE

log = logging.getLogger(__name__)


DOWNLOADS = 8
"""Segments fetched at once: the store serves many streams faster than one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentRef:
    """A segment as its chunk's manifest names it."""

    index: int
    key: str
    size_bytes: int
    sha256: str
    frames: int
    fps: Fraction
    encoder: dict[str, Any]
    first: tuple[int, int]
    """Where it goes in the video (first_frame)."""
    etag: str = ""
    """The stored object's ETag when its manifest recorded one (workers.phases.s3join insists on it)."""
    renditions: tuple[dict[str, Any], ...] | None = None
    """A ladder segment's renditions as its manifest lists them (workers.phases.ladder), rung
    order; None where the manifest lists none."""

    @property
    def length(self) -> tuple[int, Fraction]:
        """Frames and seconds."""
        return self.frames, Fraction(self.frames) / self.fps


def segment_refs(ctx: WorkerContext, job_id: str) -> list[SegmentRef]:
    """Every chunk's manifest, the one its record names (its winning claim's), read in parallel,
    in the order of their first frames: a split chunk's rest has a later index than chunks after
    it in the video (farm.core.split)."""
    named = [keys.chunk_manifest_key(job_id, chunk) for chunk in ctx.ledger.chunks(job_id)]
    with ThreadPoolExecutor(DOWNLOADS, thread_name_prefix="manifest") as pool:
        manifests = list(pool.map(ctx.store.get_json, named))
    refs = sorted((_ref(m, i) for i, m in enumerate(manifests)), key=lambda r: r.first)
    names = {ref.encoder["name"] for ref in refs}
    if len(names) > 1:
        raise PermanentError(
            f"segments were made by different encoders ({', '.join(sorted(names))}); they cannot "
            "be joined by stream copy. The job was encoded before the farm kept one encoder a "
            "job: submit it again"
        )
    return refs


def _ref(manifest: dict[str, Any], index: int) -> SegmentRef:
    seg = manifest["segment"]
    if seg["frames"] != manifest["frame_count"]:
        raise PermanentError(
            f"segment {index} has {seg['frames']} of {manifest['frame_count']} frames"
        )
    return SegmentRef(
        index=index,
        key=seg["key"],
        size_bytes=seg["size"],
        sha256=seg["sha256"],
        frames=seg["frames"],
        fps=Fraction(seg["fps"]),
        encoder=manifest["encoder"],
        first=first_frame(manifest, index),
        etag=str(seg.get("etag", "")),
        renditions=tuple(r) if isinstance(r := manifest.get("renditions"), list) else None,
    )


def first_frame(manifest: dict[str, Any], index: int) -> tuple[int, int]:
    """Where a segment goes in the video: its first frame (a render chunk's frame list, or a
    transcode cut's `first`), then its chunk index."""
    frames = manifest.get("frames")
    if isinstance(frames, dict) and isinstance(frames.get("first"), int):
        return frames["first"], index
    if isinstance(frames, list) and frames and isinstance(frames[0], dict):
        return int(frames[0].get("frame", 0)), index
    return 0, index


def fetch_segment(ctx: WorkerContext, ref: SegmentRef, work: Path) -> Path:
    """Download a segment and check it against its manifest."""
    local = work / Path(ref.key).name
    try:
        ctx.store.get_file(ref.key, local)
    except ObjectMissing as exc:  # no retry of the download brings it back
        raise PermanentError(f"segment {ref.index} is gone from the store; {UNJOINABLE}") from exc
    if local.stat().st_size != ref.size_bytes or sha256_file(local) != ref.sha256:
        raise PermanentError(f"segment {ref.index} does not match its manifest; {UNJOINABLE}")
    return local


@contextmanager
def fetching(ctx: WorkerContext, refs: list[SegmentRef], work: Path) -> Iterator[Iterator[Path]]:
    """The segments' local paths in join order, each as soon as it (and every one before it)
    has landed; DOWNLOADS run ahead of the join. Leaving stops the downloads not yet begun."""
    with ThreadPoolExecutor(DOWNLOADS, thread_name_prefix="segment") as pool:
        futures: list[Future[Path]] = [pool.submit(fetch_segment, ctx, r, work) for r in refs]
        try:
            yield (future.result() for future in futures)
        finally:
            for future in futures:
                future.cancel()


def stitch_frames(
    ctx: WorkerContext, job_id: str, job: dict[str, str], spec: JobSpec
) -> dict[str, object]:
    """A render job's stitch: its segments joined by stream copy, checked frame for frame; by
    the object store where their samples can be copied there (workers.phases.s3join), else here."""
    started = time.monotonic()
    versions.keep_previous(ctx, job_id, job, spec.codec.container)  # a fix's video before it
    with stitch_workspace(ctx, job_id) as work:
        refs = segment_refs(ctx, job_id)
        in_store = stitch_in_store(ctx, job_id, job, spec, refs, started)
        if in_store is not None:
            return in_store
        out = work / f"output.{spec.codec.container}"
        fps = fps_fraction(spec.fps)
        box = media_box(ctx.settings, writable=(work,))  # ffmpeg and ffprobe: this folder alone
        with fetching(ctx, refs, work) as paths:
            joined = join_segments(
                paths=paths,
                lengths=[ref.length for ref in refs],
                out=out,
                concat=lambda list_file, _: concat_argv(
                    ffmpeg_bin=ctx.settings.ffmpeg,
                    list_file=list_file,
                    out=out,
                    frames=spec.frames.count,
                ),
                box=box,
            )
        join_s = time.monotonic() - started  # manifests, downloads and the join they overlap
        info = probe_joined(ctx.settings.ffprobe, out, joined, spec.frames.count, fps, box)
        check_streams(info, spec)
        output_key = deliver(
            ctx, job_id, out, started, fetch_join_s=round(join_s, 3), stitch_join=joined.method
        )
    return {"job_id": job_id, "output": output_key, "frames": info.frames}


def stitch_in_store(
    ctx: WorkerContext,
    job_id: str,
    job: dict[str, str],
    spec: JobSpec,
    refs: list[SegmentRef],
    started: float,
) -> dict[str, object] | None:
    """The stitch done by the object store (workers.phases.s3join), checked as the local join is: its
    tables, the object's size, ffprobe of its header. None (nothing done) when the segments
    are not ones it can join; the stitch then joins them here."""
    output_key = keys.output_key(job_id, spec.codec.container)
    # Begun by the first segment big enough (s3join.copy_early), before any chunk was done.
    early_upload = job.get(EARLY_UPLOAD, "")
    try:
        plan = s3join.plan(ctx.store, refs, spec.frames.count)
    except CannotJoin as exc:
        log.info("joining %s on this worker, not in the store: %s", job_id, exc)
        if early_upload:
            s3join.abort_upload(ctx.store, output_key, early_upload)
        return None
    check_tables(plan.joined, spec.frames.count, fps_fraction(spec.fps))
    early = None
    if early_upload:
        chunks = {int(c["index"]): c for c in ctx.ledger.chunks(job_id)}
        early = s3join.early_parts(
            plan,
            positions=[spec.frames.position(r.first[0]) for r in refs],
            fields=[chunks.get(r.index, {}).get(EARLY_PART, "") for r in refs],
            total=spec.frames.count,
        )
    if not s3join.assemble_job(
        ctx.store, plan, output_key, early_upload=early_upload, early=early
    ):  # an earlier stitch of the job made it and ended before it was recorded: checked below
        log.info("%s is in the store already; checking it, never replacing it", output_key)
    join_s = time.monotonic() - started
    try:
        info = s3join.probe_object(
            ctx.store,
            output_key,
            plan.joined,
            ffprobe=ctx.settings.ffprobe,
            ca_file=ctx.settings.ca_file,
        )
        check_streams(info, spec)
    except PermanentError:
        # A deliverable that failed its checks is none: the job fails and never names it. The
        # object goes where this worker may delete (a local farm); a worker role that may not
        # (modules/iam) leaves it to the next stitch of the job, which writes the same key.
        try:
            ctx.store.delete(output_key)
        except FarmError as exc:
            log.warning("could not remove %s after its checks failed: %s", output_key, exc)
        raise
    mark_done(
        ctx, job_id, output_key, plan.joined.size_bytes, started,
        fetch_join_s=round(join_s, 3), stitch_join=s3join.S3COPY,
    )  # fmt: skip
    return {"job_id": job_id, "output": output_key, "frames": info.frames}


def check_streams(info: Streams, spec: JobSpec) -> None:
    """The joined video has the frames, size and rate the job asked for."""
    fps = fps_fraction(spec.fps)
    expected = (spec.frames.count, spec.resolution.width, spec.resolution.height, fps)
    got = (info.frames, info.width, info.height, info.fps)
    if got != expected:
        raise PermanentError(
            f"the joined video has {info.frames} frames at {info.width}x{info.height}, "
            f"{info.fps} fps; asked for {expected[0]} frames at {expected[1]}x{expected[2]}, "
            f"{expected[3]} fps"
        )


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


def deliver(
    ctx: WorkerContext, job_id: str, out: Path, started: float, **fields: float | str
) -> str:
    """Upload the verified deliverable, once: a stitch never replaces one in the store, and
    one that finds it there (an earlier stitch of the job ended before it was recorded) takes
    it only as these very bytes. Marks the job done (`fields`: how the join went); returns its
    key."""
    output_key = keys.output_key(job_id, out.suffix.lstrip("."))
    if not ctx.store.put_file_once(output_key, out):
        check_delivered(ctx, output_key, out)
    mark_done(ctx, job_id, output_key, out.stat().st_size, started, **fields)
    return output_key


def check_delivered(ctx: WorkerContext, output_key: str, out: Path) -> None:
    """The deliverable found at `output_key` is `out`, byte for byte (read back once: a stitch
    retried after a crash is rare); else the job fails, naming the object to remove."""
    present = out.with_name(out.name + ".present")
    ctx.store.get_file(output_key, present)
    try:
        if sha256_file(present) != sha256_file(out):
            raise PermanentError(
                f"{output_key} is in the store already and is not this stitch's video; the "
                "farm never replaces a delivered output: remove it, then `farm retry` the job"
            )
    finally:
        present.unlink(missing_ok=True)


def mark_done(
    ctx: WorkerContext,
    job_id: str,
    output_key: str,
    size_bytes: int,
    started: float,
    **fields: float | str,
) -> None:
    """The job done, its verified deliverable at `output_key` in the store."""
    ctx.ledger.move_job(
        job_id,
        JobState.DONE,
        output=output_key,
        output_size=size_bytes,
        stitch_s=round(time.monotonic() - started, 3),
        finished=time.time(),
        **fields,
    )

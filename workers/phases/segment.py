"""The segment phase of a render job: one chunk's frames become one video segment, manifest last.

The manifest (frames, sizes, checksums, frame count, segment, encoder) is what makes a chunk done.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from farm.adapters.store import sha256_file
from farm.blender import command as blender
from farm.core import keys
from farm.core.errors import FramesMissing, NotHere, ObjectMissing, PermanentError
from farm.core.spec import fps_fraction
from farm.ledger import FrameRecord
from farm.media import framecheck
from farm.media.ffgraph import SOFTWARE, EncodeSettings, choose_encoder, frames_to_segment_argv
from farm.media.probe import probe_streams
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt, Outcome, segment_manifest
from workers.host.box import media_box
from workers.phases import s3join
from workers.phases.tiles import tile_done

log = logging.getLogger(__name__)

FLAGGED = "flagged"
"""The chunk field `--check-frames` fills: JSON frame -> why it looks broken (black, one flat
colour); its manifest keeps the same under `flagged`."""


def _linked(local: Path, target: Path) -> bool:
    """Hard-link the box's file at `target` (this attempt's own folder) as what it is: a
    symlink there (a trusted scene swapped the frame for a link to a host file) is not a frame."""
    try:
        os.link(local, target, follow_symlinks=False)
    except OSError:  # not there, a folder, a file system without hard links: the store has it
        return False
    return not target.is_symlink() and target.is_file()


def gather_frames(
    ctx: WorkerContext,
    job_id: str,
    frames: list[int],
    seq_dir: Path,
    records: dict[int, FrameRecord],
) -> list[dict[str, object]]:
    """Lay the chunk's frames out as 000000.png… for ffmpeg: the local copy this worker rendered
    when its checksum matches the ledger's record, else a download from the store. `records`:
    the frames' records (ChunkAttempt.records: the claim brought them back)."""
    rendered = ctx.job_dir(job_id) / "frames"
    entries = []
    for n, frame in enumerate(frames):
        record = records.get(frame)
        if record is None:
            raise FramesMissing(f"frame {frame} has no record in the ledger; rendering it again")
        size, digest, writer = record
        key = keys.frame_key(job_id, frame, writer)  # the recorded writer's, never a stale one's
        target = seq_dir / f"{n:06d}.png"
        local = blender.preview_file(rendered, frame)  # display-referred, for the video
        # The box wrote `local`: what is checked is the link, never what `local` points to.
        mine = _linked(local, target)
        if not (mine and target.stat().st_size == size and sha256_file(target) == digest):
            target.unlink(missing_ok=True)
            try:
                ctx.store.get_file(key, target)
            except ObjectMissing as exc:
                # Gone from the store (expired by the lifecycle rule, deleted): no retry of the
                # download brings it back; the render does.
                ctx.ledger.forget_frame(job_id, frame)
                raise FramesMissing(
                    f"frame {frame} is not in the store; rendering it again"
                ) from exc
            if sha256_file(target) != digest:
                ctx.ledger.forget_frame(job_id, frame)
                raise FramesMissing(
                    f"frame {frame} in the store does not match its checksum; rendering it again"
                )
        entries.append({"frame": frame, "key": key, "size": size, "sha256": digest})
    return entries


def job_encoder(
    ctx: WorkerContext, job: Mapping[str, str], mine: str, codec: str, *, auto: bool = True
) -> str:
    """The job's one encoder, recorded on the job by its first encode: segments made by
    different encoders cannot be joined by stream copy, and a fleet may mix NVENC hosts with
    hosts that encode in software. `mine`: what this worker would use; `auto`: the job let the
    farm choose (no --encoder), so a fleet with both kinds of encode host makes it software,
    which every host runs. A job from before this was recorded keeps its done chunks' encoder.
    A host without NVENC hands an NVENC job's chunk back (NotHere) while a host with NVENC is
    up, and fails it once none is."""
    job_id, software = job["id"], SOFTWARE[codec]

    def encoders_with_nvenc() -> set[bool]:
        """Whether each live encode host has NVENC (read only when the choice needs it)."""
        hosts = ctx.ledger.workers().values()
        return {bool(w.get("nvenc")) for w in hosts if "encode" in w.get("queues", ())}

    chosen = job.get("encoder", "")
    if not chosen:  # the job's first encodes: read what the farm has, once a job
        done = next((c["encoder"] for c in ctx.ledger.chunks(job_id) if c.get("encoder")), "")
        if not done and auto and mine != software and False in encoders_with_nvenc():
            mine = software
        chosen = ctx.ledger.job_field_once(job_id, "encoder", done or mine) or mine
    if chosen == mine or chosen in SOFTWARE.values():
        return chosen
    if True not in encoders_with_nvenc():
        raise PermanentError(
            f"job {job_id}'s segments are {chosen}, and no worker with NVENC is left to make the "
            "rest: add one, or cancel the job and submit it again"
        )
    raise NotHere(f"job {job_id}'s segments are {chosen}: this worker has no NVENC")


def check_frames(attempt: ChunkAttempt, seq_dir: Path, frames: list[int]) -> dict[int, str]:
    """`--check-frames`: the chunk's frames that are black or one flat colour, read by ffmpeg's
    signalstats from the frames laid out for the encode, and, for a scene that writes EXR, those
    whose master holds NaN (farm.media.framecheck), each with why. Frames the stats leave out are
    logged as not checked."""
    ctx = attempt.ctx
    stats = attempt.workspace / "framestats.txt"
    argv = framecheck.stats_argv(
        ffmpeg_bin=ctx.settings.ffmpeg, pattern=seq_dir / "%06d.png", stats=stats
    )
    box = media_box(ctx.settings, writable=(attempt.workspace,))
    attempt.run_child(argv, what="ffmpeg (frame check)", box=box)
    text = stats.read_text("utf-8", "replace") if stats.is_file() else ""
    flags, unchecked = framecheck.flagged(frames, text)
    if unchecked:
        log.warning("job %s chunk %d: frames %s were not checked (no stats for them)",
                    attempt.job_id, attempt.index, unchecked)  # fmt: skip
    scene = attempt.spec.scene
    if scene is not None and scene.file_format in framecheck.EXR_FORMATS:
        for frame in frames:
            if nans := _master_nans(attempt, frame):
                flags[frame] = f"{framecheck.NAN} ({nans} values)"
    return flags


def _master_nans(attempt: ChunkAttempt, frame: int) -> int:
    """NaN values in the frame's EXR master: the copy this worker rendered, else the recorded
    writer's in the store; decoded by ffmpeg in its box, counted here. 0 without a master."""
    ctx, job_id = attempt.ctx, attempt.job_id
    name = f"frame_{frame:06d}.exr"
    work = attempt.workspace / "nan"
    work.mkdir(exist_ok=True)
    master = work / name
    record = attempt.records.get(frame)
    if not _linked(ctx.job_dir(job_id) / "frames" / name, master):
        master.unlink(missing_ok=True)
        try:
            ctx.store.get_file(
                keys.master_key(job_id, frame, name, record and record.writer), master
            )
        except ObjectMissing:
            return 0
    raw = work / "planes.raw"
    argv = framecheck.floats_argv(ffmpeg_bin=ctx.settings.ffmpeg, source=master, out=raw)
    box = media_box(ctx.settings, writable=(attempt.workspace,))
    try:
        attempt.run_child(argv, what="ffmpeg (NaN check)", box=box)
        return framecheck.nan_count(raw)
    except PermanentError as exc:  # a check must never fail the chunk it checks: said, skipped
        log.warning("job %s frame %d: its EXR master was not checked for NaN: %s",
                    job_id, frame, exc)  # fmt: skip
        return 0
    finally:
        raw.unlink(missing_ok=True)
        master.unlink(missing_ok=True)


def segment_chunk(attempt: ChunkAttempt) -> Outcome:
    """Frames -> verified segment -> upload; the manifest is written last by the attempt."""
    if attempt.spec.tiles:  # a still's tiles are merged by its stitch, not encoded
        return tile_done(attempt)
    ctx, job_id, index = attempt.ctx, attempt.job_id, attempt.index
    started = time.monotonic()
    spec, frames = attempt.spec, attempt.frames
    codec = str(spec.codec)
    # Before any frame is fetched: a chunk this worker cannot encode goes back at once.
    encoder = job_encoder(ctx, attempt.job, choose_encoder(codec, ctx.caps.nvenc), codec)
    seq_dir = attempt.fresh_workspace() / "seq"
    seq_dir.mkdir()
    entries = gather_frames(ctx, job_id, frames, seq_dir, attempt.records)
    gathered_s = time.monotonic() - started
    # Frames this worker rendered are hard links; the rest came from the store (bytes moved).
    fetched_bytes = sum(p.stat().st_size for p in seq_dir.iterdir() if p.stat().st_nlink == 1)
    settings = EncodeSettings(codec=codec, encoder=encoder, fps=fps_fraction(spec.fps))
    segment = attempt.workspace / f"{index:05d}.{spec.codec.container}"
    argv = frames_to_segment_argv(
        ffmpeg_bin=ctx.settings.ffmpeg,
        pattern=seq_dir / "%06d.png",
        out=segment,
        settings=settings,
        frame_count=len(frames),
    )
    # The frames were written by the scene's box: ffmpeg reads them in one of its own.
    box = media_box(ctx.settings, writable=(attempt.workspace,), gpu=settings.is_nvenc)
    attempt.run_child(argv, what=f"ffmpeg ({settings.encoder})", box=box)
    encoded_s = time.monotonic() - started - gathered_s
    flags = check_frames(attempt, seq_dir, frames) if spec.check_frames else None
    info = probe_streams(ctx.settings.ffprobe, segment, box)
    if info.frames != len(frames):
        raise PermanentError(f"segment {index} has {info.frames} frames, expected {len(frames)}")
    attempt.check_lease("before the upload")
    upload_started = time.monotonic()
    key = attempt.segment_key(spec.codec.container)
    etag = ctx.store.put_file(key, segment, intermediate=True)
    # The stitch's part of this segment, copied by the store now rather than after the last one;
    # not by an attempt that lost the chunk during the upload (its part would be copied again).
    attempt.check_lease("before the early copy")
    early = s3join.copy_early(
        ctx.store, ctx.ledger, job_id=job_id, output_key=keys.output_key(job_id, spec.codec.container),
        segment=segment, key=key, etag=etag,
        position=spec.frames.position(frames[0]), total=spec.frames.count,
    )  # fmt: skip
    manifest = segment_manifest(
        attempt,
        frames=entries,
        frame_count=len(frames),
        segment=segment,
        info=info.manifest_fields(settings.fps),
        encoder={"name": settings.encoder, "quality": settings.quality, "preset": settings.preset},
        etag=etag,
        **({} if flags is None else {"flagged": {str(f): why for f, why in flags.items()}}),
    )
    for frame in frames:  # the segment holds them now; the store keeps the frames themselves
        for path in blender.local_files(ctx.job_dir(job_id) / "frames", frame):
            path.unlink(missing_ok=True)
    return Outcome(
        fields={
            "encoder": settings.encoder,
            "encode_s": round(encoded_s, 3),
            "gather_s": round(gathered_s, 3),
            "segment_upload_s": round(time.monotonic() - upload_started, 3),
            "segment_bytes": segment.stat().st_size,  # bytes moved, for farm.control.census
            "frames_fetched_bytes": fetched_bytes,
            **({} if flags is None else {FLAGGED: json.dumps(flags)}),
            **early,
        },
        manifest=manifest,
        summary={"frames": info.frames, "encoder": settings.encoder},
    )

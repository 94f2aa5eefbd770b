"""Encode one rendered chunk's frames into a video segment, then write its manifest last.

The manifest (frames, sizes, checksums, frame count, segment, encoder) is what makes a chunk done.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

from farm import keys
from farm.errors import LeaseLost, PermanentError
from farm.proc import Running, run
from farm.spec import JobSpec
from farm.state import ChunkState
from farm.store import sha256_file
from workers import blender
from workers.context import WorkerContext
from workers.ffgraph import EncodeSettings, choose_encoder, fps_fraction, frames_to_segment_argv
from workers.lease import LeaseKeeper
from workers.media import probe_video

log = logging.getLogger(__name__)


def gather_frames(
    ctx: WorkerContext, job_id: str, frames: list[int], seq_dir: Path
) -> list[dict[str, object]]:
    """Lay the chunk's frames out as 000000.png… for ffmpeg: the local copy this worker rendered
    when its checksum matches the ledger's record, else a download from the store."""
    records = ctx.ledger.frame_records(job_id)
    rendered = ctx.job_dir(job_id) / "frames"
    entries = []
    for n, frame in enumerate(frames):
        record = records.get(frame)
        if record is None:
            raise PermanentError(
                f"frame {frame} has no record in the ledger; render the chunk again"
            )
        size, digest = record
        target = seq_dir / f"{n:06d}.png"
        local = blender.frame_file(rendered, frame)
        if local.exists() and local.stat().st_size == size and sha256_file(local) == digest:
            os.link(local, target)
        else:
            ctx.store.get_file(keys.frame_key(job_id, frame), target)
            if sha256_file(target) != digest:
                raise PermanentError(f"frame {frame} in the store does not match its checksum")
        entries.append(
            {"frame": frame, "key": keys.frame_key(job_id, frame), "size": size, "sha256": digest}
        )
    return entries


def encode_chunk(ctx: WorkerContext, job_id: str, index: int) -> dict[str, object]:
    job = ctx.ledger.job(job_id)
    if not job:
        return {"skipped": "unknown job"}
    claim = ctx.ledger.move_chunk(
        job_id,
        index,
        ChunkState.ENCODING,
        mode="claim",
        only_from=frozenset({ChunkState.RENDERED}),  # never a render job's unrendered chunk
        lease_s=ctx.settings.lease_s,
        worker=ctx.name,
        phase="encode",
    )
    if not claim.moved:
        return {"skipped": f"chunk is {claim.previous}"}
    started = time.monotonic()
    spec = JobSpec.from_json(json.loads(job["spec"]))
    frames: list[int] = json.loads(ctx.ledger.chunk(job_id, index)["frames"])
    work = ctx.job_dir(job_id) / f"encode-{index:05d}"
    shutil.rmtree(work, ignore_errors=True)
    seq_dir = work / "seq"
    seq_dir.mkdir(parents=True)
    entries = gather_frames(ctx, job_id, frames, seq_dir)
    gathered_s = time.monotonic() - started
    settings = EncodeSettings(
        codec=str(spec.codec),
        encoder=choose_encoder(str(spec.codec), ctx.caps.nvenc),
        fps=fps_fraction(spec.fps),
    )
    segment = work / f"{index:05d}.mp4"
    argv = frames_to_segment_argv(
        ffmpeg_bin=ctx.settings.ffmpeg,
        pattern=seq_dir / "%06d.png",
        out=segment,
        settings=settings,
        frame_count=len(frames),
    )
    running = Running()
    log_path = work / "encode.log"
    keeper = LeaseKeeper(
        ctx.ledger,
        job_id=job_id,
        chunk=index,
        token=claim.token,
        lease_s=ctx.settings.lease_s,
        renew_s=ctx.settings.lease_renew_s,
        running=running,
    )
    with keeper:
        result = run(argv, log_path=log_path, handle=running)
    attempt = int(claim.token.split(":", 1)[0])
    ctx.store.put_file(keys.log_key(job_id, index, attempt, "encode"), log_path)
    if keeper.lost:
        raise LeaseLost(f"chunk {index}: lease {keeper.lost} while encoding")
    if not result.ok:
        raise PermanentError(
            f"ffmpeg ({settings.encoder}) exited with code {result.returncode}:\n"
            + "\n".join(result.tail[-20:])
        )
    encoded_s = time.monotonic() - started - gathered_s
    info = probe_video(ctx.settings.ffprobe, segment)
    if info.frames != len(frames):
        raise PermanentError(f"segment {index} has {info.frames} frames, expected {len(frames)}")
    segment_key = keys.segment_key(job_id, index)
    upload_started = time.monotonic()
    ctx.store.put_file(segment_key, segment, intermediate=True)
    manifest = {
        "job_id": job_id,
        "chunk": index,
        "attempt": attempt,
        "worker": ctx.name,
        "frames": entries,
        "frame_count": len(frames),
        "segment": {
            "key": segment_key,
            "size": segment.stat().st_size,
            "sha256": sha256_file(segment),
            "frames": info.frames,
            "codec": info.codec,
            "width": info.width,
            "height": info.height,
            "fps": str(settings.fps),
        },
        "encoder": {
            "name": settings.encoder,
            "quality": settings.quality,
            "preset": settings.preset,
        },
    }
    ctx.store.put_json(keys.manifest_key(job_id, index), manifest)
    upload_s = time.monotonic() - upload_started
    move = ctx.ledger.move_chunk(
        job_id,
        index,
        ChunkState.DONE,
        token=claim.token,
        encode_s=round(encoded_s, 3),
        gather_s=round(gathered_s, 3),
        segment_upload_s=round(upload_s, 3),
        encoder=settings.encoder,
    )
    shutil.rmtree(work, ignore_errors=True)
    for frame in frames:
        blender.frame_file(ctx.job_dir(job_id) / "frames", frame).unlink(missing_ok=True)
    if move.status not in ("ok", "same"):
        raise LeaseLost(f"chunk {index}: could not record the segment ({move.status})")
    if ctx.ledger.try_start_stitch(job_id):
        ctx.dispatch.stitch(job_id)
    return {"job_id": job_id, "chunk": index, "frames": info.frames, "encoder": settings.encoder}

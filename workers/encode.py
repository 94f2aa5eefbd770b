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
from farm.errors import FramesMissing, LeaseLost, PermanentError
from farm.proc import Running, run
from farm.spec import JobSpec
from farm.state import ChunkState
from farm.store import sha256_file
from workers import attempt, blender
from workers.context import WorkerContext
from workers.ffgraph import EncodeSettings, choose_encoder, fps_fraction, frames_to_segment_argv
from workers.lease import LeaseKeeper
from workers.media import VideoInfo, probe_video

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
            raise FramesMissing(f"frame {frame} has no record in the ledger; rendering it again")
        size, digest = record
        target = seq_dir / f"{n:06d}.png"
        local = blender.frame_file(rendered, frame)
        if local.exists() and local.stat().st_size == size and sha256_file(local) == digest:
            os.link(local, target)
        else:
            ctx.store.get_file(keys.frame_key(job_id, frame), target)
            if sha256_file(target) != digest:
                ctx.ledger.forget_frame(job_id, frame)
                raise FramesMissing(
                    f"frame {frame} in the store does not match its checksum; rendering it again"
                )
        entries.append(
            {"frame": frame, "key": keys.frame_key(job_id, frame), "size": size, "sha256": digest}
        )
    return entries


def encode_chunk(ctx: WorkerContext, job_id: str, index: int) -> dict[str, object]:
    job = ctx.ledger.job(job_id)
    if not job:
        return {"skipped": "unknown job"}
    claim = attempt.claim(
        ctx, job_id, index, ChunkState.ENCODING, phase="encode",
        only_from=frozenset({ChunkState.RENDERED}),  # never a render job's unrendered chunk
    )  # fmt: skip
    if not claim.moved:
        return {"skipped": f"chunk is {claim.previous}"}
    work = ctx.job_dir(job_id) / f"encode-{index:05d}"
    keeper = LeaseKeeper(
        ctx.ledger,
        job_id=job_id,
        chunk=index,
        token=claim.token,
        lease_s=ctx.settings.lease_s,
        renew_s=ctx.settings.lease_renew_s,
        running=Running(),
    )
    try:
        # The lease covers the whole attempt: gathering frames and uploading take time too.
        with keeper:
            frames, info, encoder, timing = _encode(ctx, keeper, job, work)
        move = ctx.ledger.move_chunk(
            job_id,
            index,
            ChunkState.DONE,
            token=claim.token,
            encoder=encoder,
            encode_s=timing["encode_s"],
            gather_s=timing["gather_s"],
            segment_upload_s=timing["segment_upload_s"],
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for frame in frames:
        blender.frame_file(ctx.job_dir(job_id) / "frames", frame).unlink(missing_ok=True)
    if move.status not in ("ok", "same"):
        raise LeaseLost(f"chunk {index}: could not record the segment ({move.status})")
    if ctx.ledger.try_start_stitch(job_id):
        ctx.dispatch.stitch(job_id)
    return {"job_id": job_id, "chunk": index, "frames": info.frames, "encoder": encoder}


def _encode(
    ctx: WorkerContext, keeper: LeaseKeeper, job: dict[str, str], work: Path
) -> tuple[list[int], VideoInfo, str, dict[str, float]]:
    """Frames -> verified segment -> upload -> manifest (last), all under the keeper's lease."""
    job_id, index = keeper.job_id, keeper.chunk
    started = time.monotonic()
    spec = JobSpec.from_json(json.loads(job["spec"]))
    frames: list[int] = json.loads(ctx.ledger.chunk(job_id, index)["frames"])
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
    log_path = work / "encode.log"
    result = run(argv, log_path=log_path, handle=keeper.running)
    attempt_no = int(keeper.token.split(":", 1)[0])
    ctx.store.put_file(keys.log_key(job_id, index, attempt_no, "encode"), log_path)
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
    if keeper.lost:  # never overwrite a newer attempt's segment
        raise LeaseLost(f"chunk {index}: lease {keeper.lost} before the upload")
    ctx.store.put_file(segment_key, segment, intermediate=True)
    manifest = {
        "job_id": job_id,
        "chunk": index,
        "attempt": attempt_no,
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
    timing = {
        "encode_s": round(encoded_s, 3),
        "gather_s": round(gathered_s, 3),
        "segment_upload_s": round(time.monotonic() - upload_started, 3),
    }
    return frames, info, settings.encoder, timing

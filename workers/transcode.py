"""Transcode one segment of an encode job's master: exactly its frames, scaled, to a closed-GOP
segment; upload it, then write its manifest last (encoder and settings included).

The master is read over a short-lived presigned URL (ffmpeg reads byte ranges) where that works,
else from one local copy per worker, cached by content hash.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import time
from pathlib import Path

from farm import keys
from farm.errors import ChunkInterrupted, LeaseLost, PermanentError
from farm.master import MasterInfo
from farm.proc import Running, capture, run
from farm.spec import EncoderChoice, JobKind, JobSpec
from farm.state import ChunkState
from farm.store import sha256_file
from workers.attempt import claim as claim_chunk
from workers.context import WorkerContext
from workers.ffgraph import EncodeSettings, choose_encoder
from workers.lease import LeaseKeeper
from workers.media import probe_video
from workers.render import fetch_scene
from workers.transcode_graph import SegmentCut, default_quality, seek_seconds, segment_argv

log = logging.getLogger(__name__)
URL_TTL_S = 3600
_RANGED: dict[str, bool] = {}
"""Per worker process: whether ffmpeg could read a master straight from the store."""


def master_source(ctx: WorkerContext, key: str) -> tuple[str, str]:
    """(what ffmpeg opens, how it is read): a presigned URL, or the cached local copy."""
    url = ctx.store.presign_get(key, URL_TTL_S)
    if key not in _RANGED:
        probe = capture([ctx.settings.ffprobe, "-v", "error", "-show_format", url], 120)
        _RANGED[key] = probe.returncode == 0
        if not _RANGED[key]:
            log.warning("ffmpeg cannot read %s over a presigned URL; using a local copy", key)
    if _RANGED[key]:
        return url, "presigned-url"
    return str(fetch_scene(ctx, key)), "cached-copy"


def pick_encoder(spec: JobSpec, nvenc: bool, nvenc_error: str) -> str:
    """auto: NVENC when this worker's probe found one; nvenc: NVENC or a clear refusal."""
    codec = str(spec.codec)
    if spec.encoder is EncoderChoice.NVENC and not nvenc:
        raise PermanentError(
            f"--encoder nvenc: this worker has no working NVENC ({nvenc_error or 'probe failed'}); "
            "submit with --encoder auto or software, or add NVENC workers"
        )
    return choose_encoder(codec, nvenc and spec.encoder is not EncoderChoice.SOFTWARE)


def segment_cut(master: MasterInfo, frames: list[int], segment_frames: int) -> SegmentCut:
    """The seek point recorded at submit for the segment starting at frames[0]; a chunk planned
    any other way decodes from the start, slower but as exact."""
    n, offset = divmod(frames[0], segment_frames)
    seek = master.seek_pts[n] if not offset and n < len(master.seek_pts) else master.start_pts
    return SegmentCut(
        first=frames[0],
        end=frames[-1] + 1,
        total=master.frame_count,
        rate=master.rate,
        start_pts=master.start_pts,
        seek_s=seek_seconds(seek, master.start_pts, master.tb),
    )


def _redact(path: Path, url: str) -> None:
    """Presigned URLs are credentials for an hour: keep them out of logs."""
    if url.startswith("http") and path.exists():
        path.write_text(path.read_text(errors="replace").replace(url, "<master URL>"))


def transcode_segment(ctx: WorkerContext, job_id: str, index: int) -> dict[str, object]:
    job = ctx.ledger.job(job_id)
    if not job or job.get("kind") != JobKind.ENCODE:
        return {"skipped": "not an encode job"}
    claim = claim_chunk(
        ctx, job_id, index, ChunkState.ENCODING, phase="transcode",
        only_from=frozenset({ChunkState.QUEUED, ChunkState.INTERRUPTED}),
    )  # fmt: skip
    if not claim.moved:
        return {"skipped": f"chunk is {claim.previous}"}
    started = time.monotonic()
    spec = JobSpec.from_json(json.loads(job["spec"]))
    assert spec.master is not None, "encode jobs carry their master's probe"
    frames: list[int] = json.loads(ctx.ledger.chunk(job_id, index)["frames"])
    encoder = pick_encoder(spec, ctx.caps.nvenc, ctx.caps.nvenc_error)
    settings = EncodeSettings(
        codec=str(spec.codec),
        encoder=encoder,
        fps=spec.master.rate,
        quality=spec.quality if spec.quality is not None else default_quality(encoder),
        preset=spec.preset,
    )
    source, read_as = master_source(ctx, job["scene_key"])
    work = ctx.job_dir(job_id) / f"transcode-{index:05d}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    segment = work / f"{index:05d}.mp4"
    cut = segment_cut(spec.master, frames, spec.chunk_size)
    argv = segment_argv(
        ffmpeg_bin=ctx.settings.ffmpeg,
        source=source,
        out=str(segment),
        cut=cut,
        width=spec.resolution.width,
        height=spec.resolution.height,
        settings=settings,
    )
    running = Running()
    log_path = work / "transcode.log"
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
    _redact(log_path, source)
    attempt = int(claim.token.split(":", 1)[0])
    ctx.store.put_file(keys.log_key(job_id, index, attempt, "transcode"), log_path)
    if keeper.lost:
        raise LeaseLost(f"chunk {index}: lease {keeper.lost} while transcoding")
    stopped = result.returncode in (-signal.SIGTERM, -signal.SIGKILL, -signal.SIGINT)
    if not result.ok and stopped and (ctx.stopping.is_set() or result.stopped):
        # Stopped because the worker is going away; a finished segment is kept even then.
        raise ChunkInterrupted(f"chunk {index}: worker interrupted while transcoding")
    if not result.ok:
        tail = "\n".join(result.tail[-20:]).replace(source, "<master URL>")
        raise PermanentError(f"ffmpeg ({encoder}) exited with code {result.returncode}:\n{tail}")
    encoded_s = time.monotonic() - started
    info = probe_video(ctx.settings.ffprobe, segment)
    if info.frames != cut.count:
        raise PermanentError(f"segment {index} has {info.frames} frames, expected {cut.count}")
    segment_key = keys.segment_key(job_id, index)
    ctx.store.put_file(segment_key, segment, intermediate=True)
    manifest = {
        "job_id": job_id,
        "chunk": index,
        "attempt": attempt,
        "worker": ctx.name,
        "frames": {"first": cut.first, "end": cut.end, "seek_s": cut.seek_s},
        "frame_count": cut.count,
        "master": {"key": job["scene_key"], "read_as": read_as},
        "segment": {
            "key": segment_key,
            "size": segment.stat().st_size,
            "sha256": sha256_file(segment),
            "frames": info.frames,
            "codec": info.codec,
            "width": info.width,
            "height": info.height,
            "pix_fmt": info.pix_fmt,
            "fps": str(settings.fps),
        },
        "encoder": {
            "name": settings.encoder,
            "quality": settings.quality,
            "preset": settings.preset,
            "argv": [a for a in argv[1:] if a not in (source, str(segment))],
        },
    }
    ctx.store.put_json(keys.manifest_key(job_id, index), manifest)
    move = ctx.ledger.move_chunk(
        job_id,
        index,
        ChunkState.DONE,
        token=claim.token,
        encode_s=round(encoded_s, 3),
        frames_rendered=cut.count,
        encoder=settings.encoder,
    )
    shutil.rmtree(work, ignore_errors=True)
    if move.status not in ("ok", "same"):
        raise LeaseLost(f"chunk {index}: could not record the segment ({move.status})")
    if ctx.ledger.try_start_stitch(job_id):
        ctx.dispatch.stitch(job_id)
    return {"job_id": job_id, "chunk": index, "frames": info.frames, "encoder": encoder}

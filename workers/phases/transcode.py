"""The transcode phase: one segment of a transcode job's master: exactly its frames, scaled, to a closed-GOP
segment; upload it, then write its manifest last (encoder and settings included).

The master is read over a short-lived presigned URL (ffmpeg reads byte ranges) where that works,
else from one local copy per worker, cached by content hash.
"""

from __future__ import annotations

import logging
import time

from farm.core.errors import PermanentError
from farm.core.sources import MasterInfo
from farm.core.spec import EncoderChoice, JobSpec
from farm.media.ffgraph import EncodeSettings, choose_encoder
from farm.media.probe import input_name, probe_streams, url_readable
from farm.media.transcode_graph import SegmentCut, default_quality, seek_seconds, segment_argv
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt, Outcome, segment_manifest
from workers.phases.segment import job_encoder
from workers.phases.source import fetch_source

log = logging.getLogger(__name__)
URL_TTL_S = 3600
_RANGED: dict[str, bool] = {}
"""Per worker process: whether ffmpeg could read a master straight from the store."""


def master_source(ctx: WorkerContext, key: str) -> tuple[str, str]:
    """(what ffmpeg opens, how it is read): a presigned URL, or the cached local copy."""
    url = ctx.store.presign_get(key, URL_TTL_S)
    if key not in _RANGED:
        _RANGED[key] = url_readable(ctx.settings.ffprobe, url, ctx.settings.ca_file)
        if not _RANGED[key]:
            log.warning("ffmpeg cannot read %s over a presigned URL; using a local copy", key)
    if _RANGED[key]:
        return url, "presigned-url"
    return input_name(fetch_source(ctx, key)), "cached-copy"


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


def transcode_segment(attempt: ChunkAttempt) -> Outcome:
    """Exactly this chunk's frames of the master, transcoded into one verified segment."""
    ctx, index = attempt.ctx, attempt.index
    started = time.monotonic()
    spec, frames = attempt.spec, attempt.frames
    assert spec.master is not None, "transcode jobs carry their master's probe"
    encoder = job_encoder(
        ctx, attempt.job, pick_encoder(spec, ctx.caps.nvenc, ctx.caps.nvenc_error),
        str(spec.codec), auto=spec.encoder is EncoderChoice.AUTO,
    )  # fmt: skip
    settings = EncodeSettings(
        codec=str(spec.codec),
        encoder=encoder,
        fps=spec.master.rate,
        quality=spec.quality if spec.quality is not None else default_quality(encoder),
        preset=spec.preset,
    )
    source_key = attempt.job["source_key"]
    source, read_as = master_source(ctx, source_key)
    segment = attempt.fresh_workspace() / f"{index:05d}.{spec.codec.container}"
    cut = segment_cut(spec.master, frames, spec.chunk_size)
    argv = segment_argv(
        ffmpeg_bin=ctx.settings.ffmpeg,
        source=source,
        out=str(segment),
        cut=cut,
        width=spec.resolution.width,
        height=spec.resolution.height,
        settings=settings,
        ca_file=ctx.settings.ca_file,
    )
    attempt.run_child(argv, what=f"ffmpeg ({encoder})", redact=source)
    encoded_s = time.monotonic() - started
    info = probe_streams(ctx.settings.ffprobe, segment)
    if info.frames != cut.count:
        raise PermanentError(f"segment {index} has {info.frames} frames, expected {cut.count}")
    attempt.check_lease("before the upload")
    etag = ctx.store.put_file(attempt.segment_key(spec.codec.container), segment, intermediate=True)
    manifest = segment_manifest(
        attempt,
        frames={"first": cut.first, "end": cut.end, "seek_s": cut.seek_s},
        frame_count=cut.count,
        segment=segment,
        info=info.manifest_fields(settings.fps),
        encoder={
            "name": settings.encoder,
            "quality": settings.quality,
            "preset": settings.preset,
            "argv": [a for a in argv[1:] if a not in (source, str(segment))],
        },
        master={"key": source_key, "read_as": read_as},
        etag=etag,
    )
    return Outcome(
        fields={
            "encode_s": round(encoded_s, 3),
            "frames_rendered": cut.count,
            "encoder": settings.encoder,
        },
        manifest=manifest,
        summary={"frames": info.frames, "encoder": encoder},
    )

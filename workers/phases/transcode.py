"""The transcode phase: one segment of a transcode job's master: exactly its frames, scaled, to a closed-GOP
segment; upload it, then write its manifest last (encoder and settings included).

The master is untrusted: it is read from one local copy per worker (cached by content hash), its
container checked here first, by ffmpeg and ffprobe in the box (no network, the master and the
chunk's folder alone) with the whitelists of farm.media.probe.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from farm.core.errors import PermanentError
from farm.core.sources import MasterInfo
from farm.core.spec import EncoderChoice, JobSpec
from farm.media.ffgraph import EncodeSettings, choose_encoder
from farm.media.master import check_container
from farm.media.probe import input_name, probe_streams
from farm.media.quality import parse_target, wants_vmaf
from farm.media.scenecuts import seek_for
from farm.media.transcode_graph import SegmentCut, default_quality, seek_seconds, segment_argv
from farm.media.transcode_spec import MAX_QUALITY
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt, Outcome, segment_manifest
from workers.host.box import media_box
from workers.phases.ladder import ladder_segment
from workers.phases.scoring import score_segment, search_quality
from workers.phases.segment import job_encoder
from workers.phases.source import fetch_source

log = logging.getLogger(__name__)


def local_master(ctx: WorkerContext, key: str, name: str) -> tuple[Path, str]:
    """The master's local copy and its container, checked by this worker before any frame of
    it is read: the submit's check runs on the submitter's machine, and anyone holding the
    farm's credentials can skip it. PermanentError naming a container not taken (`name`: what
    the user called the master)."""
    path = fetch_source(ctx, key)
    box = media_box(ctx.settings, readable=(path,))
    return path, check_container(ctx.settings.ffprobe, path, name, box)


def pick_encoder(spec: JobSpec, nvenc: bool, nvenc_error: str) -> str:
    """auto: NVENC when this worker's probe found one; nvenc: NVENC or a clear refusal."""
    codec = str(spec.codec)
    if spec.encoder is EncoderChoice.NVENC and not nvenc:
        raise PermanentError(
            f"--encoder nvenc: this worker has no working NVENC ({nvenc_error or 'probe failed'}); "
            "submit with --encoder auto or software, or add NVENC workers"
        )
    hdr = spec.master.hdr if spec.master else None
    if hdr is not None and hdr.static and not hdr.tonemap:
        # ffmpeg 5.1's NVENC cannot write HDR10's SEI (farm.media.hdr): software keeps it.
        return choose_encoder(codec, False)
    return choose_encoder(codec, nvenc and spec.encoder is not EncoderChoice.SOFTWARE)


def segment_cut(master: MasterInfo, frames: list[int], segment_frames: int) -> SegmentCut:
    """The seek point recorded at submit for the segment starting at frames[0]; a chunk planned
    any other way decodes from the start, slower but as exact."""
    seek = seek_for(master, frames[0], segment_frames)  # a keyframe at or before the first
    return SegmentCut(
        first=frames[0],
        end=frames[-1] + 1,
        total=master.frame_count,
        rate=master.rate,
        start_pts=master.start_pts,
        deinterlace=master.deinterlace,
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
        hdr=spec.master.hdr,
        varied_quality=bool(spec.target_quality),
    )
    source_key = attempt.job["source_key"]
    source, container = local_master(ctx, source_key, spec.source_name)
    workspace = attempt.fresh_workspace()
    segment = workspace / f"{index:05d}.{spec.codec.container}"
    cut = segment_cut(spec.master, frames, spec.chunk_size)
    if spec.ladder:  # one decode, every rendition (workers.phases.ladder)
        return ladder_segment(attempt, settings=settings, source=source, container=container,
                              cut=cut, started=started)  # fmt: skip
    searched: dict[str, object] = {}
    if spec.target_quality:  # the chunk's own CRF/CQ, from short probes of it
        target = parse_target(spec.target_quality)
        chosen, met, tried = search_quality(
            attempt, source=source, cut=cut, spec=spec, settings=settings, target=target,
            top=MAX_QUALITY[spec.codec],
        )  # fmt: skip
        settings = replace(settings, quality=chosen)
        searched = {"target": str(target), "target_met": met,
                    "probes": {str(q): round(v, 6) for q, v in sorted(tried.items())}}  # fmt: skip
    argv = segment_argv(
        ffmpeg_bin=ctx.settings.ffmpeg,
        source=source,
        out=str(segment),
        cut=cut,
        width=spec.resolution.width,
        height=spec.resolution.height,
        settings=settings,
    )
    box = media_box(ctx.settings, writable=(workspace,), readable=(source,), gpu=settings.is_nvenc)
    attempt.run_child(argv, what=f"ffmpeg ({encoder})", box=box)
    encoded_s = time.monotonic() - started
    info = probe_streams(ctx.settings.ffprobe, segment, box)
    if info.frames != cut.count:
        raise PermanentError(f"segment {index} has {info.frames} frames, expected {cut.count}")
    scoring = time.monotonic()
    score = None if spec.score == "none" else score_segment(
        attempt, source=source, segment=segment, cut=cut, spec=spec, settings=settings,
        vmaf=wants_vmaf(spec.target_quality, spec.score),
    )  # fmt: skip
    score_s = time.monotonic() - scoring
    scored = {} if score is None else {**score.fields(), "score_s": round(score_s, 3)}
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
            **({"target": searched["target"]} if searched else {}),
            "argv": [a for a in argv[1:] if a not in (input_name(source), str(segment))],
        },
        master={"key": source_key, "container": container},
        etag=etag,
        **({} if score is None else
           {"quality": {**score.fields(), "frames_scored": score.frames, **searched}}),
    )  # fmt: skip
    return Outcome(
        fields={
            "encode_s": round(encoded_s, 3),
            "frames_rendered": cut.count,
            "encoder": settings.encoder,
            **scored,  # none under --score none
            **({"quality": settings.quality} if searched else {}),
        },
        manifest=manifest,
        summary={"frames": info.frames, "encoder": encoder},
    )

"""A transcoded segment's score against its master's frames, and `--target-quality`'s search of
a chunk's CRF/CQ on short probes: ffmpeg in the box, with the master's whitelists; the argv, the
parsing and the search itself are farm.media.quality's."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

from farm.adapters.vmaf import find_vmaf
from farm.core.errors import PermanentError
from farm.core.spec import JobSpec
from farm.media.ffgraph import EncodeSettings, codec_options
from farm.media.quality import (
    Score,
    Target,
    chosen,
    next_probe,
    parse_score,
    parse_scores,
    probe_cuts,
    renditions_score_argv,
    score_argv,
    vmaf_model,
)
from farm.media.transcode_graph import SegmentCut, segment_argv
from workers.attempt.lifecycle import ChunkAttempt
from workers.host.box import media_box

log = logging.getLogger(__name__)

SCORED_PIX_FMT = {"p010le": "yuv420p10le", "nv12": "yuv420p"}
"""NVENC's upload formats, as the same planes the ssim and psnr filters take."""


def score_segment(
    attempt: ChunkAttempt,
    *,
    source: Path,
    segment: Path,
    cut: SegmentCut,
    spec: JobSpec,
    settings: EncodeSettings,
    vmaf: bool = False,
) -> Score:
    """SSIM and PSNR of `segment` against the master's frames it was cut from; with `vmaf`,
    VMAF too, all three in one run of the VMAF ffmpeg (one decode)."""
    pix_fmt = str(codec_options(settings, cut.count)["pix_fmt"])
    ffmpeg_bin = vmaf_ffmpeg(attempt) if vmaf else attempt.ctx.settings.ffmpeg
    argv = score_argv(
        ffmpeg_bin=ffmpeg_bin,
        segment=segment,
        source=source,
        cut=cut,
        width=spec.resolution.width,
        height=spec.resolution.height,
        pix_fmt=SCORED_PIX_FMT.get(pix_fmt, pix_fmt),
        hdr=settings.hdr,
        vmaf_threads=(attempt.ctx.threads or len(os.sched_getaffinity(0))) if vmaf else 0,
    )
    lines: list[str] = []
    box = media_box(attempt.ctx.settings, readable=(source, segment.parent),
                    programs=(ffmpeg_bin,))  # fmt: skip
    attempt.run_child(argv, what="ffmpeg (score)", on_line=lines.append, box=box)
    try:
        score = parse_score("\n".join(lines), cut.count, vmaf=vmaf)
    except ValueError as exc:
        raise PermanentError(f"segment {attempt.index} could not be scored: {exc}") from None
    if not vmaf:
        return score
    return replace(score, vmaf_model=vmaf_model(spec.resolution.width, spec.resolution.height))


def vmaf_ffmpeg(attempt: ChunkAttempt) -> str:
    """This worker's ffmpeg with libvmaf; PermanentError naming the worker and what to install
    when its start-up probe found none (the job's other chunks may land on workers that have it;
    a chunk's retries go to any worker)."""
    ctx = attempt.ctx
    if not ctx.caps.vmaf:
        raise PermanentError(
            f"segment {attempt.index} asks for VMAF and worker {ctx.name} cannot score it "
            f"({ctx.caps.vmaf_error or 'not probed'}): install imageio-ffmpeg>=0.8.1 in its "
            "Python, or set FARM_VMAF_FFMPEG to an ffmpeg built --enable-libvmaf, and restart it"
        )
    return find_vmaf(ctx.settings.vmaf_ffmpeg).binary


def score_renditions(
    attempt: ChunkAttempt,
    *,
    source: Path,
    renditions: list[Path],
    cut: SegmentCut,
    spec: JobSpec,
    settings: EncodeSettings,
) -> list[Score]:
    """SSIM and PSNR of each rendition of a ladder segment (rung order) against the master's
    frames scaled to its rung, the master decoded once for them all."""
    pix_fmt = str(codec_options(settings, cut.count)["pix_fmt"])
    argv = renditions_score_argv(
        ffmpeg_bin=attempt.ctx.settings.ffmpeg,
        renditions=renditions,
        source=source,
        cut=cut,
        rungs=spec.ladder,
        settings=settings,
        pix_fmt=SCORED_PIX_FMT.get(pix_fmt, pix_fmt),
    )
    lines: list[str] = []
    box = media_box(attempt.ctx.settings, readable=(source, *{r.parent for r in renditions}))
    attempt.run_child(argv, what=f"ffmpeg (score {len(renditions)} renditions)",
                      on_line=lines.append, box=box)  # fmt: skip
    try:
        return parse_scores("\n".join(lines), cut.count, len(renditions))
    except ValueError as exc:
        raise PermanentError(f"segment {attempt.index} could not be scored: {exc}") from None


def search_quality(
    attempt: ChunkAttempt,
    *,
    source: Path,
    cut: SegmentCut,
    spec: JobSpec,
    settings: EncodeSettings,
    target: Target,
    top: int,
) -> tuple[int, bool, dict[int, float]]:
    """The highest CRF/CQ (0..`top`) whose probes meet `target`, whether it met it, and every
    value tried with its score: each probe encodes short windows of the chunk and scores them,
    frame-weighted."""
    probes = probe_cuts(cut)
    work = attempt.workspace / "probes"
    work.mkdir(parents=True, exist_ok=True)
    box = media_box(attempt.ctx.settings, writable=(work,), readable=(source,),
                    gpu=settings.is_nvenc)  # fmt: skip
    tried: dict[int, float] = {}
    bottom = 1 if settings.is_nvenc else 0  # NVENC's CQ 0 is "let the driver choose"
    while (quality := next_probe(tried, target, settings.quality, top, bottom)) is not None:
        trial = replace(settings, quality=quality)
        total = weight = 0.0
        for n, window in enumerate(probes):
            out = work / f"q{quality}-{n}.mp4"
            argv = segment_argv(
                ffmpeg_bin=attempt.ctx.settings.ffmpeg, source=source, out=str(out), cut=window,
                width=spec.resolution.width, height=spec.resolution.height, settings=trial,
            )  # fmt: skip
            attempt.run_child(argv, what=f"ffmpeg (probe {target.metric} at {quality})", box=box)
            score = score_segment(attempt, source=source, segment=out, cut=window, spec=spec,
                                  settings=trial, vmaf=target.metric == "vmaf")  # fmt: skip
            total += score.value(target.metric) * window.count
            weight += window.count
            out.unlink(missing_ok=True)
        tried[quality] = total / weight
    quality, met = chosen(tried, target)
    log.info("job %s chunk %d: %s probes %s -> %d%s", attempt.job_id, attempt.index, target,
             tried, quality, "" if met else " (target not met)")  # fmt: skip
    return quality, met, tried

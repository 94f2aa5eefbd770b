"""Validating an encode job (a video master to transcode) into a JobSpec, at the edge (pure)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from farm.adapters.sandbox import Box
from farm.core.errors import SpecError
from farm.core.spec import Codec, EncoderChoice, FrameRange, JobKind, JobSpec, parse_resolution
from farm.media.containers import container_choice
from farm.media.hdr import probe_hdr
from farm.media.hdrspec import hdr_choice
from farm.media.ladder import ladder_choice
from farm.media.master import Probed, check_interlace, probe_master, seek_points
from farm.media.quality import score_choice, target_choice
from farm.media.scenecuts import find_cuts, moved, place_segments, seeks_at
from farm.media.streams import cue_counts, parse_drop, plan_streams, with_plan

DEFAULT_RESOLUTION = "3840x2160"
SEGMENT_S = 10
"""Default segment length: long enough that the per-segment decode lead-in is noise."""
PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
)
MAX_QUALITY = {Codec.H264: 51, Codec.HEVC: 51, Codec.AV1: 63, Codec.HEVC10: 51, Codec.PRORES: 0}
"""ProRes takes no quality: its profile (422 HQ) sets the bit budget."""


def _choice(kind: type[Codec] | type[EncoderChoice], option: str, value: str) -> str:
    try:
        return str(kind(value))
    except ValueError:
        choices = ", ".join(c.value for c in kind)
        raise SpecError(f"{option} {value!r}: choose one of {choices}") from None


def build_transcode_spec(
    *,
    source_name: str,
    probed: Probed,
    resolution: str | None,
    codec: str,
    quality: int | None,
    encoder: str,
    preset: str,
    segment_frames: int | None,
    cuts: tuple[int, ...] | None = None,
    tonemap: bool = False,
    drop_dynamic_hdr: bool = False,
    ladder: str | None = None,
    package: str | None = None,
    target_quality: str | None = None,
    score: str | None = None,
    vmaf_missing: str = "",
    drop: str | None = None,
    deinterlace: bool = False,
    container: str | None = None,
) -> JobSpec:
    """Validate CLI values for an encode job; the master's frames are numbered 0..N-1. `cuts`:
    the master's scene cuts (farm.media.scenecuts), which segment boundaries move to; None: not
    scanned, a boundary every `segment_frames`. `vmaf_missing`: why this farm cannot score VMAF
    ('' when it can), for `--score vmaf` and a `vmaf=` target."""
    parsed_codec = Codec(_choice(Codec, "--codec", codec))
    parsed_encoder = EncoderChoice(_choice(EncoderChoice, "--encoder", encoder))
    if quality is not None and parsed_codec is Codec.PRORES:
        raise SpecError("--quality: ProRes 422 HQ has no quality setting; leave --quality out")
    if quality is not None and not 0 <= quality <= MAX_QUALITY[parsed_codec]:
        raise SpecError(
            f"--quality {quality}: choose between 0 (best) and {MAX_QUALITY[parsed_codec]} "
            f"for {parsed_codec}"
        )
    if parsed_codec is Codec.PRORES and parsed_encoder is EncoderChoice.NVENC:
        raise SpecError("--encoder nvenc: NVENC has no ProRes; use --encoder auto or software")
    if preset not in PRESETS:
        raise SpecError(f"--preset {preset!r}: choose one of {', '.join(PRESETS)}")
    info = probed.info
    hdr = hdr_choice(source_name, info.hdr, parsed_codec, parsed_encoder, tonemap=tonemap,
                     drop_dynamic_hdr=drop_dynamic_hdr)  # fmt: skip
    if segment_frames is None:
        segment_frames = max(1, round(float(info.rate) * SEGMENT_S))
    if segment_frames < 1:
        raise SpecError(f"--segment-frames {segment_frames}: a segment holds at least one frame")
    master = replace(seek_points(probed, segment_frames), hdr=hdr)
    box = container_choice(container, parsed_codec, ladder=ladder is not None,
                           package=bool(package))  # fmt: skip
    deliverable = box or parsed_codec.container
    plan = plan_streams(source_name, probed.shown, deliverable, parse_drop(drop))
    plan = cue_counts(source_name, plan, deliverable, lambda n: probed.cues.get(n, ""))
    master = with_plan(check_interlace(source_name, master, deinterlace), plan)
    rungs, package = ladder_choice(ladder, package, resolution, parsed_codec, master)
    if rungs:
        resolution = f"{rungs[0].width}x{rungs[0].height}"
    if cuts is not None:
        starts = place_segments(info.frame_count, segment_frames, cuts)
        master = replace(master, scene_cuts=cuts)
        if moved(starts, cuts):
            master = replace(
                master, segment_starts=starts, segment_seek_pts=seeks_at(probed, starts)
            )
    target = target_choice(target_quality, quality=quality, ladder=bool(rungs),
                           prores=parsed_codec is Codec.PRORES)  # fmt: skip
    score = score_choice(score, target, ladder=bool(rungs), missing=vmaf_missing)
    return JobSpec(
        kind=JobKind.TRANSCODE,
        source_name=source_name,
        frames=FrameRange(first=0, last=info.frame_count - 1),
        chunk_size=segment_frames,
        resolution=parse_resolution(resolution or DEFAULT_RESOLUTION),
        fps=float(info.rate),
        samples=0,
        codec=parsed_codec,
        encoder=parsed_encoder,
        quality=quality,
        preset=preset,
        master=master,
        ladder=rungs,
        package=package,
        target_quality=target,
        score=score,
        container=box,
    )


def transcode_spec_from_file(
    path: Path,
    *,
    ffprobe: str,
    ffmpeg: str,
    frames: str | None,
    box: Box | None = None,
    scene_cuts: bool = True,
    **options: Any,
) -> JobSpec:
    """Probe the master at `path` (SpecError when it is no playable video) and build its spec.
    `box`: where the probe runs (farm.media.probe.submit_box); `scene_cuts`: scan it for cuts
    (it decodes the master once) and move segment boundaries onto them."""
    if not path.exists():
        raise SpecError(f"{path}: no such file; check the path and submit again")
    if not path.is_file():
        raise SpecError(f"{path}: is a directory, not a video master")
    if frames is not None:
        raise SpecError(
            "--frames is for render jobs: an encode job takes every frame of its master"
        )
    probed = probe_master(ffprobe, ffmpeg, path, box)
    probed = replace(probed, info=replace(probed.info, hdr=probe_hdr(ffprobe, path, box)))
    cuts = find_cuts(ffmpeg, path, probed.info, box) if scene_cuts else None
    return build_transcode_spec(source_name=path.name, probed=probed, cuts=cuts, **options)


def vfr_note(spec: JobSpec) -> str:
    """What to tell the user about a variable-frame-rate master, or ''."""
    if spec.master is None or not spec.master.vfr:
        return ""
    rate = spec.master.rate
    return (
        f"note: {spec.source_name} has a variable frame rate; the output is constant "
        f"{rate.numerator}/{rate.denominator} fps ({float(rate):.3f}), its average, "
        f"{spec.master.frame_count} frames"
    )

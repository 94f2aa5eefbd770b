"""ffmpeg command lines for segments and stitches, built with ffmpeg-python (pure).

Every segment starts on an IDR frame with a closed GOP and the same codec settings, so segments
join by stream copy with the concat demuxer, frame-exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import ffmpeg

from farm.core.hdr import HdrInfo
from farm.media.hdr import colour_options, svtav1_hdr_params, x265_hdr_params
from farm.media.probe import CONCAT_FORMATS, FRAME_FORMATS, whitelists

SOFTWARE = {
    "h264": "libx264", "hevc": "libx265", "av1": "libsvtav1", "hevc10": "libx265",
    "prores": "prores_ks",
}  # fmt: skip
NVENC = {"h264": "h264_nvenc", "hevc": "hevc_nvenc", "av1": "av1_nvenc", "hevc10": "hevc_nvenc"}
"""No ProRes: a ProRes job encodes in software on every host."""
_PRESET_ORDER = (
    "ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow",
    "placebo",
)  # fmt: skip
NVENC_PRESETS = ("p1", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p7", "p7")
SVTAV1_PRESETS = (12, 11, 10, 9, 8, 6, 4, 3, 2, 1)


def mapped_preset(encoder: str, preset: str) -> str:
    """x264-style preset names, mapped for NVENC (p1..p7) and SVT-AV1 (12..1)."""
    rank = _PRESET_ORDER.index(preset) if preset in _PRESET_ORDER else 5
    if encoder.endswith("_nvenc"):
        return NVENC_PRESETS[rank]
    if encoder == "libsvtav1":
        return str(SVTAV1_PRESETS[rank])
    return preset


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodeSettings:
    codec: str
    """h264 or hevc."""
    encoder: str
    """The ffmpeg encoder: libx264, libx265, h264_nvenc, hevc_nvenc."""
    fps: Fraction
    quality: int = 20
    """CRF for libx264/libx265, CQ for NVENC: lower is better."""
    preset: str = "medium"
    hdr: HdrInfo | None = None
    """An HDR master's signalling (farm.core.hdr): carried into the stream, or tone-mapped."""
    varied_quality: bool = False
    """Segments of this job differ in CRF (`--target-quality`): headers that would carry it are
    left out, so every segment's parameter sets (avcC/hvcC) stay alike and join by copy."""

    @property
    def is_nvenc(self) -> bool:
        return self.encoder.endswith("_nvenc")

    @property
    def keeps_hdr(self) -> bool:
        return self.hdr is not None and self.hdr.is_hdr and not self.hdr.tonemap


GLOBAL_ARGS = ("-hide_banner", "-nostdin", "-loglevel", "error", "-y")
"""Global options (ffmpeg reads them anywhere on the line; ffmpeg-python puts them last)."""


def choose_encoder(codec: str, nvenc: bool) -> str:
    return NVENC[codec] if nvenc and codec in NVENC else SOFTWARE[codec]


NVENC_HDR10_SINCE = (7, 1)
"""The first ffmpeg whose NVENC writes HDR10's SEI from the frames' side data (docs/design/hdr.md);
5.1, Debian 12's, writes the colour tags (VUI) alone."""


def ffmpeg_version(text: str) -> tuple[int, int]:
    """`ffmpeg version 5.1.9-0+deb12u1 ...` (the first line of `ffmpeg -version`) -> (5, 1);
    (0, 0) for a build that names no release (`ffmpeg version N-113000-g...`, a git snapshot)."""
    match = re.match(r"\s*ffmpeg version n?(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def nvenc_keeps_hdr10(version: tuple[int, int]) -> bool:
    """Whether this ffmpeg's NVENC carries mastering display and content light level: the argv
    is the same either way (colour tags as options, the metadata from the frames); what changes is
    whether a master with them may encode on NVENC."""
    return version >= NVENC_HDR10_SINCE


def codec_options(settings: EncodeSettings, frame_count: int) -> dict[str, object]:
    """Output options: one closed GOP per segment at most, no scene-cut keyframes breaking it."""
    # Not below 3: at keyint 1 or 2 x264 and x265 write another SPS (intra-only, fewer
    # references), and a segment that differs in it cannot be joined to the others by copy.
    gop = max(frame_count, 3)
    # HDR in 8 bits bands: an HDR master kept in AV1 encodes 10-bit (SVT-AV1's main profile).
    ten_bit = settings.codec in ("hevc10", "prores") or (
        settings.codec == "av1" and settings.keeps_hdr
    )
    hdr = settings.hdr if settings.keeps_hdr else None
    opts: dict[str, object] = {
        "vcodec": settings.encoder,
        "pix_fmt": "yuv420p10le" if ten_bit else "yuv420p",
        "r": str(settings.fps),
        "g": gop,
        # A timescale that is a whole multiple of the rate keeps every frame's duration exact.
        "video_track_timescale": settings.fps.numerator
        * (1000 if settings.fps.denominator == 1 else 1),
    }
    if settings.encoder == "prores_ks":
        # Profile 3 is 422 HQ; every frame is a keyframe, so any cut joins by stream copy.
        opts.update(**{"profile:v": 3}, pix_fmt="yuv422p10le", vendor="apl0")
        opts.pop("g")
    elif settings.encoder == "libx264":
        # stitchable: x264 writes PPS's initial QP from the CRF unless told not to.
        stitch = ":stitchable=1" if settings.varied_quality else ""
        opts.update(crf=settings.quality, preset=settings.preset,
                    x264opts=f"no-scenecut:open-gop=0{stitch}")  # fmt: skip
    elif settings.encoder == "libx265":
        if ten_bit:
            opts["profile:v"] = "main10"
        opts.update(
            crf=settings.quality,
            preset=settings.preset,
            **{
                "x265-params": ":".join(
                    [f"keyint={gop}:min-keyint={gop}:scenecut=0:open-gop=0:log-level=error"]
                    # info=0: x265's settings SEI (its CRF among them) would sit in the hvcC.
                    + (["info=0"] if settings.varied_quality else [])
                    + (x265_hdr_params(hdr) if hdr else [])
                )
            },
            **{"tag:v": "hvc1"},
        )
    elif settings.encoder == "libsvtav1":
        opts.update(
            crf=settings.quality,
            preset=mapped_preset(settings.encoder, settings.preset),
            # irefresh-type=2: closed GOP, every keyframe an IDR that segments can start on.
            **{
                "svtav1-params": ":".join(
                    [f"keyint={gop}:scd=0:irefresh-type=2"]
                    + (svtav1_hdr_params(hdr) if hdr else [])
                )
            },
        )
    else:
        opts.update(
            preset=mapped_preset(settings.encoder, settings.preset),
            rc="vbr",
            cq=settings.quality,
            **{"b:v": 0},
            **{"forced-idr": 1},
        )
        if settings.codec in ("hevc", "hevc10"):
            opts["tag:v"] = "hvc1"
        if ten_bit:  # NVENC takes 10-bit frames as P010 and writes Main10 (AV1: main, 10-bit)
            opts["pix_fmt"] = "p010le"
            if settings.codec != "av1":
                opts["profile:v"] = "main10"
    opts.update(colour_options(settings.hdr))
    return opts


FRAMES_AS_VIDEO = {
    # setparams tags the frames themselves: ProRes takes its tags from them, not the options.
    "vf": "scale=out_color_matrix=bt709:out_range=tv,"
    "setparams=colorspace=bt709:color_primaries=bt709:color_trc=bt709:range=tv",
    "colorspace": "bt709",
    "color_primaries": "bt709",
    "color_trc": "bt709",
}
"""A render's display-referred frames (sRGB primaries) as BT.709 video, and tagged so. Left to
itself ffmpeg converts RGB with BT.601's matrix and tags nothing, and players read untagged HD
and 4K as BT.709: a pure red frame played back as (255, 23, 0)."""


def frames_to_segment_argv(
    *, ffmpeg_bin: str, pattern: Path, out: Path, settings: EncodeSettings, frame_count: int
) -> list[str]:
    """Numbered PNGs (0-based, `%06d.png`) -> one segment of exactly `frame_count` frames.
    Read as image2 files alone: a frame the box wrote is never a playlist or a URL."""
    stream = ffmpeg.input(
        str(pattern),
        framerate=str(settings.fps),
        start_number=0,
        **whitelists(str(pattern), FRAME_FORMATS),
    )
    options = {**codec_options(settings, frame_count), **FRAMES_AS_VIDEO}
    stream = stream.output(str(out), vframes=frame_count, **options)
    return list(stream.global_args(*GLOBAL_ARGS).compile(cmd=ffmpeg_bin))


def moov_reserve_bytes(video_frames: int, audio_packets: int = 0) -> int:
    """Room for the MP4 index at the front of the file, so the stitch writes it in one pass
    (`+faststart` writes the whole file a second time to move it there). At most 48 bytes of
    tables per sample (stsz, ctts, stss, stts, stco/co64, stsc, each at its worst of one entry
    per sample), plus 64 KiB for the headers."""
    return 64 * 1024 + 48 * (video_frames + audio_packets)


def concat_argv(*, ffmpeg_bin: str, list_file: Path, out: Path, frames: int) -> list[str]:
    """Join segments listed in a concat-demuxer file by stream copy, index first, one pass.
    `safe=0`: the list names the segments by absolute path; the whitelists keep it to local
    files the farm wrote (MP4/MOV)."""
    stream = ffmpeg.input(
        str(list_file), f="concat", safe=0, **whitelists(str(list_file), CONCAT_FORMATS)
    ).output(str(out), c="copy", moov_size=moov_reserve_bytes(frames))
    return list(stream.global_args(*GLOBAL_ARGS).compile(cmd=ffmpeg_bin))


def concat_list(segments: list[tuple[Path, Fraction]]) -> str:
    """The concat demuxer's list: each segment with its exact duration in seconds.

    Without `duration` the demuxer offsets each file by the container's duration, which MP4 keeps
    in milliseconds: a few ticks of drift per join. Durations are written in microseconds, rounded
    on the running total, so the offset of every segment is exact to well under one tick.
    """
    lines = []
    start = Fraction(0)
    for path, duration in segments:
        end = start + duration
        micros = round(end * 1_000_000) - round(start * 1_000_000)
        escaped = str(path).replace("'", "'\\''")
        lines.append(f"file '{escaped}'")
        lines.append(f"duration {micros // 1_000_000}.{micros % 1_000_000:06d}")
        start = end
    return "\n".join(lines) + "\n"

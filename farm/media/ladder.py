"""A ladder of renditions from one encode job (`--ladder`): the rungs a user asks for, checked
against the master, and the ffmpeg command line that decodes a segment's frames once and encodes
every rendition of it (pure).

Every rendition of a segment has its keyframes on the same frames (the segment's first, then one
every GOP_S seconds, closed GOPs, no scene-cut keyframes), so a player switches between them at any
packaged segment's start.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import ffmpeg

from farm.core.errors import SpecError
from farm.core.sources import MasterInfo
from farm.core.spec import Codec, JobSpec, Rung
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options
from farm.media.probe import MASTER_FORMATS, input_name, whitelists
from farm.media.streams import kept
from farm.media.transcode_graph import SegmentCut, scale_filters, segment_filtergraph

NAMED_HEIGHTS = {"2160p": 2160, "1440p": 1440, "1080p": 1080, "720p": 720, "540p": 540, "480p": 480,
                 "360p": 360, "240p": 240, "144p": 144}  # fmt: skip
H264_KBPS = {2160: 16000, 1440: 9000, 1080: 6000, 720: 3000, 540: 2000, 480: 1500, 360: 800, 240: 400,
             144: 200}  # fmt: skip
"""A named rung's bitrate in H.264 (near Apple's HLS authoring spec); HEVC takes CODEC_SHARE of it."""
CODEC_SHARE = {Codec.H264: Fraction(1), Codec.HEVC: Fraction(3, 5), Codec.HEVC10: Fraction(3, 5)}
"""Codecs a ladder encodes: bitrate caps are written for x264, x265 and NVENC's VBR; AV1 (SVT-AV1
in ffmpeg 5.1 caps no peak rate) and ProRes are refused at submit. HEVC Main10 (an HDR10 or HLG
ladder, or 10-bit SDR) takes HEVC's share: two more bits a sample cost x265 next to nothing
at equal quality, and it is the same encoder at the same rate control."""
TEXT_SUBTITLES = frozenset({"mov_text", "subrip", "srt", "ass", "ssa", "webvtt", "text"})
"""Subtitle codecs ffmpeg turns into WebVTT (a package's subtitles)."""
GOP_S = 2
"""Seconds between keyframes in every rendition: the packaged segments' length."""
MAX_RUNGS = 8
MAX_KBPS = 200_000
_EXPLICIT = re.compile(r"^(\d{2,5})x(\d{2,5})@(\d+(?:\.\d+)?)([kM])$")


def parse_ladder(
    text: str, *, codec: Codec, master_width: int, master_height: int
) -> tuple[Rung, ...]:
    """`2160p,1080p,720p` or `1920x1080@6M,1280x720@3000k` -> the rungs, largest first. A named
    rung keeps the master's shape (width rounded to even); none may be taller than the master."""
    if codec not in CODEC_SHARE:
        raise SpecError(
            f"--ladder encodes h264, hevc or hevc10; --codec {codec} is not one of them"
        )
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise SpecError("--ladder ''; name rungs, e.g. --ladder 1080p,720p or 1920x1080@6M")
    if len(names) > MAX_RUNGS:
        raise SpecError(f"--ladder has {len(names)} rungs; at most {MAX_RUNGS}")
    rungs = [_rung(n, codec, master_width, master_height) for n in names]
    for name, rung in zip(names, rungs, strict=True):
        if rung.height > master_height or rung.width > master_width:
            raise SpecError(
                f"--ladder {name}: {rung.width}x{rung.height} is larger than the master "
                f"({master_width}x{master_height}); a ladder never upscales: leave it out or "
                f"name a rung of {master_height}p or less"
            )
    rungs.sort(key=lambda r: (r.height, r.width, r.bitrate_kbps), reverse=True)
    if len({(r.width, r.height) for r in rungs}) != len(rungs):
        raise SpecError(f"--ladder {text}: two rungs of the same size; name each size once")
    return tuple(rungs)


PACKAGES = ("hls", "dash", "both")


def ladder_choice(
    ladder: str | None,
    package: str | None,
    resolution: str | None,
    codec: Codec,
    master: MasterInfo,
) -> tuple[tuple[Rung, ...], str]:
    """`--ladder` and `--package` checked together: the rungs and the package ('' for none).
    `master`: with its stream plan (farm.media.streams), whose subtitles the package carries."""
    master_width, master_height = master.width, master.height
    if ladder is None:
        if package:
            raise SpecError(
                f"--package {package} packages a ladder's renditions: add --ladder, e.g. "
                f"--ladder {master_height}p for one rendition"
            )
        return (), ""
    if resolution is not None:
        raise SpecError(
            f"--resolution {resolution} with --ladder: the ladder's rungs set every size; "
            "leave --resolution out"
        )
    if package and package not in PACKAGES:
        raise SpecError(f"--package {package!r}: choose one of {', '.join(PACKAGES)}")
    rungs = parse_ladder(ladder, codec=codec, master_width=master_width,
                         master_height=master_height)  # fmt: skip
    if package:
        check_package_streams(master)
    return rungs, package or ""


def check_package_streams(master: MasterInfo) -> None:
    """A package carries subtitles as WebVTT, made from text alone: a bitmap track is refused."""
    bitmaps = [s for s in kept(master, "subtitle") if s.codec not in TEXT_SUBTITLES]
    if bitmaps:
        named = ", ".join(f"s:{s.kind_index} ({s.codec})" for s in bitmaps)
        drops = ",".join(f"s:{s.kind_index}" for s in bitmaps)
        raise SpecError(
            f"--package: subtitles {named} are pictures, and a package's subtitles are WebVTT "
            f"text; add --drop {drops} to package without them (submit without --package to keep "
            "them in the MP4)"
        )


def _rung(name: str, codec: Codec, master_width: int, master_height: int) -> Rung:
    if name in NAMED_HEIGHTS:
        height = NAMED_HEIGHTS[name]
        width = round(master_width * height / master_height / 2) * 2
        kbps = int(H264_KBPS[height] * CODEC_SHARE[codec])
        return Rung(width=width, height=height, bitrate_kbps=kbps)
    match = _EXPLICIT.match(name)
    if match is None:
        raise SpecError(
            f"--ladder {name!r}: write a named rung ({', '.join(NAMED_HEIGHTS)}) or "
            "WIDTHxHEIGHT@BITRATE, e.g. 1920x1080@6M or 640x360@800k"
        )
    width, height = int(match[1]), int(match[2])
    kbps = int(float(match[3]) * (1000 if match[4] == "M" else 1))
    rung = Rung(width=width, height=height, bitrate_kbps=kbps)
    check_rung(rung)
    return rung


def check_rung(rung: Rung) -> None:
    """Values that reach ffmpeg's argv: even sizes (4:2:0), bitrates in a sane range."""
    if not (16 <= rung.width <= 7680 and 16 <= rung.height <= 4320):
        raise SpecError(f"ladder rung {rung}: sizes from 16x16 to 7680x4320")
    if rung.width % 2 or rung.height % 2:
        raise SpecError(f"ladder rung {rung}: width and height must be even (4:2:0 video)")
    if not 50 <= rung.bitrate_kbps <= MAX_KBPS:
        raise SpecError(f"ladder rung {rung}: a bitrate from 50k to {MAX_KBPS // 1000}M")


def gop_frames(rate: Fraction) -> int:
    return max(3, round(rate * GOP_S))


def rung_options(settings: EncodeSettings, rung: Rung) -> dict[str, object]:
    """The job's codec options (farm.media.ffgraph) with a fixed GOP and a capped bitrate in
    place of its constant quality: the peak at 1.5x the average over a 2 s buffer."""
    opts = codec_options(settings, gop_frames(settings.fps))
    for key in ("r", "crf", "cq"):
        opts.pop(key, None)
    opts.update(
        **{"b:v": f"{rung.bitrate_kbps}k"},
        maxrate=f"{rung.bitrate_kbps * 3 // 2}k",
        bufsize=f"{rung.bitrate_kbps * 2}k",
    )
    if settings.is_nvenc:
        opts.pop("pix_fmt", None)  # CUDA frames; scale_cuda already chose the format
    return opts


def ladder_filtergraph(
    cut: SegmentCut, rungs: tuple[Rung, ...], nvenc: bool, settings: EncodeSettings, pix_fmt: str
) -> str:
    """The single segment's cut (farm.media.transcode_graph), split once, each copy scaled to a
    rung; outputs [r0]..[rN-1]."""
    top = rungs[0]
    single = segment_filtergraph(cut, top.width, top.height, nvenc, pix_fmt, settings.hdr)
    scale = "," + ",".join(scale_filters(top.width, top.height, nvenc, pix_fmt))
    assert single.endswith(scale), "the segment's chain ends with its scale"
    chain = single[: -len(scale)]
    splits = "".join(f"[s{n}]" for n in range(len(rungs)))
    parts = [f"[0:v:0]{chain},split={len(rungs)}{splits}"]
    for n, rung in enumerate(rungs):
        parts.append(f"[s{n}]" + ",".join(scale_filters(rung.width, rung.height, nvenc, pix_fmt))
                     + f"[r{n}]")  # fmt: skip
    return ";".join(parts)


def rendition_name(index: int, container: str) -> str:
    """A rendition's file name in a chunk's folder, and the tail of its segment's key."""
    return f"r{index}.{container}"


def ladder_segment_argv(
    *,
    ffmpeg_bin: str,
    source: Path,
    outs: list[str],
    cut: SegmentCut,
    rungs: tuple[Rung, ...],
    settings: EncodeSettings,
) -> list[str]:
    """The master's frames [first, end), decoded once, -> one closed-GOP segment per rung, video
    only. `source` is read as segment_argv reads it (that file alone, a master's container)."""
    assert len(outs) == len(rungs), "one output per rung"
    name = input_name(source)
    reading = whitelists(name, MASTER_FORMATS)
    if cut.seek_s > 0:
        reading.update(noaccurate_seek=None, ss=f"{cut.seek_s:.6f}")
    source_in = ffmpeg.input(name, **reading)
    pix_fmt = str(codec_options(settings, 3)["pix_fmt"])
    outputs = [
        ffmpeg.output(
            source_in,
            out,
            map=f"[r{n}]",
            fps_mode="passthrough",
            **{"frames:v": cut.count},
            **rung_options(settings, rung),
        )
        for n, (out, rung) in enumerate(zip(outs, rungs, strict=True))
    ]
    graph = ladder_filtergraph(cut, rungs, settings.is_nvenc, settings, pix_fmt)
    # -filter_complex is a global option: ffmpeg-python cannot name a split's outputs for -map.
    globals_ = [*GLOBAL_ARGS, "-copyts", "-filter_complex", graph]
    if settings.is_nvenc:
        globals_ += ["-init_hw_device", "cuda=gpu:0", "-filter_hw_device", "gpu"]
    return list(ffmpeg.merge_outputs(*outputs).global_args(*globals_).compile(cmd=ffmpeg_bin))


def check_ladder(spec: JobSpec) -> None:
    """A spec's ladder as the API receives it (ints and bitrates only, as parse_ladder makes them)."""
    if spec.package not in ("", *PACKAGES):
        raise SpecError(f"package {spec.package!r}: choose one of {', '.join(PACKAGES)}, or ''")
    if not spec.ladder:
        if spec.package:
            raise SpecError(f"package {spec.package}: a package needs a ladder")
        return
    if spec.codec not in CODEC_SHARE or len(spec.ladder) > MAX_RUNGS:
        raise SpecError(f"ladder: at most {MAX_RUNGS} rungs, codec h264, hevc or hevc10")
    master = spec.master
    for rung in spec.ladder:
        if not all(type(v) is int for v in (rung.width, rung.height, rung.bitrate_kbps)):
            raise SpecError(f"ladder rung {rung}: width, height and bitrate_kbps are integers")
        check_rung(rung)
        if master is not None and (rung.width > master.width or rung.height > master.height):
            raise SpecError(f"ladder rung {rung}: larger than the master; a ladder never upscales")
    top = spec.ladder[0]
    if (spec.resolution.width, spec.resolution.height) != (top.width, top.height):
        raise SpecError(f"resolution {spec.resolution}: a ladder's resolution is its first rung's")

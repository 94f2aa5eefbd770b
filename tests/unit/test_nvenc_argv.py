"""The ffmpeg argv the farm builds for NVENC (h264_nvenc, hevc_nvenc, av1_nvenc), checked as argv:
no GPU here. HDR on NVENC: the colour tags (VUI) are options in every ffmpeg; HDR10's mastering
display and content light level SEI only come from the frames' side data in ffmpeg 7.1 and later,
so which masters may use NVENC depends on the version `ffmpeg -version` names."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from farm.core.hdr import HdrInfo, MasteringDisplay
from farm.media.ffgraph import EncodeSettings, codec_options, ffmpeg_version, nvenc_keeps_hdr10
from farm.media.transcode_graph import SegmentCut, segment_argv

NTSC = Fraction(24000, 1001)
HLG = HdrInfo(primaries="bt2020", transfer="arib-std-b67", matrix="bt2020nc")
HDR10 = HdrInfo(
    primaries="bt2020", transfer="smpte2084", matrix="bt2020nc",
    mastering=MasteringDisplay(red=(34000, 16000), green=(13250, 34500), blue=(7500, 3000),
                               white=(15635, 16450), max_luminance=10000000, min_luminance=50),
    max_cll=1000, max_fall=400,
)  # fmt: skip
CUT = SegmentCut(first=48, end=96, total=240, rate=NTSC, start_pts=0, seek_s=1.5)


def _settings(codec: str, encoder: str, hdr: HdrInfo | None = None) -> EncodeSettings:
    return EncodeSettings(codec=codec, encoder=encoder, fps=NTSC, quality=23, preset="slow",
                          hdr=hdr)  # fmt: skip


def _argv(settings: EncodeSettings) -> list[str]:
    return segment_argv(ffmpeg_bin="ffmpeg", source=Path("/w/m.mov"), out="/w/s.mp4", cut=CUT,
                        width=1920, height=1080, settings=settings)  # fmt: skip


def _opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_h264_nvenc_is_constant_quality_vbr_with_an_idr_per_segment() -> None:
    assert codec_options(_settings("h264", "h264_nvenc"), 48) == {
        "vcodec": "h264_nvenc", "pix_fmt": "yuv420p", "r": "24000/1001", "g": 48,
        "video_track_timescale": 24000, "preset": "p6", "rc": "vbr", "cq": 23, "b:v": 0,
        "forced-idr": 1,
    }  # fmt: skip


def test_an_nvenc_segment_scales_on_the_gpu_and_leaves_the_format_to_scale_cuda() -> None:
    argv = _argv(_settings("h264", "h264_nvenc"))
    assert _opt(argv, "-vf").endswith(
        "format=nv12,hwupload_cuda,scale_cuda=w=1920:h=1080:interp_algo=lanczos:format=yuv420p"
    )
    assert "-pix_fmt" not in argv and "-r" not in argv
    assert argv[-4:] == ["-init_hw_device", "cuda=gpu:0", "-filter_hw_device", "gpu"]
    assert (_opt(argv, "-vcodec"), _opt(argv, "-frames:v"), _opt(argv, "-g")) == (
        "h264_nvenc", "48", "48"
    )  # fmt: skip


def test_hevc_nvenc_keeps_an_hlg_masters_tags_in_main10() -> None:
    argv = _argv(_settings("hevc10", "hevc_nvenc", HLG))
    assert [_opt(argv, f) for f in ("-color_primaries", "-color_trc", "-colorspace")] == [
        "bt2020", "arib-std-b67", "bt2020nc"
    ]  # fmt: skip
    assert (_opt(argv, "-profile:v"), _opt(argv, "-tag:v")) == ("main10", "hvc1")
    assert "format=p010le,hwupload_cuda,scale_cuda=" in _opt(argv, "-vf")
    assert _opt(argv, "-vf").endswith(":format=p010le")


def test_av1_nvenc_keeps_hdr_in_ten_bits_without_hevcs_profile_or_tag() -> None:
    opts = codec_options(_settings("av1", "av1_nvenc", HLG), 48)
    assert opts["pix_fmt"] == "p010le"
    assert "profile:v" not in opts and "tag:v" not in opts
    assert (opts["color_trc"], opts["cq"], opts["preset"]) == ("arib-std-b67", 23, "p6")


def test_hdr10_on_nvenc_writes_the_tags_and_no_sei_option() -> None:
    """No ffmpeg's NVENC takes mastering display as an option: 7.1 reads it from the frames,
    5.1 not at all; the argv is the same in both, and carries no x265/SVT-AV1 parameters."""
    argv = _argv(_settings("hevc10", "hevc_nvenc", HDR10))
    assert _opt(argv, "-color_trc") == "smpte2084"
    assert not [a for a in argv if "master" in a or "max-cll" in a or "params" in a]


def test_tonemapped_on_nvenc_maps_on_the_cpu_before_the_upload_and_tags_bt709() -> None:
    mapped = HdrInfo(primaries="bt2020", transfer="smpte2084", matrix="bt2020nc", tonemap=True)
    argv = _argv(_settings("hevc", "hevc_nvenc", mapped))
    vf = _opt(argv, "-vf")
    assert vf.index("tonemap=tonemap=hable") < vf.index("hwupload_cuda")
    assert [_opt(argv, f) for f in ("-color_primaries", "-color_trc", "-colorspace")] == [
        "bt709"
    ] * 3
    assert "-profile:v" not in argv  # 8-bit Main


def test_varied_quality_leaves_nvencs_argv_alone() -> None:
    plain = codec_options(_settings("hevc", "hevc_nvenc"), 48)
    varied = codec_options(EncodeSettings(codec="hevc", encoder="hevc_nvenc", fps=NTSC,
                                          quality=23, preset="slow", varied_quality=True), 48)  # fmt: skip
    assert plain == varied


@pytest.mark.parametrize(
    ("first_line", "version", "keeps"),
    [
        ("ffmpeg version 5.1.9-0+deb12u1 Copyright (c) 2000-2026 the FFmpeg developers", (5, 1),
         False),
        ("ffmpeg version 6.1.1-3ubuntu5 Copyright (c) 2000-2023", (6, 1), False),
        ("ffmpeg version 7.1 Copyright (c) 2000-2024 the FFmpeg developers", (7, 1), True),
        ("ffmpeg version n7.1.1 Copyright (c) 2000-2025", (7, 1), True),
        ("ffmpeg version N-113000-gabcdef Copyright (c) 2000-2024", (0, 0), False),
    ],
)  # fmt: skip
def test_the_ffmpeg_version_says_whether_nvenc_keeps_hdr10(
    first_line: str, version: tuple[int, int], keeps: bool
) -> None:
    assert ffmpeg_version(first_line) == version
    assert nvenc_keeps_hdr10(ffmpeg_version(first_line)) is keeps

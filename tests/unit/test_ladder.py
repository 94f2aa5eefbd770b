"""`--ladder`: rungs parsed and checked against the master, the spec's record of them, and the one
ffmpeg that decodes a segment once and encodes every rendition (argv by list equality)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from farm.core.errors import SpecError
from farm.core.spec import Codec, JobSpec, Rung
from farm.media.ffgraph import EncodeSettings
from farm.media.ladder import check_ladder, ladder_filtergraph, ladder_segment_argv, parse_ladder
from farm.media.transcode_graph import SegmentCut
from farm.web.api.answers import ApiError
from farm.web.api.validate import job_spec
from tests.unit.test_transcode_spec import PROBED, _spec


def _ladder(text: str, codec: Codec = Codec.H264) -> tuple[Rung, ...]:
    return parse_ladder(text, codec=codec, master_width=1920, master_height=1080)


def test_named_rungs_keep_the_masters_shape_and_take_the_codecs_default_bitrate() -> None:
    assert _ladder("720p,1080p,360p") == (
        Rung(width=1920, height=1080, bitrate_kbps=6000),
        Rung(width=1280, height=720, bitrate_kbps=3000),
        Rung(width=640, height=360, bitrate_kbps=800),
    )
    assert _ladder("1080p", Codec.HEVC) == (Rung(width=1920, height=1080, bitrate_kbps=3600),)


def test_explicit_rungs_take_their_size_and_bitrate() -> None:
    assert _ladder("1920x1080@6M,960x540@1500k") == (
        Rung(width=1920, height=1080, bitrate_kbps=6000),
        Rung(width=960, height=540, bitrate_kbps=1500),
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "2160p,1080p",
            "2160p: 3840x2160 is larger than the master (1920x1080); a ladder never upscales",
        ),
        ("1080p,hd", "--ladder 'hd': write a named rung"),
        ("1921x1080@6M", "width and height must be even"),
        ("1280x720@10k", "a bitrate from 50k"),
        ("720p,1280x720@2M", "two rungs of the same size"),
        ("", "name rungs"),
    ],
)
def test_rungs_that_cannot_be_made_are_refused_by_name(text: str, said: str) -> None:
    with pytest.raises(SpecError, match=None) as caught:
        _ladder(text)
    assert said in str(caught.value)


def test_a_ladder_is_refused_for_codecs_it_cannot_cap() -> None:
    with pytest.raises(SpecError, match="--ladder encodes h264, hevc or hevc10; --codec prores"):
        _ladder("720p", Codec.PRORES)


def test_the_spec_records_the_rungs_its_resolution_is_the_top_one_and_old_specs_load() -> None:
    spec = _spec(codec="h264", ladder="540p,1080p", package="both")
    assert spec.ladder[0] == Rung(width=1920, height=1080, bitrate_kbps=6000)
    assert (spec.resolution.width, spec.resolution.height) == (1920, 1080)
    assert JobSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    old = {k: v for k, v in spec.to_json().items() if k not in ("ladder", "package")}
    assert JobSpec.from_json(old).ladder == ()


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"package": "hls"}, "--package hls packages a ladder's renditions: add --ladder"),
        ({"ladder": "720p", "resolution": "1280x720"}, "leave --resolution out"),
        ({"ladder": "720p", "package": "smooth"}, "--package 'smooth': choose one of"),
    ],
)
def test_package_and_resolution_are_checked_with_the_ladder(
    options: dict[str, str], said: str
) -> None:
    with pytest.raises(SpecError) as caught:
        _spec(codec="h264", **options)
    assert said in str(caught.value)


def test_the_api_refuses_a_rung_that_is_not_integers_or_upscales() -> None:
    spec = _spec(codec="h264", ladder="720p,360p", package="hls")
    body = spec.to_json()
    assert job_spec(json.loads(json.dumps(body)), max_chunks=1000).ladder == spec.ladder
    for rung, said in (
        ({"width": "1280; rm", "height": 720, "bitrate_kbps": 3000}, "ladder"),
        ({"width": 3840, "height": 2160, "bitrate_kbps": 3000}, "larger than the master"),
    ):
        bad = {**body, "ladder": [rung]}
        with pytest.raises(ApiError) as caught:
            job_spec(json.loads(json.dumps(bad)), max_chunks=1000)
        assert said in str(caught.value)
    with pytest.raises(SpecError, match="a package needs a ladder"):
        check_ladder(replace(spec, ladder=()))


CUT = SegmentCut(first=24, end=48, total=60, rate=Fraction(24), start_pts=0)
SETTINGS = EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24), preset="ultrafast")
RUNGS = (
    Rung(width=640, height=360, bitrate_kbps=800),
    Rung(width=426, height=240, bitrate_kbps=400),
)


def test_one_decode_is_split_once_and_scaled_per_rung() -> None:
    graph = ladder_filtergraph(CUT, RUNGS, False, SETTINGS, "yuv420p")
    assert graph == (
        "[0:v:0]setpts=PTS-0,fps=fps=24/1,"
        "trim=start_pts=24:end_pts=48,setpts=PTS-STARTPTS,split=2[s0][s1];"
        "[s0]scale=w=640:h=360:flags=lanczos,format=yuv420p[r0];"
        "[s1]scale=w=426:h=240:flags=lanczos,format=yuv420p[r1]"
    )


def test_each_rendition_is_bitrate_capped_with_the_same_fixed_closed_gop() -> None:
    argv = ladder_segment_argv(ffmpeg_bin="ffmpeg", source=Path("/m/master.mov"),
                               outs=["/w/a.mp4", "/w/b.mp4"], cut=CUT, rungs=RUNGS,
                               settings=SETTINGS)  # fmt: skip
    assert argv.count("-i") == 1 and argv[argv.index("-i") + 1] == "file:/m/master.mov"
    first = argv[argv.index("-i") + 2 : argv.index("/w/a.mp4")]
    second = argv[argv.index("/w/a.mp4") + 1 : argv.index("/w/b.mp4")]
    assert first == [
        "-b:v", "800k", "-bufsize", "1600k", "-fps_mode", "passthrough", "-frames:v", "24",
        "-g", "48", "-map", "[r0]", "-maxrate", "1200k", "-pix_fmt", "yuv420p", "-preset",
        "ultrafast", "-vcodec", "libx264", "-video_track_timescale", "24000", "-x264opts",
        "no-scenecut:open-gop=0",
    ]  # fmt: skip
    assert second[:6] == ["-b:v", "400k", "-bufsize", "800k", "-fps_mode", "passthrough"]
    assert "-crf" not in argv and "[r1]" in second
    assert argv[argv.index("-filter_complex") + 1].count("split=2") == 1


def test_a_ladder_spec_from_a_probed_master_never_exceeds_it() -> None:
    assert PROBED.info.height == 1080
    with pytest.raises(SpecError, match="never upscales"):
        _spec(codec="h264", ladder="1440p")


def test_on_nvenc_each_rung_is_scaled_on_the_gpu_and_capped_in_vbr() -> None:
    nvenc = EncodeSettings(codec="h264", encoder="h264_nvenc", fps=Fraction(24), preset="fast")
    argv = ladder_segment_argv(ffmpeg_bin="ffmpeg", source=Path("/m/master.mov"),
                               outs=["/w/a.mp4", "/w/b.mp4"], cut=CUT, rungs=RUNGS,
                               settings=nvenc)  # fmt: skip
    graph = argv[argv.index("-filter_complex") + 1]
    assert "[s1]format=nv12,hwupload_cuda,scale_cuda=w=426:h=240:interp_algo=lanczos" in graph
    first = argv[argv.index("-i") + 2 : argv.index("/w/a.mp4")]
    opts = dict(zip(first[::2], first[1::2], strict=True))
    assert (opts["-rc"], opts["-b:v"], opts["-maxrate"], opts["-g"]) == (
        "vbr",
        "800k",
        "1200k",
        "48",
    )
    assert "-cq" not in opts and "-pix_fmt" not in opts and opts["-forced-idr"] == "1"
    assert argv[-4:] == ["-init_hw_device", "cuda=gpu:0", "-filter_hw_device", "gpu"]

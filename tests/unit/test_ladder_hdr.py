"""An HDR ladder (`--ladder` with `--codec hevc10` from an HDR master): the rungs accepted, each
rendition's argv 10-bit with the master's HDR10 options, and the package's HDR signalling (the
master playlist's VIDEO-RANGE and full HEVC CODECS, the MPD's CICP descriptors)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from farm.core.errors import PermanentError, SpecError
from farm.core.hdr import HDR10_PLUS, HLG, HdrInfo
from farm.core.spec import Codec, JobSpec, Rung
from farm.media.ffgraph import EncodeSettings
from farm.media.ladder import ladder_segment_argv, parse_ladder
from farm.media.master import Probed
from farm.media.package import (
    AudioTrack,
    hevc_codec,
    master_playlist,
    mpd_with_video,
    parse_playlist,
    video_range,
)
from farm.media.transcode_graph import SegmentCut
from farm.media.transcode_spec import build_transcode_spec
from tests.unit.test_hdr import HDR10 as PQ10
from tests.unit.test_hdr import HLG as HLG10
from tests.unit.test_transcode_spec import MASTER
from workers.phases.transcode_stitch import check_hdr

CUT = SegmentCut(first=0, end=24, total=48, rate=Fraction(24), start_pts=0)
RUNGS = (Rung(width=640, height=360, bitrate_kbps=2000), Rung(width=320, height=180,
                                                             bitrate_kbps=600))  # fmt: skip
DASH = "{urn:mpeg:dash:schema:mpd:2011}"
CICP = "urn:mpeg:mpegB:cicp:"


def _hdr_spec(hdr: HdrInfo, **options: object) -> JobSpec:
    """A spec from a 1080p master tagged `hdr`, as the submit builds it."""
    settings: dict[str, object] = {"resolution": None, "quality": None, "encoder": "auto",
                                   "preset": "medium", "segment_frames": None, **options}  # fmt: skip
    probed = Probed(info=replace(MASTER, hdr=hdr), keyframes_pts=(0,))
    return build_transcode_spec(source_name="master.mov", probed=probed, **settings)  # type: ignore[arg-type]


def _argv(hdr: HdrInfo, encoder: str = "libx265") -> list[str]:
    settings = EncodeSettings(codec="hevc10", encoder=encoder, fps=Fraction(24), hdr=hdr,
                              preset="ultrafast")  # fmt: skip
    return ladder_segment_argv(ffmpeg_bin="ffmpeg", source=Path("/m/pq.mp4"),
                               outs=["/w/a.mp4", "/w/b.mp4"], cut=CUT, rungs=RUNGS,
                               settings=settings)  # fmt: skip


def _outputs(argv: list[str]) -> list[dict[str, str]]:
    """Each output's options, by name."""
    first = argv[argv.index("-i") + 2 : argv.index("/w/a.mp4")]
    second = argv[argv.index("/w/a.mp4") + 1 : argv.index("/w/b.mp4")]
    return [dict(zip(o[::2], o[1::2], strict=True)) for o in (first, second)]


def test_a_hevc10_ladder_takes_hevcs_default_bitrates() -> None:
    rungs = parse_ladder("1080p,720p", codec=Codec.HEVC10, master_width=1920, master_height=1080)
    same = parse_ladder("1080p,720p", codec=Codec.HEVC, master_width=1920, master_height=1080)
    assert rungs == same == (Rung(width=1920, height=1080, bitrate_kbps=3600),
                             Rung(width=1280, height=720, bitrate_kbps=1800))  # fmt: skip


def test_an_hdr10_master_ladders_in_hevc10_and_the_api_takes_the_spec_back() -> None:
    spec = _hdr_spec(PQ10, codec="hevc10", ladder="1920x1080@8M,960x540@2M", package="both")
    assert spec.master is not None and spec.master.hdr == PQ10
    assert [str(r) for r in spec.ladder] == ["1920x1080@8000k", "960x540@2000k"]
    assert JobSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"codec": "hevc"}, "--codec hevc is SDR only"),
        ({"codec": "hevc10", "encoder": "nvenc"}, "--encoder nvenc"),
    ],
)
def test_an_hdr10_ladder_is_refused_where_a_single_output_is(
    options: dict[str, str], said: str
) -> None:
    with pytest.raises(SpecError) as caught:
        _hdr_spec(PQ10, ladder="720p", **options)
    assert said in str(caught.value)


def test_dynamic_hdr_is_refused_for_a_ladder_or_dropped_when_asked() -> None:
    plus = replace(PQ10, dynamic=(HDR10_PLUS,))
    with pytest.raises(SpecError, match="--drop-dynamic-hdr"):
        _hdr_spec(plus, codec="hevc10", ladder="720p")
    spec = _hdr_spec(plus, codec="hevc10", ladder="720p", drop_dynamic_hdr=True)
    assert spec.ladder and spec.master is not None and spec.master.hdr == plus


def test_every_rendition_encodes_10_bit_with_the_masters_hdr10_metadata() -> None:
    argv = _argv(PQ10)
    graph = argv[argv.index("-filter_complex") + 1]
    assert graph.endswith(
        "split=2[s0][s1];[s0]scale=w=640:h=360:flags=lanczos,format=yuv420p10le[r0];"
        "[s1]scale=w=320:h=180:flags=lanczos,format=yuv420p10le[r1]"
    )
    assert "zscale" not in graph and "tonemap" not in graph
    for n, opts in enumerate(_outputs(argv)):
        params = opts["-x265-params"].split(":")
        assert "master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)" \
            "L(10000000,1)" in params and "max-cll=1000,400" in params, n  # fmt: skip
        assert {"hdr10=1", "repeat-headers=1", "transfer=smpte2084", "keyint=48"} <= set(params)
        assert (opts["-pix_fmt"], opts["-profile:v"], opts["-tag:v"]) == (
            "yuv420p10le", "main10", "hvc1"
        )  # fmt: skip
        assert (opts["-color_primaries"], opts["-color_trc"], opts["-colorspace"]) == (
            "bt2020", "smpte2084", "bt2020nc"
        )  # fmt: skip
        assert opts["-b:v"] == f"{RUNGS[n].bitrate_kbps}k" and "-crf" not in opts


def test_an_hlg_ladder_keeps_its_tags_and_on_nvenc_scales_p010_on_the_gpu() -> None:
    argv = _argv(HLG10, encoder="hevc_nvenc")
    graph = argv[argv.index("-filter_complex") + 1]
    assert "[s1]format=p010le,hwupload_cuda,scale_cuda=w=320:h=180:interp_algo=lanczos:" \
        "format=p010le[r1]" in graph  # fmt: skip
    for opts in _outputs(argv):
        assert (opts["-profile:v"], opts["-color_trc"], opts["-color_primaries"]) == (
            "main10", HLG, "bt2020"
        )  # fmt: skip
        assert "-pix_fmt" not in opts and "-x265-params" not in opts


def test_a_tone_mapped_ladder_takes_the_sdr_path() -> None:
    argv = _argv(replace(PQ10, tonemap=True))
    graph = argv[argv.index("-filter_complex") + 1]
    assert graph.count("tonemap=tonemap=hable") == 1 and graph.index("tonemap") < graph.index(
        "split"
    )
    for opts in _outputs(argv):
        assert opts["-color_trc"] == "bt709" and "master-display" not in opts["-x265-params"]


def _init(record: bytes, entry: bytes = b"hvc1") -> bytes:
    """A sliver of an init segment: the sample entry's type, then its hvcC box."""
    hvcc = (8 + len(record)).to_bytes(4, "big") + b"hvcC" + record
    return b"\0\0\0\x10stsd" + (86 + len(hvcc)).to_bytes(4, "big") + entry + bytes(78) + hvcc


# configurationVersion, profile space/tier/idc, compatibility (32 bits), constraints (48), level
MAIN10_L31 = bytes([1, 0x02, 0x20, 0, 0, 0, 0xB0, 0, 0, 0, 0, 0, 93]) + bytes(10)


def test_an_hevc_codecs_string_is_read_from_the_init_segments_hvcc() -> None:
    assert hevc_codec(_init(MAIN10_L31)) == "hvc1.2.4.L93.B0"
    main_high = bytes([1, 0x21, 0x60, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 153]) + bytes(10)
    assert hevc_codec(_init(main_high, b"hev1")) == "hev1.1.6.H153.90"
    with pytest.raises(ValueError, match="no HEVC configuration"):
        hevc_codec(b"\0\0\0\x10ftypisom")


WRITTEN = """#EXTM3U
#EXT-X-VERSION:7
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="group_A1",NAME="audio_2",DEFAULT=YES,URI="media_2.m3u8"
#EXT-X-STREAM-INF:BANDWIDTH=2829304,RESOLUTION=640x360,CODECS="hvc1,mp4a.40.2",AUDIO="group_A1"
media_0.m3u8

#EXT-X-STREAM-INF:BANDWIDTH=845232,RESOLUTION=320x180,CODECS="hvc1,mp4a.40.2",AUDIO="group_A1"
media_1.m3u8
"""


def test_the_master_playlist_says_every_variant_is_pq_with_its_full_hevc_codecs() -> None:
    codecs = ["hvc1.2.4.L93.B0", "hvc1.2.4.L60.B0"]
    written = master_playlist(WRITTEN, [AudioTrack(index=0, language="eng")], "24.000",
                              codecs=codecs, range_=video_range(PQ10))  # fmt: skip
    variants = parse_playlist(written).variants
    assert [(a["VIDEO-RANGE"], a["CODECS"]) for a, _ in variants] == [
        ("PQ", "hvc1.2.4.L93.B0,mp4a.40.2"), ("PQ", "hvc1.2.4.L60.B0,mp4a.40.2")
    ]  # fmt: skip
    assert (video_range(HLG10), video_range(replace(PQ10, tonemap=True)), video_range(None)) == (
        "HLG", "", ""
    )  # fmt: skip
    sdr = parse_playlist(master_playlist(WRITTEN, [AudioTrack(index=0)], "24.000")).variants
    assert "VIDEO-RANGE" not in sdr[0][0] and sdr[0][0]["CODECS"] == "hvc1,mp4a.40.2"


MPD = ('<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011"><Period id="0">'
       '<AdaptationSet id="0" contentType="video"><Representation id="0" codecs="hvc1"/>'
       '<Representation id="1" codecs="hvc1"/></AdaptationSet>'
       '<AdaptationSet id="1" contentType="audio"><Representation id="2" codecs="mp4a.40.2"/>'
       "</AdaptationSet></Period></MPD>")  # fmt: skip


def _descriptors(mpd: str) -> tuple[list[tuple[str, str, str]], list[str | None]]:
    video, audio = ET.fromstring(mpd).findall(f"{DASH}Period/{DASH}AdaptationSet")
    assert not [e for e in audio if "Property" in e.tag]
    found = [(e.tag.removeprefix(DASH), e.get("schemeIdUri", "").removeprefix(CICP),
              e.get("value", "")) for e in video if "Property" in e.tag]  # fmt: skip
    assert all("Property" in e.tag for e in list(video)[: len(found)])  # before the representations
    return found, [r.get("codecs") for r in video.findall(f"{DASH}Representation")]


def test_the_mpd_names_the_colour_as_cicp_and_each_representations_codecs() -> None:
    found, codecs = _descriptors(mpd_with_video(MPD, ["hvc1.2.4.L93.B0", "hvc1.2.4.L60.B0"], PQ10))
    assert found == [
        ("SupplementalProperty", "ColourPrimaries", "9"),
        ("EssentialProperty", "TransferCharacteristics", "16"),
        ("SupplementalProperty", "MatrixCoefficients", "9"),
    ]
    assert codecs == ["hvc1.2.4.L93.B0", "hvc1.2.4.L60.B0"]
    hlg, _ = _descriptors(mpd_with_video(MPD, [], HLG10))
    assert ("SupplementalProperty", "TransferCharacteristics", "18") in hlg
    for sdr in (None, replace(PQ10, tonemap=True)):
        assert _descriptors(mpd_with_video(MPD, [], sdr)) == ([], ["hvc1", "hvc1"])


def test_a_rendition_that_lost_the_hdr_fails_the_stitch_by_name() -> None:
    with pytest.raises(PermanentError) as caught:
        check_hdr(PQ10, replace(PQ10, max_cll=None, max_fall=None), "rendition 1 (320x180@600k)")
    said = str(caught.value)
    assert said.startswith("rendition 1 (320x180@600k) does not keep the master's HDR")
    assert "content light level None,None, the master's 1000,400" in said

"""HDR masters: ffprobe's side data read into the spec, the encoders' options built from it,
and what the submit decides (keep, tone-map, refuse) (pure)."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from farm.core.errors import SpecError
from farm.core.hdr import HdrInfo, MasteringDisplay
from farm.core.sources import MasterInfo
from farm.core.spec import Codec, EncoderChoice, JobSpec
from farm.media.ffgraph import EncodeSettings, codec_options
from farm.media.hdr import colour_options, parse_hdr, svtav1_hdr_params, x265_hdr_params
from farm.media.hdrspec import hdr_choice, hdr_note
from farm.media.master import Probed
from farm.media.transcode_graph import SegmentCut, segment_filtergraph
from farm.media.transcode_spec import build_transcode_spec
from workers.phases.transcode import pick_encoder

MASTERING_SIDE = {
    "side_data_type": "Mastering display metadata",
    "red_x": "34000/50000", "red_y": "16000/50000", "green_x": "13250/50000",
    "green_y": "34500/50000", "blue_x": "7500/50000", "blue_y": "3000/50000",
    "white_point_x": "15635/50000", "white_point_y": "16450/50000",
    "min_luminance": "1/10000", "max_luminance": "10000000/10000",
}  # fmt: skip
LIGHT_SIDE = {"side_data_type": "Content light level metadata", "max_content": 1000,
              "max_average": 400}  # fmt: skip
PQ_TAGS = {"color_range": "tv", "color_space": "bt2020nc", "color_primaries": "bt2020",
           "color_transfer": "smpte2084"}  # fmt: skip
HDR10 = HdrInfo(
    primaries="bt2020", transfer="smpte2084", matrix="bt2020nc",
    mastering=MasteringDisplay(red=(34000, 16000), green=(13250, 34500), blue=(7500, 3000),
                               white=(15635, 16450), max_luminance=10000000, min_luminance=1),
    max_cll=1000, max_fall=400,
)  # fmt: skip
HLG = HdrInfo(primaries="bt2020", transfer="arib-std-b67", matrix="bt2020nc")


def _probed(frame: dict[str, object], stream: dict[str, object] | None = None) -> str:
    return json.dumps({"frames": [frame], "streams": [stream or {}]})


def test_hdr10_side_data_of_the_first_frame_is_read_in_x265_units() -> None:
    text = _probed({**PQ_TAGS, "side_data_list": [MASTERING_SIDE, LIGHT_SIDE]})
    assert parse_hdr(text) == HDR10


def test_mastering_display_in_other_denominators_is_converted() -> None:
    side = {**MASTERING_SIDE, "red_x": "17/25", "max_luminance": "1000/1", "min_luminance": "0/1"}
    hdr = parse_hdr(_probed({**PQ_TAGS, "side_data_list": [side]}))
    assert hdr is not None and hdr.mastering is not None
    assert (hdr.mastering.red[0], hdr.mastering.max_luminance, hdr.mastering.min_luminance) == (
        34000,
        10000000,
        0,
    )


def test_a_matroska_masters_stream_side_data_counts_when_the_frame_has_none() -> None:
    text = _probed(PQ_TAGS, {**PQ_TAGS, "side_data_list": [MASTERING_SIDE, LIGHT_SIDE]})
    assert parse_hdr(text) == HDR10


def test_an_sdr_master_has_no_hdr_and_an_hlg_master_its_tags_alone() -> None:
    sdr = {"color_primaries": "bt709", "color_transfer": "bt709", "color_space": "bt709"}
    assert parse_hdr(_probed(sdr)) is None
    assert parse_hdr(_probed({})) is None
    hlg = parse_hdr(_probed({**PQ_TAGS, "color_transfer": "arib-std-b67"}))
    assert hlg == HLG and not hlg.static


@pytest.mark.parametrize(
    ("where", "side_type", "found"),
    [
        ("frame", "HDR Dynamic Metadata SMPTE2094-40 (HDR10+)", "HDR10+"),
        ("stream", "DOVI configuration record", "Dolby Vision"),
    ],
)
def test_dynamic_metadata_is_detected(where: str, side_type: str, found: str) -> None:
    side = {"side_data_list": [{"side_data_type": side_type}]}
    frame = {**PQ_TAGS, **(side if where == "frame" else {})}
    stream = side if where == "stream" else {}
    hdr = parse_hdr(_probed(frame, stream))
    assert hdr is not None and hdr.dynamic == (found,)


def test_x265_params_write_hdr10_sei_in_every_keyframe() -> None:
    assert ":".join(x265_hdr_params(HDR10)) == (
        "colorprim=bt2020:transfer=smpte2084:colormatrix=bt2020nc:"
        "master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)"
        "L(10000000,1):max-cll=1000,400:hdr10=1:hdr10-opt=1:repeat-headers=1"
    )
    assert x265_hdr_params(HLG) == [
        "colorprim=bt2020", "transfer=arib-std-b67", "colormatrix=bt2020nc"
    ]  # fmt: skip


def test_svtav1_params_take_chromaticities_and_luminance_as_numbers() -> None:
    assert svtav1_hdr_params(HDR10) == [
        "mastering-display=G(0.26500,0.69000)B(0.15000,0.06000)R(0.68000,0.32000)"
        "WP(0.31270,0.32900)L(1000.0000,0.0001)",
        "content-light=1000,400",
    ]


def test_hdr_kept_tags_the_output_and_av1_goes_ten_bit() -> None:
    x265 = codec_options(EncodeSettings(codec="hevc10", encoder="libx265", fps=Fraction(24),
                                        hdr=HDR10), 24)  # fmt: skip
    assert "master-display=" in str(x265["x265-params"])
    assert (x265["color_trc"], x265["color_primaries"], x265["colorspace"]) == (
        "smpte2084",
        "bt2020",
        "bt2020nc",
    )
    av1 = codec_options(EncodeSettings(codec="av1", encoder="libsvtav1", fps=Fraction(24),
                                       hdr=HDR10), 24)  # fmt: skip
    assert av1["pix_fmt"] == "yuv420p10le"
    assert "content-light=1000,400" in str(av1["svtav1-params"])
    sdr = codec_options(EncodeSettings(codec="av1", encoder="libsvtav1", fps=Fraction(24)), 24)
    assert sdr["pix_fmt"] == "yuv420p" and "color_trc" not in sdr


def test_a_tone_mapped_job_is_tagged_bt709_and_its_graph_tone_maps_before_scaling() -> None:
    mapped = HdrInfo(**{**HDR10.to_json(), "mastering": HDR10.mastering, "tonemap": True})
    assert colour_options(mapped) == {
        "color_primaries": "bt709", "color_trc": "bt709", "colorspace": "bt709"
    }  # fmt: skip
    options = codec_options(EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24),
                                           hdr=mapped), 24)  # fmt: skip
    assert options["pix_fmt"] == "yuv420p"
    cut = SegmentCut(first=0, end=24, total=48, rate=Fraction(24), start_pts=0)
    graph = segment_filtergraph(cut, 320, 180, False, "yuv420p", mapped)
    assert "zscale=tin=smpte2084:pin=bt2020:min=bt2020nc:rin=tv:t=linear" in graph
    assert graph.index("tonemap=tonemap=hable") < graph.index("scale=w=320")
    assert "zscale" not in segment_filtergraph(cut, 320, 180, False, "yuv420p10le", HDR10)


def _choose(hdr: HdrInfo | None, codec: Codec = Codec.HEVC10, **flags: object) -> HdrInfo | None:
    options: dict[str, object] = {"tonemap": False, "drop_dynamic_hdr": False,
                                  "encoder": EncoderChoice.AUTO, **flags}  # fmt: skip
    encoder = options.pop("encoder")
    return hdr_choice("m.mov", hdr, codec, encoder, **options)  # type: ignore[arg-type]


def test_dynamic_metadata_is_refused_unless_dropped_by_name() -> None:
    plus = HdrInfo(**{**HDR10.to_json(), "mastering": HDR10.mastering, "dynamic": ("HDR10+",)})
    with pytest.raises(SpecError, match=r"HDR10\+ dynamic HDR metadata.*--drop-dynamic-hdr"):
        _choose(plus)
    kept = _choose(plus, drop_dynamic_hdr=True)
    assert kept == plus and kept is not None and kept.static
    assert "dropped (--drop-dynamic-hdr)" in hdr_note(_spec_with(kept))


def test_hdr_in_an_sdr_codec_is_refused_unless_tone_mapped() -> None:
    for codec in (Codec.H264, Codec.HEVC, Codec.PRORES):
        with pytest.raises(SpecError, match=r"--codec hevc10.*--tonemap"):
            _choose(HLG, codec)
    mapped = _choose(HDR10, Codec.H264, tonemap=True)
    assert mapped is not None and mapped.tonemap


def test_hdr10_on_nvenc_is_refused_at_submit_and_auto_encodes_in_software() -> None:
    with pytest.raises(SpecError, match="--encoder nvenc"):
        _choose(HDR10, encoder=EncoderChoice.NVENC)
    assert _choose(HLG, encoder=EncoderChoice.NVENC) == HLG  # tags alone: NVENC writes them
    assert pick_encoder(_spec_with(HDR10), True, "") == "libx265"
    assert pick_encoder(_spec_with(HLG), True, "") == "hevc_nvenc"


def test_flags_for_hdr_on_an_sdr_master_are_refused() -> None:
    with pytest.raises(SpecError, match="--tonemap"):
        _choose(None, tonemap=True)
    with pytest.raises(SpecError, match="--drop-dynamic-hdr"):
        _choose(HDR10, drop_dynamic_hdr=True)


MASTER = MasterInfo(
    container="mov,mp4", codec="hevc", width=320, height=180, frame_count=48,
    avg_frame_rate="24/1", time_base="1/12288", start_pts=0, format_start_s=0.0,
    duration_s=2.0, vfr=False,
)  # fmt: skip


def _spec_with(hdr: HdrInfo, codec: str = "hevc10") -> JobSpec:
    probed = Probed(info=MasterInfo(**{**MASTER.to_json(), "hdr": hdr}), keyframes_pts=(0,))
    return build_transcode_spec(
        source_name="m.mov", probed=probed, resolution="320x180", codec=codec, quality=None,
        encoder="auto", preset="medium", segment_frames=24,
        drop_dynamic_hdr=bool(hdr.dynamic),
    )  # fmt: skip


def test_the_hdr_choice_travels_in_the_job_spec() -> None:
    spec = _spec_with(HDR10)
    again = JobSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again.master is not None and again.master.hdr == HDR10
    assert "its colour tags and HDR10 static metadata are kept" in hdr_note(spec)


def test_the_api_takes_an_hdr_spec_and_refuses_names_that_are_not_ffmpegs() -> None:
    from farm.web.api.answers import ApiError
    from farm.web.api.validate import job_spec

    sent = json.loads(json.dumps(_spec_with(HDR10).to_json()))
    assert job_spec(sent, max_chunks=1000).master.hdr == HDR10  # type: ignore[union-attr]
    for field, value in (
        ("primaries", "bt2020:log-file=/tmp/x"),
        ("transfer", "smpte2084,movie=/etc/passwd"),
    ):
        bad = json.loads(json.dumps(sent))
        bad["master"]["hdr"][field] = value
        with pytest.raises(ApiError, match="not one ffmpeg names"):
            job_spec(bad, max_chunks=1000)
    short = json.loads(json.dumps(sent))
    short["master"]["hdr"]["mastering"]["red"] = [1]
    with pytest.raises(ApiError, match="not a job spec"):
        job_spec(short, max_chunks=1000)
    sdr_codec = json.loads(json.dumps(sent))
    sdr_codec["codec"] = "h264"
    with pytest.raises(ApiError, match="--tonemap"):
        job_spec(sdr_codec, max_chunks=1000)


def test_tone_mapping_needs_a_pq_or_hlg_curve() -> None:
    untagged = HdrInfo(**{**HDR10.to_json(), "mastering": HDR10.mastering, "transfer": ""})
    with pytest.raises(SpecError, match="not PQ or HLG"):
        _choose(untagged, Codec.H264, tonemap=True)


def test_the_stitch_names_hdr_the_output_lost_and_takes_av1s_rounding() -> None:
    from farm.media.hdr import hdr_problems

    assert hdr_problems(HDR10, HDR10) == []
    assert hdr_problems(HDR10, None) == [
        "its first frame has lost the master's HDR (smpte2084 and its metadata)"
    ]
    tags_only = HdrInfo(primaries="bt2020", transfer="smpte2084", matrix="bt2020nc")
    said = hdr_problems(HDR10, tags_only)
    assert len(said) == 2 and said[0].startswith("mastering display None")
    assert HDR10.mastering is not None
    rounded = MasteringDisplay(red=(33999, 16001), green=HDR10.mastering.green,
                               blue=HDR10.mastering.blue, white=(15634, 16450),
                               max_luminance=10000000, min_luminance=1)  # fmt: skip
    av1 = HdrInfo(**{**HDR10.to_json(), "mastering": rounded})
    assert hdr_problems(HDR10, av1) == []
    mapped = HdrInfo(**{**HLG.to_json(), "tonemap": True})
    assert hdr_problems(mapped, None) == []
    assert hdr_problems(mapped, HLG) == ["it was to be tone-mapped to BT.709 but is arib-std-b67"]

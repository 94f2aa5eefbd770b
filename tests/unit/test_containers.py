"""A Matroska deliverable (`--container mkv`, farm.media.containers): what each stream becomes,
the final mux's argv, the choice at submit and at the API, and the stitch's check."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.core.errors import SpecError
from farm.core.sources import MasterStream
from farm.core.spec import Codec
from farm.media.containers import container_choice
from farm.media.probe import parse_streams
from farm.media.streamcheck import check_plan, deliverable_problems
from farm.media.streamnotes import stream_lines
from farm.media.streams import Action, plan_streams, planned_action, with_plan
from tests.unit.test_streams import MASTER, _mkv, _stream
from workers.phases.transcode_stitch import final_mux_argv


def _s(kind: str, codec: str) -> MasterStream:
    return MasterStream(index=1, kind=kind, kind_index=0, codec=codec)


@pytest.mark.parametrize(
    ("kind", "codec", "action"),
    [
        *[("audio", c, Action.COPY) for c in ("aac", "flac", "pcm_s24le", "truehd", "dts")],
        *[("subtitle", c, Action.COPY) for c in ("subrip", "ass", "ssa", "webvtt")],
        ("subtitle", "mov_text", Action.SRT),
        *[
            ("subtitle", c, Action.COPY)
            for c in ("hdmv_pgs_subtitle", "dvd_subtitle", "dvb_subtitle")
        ],
        ("attachment", "ttf", Action.COPY),
        ("attachment", "png", Action.COPY),
        ("data", "tmcd", Action.TIMECODE),
        ("data", "text", Action.CHAPTERS),
    ],
)
def test_mkv_keeps_each_stream_as_it_is_and_mov_text_as_subrip(
    kind: str, codec: str, action: Action
) -> None:
    # GIVEN a stream of a master WHEN planned for an MKV THEN it is kept as said
    assert planned_action(_s(kind, codec), "mkv", "01:00:00:00", 2) == action


@pytest.mark.parametrize(
    ("kind", "codec", "said"),
    [
        ("subtitle", "eia_608", "MKV cannot hold eia_608 subtitles"),
        ("data", "bin_data", "MKV cannot carry data streams of codec bin_data"),
        ("video", "mjpeg", "the farm encodes the master's first video stream alone"),
        ("data", "tmcd", "its timecode track has no start MKV can write"),
    ],
)
def test_mkv_refuses_by_name_what_it_cannot_hold(kind: str, codec: str, said: str) -> None:
    assert planned_action(_s(kind, codec), "mkv", "", 0) == said


def _mkv_plan() -> object:
    data = _mkv(
        _stream(4, "subtitle", "hdmv_pgs_subtitle", language="eng", title="Commentary"),
        _stream(5, "attachment", "ttf", filename="Title.ttf",
                mimetype="application/x-truetype-font"),
    )  # fmt: skip
    return with_plan(MASTER, plan_streams("feature.mkv", data, "mkv"))


def test_a_pgs_track_and_a_font_the_mp4_refuses_are_planned_as_copies_in_mkv() -> None:
    # GIVEN a master with PGS subtitles and a font WHEN planned for MP4 THEN refused
    data = _mkv(_stream(4, "subtitle", "hdmv_pgs_subtitle"), _stream(5, "attachment", "ttf"))
    with pytest.raises(SpecError, match="MP4 cannot hold PGS"):
        plan_streams("feature.mkv", data, "mp4")
    # WHEN planned for MKV THEN every stream is copied, the timecode said to be a tag
    master = _mkv_plan()
    lines = stream_lines(master, "mkv")  # type: ignore[arg-type]
    assert "stream 2 (audio a:1, flac, fre 'Commentary'): copied" in lines
    assert "stream 3 (subtitle s:0, subrip, eng 'English'): copied" in lines
    assert "stream 5 (attachment t:0, ttf): copied" in lines
    assert "timecode 01:00:00:00: carried as the TIMECODE tag (MKV has no timecode track)" in lines
    check_plan(master, "mkv")  # type: ignore[arg-type]  # the API takes the submit's plan
    with pytest.raises(SpecError, match="not what a submit plans"):
        check_plan(master, "mp4")  # type: ignore[arg-type]


def test_the_final_mux_writes_matroska_with_every_stream_copied_and_the_font_mapped() -> None:
    # GIVEN the MKV plan WHEN the stitch builds the final mux
    master = _mkv_plan()
    argv = final_mux_argv("ffmpeg", Path("/w/l.txt"), Path("/w/m.mkv"), Path("/w/output.mkv"),
                          master)  # type: ignore[arg-type]  # fmt: skip
    # THEN it maps audio, subtitles and the attachment, copying each, with no MP4-only option
    maps = [argv[i + 1] for i, a in enumerate(argv) if a == "-map"]
    assert maps == ["0:v:0", "1:a:0", "1:a:1", "1:s:0", "1:s:1", "1:t:0"]
    for option in ("-c:a:0", "-c:a:1", "-c:s:0", "-c:s:1", "-c:t:0"):
        assert argv[argv.index(option) + 1] == "copy"
    assert "-moov_size" not in argv and not any(a.startswith("handler_name=") for a in argv)
    assert argv[argv.index("-metadata:s:2") + 1 :][:4] == [
        "language=fre", "-metadata:s:2", "title=Commentary", "-disposition:2",
    ]  # fmt: skip
    assert argv[argv.index("-timecode") + 1] == "01:00:00:00"
    assert "/w/output.mkv" in argv


def test_mov_text_becomes_subrip_in_the_mkv_mux() -> None:
    data = _mkv()
    data["streams"][3] = _stream(3, "subtitle", "mov_text", language="eng")
    master = with_plan(MASTER, plan_streams("feature.mp4", data, "mkv"))
    argv = final_mux_argv("ffmpeg", Path("/w/l.txt"), Path("/w/m.mp4"), Path("/w/output.mkv"),
                          master)  # fmt: skip
    assert argv[argv.index("-c:s:0") + 1] == "srt"


def test_the_stitch_checks_the_mkv_s_attachments_and_timecode_tag() -> None:
    # GIVEN the MKV plan and ffprobe's JSON of a deliverable that holds it all
    master = _mkv_plan()
    good = {
        "format": {"tags": {"TIMECODE": "01:00:00:00"}},
        "streams": [
            {"codec_type": "video", "codec_name": "h264"},
            _stream(1, "audio", "aac", language="eng", title="Main", default=True),
            _stream(2, "audio", "flac", language="fre", title="Commentary"),
            _stream(3, "subtitle", "subrip", language="eng", title="English"),
            _stream(4, "subtitle", "hdmv_pgs_subtitle", language="eng", title="Commentary"),
            _stream(5, "attachment", "ttf", filename="Title.ttf",
                    mimetype="application/x-truetype-font"),
        ],
        "chapters": [{}, {}],
    }  # fmt: skip
    assert deliverable_problems(good, master) == []  # type: ignore[arg-type]
    # WHEN the font lost its mimetype and the timecode tag is gone THEN both are named
    bad = {**good, "format": {}, "streams": [*good["streams"][:5], _stream(5, "attachment", "ttf",
                                                                          filename="T.ttf")]}  # fmt: skip
    assert deliverable_problems(bad, master) == [  # type: ignore[arg-type]
        "attachment 0 (from stream 5 (attachment t:0, ttf)) has no mimetype",
        "timecode none, the master's is 01:00:00:00",
    ]


def test_a_matroska_stream_s_duration_is_read_from_its_duration_tag() -> None:
    text = (
        '{"format": {"duration": "2.100"}, "streams": ['
        '{"codec_type": "video", "codec_name": "h264", "nb_read_packets": "48", '
        '"tags": {"DURATION": "00:00:02.000000000"}}, '
        '{"codec_type": "audio", "tags": {"DURATION": "00:00:02.021000000"}}]}'
    )
    got = parse_streams(text)
    assert (got.duration_s, got.audio_s) == (2.0, (2.021,))


def test_the_container_choice_refuses_by_name_what_does_not_fit() -> None:
    assert container_choice(None, Codec.HEVC10, ladder=False, package=False) == ""
    assert container_choice("mp4", Codec.H264, ladder=False, package=False) == ""
    assert container_choice("mkv", Codec.HEVC10, ladder=False, package=False) == "mkv"
    assert container_choice("mkv", Codec.PRORES, ladder=False, package=False) == "mkv"
    with pytest.raises(SpecError, match="--container mkv with --package"):
        container_choice("mkv", Codec.H264, ladder=True, package=True)
    with pytest.raises(SpecError, match="--container mkv with --ladder"):
        container_choice("mkv", Codec.H264, ladder=True, package=False)
    with pytest.raises(SpecError, match="--container mov: the farm delivers h264 in MP4"):
        container_choice("mov", Codec.H264, ladder=False, package=False)


def test_an_mkv_spec_is_built_at_submit_taken_by_the_api_and_survives_json() -> None:
    import json

    from farm.core.spec import JobSpec
    from farm.media.master import Probed
    from farm.media.transcode_spec import build_transcode_spec
    from farm.web.api.answers import ApiError
    from farm.web.api.validate import job_spec

    # GIVEN an MKV master with a PGS track WHEN submitted with --container mkv
    shown = _mkv(_stream(4, "subtitle", "hdmv_pgs_subtitle", language="eng"))
    spec = build_transcode_spec(
        source_name="m.mkv", probed=Probed(info=MASTER, keyframes_pts=(0,), shown=shown),
        resolution="320x180", codec="hevc10", quality=None, encoder="auto", preset="medium",
        segment_frames=24, container="mkv",
    )  # fmt: skip
    # THEN the spec delivers an MKV, and the API and the spec's JSON keep it so
    assert (spec.container, spec.deliverable, spec.codec.container) == ("mkv", "mkv", "mp4")
    sent = json.loads(json.dumps(spec.to_json()))
    assert job_spec(sent, max_chunks=1000) == JobSpec.from_json(sent) == spec
    # AND the API refuses the same plan for an MP4, or a container it does not know
    for container, said in (("", "not what a submit plans"), ("avi", "container")):
        with pytest.raises(ApiError, match=said):
            job_spec({**sent, "container": container}, max_chunks=1000)

"""Every stream of a master planned at submit, mapped at the mux and checked on the deliverable
(farm.media.streams), from ffprobe's JSON."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from farm.core.errors import SpecError
from farm.core.sources import AudioStream, MasterInfo, MasterStream
from farm.media.master import check_interlace
from farm.media.streamcheck import check_plan, deliverable_problems
from farm.media.streamnotes import status_lines, stream_lines
from farm.media.streams import kept, parse_drop, plan_streams, with_plan
from farm.media.transcode_graph import SegmentCut, mux_argv, segment_filtergraph

VIDEO = {"index": 0, "codec_type": "video", "codec_name": "h264", "disposition": {}}


def _stream(index: int, kind: str, codec: str, **tags: Any) -> dict[str, Any]:
    disposition = {k: 1 for k in ("default", "forced") if tags.pop(k, False)}
    return {"index": index, "codec_type": kind, "codec_name": codec, "tags": tags,
            "disposition": disposition}  # fmt: skip


def _mkv(
    *extra: dict[str, Any], chapters: int = 2, timecode: str = "01:00:00:00"
) -> dict[str, Any]:
    """A Matroska master as ffprobe shows it: English 'Main' (default) and French
    'Commentary' AAC, an English SRT, chapters, a timecode tag."""
    return {
        "format": {"format_name": "matroska,webm", "tags": {"TIMECODE": timecode}},
        "streams": [
            VIDEO,
            _stream(1, "audio", "aac", language="eng", title="Main", default=True),
            _stream(2, "audio", "flac", language="fre", title="Commentary"),
            _stream(3, "subtitle", "subrip", language="eng", title="English"),
            *extra,
        ],
        "chapters": [{"id": n} for n in range(chapters)],
    }


MASTER = MasterInfo(
    container="matroska,webm", codec="h264", width=320, height=180, frame_count=48,
    avg_frame_rate="24/1", time_base="1/1000", start_pts=0, format_start_s=0.0,
    duration_s=2.0, vfr=False,
    audio=(AudioStream(index=0, codec="aac", channels=2, sample_rate=48000, start_s=0.0,
                       duration_s=2.0),
           AudioStream(index=1, codec="flac", channels=6, sample_rate=48000, start_s=0.0,
                       duration_s=2.0)),
)  # fmt: skip


def _planned(data: dict[str, Any], drop: str = "", container: str = "mp4") -> MasterInfo:
    return with_plan(MASTER, plan_streams("m.mkv", data, container, parse_drop(drop)))


def test_every_stream_is_kept_by_default_with_its_language_title_and_flags() -> None:
    # GIVEN a master with two audio tracks, an SRT, chapters and a timecode
    # WHEN it is planned for an MP4 deliverable
    master = _planned(_mkv())
    # THEN each stream is kept, AAC copied, FLAC encoded to AAC, SRT converted to mov_text
    assert [(s.index, s.kind, s.action) for s in master.streams] == [
        (1, "audio", "copy"), (2, "audio", "aac"), (3, "subtitle", "mov_text"),
    ]  # fmt: skip
    assert [(s.language, s.title, s.default) for s in master.streams] == [
        ("eng", "Main", True), ("fre", "Commentary", False), ("eng", "English", False),
    ]  # fmt: skip
    assert (master.chapters, master.timecode) == (2, "01:00:00:00")
    # AND submit lists each with what happens to it
    assert stream_lines(master) == [
        "stream 1 (audio a:0, aac, eng 'Main', default): copied",
        "stream 2 (audio a:1, flac, fre 'Commentary'): encoded to AAC",
        "stream 3 (subtitle s:0, subrip, eng 'English'): converted to mov_text",
        "chapters (2): copied",
        "timecode 01:00:00:00: carried",
    ]


def test_a_pgs_subtitle_is_refused_by_name_with_the_drop_that_delivers_without_it() -> None:
    pgs = _stream(4, "subtitle", "hdmv_pgs_subtitle", language="eng", title="Commentary")
    with pytest.raises(SpecError) as refused:
        _planned(_mkv(pgs))
    assert (
        "stream 4 (subtitle s:1, hdmv_pgs_subtitle, eng 'Commentary'): MP4 cannot hold PGS "
        "bitmap subtitles; add --drop s:1 to deliver without it"
    ) in str(refused.value)
    # WHEN --drop names it THEN it is dropped, said so, and the rest is kept
    master = _planned(_mkv(pgs), drop="s:1")
    assert [s.action for s in master.streams] == ["copy", "aac", "mov_text", "drop"]
    assert "stream 4 (subtitle s:1, hdmv_pgs_subtitle, eng 'Commentary'): dropped (--drop)" in (
        stream_lines(master)
    )


def test_dvd_subtitles_are_copied_into_mp4_and_refused_in_mov() -> None:
    dvd = _stream(4, "subtitle", "dvd_subtitle", language="deu")
    assert _planned(_mkv(dvd)).streams[-1].action == "copy"
    with pytest.raises(SpecError, match=r"MOV cannot hold dvd_subtitle subtitles; add --drop s:1"):
        _planned(_mkv(dvd), container="mov")


def test_fonts_and_unknown_data_are_refused_and_whole_kinds_can_be_dropped() -> None:
    font = _stream(4, "attachment", "ttf", filename="font.ttf")
    data = _stream(5, "data", "bin_data")
    with pytest.raises(SpecError) as refused:
        _planned(_mkv(font, data))
    assert "MP4 holds no attachments (fonts, images); add --drop t:0" in str(refused.value)
    assert "stream 5 (data d:0, bin_data)" in str(refused.value)
    master = _planned(_mkv(font, data), drop="attachments, d:0,subtitles,chapters,timecode")
    assert [s.action for s in master.streams] == ["copy", "aac", "drop", "drop", "drop"]
    assert (master.chapters, master.timecode, master.dropped) == (0, "", ("chapters", "timecode"))
    assert stream_lines(master)[-2:] == ["chapters: dropped (--drop)", "timecode: dropped (--drop)"]


def test_a_tmcd_track_is_carried_as_the_timecode() -> None:
    data = _mkv(_stream(4, "data", "tmcd", timecode="10:00:00;00"), timecode="")
    master = _planned(data)
    assert master.streams[-1].action == "timecode" and master.timecode == "10:00:00;00"
    assert kept(master, "subtitle") == [master.streams[2]]


@pytest.mark.parametrize(
    ("drop", "said"),
    [
        ("s:x", "name streams as KIND:N"),
        ("everything", "name streams as KIND:N"),
        ("s:4", "--drop s:4: m.mkv has no such stream"),
        ("attachments", "--drop attachments: m.mkv has no attachments"),
    ],
)
def test_a_drop_that_names_nothing_is_refused(drop: str, said: str) -> None:
    with pytest.raises(SpecError, match=said):
        _planned(_mkv(), drop=drop)


def test_the_mux_maps_each_kept_stream_with_its_tags_dispositions_chapters_and_timecode() -> None:
    master = _planned(_mkv(_stream(4, "subtitle", "ass", forced=True)), drop="a:1")
    argv = mux_argv(ffmpeg_bin="ffmpeg", list_file="/w/l.txt", master=Path("/m.mkv"),
                    out="/w/o.mp4", plan=master, offset_s=0.0, frames=48)  # fmt: skip
    at = argv.index("/w/o.mp4")
    maps = [argv[i + 1] for i, a in enumerate(argv) if a == "-map"]
    assert maps == ["0:v:0", "1:a:0", "1:s:0", "1:s:1"]
    assert argv[argv.index("-map_chapters") + 1] == "1"
    assert argv[argv.index("-timecode") + 1] == "01:00:00:00" and argv.index("-timecode") < at
    pairs = list(itertools.pairwise(argv))
    for pair in [("-c:a:0", "copy"), ("-c:s:0", "mov_text"), ("-c:s:1", "mov_text"),
                 ("-metadata:s:1", "language=eng"), ("-metadata:s:1", "title=Main"),
                 ("-metadata:s:1", "handler_name=Main"), ("-disposition:1", "default"),
                 ("-disposition:2", "0"), ("-disposition:3", "forced")]:  # fmt: skip
        assert pair in pairs, pair


def test_without_streams_to_carry_the_master_is_not_opened_and_no_chapters_are_made() -> None:
    master = _planned(_mkv(), drop="audio,subtitles,chapters,timecode")
    argv = mux_argv(ffmpeg_bin="ffmpeg", list_file="/w/l.txt", master=None, out="/w/o.mp4",
                    plan=master, offset_s=0.0, frames=48)  # fmt: skip
    assert argv.count("-i") == 1 and ("-map_chapters", "-1") in itertools.pairwise(argv)


def _output(master: MasterInfo) -> dict[str, Any]:
    """The deliverable a good mux makes, as ffprobe shows it (MP4: titles as handler names)."""
    streams = [VIDEO]
    for s in master.streams:
        if s.action in ("drop", "timecode"):
            continue
        codec = {"aac": "aac", "mov_text": "mov_text"}.get(s.action, s.codec)
        tags = {"language": s.language or "und", "handler_name": s.title or "SoundHandler"}
        streams.append({"codec_type": s.kind, "codec_name": codec, "tags": tags,
                        "disposition": {"default": int(s.default)}})  # fmt: skip
    streams.append({"codec_type": "data", "tags": {"timecode": master.timecode}})
    return {"streams": streams, "chapters": [{}] * master.chapters}


def test_the_stitch_finds_nothing_missing_in_a_good_deliverable_and_names_what_is() -> None:
    master = _planned(_mkv())
    assert deliverable_problems(_output(master), master) == []
    out = _output(master)
    out["streams"] = [s for s in out["streams"] if s.get("codec_type") != "subtitle"]
    out["streams"][2]["tags"]["language"] = "und"
    out["chapters"] = []
    out["streams"][-1]["tags"] = {}
    assert deliverable_problems(out, master) == [
        "audio 1 (from stream 2 (audio a:1, flac, fre 'Commentary')) has language none",
        "0 subtitle streams, the plan keeps 1",
        "0 chapters, the master's plan keeps 2",
        "timecode none, the master's is 01:00:00:00",
    ]


def test_a_plan_survives_the_spec_json_and_an_old_spec_keeps_its_audio() -> None:
    master = _planned(_mkv())
    assert MasterInfo.from_json(master.to_json()) == master
    old = {k: v for k, v in MASTER.to_json().items() if k not in ("streams", "dropped")}
    loaded = MasterInfo.from_json(old)
    assert [(s.kind_index, s.action) for s in kept(loaded, "audio")] == [(0, "copy"), (1, "aac")]
    assert status_lines({"master": master.to_json()})[0].startswith("streams stream 1 (audio")
    assert status_lines({}) == []


def test_the_api_takes_a_submit_s_plan_and_nothing_else() -> None:
    master = _planned(_mkv())
    check_plan(master, "mp4")
    bad: list[tuple[MasterStream, str]] = [
        (replace(master.streams[0], language="en;"), "three letters"),
        (replace(master.streams[0], title="a\nb"), "printable"),
        (replace(master.streams[0], action="mov_text"), "not what a submit plans"),
        (replace(master.streams[2], codec="-f lavfi"), "no codec name"),
        (replace(master.streams[2], kind="video"), "not what a submit plans"),
    ]
    for stream, said in bad:
        with pytest.raises(SpecError, match=said):
            check_plan(replace(master, streams=(stream,)), "mp4")
    with pytest.raises(SpecError, match="HH:MM:SS:FF"):
        check_plan(replace(master, timecode="1:00 -y"), "mp4")
    with pytest.raises(SpecError, match="only with deinterlace"):
        check_plan(replace(master, field_order="tt"), "mp4")


def test_an_interlaced_master_is_refused_unless_deinterlaced_with_bwdif_first() -> None:
    interlaced = replace(MASTER, field_order="tt")
    with pytest.raises(SpecError, match=r"interlaced \(top field first\).*add --deinterlace"):
        check_interlace("m.mkv", interlaced, deinterlace=False)
    assert check_interlace("m.mkv", interlaced, deinterlace=True).deinterlace
    cut = SegmentCut(first=0, end=24, total=48, rate=Fraction(25), start_pts=0, deinterlace=True)
    graph = segment_filtergraph(cut, 320, 180, nvenc=False)
    assert graph.startswith("bwdif=mode=send_frame:parity=auto:deint=all,setpts=PTS-0,fps=")


def test_the_api_takes_a_planned_spec_and_refuses_a_tampered_plan() -> None:
    import json

    from farm.media.master import Probed
    from farm.media.transcode_spec import build_transcode_spec
    from farm.web.api.answers import ApiError
    from farm.web.api.validate import job_spec

    spec = build_transcode_spec(
        source_name="m.mkv", probed=Probed(info=MASTER, keyframes_pts=(0,), shown=_mkv()),
        resolution="320x180", codec="h264", quality=None, encoder="auto", preset="medium",
        segment_frames=24,
    )  # fmt: skip
    sent = json.loads(json.dumps(spec.to_json()))
    assert job_spec(sent, max_chunks=1000).master == spec.master
    for field, value, said in (
        ("title", 7, "must be"),
        ("language", "-y -i", "three letters"),
        ("action", "copy", "not what a submit plans"),
        ("extra", "x", "fields a job spec does not"),
    ):
        bad = json.loads(json.dumps(sent))
        bad["master"]["streams"][1][field] = value
        with pytest.raises(ApiError, match=said):
            job_spec(bad, max_chunks=1000)


def test_dvd_cues_are_counted_and_refused_when_the_last_has_no_duration() -> None:
    from farm.media.streams import cue_counts

    dvd = _stream(4, "subtitle", "dvd_subtitle", language="deu")
    plan = plan_streams("m.mkv", _mkv(dvd), "mp4", frozenset())
    counted = cue_counts("m.mkv", plan, "mp4", lambda n: {1: "0,500,K_\n750,500,K_\n"}[n])
    assert [s.packets for s in counted.streams] == [0, 0, 0, 2]
    with pytest.raises(SpecError, match=r"s:1, dvd_subtitle, deu\): its cues carry no dur"):
        cue_counts("m.mkv", plan, "mp4", lambda n: "0,N/A,K_\n750,N/A,K_\n")
    out = _output(with_plan(MASTER, counted))
    out["streams"][4]["nb_frames"] = "1"
    assert deliverable_problems(out, with_plan(MASTER, counted)) == [
        "subtitle 1 (from stream 4 (subtitle s:1, dvd_subtitle, deu)) holds 1 cues of 2"
    ]


def test_an_mp4_masters_chapter_and_timecode_tracks_go_with_its_chapters_and_timecode() -> None:
    # GIVEN an MP4 master as the farm delivers one: its chapters in a QuickTime text track
    # (ffprobe: data, bin_data, tag text) and a tmcd track
    chapter_track = {**_stream(4, "data", "bin_data"), "codec_tag_string": "text"}
    tmcd = {**_stream(5, "data", "", timecode="01:00:00:00"), "codec_tag_string": "tmcd"}
    data = _mkv(chapter_track, tmcd)
    data["streams"][3]["codec_name"] = "mov_text"
    master = _planned(data)
    assert [s.action for s in master.streams] == ["copy", "aac", "copy", "chapters", "timecode"]
    check_plan(master, "mp4")
    # WHEN chapters and timecode are dropped THEN their tracks go with them
    dropped = _planned(data, drop="chapters,timecode")
    assert [s.action for s in dropped.streams][3:] == ["drop", "drop"]
    check_plan(dropped, "mp4")

"""`--package`: the packager's argv, the playlists the farm writes over ffmpeg's, the MPD's
subtitle sets, and what a package cannot carry (pure)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from farm.core.errors import SpecError
from farm.core.sources import MasterStream
from farm.media.ladder import check_package_streams
from farm.media.package import (
    AudioTrack,
    master_playlist,
    media_playlist,
    mpd_with_subtitles,
    package_argv,
    package_key,
    parse_playlist,
    safe_language,
    subtitle_playlist,
)
from tests.unit.test_transcode_spec import MASTER

WRITTEN = """#EXTM3U
#EXT-X-VERSION:7
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="group_A1",NAME="audio_2",DEFAULT=YES,URI="media_2.m3u8"
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="group_A1",NAME="audio_3",DEFAULT=NO,URI="media_3.m3u8"
#EXT-X-STREAM-INF:BANDWIDTH=829304,RESOLUTION=640x360,CODECS="avc1.64001e,mp4a.40.2",AUDIO="group_A1"
media_0.m3u8

#EXT-X-STREAM-INF:BANDWIDTH=445232,RESOLUTION=426x240,CODECS="avc1.640015,mp4a.40.2",AUDIO="group_A1"
media_1.m3u8
"""
MEDIA = """#EXTM3U
#EXT-X-VERSION:6
#EXT-X-TARGETDURATION:2
#EXT-X-MEDIA-SEQUENCE:1
#EXT-X-MAP:URI="init-0.m4s"
#EXTINF:2.000000,
#EXT-X-PROGRAM-DATE-TIME:2026-12-06T18:51:35.000+0000
chunk-0-00001.m4s
#EXTINF:0.500000,
#EXT-X-PROGRAM-DATE-TIME:2026-12-06T18:51:37.000+0000
chunk-0-00002.m4s
#EXT-X-ENDLIST
"""


def test_the_packager_cuts_cmaf_for_dash_and_hls_from_the_renditions_by_copy() -> None:
    argv = package_argv(ffmpeg_bin="ffmpeg", inputs=["/w/output.mp4", "/w/r1.mp4"], audio=2,
                        out_dir="/w/package", hls=True)  # fmt: skip
    assert argv[:9] == ["ffmpeg", "-format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2",
                        "-protocol_whitelist", "file", "-i", "file:/w/output.mp4",
                        "-format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2"]  # fmt: skip
    maps = [argv[i + 1] for i, a in enumerate(argv) if a == "-map"]
    assert maps == ["0:v:0", "1:v:0", "0:a:0", "0:a:1"]
    sets = argv[argv.index("-adaptation_sets") + 1]
    assert sets == "id=0,streams=0,1 id=1,streams=2 id=2,streams=3"  # a set per language
    assert (argv[argv.index("-c") + 1], argv[argv.index("-f") + 1]) == ("copy", "dash")
    assert (
        argv[argv.index("-hls_playlist") + 1] == "1"
        and argv[argv.index("-seg_duration") + 1] == "2"
    )
    assert argv[argv.index("-use_timeline") + 2] == "/w/package/manifest.mpd"


def test_the_master_playlist_names_each_language_and_keeps_ffmpegs_variants() -> None:
    audio = [AudioTrack(index=0, language="eng", default=True),
             AudioTrack(index=1, language="fra", title='Fran"çais')]  # fmt: skip
    subtitles = [AudioTrack(index=0, language="eng", forced=True)]
    written = master_playlist(WRITTEN, audio, "24.000", subtitles)
    assert written.splitlines()[:6] == [
        "#EXTM3U",
        "#EXT-X-VERSION:7",
        "#EXT-X-INDEPENDENT-SEGMENTS",
        '#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="audio",NAME="eng",LANGUAGE="eng",DEFAULT=YES,'
        'AUTOSELECT=YES,URI="media_2.m3u8"',
        '#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="audio",NAME="Français",LANGUAGE="fra",DEFAULT=NO,'
        'AUTOSELECT=YES,URI="media_3.m3u8"',
        '#EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subtitles",NAME="eng",LANGUAGE="eng",DEFAULT=NO,'
        'AUTOSELECT=YES,FORCED=YES,URI="subtitles-0.m3u8"',
    ]
    parsed = parse_playlist(written)
    assert [(a["RESOLUTION"], a["FRAME-RATE"], a["AUDIO"], a["SUBTITLES"], u)
            for a, u in parsed.variants] == [
        ("640x360", "24.000", "audio", "subtitles", "media_0.m3u8"),
        ("426x240", "24.000", "audio", "subtitles", "media_1.m3u8"),
    ]  # fmt: skip
    assert parsed.variants[0][0]["CODECS"] == "avc1.64001e,mp4a.40.2"


def test_a_master_playlist_that_lost_an_audio_track_is_refused() -> None:
    with pytest.raises(ValueError, match="lists 2 audio tracks, the output has 1"):
        master_playlist(WRITTEN, [AudioTrack(index=0)], "24.000")


def test_media_playlists_become_vod_without_the_packaging_clock() -> None:
    vod = media_playlist(MEDIA)
    assert "PROGRAM-DATE-TIME" not in vod and "#EXT-X-PLAYLIST-TYPE:VOD" in vod
    parsed = parse_playlist(vod)
    assert parsed.init == "init-0.m4s" and parsed.ended
    assert parsed.segments == [(2.0, "chunk-0-00001.m4s"), (0.5, "chunk-0-00002.m4s")]


def test_a_subtitle_track_is_one_webvtt_segment_the_videos_length() -> None:
    parsed = parse_playlist(subtitle_playlist("subtitles-0.vtt", 2.5))
    assert parsed.segments == [(2.5, "subtitles-0.vtt")] and parsed.ended
    assert "#EXT-X-TARGETDURATION:3" in subtitle_playlist("subtitles-0.vtt", 2.5)


def test_the_mpd_gains_a_text_set_per_subtitle_track() -> None:
    ns = "{urn:mpeg:dash:schema:mpd:2011}"
    mpd = ('<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011"><Period id="0">'
           '<AdaptationSet id="0" contentType="video"/><AdaptationSet id="1" contentType="audio"/>'
           "</Period></MPD>")  # fmt: skip
    root = ET.fromstring(mpd_with_subtitles(mpd, [AudioTrack(index=0, language="deu")]))
    text = root.findall(f"{ns}Period/{ns}AdaptationSet")[-1]
    assert (text.get("id"), text.get("contentType"), text.get("lang")) == ("2", "text", "deu")
    assert text.findtext(f"{ns}Representation/{ns}BaseURL") == "subtitles-0.vtt"


@pytest.mark.parametrize(
    ("tag", "kept"), [("eng", "eng"), ("und", ""), ('en"x', ""), ("pt-BR", "pt-br")]
)
def test_only_a_language_tag_reaches_a_playlist(tag: str, kept: str) -> None:
    assert safe_language(tag) == kept


def test_the_package_is_a_folder_among_the_jobs_outputs() -> None:
    assert package_key("j1") == "jobs/j1/output.package/"


def test_bitmap_subtitles_are_refused_for_a_package_with_the_drop_that_helps() -> None:
    pgs = MasterStream(index=2, kind="subtitle", kind_index=1, codec="dvd_subtitle", action="copy")
    text = MasterStream(index=1, kind="subtitle", kind_index=0, codec="subrip", action="mov_text")
    check_package_streams(replace(MASTER, streams=(text,)))
    with pytest.raises(SpecError, match=r"subtitles s:1 \(dvd_subtitle\) are pictures.*--drop s:1"):
        check_package_streams(replace(MASTER, streams=(text, pgs)))

"""Every stream of a master through a real local farm: audio tracks with their languages, titles
and default flags, subtitles as mov_text, chapters and timecode, checked on the fetched MP4 as a
player reads it; streams an MP4 cannot hold refused at submit or dropped with --drop; masters
that need care (interlaced, an edit list) handled."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest
import requests

from tests.conftest import LocalFarm
from tests.e2e.encode_media import (
    decoded_frames,
    make_dvd_subtitle_master,
    make_edit_list_master,
    make_interlaced_master,
    make_master,
    make_streams_master,
    psnr_per_frame,
    streams,
)
from tests.e2e.farmtools import ENCODE_SMALL, encode_small
from tests.e2e.test_web_live import _auth

pytestmark = pytest.mark.e2e


def _subtitle_text(path: Path) -> str:
    shown = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:s:0", "-f", "srt", "-"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return shown.stdout


def test_audio_tracks_subtitles_chapters_and_timecode_are_carried_into_the_mp4(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN an MKV master: eng 'Main' (default) and fra 'Commentary' audio, an English SRT,
    # two chapters and a timecode
    master = make_streams_master(tmp_path / "feature.mkv")
    # WHEN it is transcoded to an MP4 in four segments
    out = tmp_path / "feature.mp4"
    summary = encode_small(local_farm, master, out)
    # THEN submit listed every stream with what happens to it
    for line in ("stream 1 (audio a:0, aac, eng 'Main', default): copied",
                 "stream 2 (audio a:1, aac, fra 'Commentary'): copied",
                 "stream 3 (subtitle s:0, subrip, eng 'English'): converted to mov_text",
                 "chapters (2): copied", "timecode 01:00:00:00: carried"):  # fmt: skip
        assert line in summary["stderr"]
    # AND the output holds them as a player reads them
    got = streams(out)
    video = [s for s in got["streams"] if s["codec_type"] == "video"]
    assert int(video[0]["nb_read_packets"]) == 48 and summary["chunks_total"] == 4
    audio = [s for s in got["streams"] if s["codec_type"] == "audio"]
    assert [(a["tags"]["language"], a["tags"]["handler_name"], a["disposition"]["default"])
            for a in audio] == [("eng", "Main", 1), ("fra", "Commentary", 0)]  # fmt: skip
    subtitles = [s for s in got["streams"] if s["codec_type"] == "subtitle"]
    assert [(s["codec_name"], s["tags"]["language"]) for s in subtitles] == [("mov_text", "eng")]
    text = _subtitle_text(out)
    assert "Hello there" in text and "Second line" in text
    assert "00:00:00,500 --> 00:00:01,000" in text  # in its place against the first frame
    shown = subprocess.run(
        ["ffprobe", "-v", "error", "-show_chapters", "-show_streams", "-of", "json", str(out)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    data = json.loads(shown.stdout)
    assert [c["tags"]["title"] for c in data["chapters"]] == ["Opening", "Ending"]
    assert {s["tags"].get("timecode") for s in data["streams"]} >= {"01:00:00:00"}
    # AND farm status lists them, and its --json holds the plan as plain values
    status = local_farm.farm("status", summary["id"], check=True)
    assert "streams stream 2 (audio a:1, aac, fra 'Commentary'): copied" in status.stdout
    as_json = json.loads(local_farm.farm("status", summary["id"], "--json", check=True).stdout)
    planned = as_json["spec"]["master"]["streams"]
    assert [(s["kind"], s["language"], s["action"]) for s in planned] == [
        ("audio", "eng", "copy"), ("audio", "fra", "copy"), ("subtitle", "eng", "mov_text"),
    ]  # fmt: skip
    # AND the job page lists each stream with what happened to it, as farm status does
    page = requests.get(f"{local_farm.settings()['web_url']}/jobs/{summary['id']}",
                        auth=_auth(local_farm), timeout=30).text  # fmt: skip
    shown = re.findall(r'<li class="stream">([^<]*)</li>', page)
    said = [line.strip().removeprefix("streams ") for line in status.stdout.splitlines()
            if line.strip().startswith("streams ")]  # fmt: skip
    assert [html.unescape(line) for line in shown] == said and len(said) >= 3, page


def test_a_font_the_mp4_cannot_hold_is_refused_by_name_and_dropped_only_with_drop(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN an MKV master with a font attachment (as ASS subtitles bring)
    font = tmp_path / "Title.ttf"
    font.write_bytes(b"\x00\x01\x00\x00" + bytes(60))
    master = make_streams_master(tmp_path / "fonts.mkv", font=font)
    # WHEN it is submitted as it is THEN it is refused, naming the stream and the --drop
    refused = local_farm.farm("submit", str(master), *ENCODE_SMALL)
    assert refused.returncode == 2
    assert "stream 4 (attachment t:0, ttf" in refused.stderr
    assert "MP4 holds no attachments (fonts, images); add --drop t:0" in refused.stderr
    # WHEN --drop t:0,a:1 names it and the commentary THEN the rest is delivered, said so
    out = tmp_path / "fonts.mp4"
    summary = encode_small(local_farm, master, out, "--drop", "t:0,a:1")
    assert "stream 4 (attachment t:0, ttf): dropped (--drop)" in summary["stderr"]
    got = streams(out)
    assert [s["tags"]["language"] for s in got["streams"] if s["codec_type"] == "audio"] == ["eng"]
    assert [s["codec_name"] for s in got["streams"] if s["codec_type"] == "subtitle"] == [
        "mov_text"
    ]


def test_an_interlaced_master_is_refused_then_deinterlaced_frame_for_frame(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a 25 fps master coded as top-field-first fields
    master = make_interlaced_master(tmp_path / "tv.mp4")
    # WHEN submitted as it is THEN it is refused, saying what to do
    refused = local_farm.farm("submit", str(master), *ENCODE_SMALL)
    assert refused.returncode == 2 and "add --deinterlace" in refused.stderr
    # WHEN --deinterlace is given THEN every frame comes out, one per master frame
    out = tmp_path / "tv-out.mp4"
    summary = encode_small(local_farm, master, out, "--deinterlace")
    assert decoded_frames(out) == decoded_frames(master) == 25
    store = local_farm.store()
    manifests = [store.get_json(k) for k in store.keys(f"jobs/{summary['id']}/manifests/")]
    assert manifests and all(
        any("bwdif=mode=send_frame" in a for a in m["encoder"]["argv"]) for m in manifests
    )
    video = next(s for s in streams(out)["streams"] if s["codec_type"] == "video")
    assert video.get("field_order", "progressive") == "progressive"


def test_a_master_with_an_edit_list_encodes_the_frames_a_player_shows(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN an MP4 cut by stream copy at 0.5 s: its edit list hides the open GOP's lead-in
    source = make_master(tmp_path / "src.mp4", size="320x180", rate="24", seconds=2)
    master = make_edit_list_master(tmp_path / "cut.mp4", source, cut_s=0.5)
    shown = decoded_frames(master)
    assert shown < decoded_frames(source)
    # WHEN it is transcoded in segments
    out = tmp_path / "cut-out.mp4"
    encode_small(local_farm, master, out)
    # THEN it has exactly the frames a player shows, each the master's own (no shift)
    assert decoded_frames(out) == shown
    psnr = psnr_per_frame(out, master, (320, 180), tmp_path)
    assert len(psnr) == shown and min(psnr) >= 30, psnr


def test_dvd_bitmap_subtitles_are_copied_cue_for_cue_or_refused_without_durations(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN an MKV master with a German DVD subtitle track of two cues, without packet durations
    bare = make_dvd_subtitle_master(tmp_path / "dvd-bare.mkv", durations=False)
    # WHEN submitted THEN it is refused: MP4 would lose the last cue
    refused = local_farm.farm("submit", str(bare), *ENCODE_SMALL)
    assert refused.returncode == 2
    assert "stream 1 (subtitle s:0, dvd_subtitle, deu): its cues carry no durations" in (
        refused.stderr
    )
    # GIVEN the same cues with durations (as mkvmerge writes them) WHEN transcoded
    master = make_dvd_subtitle_master(tmp_path / "dvd.mkv")
    out = tmp_path / "dvd.mp4"
    summary = encode_small(local_farm, master, out)
    assert "stream 1 (subtitle s:0, dvd_subtitle, deu): copied" in summary["stderr"]
    # THEN the MP4 holds the bitmap track as it was, both cues
    subtitles = [s for s in streams(out)["streams"] if s["codec_type"] == "subtitle"]
    assert [(s["codec_name"], s["tags"]["language"], int(s["nb_read_packets"]))
            for s in subtitles] == [("dvd_subtitle", "deu", 2)]  # fmt: skip

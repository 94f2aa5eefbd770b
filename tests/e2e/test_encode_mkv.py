"""A Matroska deliverable (`--container mkv`) through a real local farm: every audio codec, ASS
styling, a bitmap subtitle track, a font attachment, chapters and the timecode kept as they are,
checked on the fetched output.mkv as a player reads it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LocalFarm
from tests.e2e.encode_media import CHAPTERS, FFMPEG, decoded_frames, make_dvd_subtitle_master
from tests.e2e.farmtools import ENCODE_SMALL, encode_small
from tests.e2e.player import play

pytestmark = pytest.mark.e2e

ASS = r"""[Script Info]
ScriptType: v4.00+
PlayResX: 320
PlayResY: 180

[V4+ Styles]
Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, Alignment, MarginL, MarginR, MarginV, Encoding
Style: Title,Farm Sans,24,&H0000FFFF,&H000000FF,&H00000000,&H00000000,1,0,0,0,100,100,0,0,1,1,0,2,10,10,10,1

[Events]
Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text
Dialogue: 0,0:00:00.50,0:00:01.00,Title,,0,0,0,,{\i1}Hello there
Dialogue: 0,0:00:01.25,0:00:01.75,Title,,0,0,0,,Second line
"""


def make_mkv_master(path: Path) -> Path:
    """encode_media's 2 s DVD-subtitle master (German bitmap cues), remuxed with English 'Main'
    FLAC (default) and French 'Commentary' AAC audio, a styled English ASS track (forced), a
    font attachment, two chapters and a 01:00:00:00 timecode."""
    dvd = make_dvd_subtitle_master(path.with_name("dvd-" + path.name))
    ass, meta, font = (path.with_suffix(s) for s in (".ass", ".ffmeta", ".ttf"))
    ass.write_text(ASS)
    meta.write_text(CHAPTERS)
    font.write_bytes(b"\x00\x01\x00\x00" + bytes(60))
    argv = [*FFMPEG, "-i", str(dvd), "-f", "lavfi", "-i", "sine=f=440:r=48000:d=2",
            "-f", "lavfi", "-i", "sine=f=660:r=48000:d=2", "-i", str(ass), "-i", str(meta),
            "-map", "0:v", "-map", "1:a", "-map", "2:a", "-map", "3:s", "-map", "0:s",
            "-map_metadata", "4", "-map_chapters", "4", "-c:v", "copy", "-c:s", "copy",
            "-c:a:0", "flac", "-c:a:1", "aac",
            "-metadata:s:a:0", "language=eng", "-metadata:s:a:0", "title=Main",
            "-disposition:a:0", "default",
            "-metadata:s:a:1", "language=fra", "-metadata:s:a:1", "title=Commentary",
            "-disposition:a:1", "0",
            "-metadata:s:s:0", "language=eng", "-metadata:s:s:0", "title=Styled",
            "-disposition:s:0", "forced",
            "-metadata:s:s:1", "title=Bitmap", "-disposition:s:1", "0",
            "-attach", str(font), "-metadata:s:t:0", "mimetype=application/x-truetype-font",
            "-timecode", "01:00:00:00", str(path)]  # fmt: skip
    subprocess.run(argv, check=True)
    return path


def _probe(path: Path) -> dict[str, Any]:
    shown = subprocess.run(
        ["ffprobe", "-v", "error", "-count_packets", "-show_streams", "-show_chapters",
         "-show_format", "-of", "json", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    data: dict[str, Any] = json.loads(shown.stdout)
    return data


def _shown(s: dict[str, Any]) -> tuple[object, ...]:
    tags, disposition = s.get("tags") or {}, s["disposition"]
    return (s["codec_type"], s["codec_name"], tags.get("language"), tags.get("title"),
            disposition["default"], disposition["forced"])  # fmt: skip


def test_an_mkv_deliverable_keeps_every_stream_as_it_is(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN an MKV master with FLAC and AAC audio, ASS and DVD bitmap subtitles, a font,
    # chapters and a timecode
    master = make_mkv_master(tmp_path / "feature.mkv")
    # WHEN it is submitted for an MP4 THEN the font is refused by name
    refused = local_farm.farm("submit", str(master), *ENCODE_SMALL)
    assert refused.returncode == 2 and "MP4 holds no attachments" in refused.stderr
    # WHEN it is transcoded with --container mkv
    out = tmp_path / "delivered.mkv"
    summary = encode_small(local_farm, master, out, "--container", "mkv")
    # THEN submit said each stream is kept as it is
    for line in ("stream 1 (audio a:0, flac, eng 'Main', default): copied",
                 "stream 3 (subtitle s:0, ass, eng 'Styled', forced): copied",
                 "stream 4 (subtitle s:1, dvd_subtitle, deu 'Bitmap'): copied",
                 "stream 5 (attachment t:0, ttf): copied", "chapters (2): copied",
                 "timecode 01:00:00:00: carried as the TIMECODE tag"):  # fmt: skip
        assert line in summary["stderr"], summary["stderr"]
    # AND the store holds output.mkv, fetched as Matroska, every frame there
    assert local_farm.ledger().job(summary["id"])["output"].endswith("/output.mkv")
    got = _probe(out)
    assert got["format"]["format_name"] == "matroska,webm"
    assert decoded_frames(out) == decoded_frames(master) > 0
    # AND every stream keeps its codec, language, title and dispositions
    want = [s for s in _probe(master)["streams"] if s["codec_type"] != "video"]
    kept = [s for s in got["streams"] if s["codec_type"] != "video"]
    assert (
        [_shown(s) for s in kept]
        == [_shown(s) for s in want]
        == [
            ("audio", "flac", "eng", "Main", 1, 0),
            ("audio", "aac", "fra", "Commentary", 0, 0),
            ("subtitle", "ass", "eng", "Styled", 0, 1),
            ("subtitle", "dvd_subtitle", "deu", "Bitmap", 0, 0),
            ("attachment", "ttf", None, None, 0, 0),
        ]
    )
    subtitles = [s for s in kept if s["codec_type"] == "subtitle"]
    assert [int(s["nb_read_packets"]) for s in subtitles] == [2, 2]
    styled = subprocess.run(["ffmpeg", "-v", "error", "-i", str(out), "-map", "0:s:0", "-c", "copy",
                             "-f", "ass", "-"], capture_output=True, text=True, check=True)  # fmt: skip
    assert "Style: Title,Farm Sans" in styled.stdout  # the ASS styling, as it was
    font = kept[-1]["tags"]
    assert (font["filename"], font["mimetype"]) == ("feature.ttf", "application/x-truetype-font")
    assert [c["tags"]["title"] for c in got["chapters"]] == ["Opening", "Ending"]
    assert got["format"]["tags"]["TIMECODE"] == "01:00:00:00"
    # AND farm status says the same of each stream
    status = local_farm.farm("status", summary["id"], check=True).stdout
    assert "streams stream 5 (attachment t:0, ttf): copied" in status
    # AND the job page plays it: Chromium decodes the MKV past its first second
    player = play(local_farm, f"/jobs/{summary['id']}", tmp_path, "video")
    assert not player["error"] and player["time"] >= 1.0 and player["height"] > 0, player

"""Every ffmpeg and ffprobe command line that reads an input keeps it to local files and to the
demuxers that input may be, and the worker's boxes around them have no network (argv by list
equality, and the container named when the whitelist refuses one)."""

from __future__ import annotations

import json
import logging
from fractions import Fraction
from pathlib import Path

import pytest

from farm.adapters.sandbox import wrap
from farm.adapters.settings import Settings
from farm.core.errors import SpecError
from farm.media.ffgraph import EncodeSettings, concat_argv, frames_to_segment_argv
from farm.media.master import container_refusal, parse_master, refused_container
from farm.media.probe import (
    FARM_FORMATS,
    MASTER_FORMATS,
    format_argv,
    input_name,
    packets_argv,
    streams_argv,
    submit_box,
    submit_capture,
    whitelists,
)
from farm.media.transcode_graph import SegmentCut, mux_argv, segment_argv
from tests.unit.test_streams import MASTER
from workers.host.box import media_box

SETTINGS = EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24))
CUT = SegmentCut(first=0, end=24, total=48, rate=Fraction(24), start_pts=0)
MASTERS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,mxf,mpegts,avi"
"""The demuxers a master may be: QuickTime/MP4, Matroska/WebM, MXF, MPEG-TS, AVI."""


def option(argv: list[str], flag: str) -> list[str]:
    """Every value `flag` takes in `argv`, in order (one per input)."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_a_master_is_never_one_of_the_demuxers_that_open_other_files_or_urls() -> None:
    listed = {name for entry in MASTER_FORMATS for name in entry.split(",")}
    assert ",".join(MASTER_FORMATS) == MASTERS
    refused = {"hls", "applehttp", "dash", "concat", "image2", "data", "tee", "subfile", "sdp",
               "rtsp", "ffmetadata", "webm_dash_manifest", "imf", "mpjpeg", "lavfi"}  # fmt: skip
    assert not listed & refused


def test_whitelists_allow_the_file_protocol_alone_and_the_stores_url_its_own_scheme() -> None:
    assert whitelists("file:/cache/m.mov", MASTER_FORMATS) == {
        "protocol_whitelist": "file",
        "format_whitelist": MASTERS,
    }
    assert whitelists("https://s3/o.mp4?X-Amz-Signature=s", FARM_FORMATS)["protocol_whitelist"] == (
        "https,tls,tcp"
    )


def test_the_segment_ffmpeg_reads_the_local_master_as_one_mastering_file() -> None:
    argv = segment_argv(
        ffmpeg_bin="ffmpeg", source=Path("/cache/m.mp4"), out="/w/s.mp4", cut=CUT,
        width=64, height=48, settings=SETTINGS,
    )  # fmt: skip
    assert option(argv, "-i") == ["file:/cache/m.mp4"]
    assert option(argv, "-protocol_whitelist") == ["file"]
    assert option(argv, "-format_whitelist") == [MASTERS]
    assert argv.index("-format_whitelist") < argv.index("-i")  # an input option: before -i


def test_the_mux_reads_the_farms_segments_and_the_local_masters_audio_alone() -> None:
    argv = mux_argv(
        ffmpeg_bin="ffmpeg", list_file="/w/l.txt", master=Path("/cache/m.mov"), out="/w/o.mp4",
        plan=MASTER, offset_s=0.0, frames=48,
    )  # fmt: skip
    assert option(argv, "-i") == ["/w/l.txt", "file:/cache/m.mov"]
    assert option(argv, "-protocol_whitelist") == ["file", "file"]
    assert option(argv, "-format_whitelist") == ["concat,mov,mp4,m4a,3gp,3g2,mj2", MASTERS]


def test_the_render_segment_and_the_stitch_read_local_frames_and_segments_alone() -> None:
    frames = frames_to_segment_argv(
        ffmpeg_bin="ffmpeg", pattern=Path("/w/seq/%06d.png"), out=Path("/w/s.mp4"),
        settings=SETTINGS, frame_count=24,
    )  # fmt: skip
    assert (option(frames, "-protocol_whitelist"), option(frames, "-format_whitelist")) == (
        ["file"],
        ["image2"],
    )
    joined = concat_argv(ffmpeg_bin="ffmpeg", list_file=Path("/w/l.txt"), out=Path("/w/o.mp4"),
                         frames=48)  # fmt: skip
    assert (option(joined, "-protocol_whitelist"), option(joined, "-format_whitelist")) == (
        ["file"],
        ["concat,mov,mp4,m4a,3gp,3g2,mj2"],
    )


def test_every_ffprobe_argv_carries_the_whitelists_before_its_input() -> None:
    for argv in (
        format_argv("ffprobe", "file:/m.mov", MASTER_FORMATS),
        packets_argv("ffprobe", "file:/m.mov", MASTER_FORMATS),
        streams_argv("ffprobe", "file:/w/s.mp4"),
    ):
        assert option(argv, "-protocol_whitelist") == ["file"]
        assert argv.index("-format_whitelist") < len(argv) - 1
    assert option(streams_argv("ffprobe", "file:/w/s.mp4"), "-format_whitelist") == [
        "mov,mp4,m4a,3gp,3g2,mj2"
    ]


def test_the_container_the_whitelist_refused_is_read_from_ffmpegs_words() -> None:
    said = (
        "[hls @ 0x55e4978b0280] Format not on whitelist 'mov,mp4,m4a,3gp,3g2,mj2,matroska'\n"
        "file:/cache/ab.mp4: Invalid argument\n"
    )
    assert refused_container(said) == "hls"
    assert refused_container("Format not on whitelist 'mov'\n") == "unlisted"
    assert refused_container("file:/m.mov: Invalid data found when processing input\n") == ""


def test_a_refusal_names_the_container_the_allowed_ones_and_what_to_do() -> None:
    text = container_refusal("master.mp4", "hls")
    assert text.startswith("master.mp4: its container is 'hls'")
    assert MASTER_FORMATS[0] in text and "mxf" in text and "ffmpeg -i IN -c copy" in text


def test_a_probe_answer_in_another_container_is_refused_at_submit_by_name() -> None:
    """The whitelist stops it inside ffprobe first; the parse is the record of the rule."""
    answer = json.dumps({"format": {"format_name": "hls"}, "streams": [{"codec_type": "video"}]})
    with pytest.raises(SpecError, match=r"master.mp4: its container is 'hls'"):
        parse_master("master.mp4", answer, "0,1,K_")


def test_the_workers_ffmpeg_runs_boxed_without_network_on_its_own_folders(tmp_path: Path) -> None:
    master, work = tmp_path / "cache" / "m.mp4", tmp_path / "work"
    box = media_box(Settings(), writable=(work,), readable=(master,))
    assert box is not None and box.devices == ()  # GPUs only for an NVENC encode
    argv = wrap(
        segment_argv(ffmpeg_bin="ffmpeg", source=master, out=str(work / "s.mp4"), cut=CUT,
                     width=64, height=48, settings=SETTINGS),
        box,
    )  # fmt: skip
    assert argv[0].endswith("bwrap") and "--unshare-all" in argv  # every namespace: net too
    assert "--share-net" not in argv
    assert str(master) in option(argv, "--ro-bind") and option(argv, "--bind") == [str(work)]
    boxed = argv[argv.index("--") + 1 :]
    assert boxed[0] == "ffmpeg" and option(boxed, "-protocol_whitelist") == ["file"]
    assert media_box(Settings(sandbox="off"), writable=(work,)) is None


def test_the_submits_probe_is_boxed_as_the_workers_with_a_temporary_home(tmp_path: Path) -> None:
    """At submit: the master read-only, no network, no GPU, a temporary folder the only one
    written (removed after), and the master's whitelists inside."""
    master = tmp_path / "shots" / "master.mov"
    with submit_box(Settings(), master) as box:
        assert box is not None and box.devices == ()
        home = box.writable[0]
        assert home.is_dir() and home.name.startswith("farm-probe-")
        argv = wrap(format_argv("ffprobe", input_name(master), MASTER_FORMATS), box)
    assert not home.exists()
    assert argv[0].endswith("bwrap") and "--unshare-all" in argv and "--share-net" not in argv
    assert str(master) in option(argv, "--ro-bind") and option(argv, "--bind") == [str(home)]
    boxed = argv[argv.index("--") + 1 :]
    assert option(boxed, "-protocol_whitelist") == ["file"]
    assert option(boxed, "-format_whitelist") == [MASTERS]


def test_with_the_box_off_the_submits_probe_says_once_that_it_runs_unboxed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING),
        submit_box(Settings(sandbox="off"), tmp_path / "m.mov") as box,
    ):
        assert box is None
    said = [r.getMessage() for r in caplog.records if r.name == "farm.media.probe"]
    assert said == [
        "m.mov is probed without a box (FARM_SANDBOX=off): only ffprobe's whitelists and time "
        "limits keep it to that file"
    ]


def test_a_probe_at_submit_past_its_time_limit_refuses_the_master_in_words() -> None:
    """A master that keeps ffprobe reading (a stalled network mount, a crafted index) is killed
    at the limit and refused with what to check, not a traceback."""
    with pytest.raises(SpecError, match=r"^m\.mov: sleep did not finish reading it in 1 s"):
        submit_capture(["sleep", "60"], 1, None, "m.mov")

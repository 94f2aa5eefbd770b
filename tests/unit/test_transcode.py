import json

import pytest

from farm.core.errors import PermanentError
from farm.core.sources import MasterInfo
from farm.media.master import Probed
from farm.media.probe import Streams, parse_streams
from farm.media.transcode_spec import build_transcode_spec
from workers.phases.transcode import pick_encoder, segment_cut
from workers.phases.transcode_stitch import check_output, check_segments

MASTER = MasterInfo(
    container="mov,mp4", codec="h264", width=1920, height=1080, frame_count=96,
    avg_frame_rate="24000/1001", time_base="1/24000", start_pts=0, format_start_s=0.0,
    duration_s=4.004, vfr=False,
)  # fmt: skip


def _spec(encoder: str, codec: str = "hevc"):  # type: ignore[no-untyped-def]
    return build_transcode_spec(
        source_name="m.mov", probed=Probed(info=MASTER, keyframes_pts=(0, 30030, 60060)),
        resolution="1280x720", codec=codec, quality=None, encoder=encoder, preset="medium",
        segment_frames=24,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("choice", "nvenc", "expected"),
    [
        ("auto", False, "libx265"),
        ("auto", True, "hevc_nvenc"),
        ("software", True, "libx265"),
        ("nvenc", True, "hevc_nvenc"),
    ],
)
def test_the_encoder_follows_the_choice_and_the_probe(
    choice: str, nvenc: bool, expected: str
) -> None:
    assert pick_encoder(_spec(choice), nvenc, "") == expected


def test_nvenc_on_a_worker_without_one_is_a_permanent_error_that_says_why() -> None:
    with pytest.raises(PermanentError, match="no working NVENC \\(no NVIDIA GPU\\)"):
        pick_encoder(_spec("nvenc"), False, "no NVIDIA GPU")


def test_a_segment_cut_takes_its_frames_and_seek_point_from_the_spec() -> None:
    master = _spec("auto").master
    assert master is not None
    cut = segment_cut(master, list(range(72, 96)), 24)
    assert (cut.first, cut.end, cut.total, cut.seek_s) == (72, 96, 96, 1.25125)


def test_a_chunk_planned_off_the_segment_grid_decodes_from_the_start() -> None:
    master = _spec("auto").master
    assert master is not None
    assert segment_cut(master, list(range(70, 80)), 24).seek_s == 0.0


def _streams(**kw: object) -> Streams:
    base = dict(
        codec="hevc",
        width=1280,
        height=720,
        pix_fmt="yuv420p",
        rate="24000/1001",
        time_base="1/24000",
        frames=24,
        duration_s=1.001,
        audio_s=(),
    )
    return Streams(**{**base, **kw})  # type: ignore[arg-type]


def test_segments_alike_pass_and_an_odd_one_is_named() -> None:
    enc = [{"name": "libx265", "quality": 22, "preset": "medium"}] * 2
    check_segments([_streams(), _streams()], _spec("auto"), enc)
    with pytest.raises(PermanentError, match="segment 1 is hevc 1280x720 yuv420p10le"):
        check_segments([_streams(), _streams(pix_fmt="yuv420p10le")], _spec("auto"), enc)


def test_segments_from_different_encoders_are_refused() -> None:
    enc = [{"name": "libx265", "quality": 22, "preset": "medium"},
           {"name": "hevc_nvenc", "quality": 23, "preset": "medium"}]  # fmt: skip
    with pytest.raises(PermanentError, match="different encoders"):
        check_segments([_streams(), _streams()], _spec("auto"), enc)


def test_the_output_must_match_the_master_frame_for_frame() -> None:
    check_output(_streams(frames=96, duration_s=4.004), _spec("auto"), MASTER)
    with pytest.raises(PermanentError, match="95 frames, the master has 96"):
        check_output(_streams(frames=95, duration_s=3.963), _spec("auto"), MASTER)


def test_parse_streams_reads_the_video_and_every_audio_duration() -> None:
    text = json.dumps({
        "streams": [
            {"codec_type": "video", "codec_name": "hevc", "width": 3840, "height": 2160,
             "pix_fmt": "yuv420p", "r_frame_rate": "24000/1001", "time_base": "1/24000",
             "nb_read_packets": "96", "duration": "4.004000"},
            {"codec_type": "audio", "duration": "4.000000"},
        ],
        "format": {"duration": "4.004"},
    })  # fmt: skip
    got = parse_streams(text)
    assert (got.frames, got.width, got.duration_s, got.audio_s) == (96, 3840, 4.004, (4.0,))

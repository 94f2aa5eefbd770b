import json
from fractions import Fraction

import pytest

from farm.core.errors import SpecError
from farm.core.sources import MasterInfo
from farm.media.master import output_rate, parse_master, parse_packets, seek_points


def _streams(video: dict[str, object] | None = None, audio: bool = True, **fmt: object) -> str:
    streams: list[dict[str, object]] = []
    if video is not None:
        streams.append(
            {
                "codec_type": "video",
                "codec_name": "h264",
                "width": 1920,
                "height": 1080,
                "time_base": "1/24000",
                "avg_frame_rate": "24000/1001",
                **video,
            }
        )
    if audio:
        streams.append(
            {
                "codec_type": "audio",
                "codec_name": "aac",
                "channels": 2,
                "sample_rate": "48000",
                "start_time": "0.000000",
                "duration": "4.000000",
            }
        )
    return json.dumps(
        {
            "streams": streams,
            "format": {"format_name": "mov,mp4,m4a,3gp,3g2,mj2", "start_time": "0.0", **fmt},
        }
    )


def _packets(pts: list[int], duration: int, key_every: int) -> str:
    return "\n".join(
        f"{p},{duration},{'K_' if i % key_every == 0 else '__'}" for i, p in enumerate(pts)
    )


CFR = [i * 1001 for i in range(96)]


def test_packets_are_sorted_into_presentation_order_and_discarded_ones_dropped() -> None:
    csv = "0,1001,K_\n3003,1001,__\n1001,1001,__\n2002,1001,__D\n4004,1001,K_\nN/A,1001,__\n"
    pts, keys, last = parse_packets(csv)
    assert pts == [0, 1001, 3003, 4004]
    assert keys == [0, 4004]
    assert last == 1001


def test_a_constant_rate_master_is_read_exactly() -> None:
    probed = parse_master("m.mov", _streams({}), _packets(CFR, 1001, 30))
    info = probed.info
    assert (info.frame_count, info.avg_frame_rate, info.time_base) == (96, "24000/1001", "1/24000")
    assert (info.width, info.height, info.codec, info.vfr) == (1920, 1080, "h264", False)
    assert info.duration_s == pytest.approx(4.004)
    assert probed.keyframes_pts == (0, 30030, 60060, 90090)
    assert [(a.codec, a.channels, a.sample_rate, a.duration_s) for a in info.audio] == [
        ("aac", 2, 48000, 4.0)
    ]


def test_millisecond_timestamps_of_a_mkv_are_not_taken_for_a_variable_rate() -> None:
    pts = [21 + round(i * 1001 / 24) for i in range(96)]
    info = parse_master("m.mkv", _streams({"time_base": "1/1000"}), _packets(pts, 42, 30)).info
    assert not info.vfr
    assert info.start_pts == 21
    assert info.frame_count == 96


def test_gaps_in_the_timestamps_make_a_variable_rate_master_at_its_average_rate() -> None:
    pts = [i * 512 for i in range(72) if i % 5 != 2]
    info = parse_master(
        "v.mp4",
        _streams({"time_base": "1/12288", "avg_frame_rate": "0/0"}),
        _packets(pts, 512, 10),
    ).info
    assert info.vfr
    assert info.frame_count == len(pts)
    assert float(Fraction(info.avg_frame_rate)) * info.duration_s == pytest.approx(len(pts))


def test_a_file_without_video_is_refused_with_what_it_holds() -> None:
    with pytest.raises(SpecError, match=r"no video stream .*audio"):
        parse_master("a.m4a", _streams(None), "")


def test_album_art_is_not_a_video_stream() -> None:
    art = _streams({"disposition": {"attached_pic": 1}})
    with pytest.raises(SpecError, match="no video stream"):
        parse_master("song.m4a", art, "0,1,K_")


def test_a_video_stream_without_frames_is_refused() -> None:
    with pytest.raises(SpecError, match="has no frames"):
        parse_master("empty.mov", _streams({}), "")


def test_output_rate_snaps_near_misses_to_broadcast_rates() -> None:
    assert output_rate(Fraction(2397, 100), True, 0, Fraction(0)) == Fraction(24000, 1001)
    assert output_rate(Fraction(30000, 1001), False, 90, Fraction(3)) == Fraction(30000, 1001)
    assert output_rate(Fraction(58, 3), True, 58, Fraction(3)) == Fraction(58, 3)


def test_each_segment_seeks_one_keyframe_before_the_one_its_first_frame_needs() -> None:
    probed = parse_master("m.mov", _streams({}), _packets(CFR, 1001, 30))
    info = seek_points(probed, 24)
    # segments start at frames 0, 24, 48, 72; keyframes at frames 0, 30, 60, 90
    assert info.seek_pts == (0, 0, 0, 30030)


def test_master_info_round_trips_through_json() -> None:
    info = seek_points(parse_master("m.mov", _streams({}), _packets(CFR, 1001, 30)), 24)
    assert MasterInfo.from_json(json.loads(json.dumps(info.to_json()))) == info

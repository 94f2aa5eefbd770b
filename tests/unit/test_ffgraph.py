from fractions import Fraction
from pathlib import Path

from farm.core.spec import fps_fraction
from farm.media.ffgraph import (
    EncodeSettings,
    choose_encoder,
    concat_argv,
    concat_list,
    frames_to_segment_argv,
    moov_reserve_bytes,
)


def test_ntsc_rates_are_exact_fractions() -> None:
    assert fps_fraction(23.976) == Fraction(24000, 1001)
    assert fps_fraction(29.97) == Fraction(30000, 1001)
    assert fps_fraction(24) == Fraction(24)


def test_encoder_choice_follows_the_probe() -> None:
    assert choose_encoder("hevc", nvenc=True) == "hevc_nvenc"
    assert choose_encoder("hevc", nvenc=False) == "libx265"
    assert choose_encoder("h264", nvenc=False) == "libx264"


def test_x264_segment_is_one_closed_gop_of_exact_length() -> None:
    settings = EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24))
    argv = frames_to_segment_argv(
        ffmpeg_bin="ffmpeg",
        pattern=Path("/w/%06d.png"),
        out=Path("/w/s.mp4"),
        settings=settings,
        frame_count=8,
    )
    assert argv == [
        "ffmpeg", "-format_whitelist", "image2", "-framerate", "24",
        "-protocol_whitelist", "file", "-start_number", "0", "-i", "/w/%06d.png",
        "-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709",
        "-crf", "20", "-g", "8", "-pix_fmt", "yuv420p", "-preset", "medium",
        "-r", "24", "-vcodec", "libx264", "-vf",
        "scale=out_color_matrix=bt709:out_range=tv,"
        "setparams=colorspace=bt709:color_primaries=bt709:color_trc=bt709:range=tv",
        "-vframes", "8", "-video_track_timescale", "24000",
        "-x264opts", "no-scenecut:open-gop=0", "/w/s.mp4",
        "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
    ]  # fmt: skip


def test_nvenc_segment_forces_idr_and_tags_hevc() -> None:
    settings = EncodeSettings(codec="hevc", encoder="hevc_nvenc", fps=Fraction(24000, 1001))
    argv = frames_to_segment_argv(
        ffmpeg_bin="ffmpeg", pattern=Path("p"), out=Path("o.mp4"), settings=settings, frame_count=10
    )
    assert argv[argv.index("-vcodec") + 1] == "hevc_nvenc"
    assert argv[argv.index("-forced-idr") + 1] == "1"
    assert argv[argv.index("-tag:v") + 1] == "hvc1"
    assert argv[argv.index("-video_track_timescale") + 1] == "24000"
    assert argv[argv.index("-r") + 1] == "24000/1001"


def test_concat_list_durations_add_up_exactly() -> None:
    fps = Fraction(24000, 1001)
    segments = [(Path(f"/w/{i}.mp4"), Fraction(10) / fps) for i in range(3)]
    text = concat_list(segments)
    durations = [
        Fraction(line.split()[1]) for line in text.splitlines() if line.startswith("duration")
    ]
    assert abs(sum(durations) - 30 / fps) < Fraction(1, 1_000_000)
    assert text.splitlines()[0] == "file '/w/0.mp4'"


def test_concat_list_escapes_quotes() -> None:
    assert "file '/w/it'\\''s.mp4'" in concat_list([(Path("/w/it's.mp4"), Fraction(1))])


def test_concat_is_a_stream_copy() -> None:
    argv = concat_argv(ffmpeg_bin="ffmpeg", list_file=Path("l.txt"), out=Path("o.mp4"), frames=240)
    assert argv[argv.index("-f") + 1] == "concat"
    assert argv[argv.index("-c") + 1] == "copy"


def test_the_stitch_reserves_room_for_the_index_at_the_front() -> None:
    argv = concat_argv(ffmpeg_bin="ffmpeg", list_file=Path("l.txt"), out=Path("o.mp4"), frames=240)
    assert argv[argv.index("-moov_size") + 1] == str(moov_reserve_bytes(240))
    assert "-movflags" not in argv  # no second pass over the output
    assert moov_reserve_bytes(24_000, 47_000) == 64 * 1024 + 48 * 71_000

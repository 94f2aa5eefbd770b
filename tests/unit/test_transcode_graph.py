from fractions import Fraction
from pathlib import Path

from farm.core.sources import AudioStream, MasterInfo
from farm.media.ffgraph import EncodeSettings
from farm.media.transcode_graph import (
    SegmentCut,
    default_quality,
    mux_argv,
    seek_seconds,
    segment_argv,
    segment_filtergraph,
)

NTSC = Fraction(24000, 1001)
GLOBAL = ["-hide_banner", "-nostdin", "-loglevel", "error", "-y"]
MASTER_ONLY = [
    "-protocol_whitelist", "file", "-format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,mxf,mpegts,avi",
]  # fmt: skip
"""A master's input: its own file alone, in a mastering container alone."""
SEGMENTS_ONLY = [
    "-protocol_whitelist",
    "file",
    "-format_whitelist",
    "concat,mov,mp4,m4a,3gp,3g2,mj2",
]
"""The concat list the stitch wrote: local files, the farm's own MP4/MOV segments."""


FLAGS = {"-an", "-sn", "-dn", "-noaccurate_seek", "-copyts"}
"""Options that take no value."""


def options(args: list[str]) -> list[tuple[str, ...]]:
    """Options as (flag,) or (flag, value), sorted, except -map (its order numbers the streams)."""
    found, i = [], 0
    while i < len(args):
        width = 1 if args[i] in FLAGS else 2
        found.append(tuple(args[i : i + width]))
        i += width
    return sorted(o for o in found if o[0] != "-map") + [o for o in found if o[0] == "-map"]


def split(argv: list[str], out: str, globals_: list[str]) -> tuple[list[list[str]], list[str]]:
    """(each input's options ending with its -i, the output's options): what ffmpeg reads,
    whatever order ffmpeg-python writes keyword arguments in. Checks the program, the output
    file and the global options at the end."""
    assert argv[0] == "ffmpeg" and argv[-len(globals_) :] == globals_
    out_at = argv.index(out)
    inputs, start = [], 1
    for at in [n for n, a in enumerate(argv[:out_at]) if a == "-i"]:
        inputs.append([*argv[start:at], "-i", argv[at + 1]])
        start = at + 2
    return inputs, argv[start:out_at]


def _cut(first: int, end: int, total: int = 96, seek_s: float = 0.0) -> SegmentCut:
    return SegmentCut(first=first, end=end, total=total, rate=NTSC, start_pts=21, seek_s=seek_s)


def test_a_middle_segment_keeps_grid_frames_first_to_end_then_scales_with_lanczos() -> None:
    assert segment_filtergraph(_cut(24, 48), 3840, 2160, nvenc=False) == (
        "setpts=PTS-21,fps=fps=24000/1001,trim=start_pts=24:end_pts=48,setpts=PTS-STARTPTS,"
        "scale=w=3840:h=2160:flags=lanczos,format=yuv420p"
    )


def test_the_last_segment_pads_a_frame_short_grid_before_trimming() -> None:
    assert "tpad=stop_mode=clone:stop=2,trim=start_pts=72:end_pts=96" in segment_filtergraph(
        _cut(72, 96), 1280, 720, nvenc=False
    )


def test_nvenc_uploads_the_frames_and_scales_them_with_scale_cuda() -> None:
    graph = segment_filtergraph(_cut(0, 24), 3840, 2160, nvenc=True)
    assert graph.endswith(
        "format=nv12,hwupload_cuda,scale_cuda=w=3840:h=2160:interp_algo=lanczos:format=yuv420p"
    )


def test_software_segment_seeks_to_a_keyframe_of_the_local_master_and_copies_timestamps() -> None:
    settings = EncodeSettings(codec="hevc", encoder="libx265", fps=NTSC, quality=22, preset="fast")
    argv = segment_argv(
        ffmpeg_bin="ffmpeg",
        source=Path("/cache/m.mov"),
        out="/w/00001.mp4",
        cut=_cut(24, 48, seek_s=1.25125),
        width=3840,
        height=2160,
        settings=settings,
    )
    [reading], writing = split(argv, "/w/00001.mp4", [*GLOBAL, "-copyts"])
    assert reading[-2:] == ["-i", "file:/cache/m.mov"]
    assert options(reading[:-2]) == options([*MASTER_ONLY, "-noaccurate_seek", "-ss", "1.251250"])
    assert options(writing) == options([
        "-map", "0:v:0", "-an", "-sn", "-dn",
        "-vf", segment_filtergraph(_cut(24, 48), 3840, 2160, nvenc=False),
        "-frames:v", "24", "-fps_mode", "passthrough", "-map_metadata", "-1", "-map_chapters", "-1",
        "-vcodec", "libx265", "-pix_fmt", "yuv420p", "-g", "24",
        "-video_track_timescale", "24000", "-crf", "22", "-preset", "fast",
        "-x265-params", "keyint=24:min-keyint=24:scenecut=0:open-gop=0:log-level=error",
        "-tag:v", "hvc1",
    ])  # fmt: skip


def test_nvenc_segment_from_a_local_file_starts_without_a_seek() -> None:
    settings = EncodeSettings(codec="h264", encoder="h264_nvenc", fps=NTSC, quality=21)
    argv = segment_argv(
        ffmpeg_bin="ffmpeg",
        source=Path("/cache/m.mov"),
        out="/w/00000.mp4",
        cut=_cut(0, 24),
        width=1920,
        height=1080,
        settings=settings,
    )
    hw = ["-init_hw_device", "cuda=gpu:0", "-filter_hw_device", "gpu"]
    [reading], writing = split(argv, "/w/00000.mp4", [*GLOBAL, "-copyts", *hw])
    assert options(reading[:-2]) == options(MASTER_ONLY)
    assert reading[-2:] == ["-i", "file:/cache/m.mov"]
    assert options(writing) == options([
        "-map", "0:v:0", "-an", "-sn", "-dn",
        "-vf", segment_filtergraph(_cut(0, 24), 1920, 1080, nvenc=True),
        "-frames:v", "24", "-fps_mode", "passthrough", "-map_metadata", "-1", "-map_chapters", "-1",
        "-vcodec", "h264_nvenc", "-g", "24",
        "-video_track_timescale", "24000", "-preset", "p5", "-rc", "vbr", "-cq", "21",
        "-b:v", "0", "-forced-idr", "1",
    ])  # fmt: skip


def test_svtav1_segments_are_closed_gops_without_scene_cut_keyframes() -> None:
    settings = EncodeSettings(codec="av1", encoder="libsvtav1", fps=NTSC, quality=30)
    argv = segment_argv(
        ffmpeg_bin="ffmpeg", source=Path("/m.mov"), out="/s.mp4", cut=_cut(0, 24),
        width=1920, height=1080, settings=settings,
    )  # fmt: skip
    assert argv[argv.index("-svtav1-params") + 1] == "keyint=24:scd=0:irefresh-type=2"
    assert argv[argv.index("-preset") + 1] == "6"


def test_seek_seconds_round_down_to_the_microsecond() -> None:
    assert seek_seconds(30030, 0, Fraction(1, 24000)) == 1.25125
    assert seek_seconds(300000 + 1001, 300000, Fraction(1, 30000)) == 0.033366
    assert seek_seconds(5, 10, Fraction(1, 1000)) == 0.0


def test_quality_defaults_follow_the_encoder() -> None:
    assert default_quality("libx264") == 20
    assert default_quality("hevc_nvenc") == 23


def _master(*audio: tuple[str, int]) -> MasterInfo:
    """A master as specs from before stream plans recorded it: its audio alone."""
    return MasterInfo(
        container="mov,mp4,m4a,3gp,3g2,mj2", codec="h264", width=320, height=180, frame_count=240,
        avg_frame_rate="24/1", time_base="1/1000", start_pts=0, format_start_s=0.0,
        duration_s=10.0, vfr=False,
        audio=tuple(AudioStream(index=n, codec=codec, channels=channels, sample_rate=48000,
                                start_s=0.0, duration_s=10.0)
                    for n, (codec, channels) in enumerate(audio)),
    )  # fmt: skip


def test_audio_mp4_can_hold_is_copied_and_the_rest_encoded_once_to_aac() -> None:
    master = _master(("aac", 2), ("vorbis", 2), ("pcm_s24le", 6))
    argv = mux_argv(ffmpeg_bin="ffmpeg", list_file="/l.txt", master=Path("/m.mov"), out="/o.mp4",
                    plan=master, offset_s=0.0, frames=240)  # fmt: skip
    [_, _], writing = split(argv, "/o.mp4", GLOBAL)
    assert {("-c:a:0", "copy"), ("-c:a:1", "aac"), ("-b:a:1", "192k"), ("-c:a:2", "aac"),
            ("-b:a:2", "576k")} <= set(options(writing))  # fmt: skip


def test_the_mux_joins_segments_by_copy_and_keeps_the_audio_in_place() -> None:
    argv = mux_argv(
        ffmpeg_bin="ffmpeg",
        list_file="/w/segments.txt",
        master=Path("/cache/m.mov"),
        out="/w/output.mp4",
        plan=_master(("aac", 2)),
        offset_s=-0.024,
        frames=240,
        audio_packets=470,
    )
    (segments, master), writing = split(argv, "/w/output.mp4", GLOBAL)
    assert options(segments[:-2]) == options(["-f", "concat", "-safe", "0", *SEGMENTS_ONLY])
    assert segments[-2:] == ["-i", "/w/segments.txt"]
    assert options(master[:-2]) == options([*MASTER_ONLY, "-itsoffset", "-0.024000"])
    assert master[-2:] == ["-i", "file:/cache/m.mov"]
    assert options(writing) == options([
        "-map", "0:v:0", "-map", "1:a:0", "-c:v", "copy", "-c:a:0", "copy",
        "-moov_size", str(64 * 1024 + 48 * 710), "-map_chapters", "-1",
    ])  # fmt: skip


def test_a_silent_master_is_not_opened_at_the_mux() -> None:
    argv = mux_argv(
        ffmpeg_bin="ffmpeg",
        list_file="/l.txt",
        master=None,
        out="/o.mp4",
        plan=_master(),
        offset_s=0.0,
        frames=24,
    )
    [segments], writing = split(argv, "/o.mp4", GLOBAL)
    assert options(segments[:-2]) == options(["-f", "concat", "-safe", "0", *SEGMENTS_ONLY])
    assert segments[-2:] == ["-i", "/l.txt"]
    assert options(writing) == options(
        [
            "-map",
            "0:v:0",
            "-c:v",
            "copy",
            "-moov_size",
            str(64 * 1024 + 48 * 24),
            "-map_chapters",
            "-1",
        ]
    )

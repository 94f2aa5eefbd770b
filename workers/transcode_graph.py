"""ffmpeg command lines for encode jobs: one frame-exact segment of a master, and the final mux
of the joined segments with the master's audio (pure).

Frames are picked by timestamp, not by seeking: the master's timestamps are rebased to its first
frame, resampled onto the output's constant-rate grid (the fps filter: frame k is the master frame
shown at k/rate, which for a constant-rate master is master frame k), and the segment keeps grid
frames [first, end) with trim. A seek to a keyframe well before `first` only saves decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from workers.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options

HTTP_INPUT = ("-reconnect", "1", "-reconnect_on_network_error", "1", "-reconnect_delay_max", "10")
"""Options for reading the master over a presigned URL (only valid for http inputs)."""
MP4_AUDIO_COPY = frozenset({"aac", "mp3", "ac3", "eac3", "alac", "opus"})
"""Audio codecs an MP4 holds as they are; anything else is encoded once to AAC."""
DEFAULT_QUALITY = {
    "libx264": 20,
    "libx265": 22,
    "libsvtav1": 30,
    "h264_nvenc": 21,
    "hevc_nvenc": 23,
    "av1_nvenc": 30,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentCut:
    """Output frames [first, end) of `total`, cut from a master whose first frame is at
    `start_pts` (in the master's video time base) and rendered at the constant `rate`."""

    first: int
    end: int
    total: int
    rate: Fraction
    start_pts: int
    seek_s: float = 0.0
    """Seconds after the master's start to seek to (a keyframe before `first`); 0: no seek."""

    @property
    def count(self) -> int:
        return self.end - self.first


def seek_seconds(seek_pts: int, start_pts: int, time_base: Fraction) -> float:
    """A keyframe's offset from the master's start, rounded down to the microsecond so that a
    backward seek lands on that keyframe, never after it."""
    micros = (seek_pts - start_pts) * time_base * 1_000_000
    return max(0, int(micros)) / 1_000_000


def default_quality(encoder: str) -> int:
    return DEFAULT_QUALITY.get(encoder, 23)


def scale_filters(width: int, height: int, nvenc: bool) -> list[str]:
    """Lanczos on the CPU; on NVENC hosts the frames go up to the GPU and scale_cuda scales them."""
    if nvenc:
        return [
            "format=nv12",
            "hwupload_cuda",
            f"scale_cuda=w={width}:h={height}:interp_algo=lanczos:format=yuv420p",
        ]
    return [f"scale=w={width}:h={height}:flags=lanczos", "format=yuv420p"]


def segment_filtergraph(cut: SegmentCut, width: int, height: int, nvenc: bool) -> str:
    chain = [
        f"setpts=PTS-{cut.start_pts}",
        f"fps=fps={cut.rate.numerator}/{cut.rate.denominator}",
    ]
    if cut.end >= cut.total:
        # A variable-rate master's grid may end a frame short: repeat its last frame, then trim.
        chain.append("tpad=stop_mode=clone:stop=2")
    chain += [f"trim=start_pts={cut.first}:end_pts={cut.end}", "setpts=PTS-STARTPTS"]
    return ",".join(chain + scale_filters(width, height, nvenc))


def options_argv(opts: dict[str, object]) -> list[str]:
    argv: list[str] = []
    for key, value in opts.items():
        argv += [f"-{key}", str(value)]
    return argv


def segment_argv(
    *,
    ffmpeg_bin: str,
    source: str,
    out: str,
    cut: SegmentCut,
    width: int,
    height: int,
    settings: EncodeSettings,
) -> list[str]:
    """The master's frames [first, end) -> one closed-GOP segment, video only, IDR first."""
    argv = [ffmpeg_bin, *GLOBAL_ARGS]
    if settings.is_nvenc:
        argv += ["-init_hw_device", "cuda=gpu:0", "-filter_hw_device", "gpu"]
    if source.startswith(("http://", "https://")):
        argv += list(HTTP_INPUT)
    if cut.seek_s > 0:
        argv += ["-noaccurate_seek", "-ss", f"{cut.seek_s:.6f}"]
    argv += ["-copyts", "-i", source, "-map", "0:v:0", "-an", "-sn", "-dn"]
    argv += ["-vf", segment_filtergraph(cut, width, height, settings.is_nvenc)]
    argv += ["-frames:v", str(cut.count), "-fps_mode", "passthrough"]
    opts = codec_options(settings, cut.count)
    opts.pop("r", None)  # the fps filter made the rate; -r could only add or drop frames
    if settings.is_nvenc:
        opts.pop("pix_fmt", None)  # CUDA frames; scale_cuda already chose yuv420p
    return [*argv, *options_argv(opts), out]


def audio_codec_argv(codecs: list[tuple[str, int]]) -> list[str]:
    """Per audio stream: stream copy when MP4 holds the codec, else one AAC encode."""
    argv: list[str] = []
    for n, (codec, channels) in enumerate(codecs):
        if codec in MP4_AUDIO_COPY:
            argv += [f"-c:a:{n}", "copy"]
        else:
            argv += [f"-c:a:{n}", "aac", f"-b:a:{n}", f"{min(96 * max(channels, 1), 640)}k"]
    return argv


def mux_argv(
    *,
    ffmpeg_bin: str,
    list_file: str,
    master: str,
    out: str,
    audio: list[tuple[str, int]],
    offset_s: float,
) -> list[str]:
    """Join the segments by stream copy and carry the master's audio over, once.

    ffmpeg shifts every input so its earliest stream starts at zero; `offset_s` (the master's
    format start minus its first video frame, zero or less) moves the audio so it keeps its
    place against the first frame, as in the master.
    """
    argv = [ffmpeg_bin, *GLOBAL_ARGS, "-f", "concat", "-safe", "0", "-i", list_file]
    if audio:
        if master.startswith(("http://", "https://")):
            argv += list(HTTP_INPUT)
        if offset_s:
            argv += ["-itsoffset", f"{offset_s:.6f}"]
        argv += ["-i", master]
    argv += ["-map", "0:v:0"]
    for n in range(len(audio)):
        argv += ["-map", f"1:a:{n}"]
    argv += ["-c:v", "copy", *audio_codec_argv(audio), "-movflags", "+faststart", out]
    return argv

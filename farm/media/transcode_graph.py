"""ffmpeg command lines for encode jobs: one frame-exact segment of a master, and the final mux
of the joined segments with the master's other streams (pure).

Frames are picked by timestamp, not by seeking: the master's timestamps are rebased to its first
frame, resampled onto the output's constant-rate grid (the fps filter: frame k is the master frame
shown at k/rate, which for a constant-rate master is master frame k), and the segment keeps grid
frames [first, end) with trim. A seek to a keyframe well before `first` only saves decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import ffmpeg

from farm.core.hdr import HdrInfo
from farm.core.sources import MasterInfo
from farm.media.containers import MKV
from farm.media.ffgraph import GLOBAL_ARGS, EncodeSettings, codec_options, moov_reserve_bytes
from farm.media.hdr import tonemap_filters
from farm.media.probe import CONCAT_FORMATS, MASTER_FORMATS, input_name, whitelists
from farm.media.streams import carries_more_than_video, mux_options

DEFAULT_QUALITY = {
    "libx264": 20,
    "libx265": 22,
    "libsvtav1": 30,
    "h264_nvenc": 21,
    "hevc_nvenc": 23,
    "av1_nvenc": 30,
    "prores_ks": 9,
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
    deinterlace: bool = False
    """bwdif first, one frame per frame (an interlaced master, --deinterlace)."""

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


def scale_filters(width: int, height: int, nvenc: bool, pix_fmt: str = "yuv420p") -> list[str]:
    """Lanczos on the CPU; on NVENC hosts the frames go up to the GPU and scale_cuda scales them."""
    if nvenc:
        return [
            "format=p010le" if "10" in pix_fmt else "format=nv12",
            "hwupload_cuda",
            f"scale_cuda=w={width}:h={height}:interp_algo=lanczos:format={pix_fmt}",
        ]
    return [f"scale=w={width}:h={height}:flags=lanczos", f"format={pix_fmt}"]


def segment_filtergraph(
    cut: SegmentCut,
    width: int,
    height: int,
    nvenc: bool,
    pix_fmt: str = "yuv420p",
    hdr: HdrInfo | None = None,
) -> str:
    """The cut (after bwdif on an interlaced master: a frame per frame, its rate kept), then a
    tone-map to SDR when the job asked for one (on the CPU, before any upload to the GPU), then
    the scale."""
    chain = ["bwdif=mode=send_frame:parity=auto:deint=all"] if cut.deinterlace else []
    chain += [
        f"setpts=PTS-{cut.start_pts}",
        f"fps=fps={cut.rate.numerator}/{cut.rate.denominator}",
    ]
    if cut.end >= cut.total:
        # A variable-rate master's grid may end a frame short: repeat its last frame, then trim.
        chain.append("tpad=stop_mode=clone:stop=2")
    chain += [f"trim=start_pts={cut.first}:end_pts={cut.end}", "setpts=PTS-STARTPTS"]
    chain += tonemap_filters(hdr)
    return ",".join(chain + scale_filters(width, height, nvenc, pix_fmt))


def segment_argv(
    *,
    ffmpeg_bin: str,
    source: Path,
    out: str,
    cut: SegmentCut,
    width: int,
    height: int,
    settings: EncodeSettings,
) -> list[str]:
    """The master's frames [first, end) -> one closed-GOP segment, video only, IDR first.
    `source`: the master's local copy, read as that file alone, in a master's container alone."""
    name = input_name(source)
    reading = whitelists(name, MASTER_FORMATS)
    if cut.seek_s > 0:
        reading.update(noaccurate_seek=None, ss=f"{cut.seek_s:.6f}")
    opts = codec_options(settings, cut.count)
    opts.pop("r", None)  # the fps filter made the rate; -r could only add or drop frames
    pix_fmt = str(opts["pix_fmt"])
    if settings.is_nvenc:
        opts.pop("pix_fmt", None)  # CUDA frames; scale_cuda already chose the format
    stream = ffmpeg.input(name, **reading).output(
        out,
        map="0:v:0",
        an=None,
        sn=None,
        dn=None,
        vf=segment_filtergraph(cut, width, height, settings.is_nvenc, pix_fmt, settings.hdr),
        fps_mode="passthrough",
        # the master's tags and chapters stay out of segments (a timecode or chapter track
        # would be a second track the join refuses); the final mux carries them once
        map_metadata="-1",
        map_chapters="-1",
        **{"frames:v": cut.count},
        **opts,
    )
    globals_ = [*GLOBAL_ARGS, "-copyts"]
    if settings.is_nvenc:
        globals_ += ["-init_hw_device", "cuda=gpu:0", "-filter_hw_device", "gpu"]
    return list(stream.global_args(*globals_).compile(cmd=ffmpeg_bin))


def mux_argv(
    *,
    ffmpeg_bin: str,
    list_file: str,
    master: Path | None,
    out: str,
    plan: MasterInfo,
    offset_s: float,
    frames: int,
    audio_packets: int = 0,
) -> list[str]:
    """Join the segments by stream copy and carry the master's other streams over, once.

    `plan`: the job's master with its stream plan (farm.media.streams): its audio, subtitles,
    attachments, chapters and timecode, with their languages, titles and dispositions, as the
    plan says (a spec from before plans: its audio alone, streams.kept).
    ffmpeg shifts every input so its earliest stream starts at zero; `offset_s` (the master's
    format start minus its first video frame, zero or less) moves the master's streams so they
    keep their place against the first frame, as in the master. `master`: its local copy (read
    only when something of it is carried), in a master's container alone; the list, the farm's
    segments alone. `out` ending .mkv: Matroska (farm.media.containers), which has no moov.
    """
    container = out.rsplit(".", 1)[-1]
    joined = ffmpeg.input(list_file, f="concat", safe=0, **whitelists(list_file, CONCAT_FORMATS))
    inputs = [joined["v:0"]]
    maps, extra = mux_options(plan, container)
    if maps or carries_more_than_video(plan):
        assert master is not None, "the master's streams are read from its local copy"
        name = input_name(master)
        reading = whitelists(name, MASTER_FORMATS)
        if offset_s:
            reading["itsoffset"] = f"{offset_s:.6f}"
        source = ffmpeg.input(name, **reading)
        inputs += [source[spec] for spec in maps]
    stream = ffmpeg.output(
        *inputs,
        out,
        **{"c:v": "copy"},
        **({} if container == MKV else {"moov_size": moov_reserve_bytes(frames, audio_packets)}),
    )
    argv = list(stream.global_args(*GLOBAL_ARGS).compile(cmd=ffmpeg_bin))
    at = len(argv) - 1 - argv[::-1].index(out)  # options go before the output's name
    return argv[:at] + extra + argv[at:]

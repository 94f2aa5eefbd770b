"""ffprobe, in one place: the command lines, and reading what it answers (parsing is pure).

Used for masters at submit (farm.media.master), segments and deliverables on workers (segment,
transcode, stitch). ffprobe argv is built here by hand: ffmpeg-python's `probe()` runs the
program itself, and farm.adapters.proc is the one place that runs programs. At submit as on a
worker, ffprobe runs in a bubblewrap box (farm.adapters.boxes.media_box; `submit_box`).

Every input ffmpeg or ffprobe opens is read with `whitelists`: the file protocol alone,
and only the demuxers that input may be. A master is untrusted: a playlist (HLS, DASH, concat)
or a demuxer that opens other files or URLs would have the farm fetch them into the video.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from farm.adapters import proc
from farm.adapters.boxes import box_fault, host_box, media_box
from farm.adapters.sandbox import Box, wrap
from farm.adapters.settings import Settings
from farm.core.errors import PermanentError, SpecError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Streams:
    """A video file as ffprobe sees it: its first video stream, and its audio durations."""

    codec: str
    width: int
    height: int
    pix_fmt: str
    rate: str
    """The video stream's r_frame_rate, as ffprobe writes it: `24000/1001`."""
    time_base: str
    frames: int
    """Video packets counted by reading the file (one per frame in every codec we write)."""
    duration_s: float
    audio_s: tuple[float, ...] = ()

    @property
    def fps(self) -> Fraction:
        return Fraction(self.rate or "0/1")

    def manifest_fields(self, fps: Fraction) -> dict[str, object]:
        """What a segment manifest records of a segment (the stitch checks against it)."""
        return {
            "frames": self.frames,
            "codec": self.codec,
            "width": self.width,
            "height": self.height,
            "pix_fmt": self.pix_fmt,
            "fps": str(fps),
        }


URL_SCHEMES = ("https://", "http://")
DEFAULT_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
HTTP_INPUT: dict[str, object] = {
    "reconnect": 1,
    "reconnect_on_network_error": 1,
    "reconnect_delay_max": 10,
}
"""Options for reading over a presigned URL (only valid for http inputs)."""

MASTER_FORMATS = (
    "mov,mp4,m4a,3gp,3g2,mj2",  # QuickTime and MP4: ProRes, DNx, H.264/HEVC masters
    "matroska,webm",
    "mxf",
    "mpegts",  # broadcast transport streams (.ts, .m2ts)
    "avi",
)
"""The demuxers a master may be read with, as ffprobe names them (its format_name): single-file
mastering containers that open nothing but their own file. Not hls, dash, concat, image2
(patterns of files), tee, data or any playlist: those read other files and URLs."""
FARM_FORMATS = ("mov,mp4,m4a,3gp,3g2,mj2",)
"""The demuxers for what the farm writes itself: segments and deliverables (.mp4, .mov)."""
MKV_FORMATS = ("matroska,webm",)
"""The demuxer for a Matroska deliverable (`--container mkv`, farm.media.containers)."""
CONCAT_FORMATS = ("concat", *FARM_FORMATS)
"""A concat list the farm wrote, naming segments it wrote."""
FRAME_FORMATS = ("image2",)
"""A chunk's numbered frames (`%06d.png`), laid out by the worker."""
FILE_PROTOCOL = "file"
"""The one protocol a local input is read with: no http, tcp, data, subfile, crypto, concat."""


def farm_formats(path: str | Path) -> tuple[str, ...]:
    """The demuxers for a file the farm wrote: its MP4/MOV ones, and Matroska's for an .mkv."""
    return (*FARM_FORMATS, *MKV_FORMATS) if str(path).endswith(".mkv") else FARM_FORMATS


def url_protocols(url: str) -> str:
    """The protocols reading a presigned URL of the store takes, and no other: https over TLS
    over TCP, or plain http over TCP."""
    return "https,tls,tcp" if url.startswith("https://") else "http,tcp"


def whitelists(source: str, formats: Sequence[str]) -> dict[str, object]:
    """Input options that keep ffmpeg or ffprobe reading `source` to `formats`' demuxers and to
    the file protocol alone (the store's URL: its own scheme's). A nested input (a playlist's
    entry, a concat list's file) inherits both, so it cannot reach further either."""
    protocols = url_protocols(source) if source.startswith(URL_SCHEMES) else FILE_PROTOCOL
    return {"protocol_whitelist": protocols, "format_whitelist": ",".join(formats)}


def input_name(source: str | Path) -> str:
    """What ffmpeg/ffprobe is told to open: a presigned URL as it is, anything else as
    `file:` + its absolute path, so a master named `file:x.mp4`, `-x.mov` or `concat:a|b` is read
    as that very file (never as a protocol or an option). A Path is always a file."""
    text = str(source)
    if isinstance(source, str) and text.startswith(URL_SCHEMES):
        return text
    if text.startswith("file:") and Path(text[5:]).is_absolute():
        return text
    return "file:" + str(Path(os.path.abspath(text)))


def input_options(source: str, ca_file: str = DEFAULT_CA_FILE) -> dict[str, object]:
    """Protocol options for reading `source`: over http(s), reconnects; over https, the server's
    certificate verified against `ca_file` (ffmpeg does not verify by default)."""
    if not source.startswith(URL_SCHEMES):
        return {}
    options = dict(HTTP_INPUT)
    if source.startswith("https://"):
        options.update(tls_verify=1, ca_file=ca_file or DEFAULT_CA_FILE)
    return options


def option_args(options: dict[str, object]) -> list[str]:
    """`input_options` as command-line flags (for argv built by hand, such as ffprobe's)."""
    return [part for k, v in options.items() for part in (f"-{k}", str(v))]


def streams_argv(ffprobe: str, path: str, formats: Sequence[str] = FARM_FORMATS) -> list[str]:
    """Every stream and the format, with video packets counted, as JSON."""
    return [ffprobe, "-v", "error", *option_args(whitelists(path, formats)), "-count_packets",
            "-show_streams", "-show_format", "-of", "json", path]  # fmt: skip


def format_argv(ffprobe: str, path: str, formats: Sequence[str]) -> list[str]:
    """Streams and format without reading the whole file (fast; a master, a joined header)."""
    return [ffprobe, "-v", "error", *option_args(whitelists(path, formats)), "-show_format",
            "-show_streams", "-of", "json", path]  # fmt: skip


def packets_argv(ffprobe: str, path: str, formats: Sequence[str]) -> list[str]:
    """Every video packet's timestamp, duration and flags (keyframes), as CSV."""
    return [ffprobe, "-v", "error", *option_args(whitelists(path, formats)), "-select_streams",
            "v:0", "-show_entries", "packet=pts,duration,flags", "-of", "csv=p=0",
            path]  # fmt: skip


COLOUR_TAGS = "color_range,color_space,color_primaries,color_transfer"


def side_data_argv(ffprobe: str, path: str, formats: Sequence[str]) -> list[str]:
    """The first video frame's colour tags and side data, and the stream's, as JSON (HDR)."""
    entries = f"frame={COLOUR_TAGS},side_data_list:stream={COLOUR_TAGS}:stream_side_data_list"
    return [ffprobe, "-v", "error", *option_args(whitelists(path, formats)), "-select_streams",
            "v:0", "-read_intervals", "%+#1", "-show_frames", "-show_entries", entries, "-of",
            "json", path]  # fmt: skip


def capture(
    argv: list[str], timeout_s: float, box: Box | None = None
) -> proc.CompletedProcess[str]:
    """Run an ffprobe argv, inside `box` when one is given (a worker's, or the submit's; none
    with FARM_SANDBOX=off or no bwrap at submit, where the whitelists alone keep it to its
    file)."""
    return proc.capture(wrap(argv, box) if box is not None else argv, timeout_s)


def submit_capture(
    argv: list[str], timeout_s: float, box: Box | None, name: str
) -> proc.CompletedProcess[str]:
    """`capture` of the submit's ffprobe or ffmpeg on the master `name`: past `timeout_s` it is
    killed and the master refused (SpecError), not a traceback."""
    try:
        return capture(argv, timeout_s, box)
    except proc.Timeout:
        program = Path(argv[0]).name
        raise SpecError(
            f"{name}: {program} did not finish reading it in {timeout_s:.0f} s, so it is not "
            "taken as a master; check that it is one video file on a local disk"
        ) from None


@contextlib.contextmanager
def submit_box(settings: Settings, master: Path) -> Iterator[Box | None]:
    """The box the master is probed in at submit, on the submitter's machine, as a worker's
    (media_box): no network, the master read-only, nothing writable but a temporary folder that
    is removed after. None where no box can be made here (FARM_SANDBOX=off, no bwrap, or one
    that cannot make a box), said once in a warning: the whitelists and time limits alone then
    keep ffprobe and ffmpeg to the master's own file."""
    unboxed = _why_unboxed(settings)
    if unboxed:
        log.warning(
            "%s is probed without a box (%s): only ffprobe's whitelists and time limits keep "
            "it to that file",
            master.name,
            unboxed,
        )
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="farm-probe-") as home:
        yield media_box(settings, writable=(Path(home),), readable=(master,))


def _why_unboxed(settings: Settings) -> str:
    """Why the submit's probe runs without a box, in a user's words; '' when it has one."""
    if settings.sandbox == "off":
        return "FARM_SANDBOX=off"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed on this machine; apt-get install bubblewrap boxes it"
    fault = box_fault(host_box(bwrap, gpu=False))
    return f"bwrap cannot make a box on this machine: {fault[-300:]}" if fault else ""


def video_streams(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Video streams that are pictures in motion (album art shows up as a one-frame video)."""
    return [
        s
        for s in data.get("streams") or []
        if s.get("codec_type") == "video" and not (s.get("disposition") or {}).get("attached_pic")
    ]


def parse_streams(text: str, name: str = "the file") -> Streams:
    data = json.loads(text or "{}")
    streams = data.get("streams") or []
    video = next(iter(video_streams(data)), None)
    if video is None:
        raise PermanentError(f"{name} has no video stream")
    fmt_s = float((data.get("format") or {}).get("duration") or 0)

    def seconds(stream: dict[str, Any]) -> float:
        """The stream's duration; Matroska gives it as a DURATION tag (HH:MM:SS.nnnnnnnnn)."""
        tag = str((stream.get("tags") or {}).get("DURATION") or "")
        hms = tag.split(":")
        if stream.get("duration") in (None, "N/A") and len(hms) == 3:
            return int(hms[0]) * 3600 + int(hms[1]) * 60 + float(hms[2])
        return float(stream.get("duration") or fmt_s)

    return Streams(
        codec=str(video.get("codec_name", "")),
        width=int(video.get("width") or 0),
        height=int(video.get("height") or 0),
        pix_fmt=str(video.get("pix_fmt", "")),
        rate=str(video.get("r_frame_rate", "")),
        time_base=str(video.get("time_base", "")),
        frames=int(video.get("nb_read_packets") or 0),
        duration_s=seconds(video),
        audio_s=tuple(seconds(s) for s in streams if s.get("codec_type") == "audio"),
    )


def probe_streams(ffprobe: str, path: Path, box: Box | None = None) -> Streams:
    """Read a file this farm made (a segment, a deliverable); unreadable is a permanent error.
    `box`: where ffprobe runs (farm.adapters.boxes.media_box, `path` readable in it)."""
    result = capture(streams_argv(ffprobe, input_name(path), farm_formats(path)), 600, box)
    if result.returncode != 0:
        raise PermanentError(f"ffprobe cannot read {path.name}: {result.stderr.strip()[-300:]}")
    return parse_streams(result.stdout, path.name)

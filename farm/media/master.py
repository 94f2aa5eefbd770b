"""Video masters for encode jobs: what ffprobe says about one, checked at submit and again by the
worker before it transcodes (parsing is pure).

The stitch needs the master's frame count, rate, time base and start; the segments need seek points.
A master is read only as one of the containers in MASTER_FORMATS (farm.media.probe): any other is
refused by its name, at submit and on the worker.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any

import ffmpeg

from farm.adapters.sandbox import Box
from farm.core.errors import PermanentError, Refused, SpecError
from farm.core.sources import AudioStream, MasterInfo
from farm.media import probe
from farm.media.probe import MASTER_FORMATS, video_streams

VFR_TOLERANCE = Fraction(1, 4)
"""A frame interval further than this share of a frame from the average one means VFR."""
STANDARD_RATES = tuple(Fraction(b * 1000, 1001) for b in (24, 30, 48, 60, 120)) + tuple(
    Fraction(r) for r in (24, 25, 30, 48, 50, 60, 100, 120)
)


_NOT_LISTED = re.compile(r"^\[([^\]@]+?) @ 0x[0-9a-f]+\] Format not on whitelist", re.MULTILINE)
"""ffmpeg's log line when the demuxer it found is not on the format whitelist; the line is
prefixed with that demuxer's name (`[hls @ 0x55d0c0a8] Format not on whitelist 'mov,…'`)."""


def refused_container(stderr: str) -> str:
    """The container ffprobe found and the format whitelist refused, by its name, before reading
    any of it ('' when ffprobe failed for another reason). "unlisted" when the line is there but
    its name is not."""
    if "Format not on whitelist" not in stderr:
        return ""
    found = _NOT_LISTED.search(stderr)
    return found.group(1) if found else "unlisted"


def container_refusal(name: str, container: str) -> str:
    """Why a master in `container` is refused, and what to do: its name and the allowed ones."""
    return (
        f"{name}: its container is {container!r}, which is not taken as a master (a playlist "
        "or a container that opens other files or URLs would have the farm fetch them); encode "
        f"jobs take one file in one of: {'; '.join(MASTER_FORMATS)}. Make it one such file "
        "first (e.g. ffmpeg -i IN -c copy master.mov) and submit that"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Probed:
    info: MasterInfo
    keyframes_pts: tuple[int, ...] = field(default=())
    shown: dict[str, Any] = field(default_factory=dict)
    """ffprobe's JSON of the master (streams, format, chapters): farm.media.streams plans them
    once the deliverable's container is known."""
    cues: dict[int, str] = field(default_factory=dict)
    """Per bitmap subtitle stream (its `s:N`), ffprobe's `pts,duration,flags` of its packets:
    the cues the stitch counts (farm.media.streams.cue_counts)."""


def output_rate(avg: Fraction, vfr: bool, frames: int, duration: Fraction) -> Fraction:
    """The constant rate of the output: the master's average, snapped to a broadcast rate when it
    is within 0.1% of one (VFR masters average to near-misses like 23.97)."""
    rate = avg if avg > 0 else (Fraction(frames) / duration if duration > 0 else Fraction(0))
    if vfr and duration > 0:
        rate = Fraction(frames) / duration
    for standard in STANDARD_RATES:
        if abs(rate - standard) / standard < Fraction(1, 1000):
            return standard
    return rate.limit_denominator(1001)


def parse_packets(csv: str) -> tuple[list[int], list[int], int]:
    """`pts,duration,flags` lines of the video stream -> (sorted pts, keyframe pts, last duration).

    Packets the demuxer marks D (discard, e.g. cut by an edit list) are not frames of the master.
    """
    pts: list[int] = []
    keyframes: list[int] = []
    last_duration = 0
    for line in csv.splitlines():
        parts = line.strip().split(",")
        if len(parts) < 3 or "D" in parts[2] or parts[0] in ("", "N/A"):
            continue
        value = int(parts[0])
        pts.append(value)
        if "K" in parts[2]:
            keyframes.append(value)
        if parts[1] not in ("", "N/A"):
            last_duration = int(parts[1])
    pts.sort()
    return pts, sorted(keyframes), last_duration


def parse_master(name: str, streams_json: str, packets_csv: str) -> Probed:
    """Turn ffprobe's answers into a MasterInfo, or a SpecError that says what is wrong."""
    data = json.loads(streams_json or "{}")
    streams = data.get("streams") or []
    fmt = data.get("format") or {}
    container = str(fmt.get("format_name", ""))
    if container not in MASTER_FORMATS:  # the whitelist refuses them first; this is its record
        raise SpecError(container_refusal(name, container))
    video = video_streams(data)
    if not video:
        kinds = sorted({str(s.get("codec_type")) for s in streams}) or ["nothing"]
        raise SpecError(f"{name}: has no video stream (it holds {', '.join(kinds)})")
    stream = video[0]
    pts, keyframes, last_duration = parse_packets(packets_csv)
    if not pts:
        raise SpecError(f"{name}: its video stream has no frames")
    tb = Fraction(stream.get("time_base") or "1/1")
    avg = _fraction(stream.get("avg_frame_rate"))
    deltas = [b - a for a, b in pairwise(pts)]
    if avg <= 0 and deltas:
        avg = 1 / (Fraction(sum(deltas), len(deltas)) * tb)
    expected = 1 / (avg * tb) if avg > 0 else Fraction(last_duration or 1)
    vfr = any(abs(d - expected) > expected * VFR_TOLERANCE for d in deltas)
    tail = last_duration or (deltas[-1] if deltas else expected)
    duration = (pts[-1] + tail - pts[0]) * tb
    rate = output_rate(avg, vfr, len(pts), duration)
    if rate <= 0:
        raise SpecError(f"{name}: ffprobe finds no frame rate for its video stream")
    audio = tuple(
        AudioStream(
            index=n,
            codec=str(s.get("codec_name", "")),
            channels=int(s.get("channels") or 0),
            sample_rate=int(s.get("sample_rate") or 0),
            start_s=float(s.get("start_time") or 0.0),
            duration_s=float(s["duration"]) if s.get("duration") not in (None, "N/A") else None,
        )
        for n, s in enumerate(x for x in streams if x.get("codec_type") == "audio")
    )
    info = MasterInfo(
        container=container,
        codec=str(stream.get("codec_name", "")),
        width=int(stream.get("width") or 0),
        height=int(stream.get("height") or 0),
        frame_count=len(pts) if not vfr else max(1, round(duration * rate)),
        avg_frame_rate=f"{rate.numerator}/{rate.denominator}",
        time_base=f"{tb.numerator}/{tb.denominator}",
        start_pts=pts[0],
        format_start_s=float(fmt.get("start_time") or pts[0] * tb),
        duration_s=float(duration),
        vfr=vfr,
        audio=audio,
        field_order=interlacing(stream),
    )
    return Probed(info=info, keyframes_pts=tuple(keyframes or pts[:1]), shown=data)


INTERLACED = ("tt", "bb", "tb", "bt")
"""ffprobe's field_order values of interlaced video (top or bottom field first, coded and shown)."""


def interlacing(stream: dict[str, Any]) -> str:
    """The video stream's field order when it is interlaced; '' when progressive or unknown."""
    order = str(stream.get("field_order") or "")
    return order if order in INTERLACED else ""


BITMAP_SUBTITLES = ("dvd_subtitle",)
"""Bitmap subtitles a deliverable may hold by copy, whose cues are counted at submit."""


def bitmap_cues(
    ffprobe: str, source: str, shown: dict[str, Any], box: Box | None, name: str
) -> dict[int, str]:
    """Each bitmap subtitle stream's packets (`s:N` -> ffprobe's CSV), read only when the master
    has one: a second read of the file, demuxed, not decoded."""
    subtitles = [s for s in shown.get("streams") or [] if s.get("codec_type") == "subtitle"]
    found = {}
    for n, stream in enumerate(subtitles):
        if stream.get("codec_name") in BITMAP_SUBTITLES:
            argv = probe.packets_argv(ffprobe, source, MASTER_FORMATS)
            argv[argv.index("v:0")] = f"s:{n}"
            read = probe.submit_capture(argv, 1800, box, name)
            found[n] = read.stdout if read.returncode == 0 else ""
    return found


def seek_points(probed: Probed, segment_frames: int) -> MasterInfo:
    """For each segment, the keyframe one before the last keyframe at or before its first frame:
    a master with open GOPs needs a whole GOP decoded ahead of the frames it keeps."""
    info = probed.info
    seeks = []
    for first in range(0, info.frame_count, segment_frames):
        target = info.start_pts + Fraction(first) / info.rate / info.tb
        before = [k for k in probed.keyframes_pts if k <= target]
        seeks.append(before[-2] if len(before) >= 2 else info.start_pts)
    return replace(info, seek_pts=tuple(seeks))


def probe_master(ffprobe: str, ffmpeg_bin: str, path: Path, box: Box | None = None) -> Probed:
    """Ask ffprobe about the file, then decode its first frame: a master must really play.
    On the submitter's machine, in `box` (farm.media.probe.submit_box; None: unboxed), and the
    whitelists keep ffprobe and ffmpeg to this one file (no playlist entry, no URL, no other
    file is opened); a master that keeps either past its time limit is refused."""
    name = path.name
    source = probe.input_name(path)  # a name like `file:x.mp4` or `-x.mov` is that file
    argv = probe.format_argv(ffprobe, source, MASTER_FORMATS)
    argv[-1:-1] = ["-show_chapters"]  # farm.media.streams plans them with the streams
    shown = probe.submit_capture(argv, 120, box, name)
    if shown.returncode != 0:
        container = refused_container(shown.stderr)
        if container:
            raise SpecError(container_refusal(name, container))
        reason = (shown.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise SpecError(
            f"{name}: not a .blend file, and not a video ffprobe can read ({reason}); "
            "encode jobs take a video master such as .mov, .mp4, .mkv or .mxf"
        )
    packets = probe.submit_capture(
        probe.packets_argv(ffprobe, source, MASTER_FORMATS), 1800, box, name
    )
    probed = parse_master(name, shown.stdout, packets.stdout if packets.returncode == 0 else "")
    probed = replace(probed, cues=bitmap_cues(ffprobe, source, probed.shown, box, name))
    first_frame = (
        ffmpeg.input(source, **probe.whitelists(source, MASTER_FORMATS))
        .output("-", map="0:v:0", f="null", **{"frames:v": 1})
        .global_args("-v", "error", "-nostdin")
    )
    decoded = probe.submit_capture(first_frame.compile(cmd=ffmpeg_bin), 120, box, name)
    if decoded.returncode != 0:
        reason = (decoded.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise SpecError(f"{name}: its first video frame does not decode ({reason}); is it corrupt?")
    return probed


def check_container(ffprobe: str, path: Path, name: str, box: Box | None = None) -> str:
    """The worker's own check of a master before it reads a frame of it (the submitter's can be
    skipped by anyone holding the farm's credentials): its container, as ffprobe names it with
    the whitelists, in `box`. Refused (the chunk fails at once) naming any other container;
    PermanentError with what ffprobe said when it cannot read the file."""
    shown = probe.capture(
        probe.format_argv(ffprobe, probe.input_name(path), MASTER_FORMATS), 120, box
    )
    if shown.returncode != 0:
        container = refused_container(shown.stderr)
        if container:
            raise Refused(container_refusal(name, container))
        said = shown.stderr.replace(str(path), name).strip()[-300:]
        raise PermanentError(f"ffprobe cannot read the master {name}: {said}")
    container = str((json.loads(shown.stdout or "{}").get("format") or {}).get("format_name", ""))
    if container not in MASTER_FORMATS:
        raise Refused(container_refusal(name, container))
    return container


def _fraction(text: object) -> Fraction:
    try:
        value = Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        return Fraction(0)
    return value if value > 0 else Fraction(0)


def check_interlace(name: str, info: MasterInfo, deinterlace: bool) -> MasterInfo:
    """An interlaced master is refused unless --deinterlace asks for bwdif (a frame per frame,
    at the master's rate): the segments' scaler would otherwise comb its fields together."""
    if info.field_order and not deinterlace:
        first = "top" if info.field_order in ("tt", "tb") else "bottom"
        raise SpecError(
            f"{name}: is interlaced ({first} field first); scaled as it is, its fields would comb; "
            "add --deinterlace to deinterlace it (bwdif, one frame per frame at "
            f"{info.avg_frame_rate} fps), or deinterlace it yourself and submit that"
        )
    return replace(info, deinterlace=deinterlace)

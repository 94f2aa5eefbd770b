"""Scene cuts of a video master (ffmpeg's scdet, run once at submit) and the transcode plan that
moves each segment boundary onto the nearest cut, so every segment's IDR lands on a cut.

Planning and parsing are pure; `find_cuts` is the one place that runs the scan.
"""

from __future__ import annotations

import re
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import ffmpeg

from farm.adapters import proc
from farm.adapters.sandbox import Box
from farm.core.errors import SpecError
from farm.core.plan import Chunk
from farm.core.sources import MasterInfo
from farm.core.spec import FrameRange
from farm.media import probe
from farm.media.master import Probed
from farm.media.probe import MASTER_FORMATS

THRESHOLD = 10.0
"""scdet's score (0-100, the mean frame difference after removing motion) that marks a cut;
ffmpeg's own default, which finds hard cuts and leaves fades and pans alone."""
SCAN_BASE_S = 600
SCAN_PER_MASTER_S = 2.0
"""The scan may take this long per second of master, on top of SCAN_BASE_S: a 4K master decodes
at about real time on a slow laptop (docs/design/scenecuts.md)."""

_CUT = re.compile(r"^frame:\s*(\d+)\s", re.MULTILINE)


def scan_argv(ffmpeg_bin: str, source: str, threshold: float = THRESHOLD) -> list[str]:
    """Decode the master's first video stream (`[0:v]`: the first one) once and print one `frame:N ...` line (and its
    lavfi.scd.time) for each frame that scdet marks as a cut, on stdout."""
    graph = (
        ffmpeg.input(source, **probe.whitelists(source, MASTER_FORMATS))
        .video.filter("scdet", threshold=threshold)
        .filter("metadata", mode="print", key="lavfi.scd.time", file="-")
        .output("-", f="null")
        .global_args("-v", "error", "-nostdin")
    )
    return graph.compile(cmd=ffmpeg_bin)  # type: ignore[no-any-return]


def parse_cuts(text: str, frame_count: int) -> tuple[int, ...]:
    """The frames scdet printed as cuts, sorted, each in 1..frame_count-1 (frame 0 starts the
    master; it is no boundary to move to)."""
    found = {int(n) for n in _CUT.findall(text)}
    return tuple(sorted(n for n in found if 0 < n < frame_count))


def find_cuts(
    ffmpeg_bin: str, path: Path, info: MasterInfo, box: Box | None = None
) -> tuple[int, ...]:
    """Scan the master at `path` for hard cuts, on the submitter's machine, in `box`. SpecError,
    naming --no-scene-cuts, when the scan fails or runs past its time limit."""
    argv = scan_argv(ffmpeg_bin, probe.input_name(path))
    limit_s = SCAN_BASE_S + SCAN_PER_MASTER_S * info.duration_s
    try:
        scanned = probe.capture(argv, limit_s, box)
    except proc.Timeout:
        raise SpecError(
            f"{path.name}: the scene-cut scan did not finish in {limit_s:.0f} s; submit again "
            "with --no-scene-cuts (segments then cut every --segment-frames frames)"
        ) from None
    if scanned.returncode != 0:
        reason = (scanned.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise SpecError(
            f"{path.name}: the scene-cut scan could not decode it ({reason}); check the master "
            "plays to its end, or submit with --no-scene-cuts"
        )
    return parse_cuts(scanned.stdout, info.frame_count)


def min_segment(segment_frames: int) -> int:
    """The shortest segment a moved boundary may leave: a quarter of a segment."""
    return max(1, segment_frames // 4)


def place_segments(frame_count: int, segment_frames: int, cuts: tuple[int, ...]) -> tuple[int, ...]:
    """The first frame of each segment: every `segment_frames` frames from the last boundary, or
    the nearest cut within half a segment of that (the earlier one on a tie). A moved segment
    is from half to 1.5 times `segment_frames` long; a cut that would leave the master's last
    segment shorter than a quarter is not taken, and once a boundary has moved, a tail shorter
    than a quarter joins the segment before it. With no cut in reach of any boundary, the plan is
    the uniform one."""
    size, reach, least = segment_frames, segment_frames // 2, min_segment(segment_frames)
    starts = [0]
    while True:
        start = starts[-1]
        nominal = start + size
        if nominal >= frame_count:
            break
        near = [
            c
            for c in cuts
            if abs(c - nominal) <= reach and c - start >= least and frame_count - c >= least
        ]
        if near:
            starts.append(min(near, key=lambda c: (abs(c - nominal), c)))
            continue
        drifted = any(s % size for s in starts)
        if drifted and frame_count - nominal < least:
            break  # a sliver left by an earlier move joins this segment (at most 1.25x)
        starts.append(nominal)
    return tuple(starts)


def seeks_at(probed: Probed, starts: tuple[int, ...]) -> tuple[int, ...]:
    """Per segment starting at `starts`, its seek point, by farm.media.master.seek_points' rule
    (the keyframe one before the last at or before its first frame: open GOPs need one ahead)."""
    info = probed.info
    seeks = []
    for first in starts:
        target = info.start_pts + Fraction(first) / info.rate / info.tb
        before = [k for k in probed.keyframes_pts if k <= target]
        seeks.append(before[-2] if len(before) >= 2 else info.start_pts)
    return tuple(seeks)


def seek_for(master: MasterInfo, first: int, segment_frames: int) -> int:
    """The seek point recorded at submit for the segment starting at frame `first` (start_pts:
    none recorded, decode from the start): by segment_starts where boundaries moved to scene
    cuts, every `segment_frames` otherwise."""
    if master.segment_starts:
        if first in master.segment_starts:
            n = master.segment_starts.index(first)
            if n < len(master.segment_seek_pts):
                return master.segment_seek_pts[n]
        return master.start_pts
    n, offset = divmod(first, segment_frames)
    return master.seek_pts[n] if not offset and n < len(master.seek_pts) else master.start_pts


def cut_chunks(frames: FrameRange, starts: tuple[int, ...]) -> tuple[Chunk, ...]:
    """The master's frames (0..N-1) in segments beginning at `starts`, in order."""
    ends = (*starts[1:], frames.count)
    return tuple(
        Chunk(index=i, frames=tuple(range(first, end)))
        for i, (first, end) in enumerate(zip(starts, ends, strict=True))
    )


def moved(starts: tuple[int, ...], cuts: tuple[int, ...]) -> tuple[int, ...]:
    """The boundaries (not frame 0) that sit on a scene cut."""
    on = set(cuts)
    return tuple(s for s in starts[1:] if s in on)


def plan_note(segment_frames: int, starts: tuple[int, ...], cuts: tuple[int, ...]) -> str:
    """The plan line `farm status` shows for a cut-aware transcode."""
    on = moved(starts, cuts)
    shown = ", ".join(str(s) for s in on[:8]) + (", ..." if len(on) > 8 else "")
    return (
        f"fixed: {segment_frames} frames per segment, as asked; {len(on)} of {len(starts) - 1} "
        f"boundaries moved to scene cuts ({len(cuts)} found)" + (f": frames {shown}" if on else "")
    )


def cut_plan(
    frames: FrameRange, segment_frames: int, master: MasterInfo
) -> tuple[tuple[Chunk, ...], dict[str, str]]:
    """The chunks of a transcode whose spec records its segment starts, and the ledger's plan
    fields for them (as farm.core.chunking.initial_plan gives for a uniform plan)."""
    chunks = cut_chunks(frames, master.segment_starts)
    note = plan_note(segment_frames, master.segment_starts, master.scene_cuts)
    return chunks, {"chunk_size": str(segment_frames), "chunk_plan": note}


def check_starts(master: MasterInfo, segment_frames: int) -> None:
    """SpecError unless a spec's recorded segment starts (from a client: untrusted) are a plan
    `place_segments` could make: from 0, increasing, inside the master, none over 1.5 segments
    (plus a quarter for the tail), and on the recorded cuts or the segment length apart."""
    starts, total = master.segment_starts, master.frame_count
    if not starts:
        return
    if starts[0] != 0 or any(b <= a for a, b in pairwise(starts)):
        raise SpecError("segment_starts: must begin at 0 and increase")
    if starts[-1] >= total:
        raise SpecError(f"segment_starts: {starts[-1]} is past the master's last frame")
    longest = segment_frames + segment_frames // 2 + min_segment(segment_frames)
    ends = (*starts[1:], total)
    if any(end - first > longest for first, end in zip(starts, ends, strict=True)):
        raise SpecError(f"segment_starts: a segment is longer than {longest} frames")
    if len(master.segment_seek_pts) != len(starts):
        raise SpecError("segment_seek_pts: one per segment start")
    cuts = set(master.scene_cuts)
    for before, first in pairwise(starts):
        if first not in cuts and first - before != segment_frames:
            raise SpecError(
                f"segment_starts: {first} is neither a recorded scene cut nor {segment_frames} "
                "frames after the boundary before it"
            )

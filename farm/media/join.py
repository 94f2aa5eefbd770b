"""The stitch's join: segments into one video by stream copy, with farm.media.mp4join where it can
(index first, each byte written once), else with ffmpeg's concat demuxer; and the checks of the
result that read its index, not its frames.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from farm.adapters import proc
from farm.adapters.sandbox import Box, wrap
from farm.core.errors import PermanentError, StoreError
from farm.media import probe
from farm.media.ffgraph import concat_list
from farm.media.mp4join import Joined, Mp4Join
from farm.media.mp4track import CannotJoin
from farm.media.probe import (
    FARM_FORMATS,
    Streams,
    format_argv,
    input_name,
    parse_streams,
    probe_streams,
    video_streams,
)

log = logging.getLogger(__name__)

MP4JOIN = "mp4join"
CONCAT = "concat"


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinResult:
    method: str
    """MP4JOIN or CONCAT."""
    joined: Joined | None
    """What mp4join wrote (None after the concat demuxer)."""
    fallback: str = ""
    """Why the concat demuxer joined them ('' when mp4join did)."""


def join_segments(
    *,
    paths: Iterable[Path],
    lengths: Sequence[tuple[int, Fraction]],
    out: Path,
    concat: Callable[[Path, list[Path]], list[str]],
    skip: str = "",
    box: Box | None = None,
) -> JoinResult:
    """Join the segments that `paths` yields in order (a download may still be under way when
    it is asked for the next) into `out`. `lengths`: each segment's frames and seconds.
    `concat`: the ffmpeg argv for a concat-demuxer list file (given the segments' paths), run
    when mp4join cannot join the segments or `skip` says why it should not try, inside `box`
    (workers.host.box.media_box: `out`'s folder writable) when one is given."""
    arrived: list[Path] = []
    pending = iter(paths)
    reason = skip
    if not reason:
        try:
            with Mp4Join(out, frames=sum(frames for frames, _ in lengths)) as join:
                for frames, _ in lengths:
                    arrived.append(next(pending))
                    join.add(arrived[-1], frames)
                return JoinResult(method=MP4JOIN, joined=join.finish())
        except CannotJoin as exc:
            reason = str(exc)
        log.warning("joining %s with ffmpeg's concat demuxer: %s", out.name, reason)
    arrived += pending
    list_file = out.with_name(out.stem + "-segments.txt")
    list_file.write_text(
        concat_list([(p, seconds) for p, (_, seconds) in zip(arrived, lengths, strict=True)])
    )
    argv = concat(list_file, arrived)
    result = proc.run(wrap(argv, box) if box is not None else argv)
    if not result.ok:
        tail = "\n".join(result.tail[-15:])
        raise PermanentError("ffmpeg could not join the segments:\n" + tail)
    return JoinResult(method=CONCAT, joined=None, fallback=reason)


def check_tables(joined: Joined, frames: int, fps: Fraction) -> None:
    """From the index mp4join wrote: exactly `frames` samples, every one 1/fps long, so the
    durations add up to frames/fps to the tick."""
    tick = Fraction(joined.timescale) / fps
    if joined.frames != frames or joined.frame_ticks != {tick}:
        raise PermanentError(
            f"the joined video has {joined.frames} frames lasting {sorted(joined.frame_ticks)} "
            f"of 1/{joined.timescale} s; asked for {frames} frames of {tick}"
        )


_UNREACHED = re.compile(
    r"Connection refused|timed out|Connection reset|Network is unreachable|Input/output error|"
    r"I/O error|End of file|"
    r"Server returned 5\d\d|Server returned (?:408|429)|Name or service not known|TLS|SSL",
    re.IGNORECASE,
)
"""What ffprobe says when it did not get to read the object at a URL, not that it is bad."""


def probe_header(
    ffprobe: str,
    path: Path | str,
    *,
    name: str = "",
    options: Sequence[str] = (),
    box: Box | None = None,
) -> Streams:
    """ffprobe of the index only: the frame count is the index's (nb_frames), not a count of
    packets read through the file. `path`: a file (read in `box` when one is given), or the
    store's presigned URL of a deliverable the farm assembled there (`options`: how to read it,
    `name`: what errors call it; the URL, a credential, never appears in them). Either way as
    MP4/MOV alone, and a URL over its own scheme alone: the object holds only what the farm's
    own encodes wrote, and its index is read where it lies rather than the whole deliverable
    downloaded (workers.phases.s3join)."""
    target = input_name(path) if isinstance(path, Path) else path
    name = name or (path.name if isinstance(path, Path) else "the video")
    argv = format_argv(ffprobe, target, FARM_FORMATS)
    argv[-1:-1] = options
    result = probe.capture(argv, 600, box)
    if result.returncode != 0:
        said = result.stderr.replace(target, f"<{name}>").strip()
        if not isinstance(path, Path) and _UNREACHED.search(said):
            # The store did not answer (refused, timed out, 503 SlowDown): the object may be
            # whole, and a deliverable is never thrown away for the network's fault.
            raise StoreError(f"ffprobe could not read {name} from the store: {said[-300:]}")
        raise PermanentError(f"ffprobe cannot read {name}: {said[-300:]}")
    video = video_streams(json.loads(result.stdout or "{}"))
    info = parse_streams(result.stdout, name)
    return dataclasses.replace(info, frames=int(video[0].get("nb_frames") or 0))


def probe_joined(
    ffprobe: str, out: Path, result: JoinResult, frames: int, fps: Fraction, box: Box | None = None
) -> Streams:
    """The joined video as the stitch checks it: mp4join's from its tables and the header, the
    concat demuxer's by counting packets (its index is ffmpeg's, not ours to trust). `box`:
    where ffprobe runs (`out` readable in it)."""
    if result.joined is None:
        return probe_streams(ffprobe, out, box)
    check_tables(result.joined, frames, fps)
    return probe_header(ffprobe, out, box=box)

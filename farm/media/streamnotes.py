"""What the farm says of a master's streams and what the job does with each: at submit, in
`farm status` and on the job page (pure). The plan itself is farm.media.streams'."""

from __future__ import annotations

from typing import Any

from farm.core.sources import MasterInfo
from farm.core.spec import JobSpec
from farm.media.containers import MKV
from farm.media.streams import Action, label

WHAT = {
    Action.COPY: "copied",
    Action.AAC: "encoded to AAC",
    Action.MOV_TEXT: "converted to mov_text",
    Action.TIMECODE: "carried as the timecode track",
    Action.CHAPTERS: "carried as the chapters",
    Action.DROP: "dropped (--drop)",
    Action.SRT: "converted to SubRip (MKV has no mov_text)",
}
MKV_TIMECODE = "carried as the TIMECODE tag (MKV has no timecode track)"


def stream_lines(master: MasterInfo, container: str = "") -> list[str]:
    """One line per stream and for chapters and timecode: what the job does with it in the
    deliverable's `container` ('': MP4 or MOV)."""
    timecode = MKV_TIMECODE if container == MKV else WHAT[Action.TIMECODE]
    what = {**WHAT, Action.TIMECODE: timecode}
    lines = [f"{label(s)}: {what[Action(s.action)]}" for s in master.streams]
    if master.chapters:
        lines.append(f"chapters ({master.chapters}): copied")
    if master.timecode:
        lines.append(f"timecode {master.timecode}: {timecode if container == MKV else 'carried'}")
    lines += [f"{d}: dropped (--drop)" for d in master.dropped]
    return lines


def streams_notes(spec: JobSpec) -> list[str]:
    """What `farm submit` says of the master's streams: one line each, with what happens to it."""
    if spec.master is None or not (spec.master.streams or spec.master.chapters
                                   or spec.master.timecode or spec.master.dropped):  # fmt: skip
        return []
    lines = stream_lines(spec.master, spec.deliverable)
    return [f"{spec.source_name}: its streams besides the video, and what the job does:"] + [
        f"  {line}" for line in lines
    ]


def status_lines(spec: dict[str, Any]) -> list[str]:
    """`farm status`'s lines for a transcode job's streams, from its spec's JSON (none for a
    render job or a spec from before plans)."""
    master = spec.get("master")
    if not master:
        return []
    lines = stream_lines(MasterInfo.from_json(master), str(spec.get("container") or ""))
    return ["streams " + line for line in lines]

"""Every stream of a video master accounted for: read from ffprobe's JSON at submit, planned
(copied, encoded to AAC, converted to mov_text, carried as timecode, or dropped because --drop
named it), refused by name where the deliverable cannot hold it, mapped into the final mux, and
checked on the deliverable (pure). docs/design/streams.md says what happens per kind."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from typing import Any

from farm.core.errors import SpecError
from farm.core.sources import MasterInfo, MasterStream
from farm.media.containers import MKV, MKV_BITMAP_SUBTITLES, MKV_TEXT_SUBTITLES

MP4_AUDIO_COPY = frozenset({"aac", "mp3", "ac3", "eac3", "alac", "opus"})
"""Audio codecs an MP4 holds as they are; anything else is encoded once to AAC."""
TEXT_SUBTITLES = frozenset({"subrip", "srt", "ass", "ssa", "webvtt", "mov_text", "text"})
"""Text subtitles: converted to mov_text (3GPP timed text), the one text format MP4/MOV take
(ASS styling is not kept: mov_text has plain text)."""
MP4_BITMAP_SUBTITLES = frozenset({"dvd_subtitle"})
"""Bitmap subtitles ffmpeg's MP4 muxer takes as they are (not in a .mov)."""
KINDS = {"audio": "a", "subtitle": "s", "data": "d", "attachment": "t", "video": "v"}
"""ffprobe's codec_type -> ffmpeg's stream specifier letter (`s:1` is the second subtitle)."""
WHOLE = {
    "audio": "audio",
    "subtitles": "subtitle",
    "data": "data",
    "attachments": "attachment",
}
"""--drop words that name every stream of a kind."""
NOT_STREAMS = ("chapters", "timecode")
TIMECODE = re.compile(r"^\d{2}:\d{2}:\d{2}[:;.]\d{2,3}$")
LANGUAGE = re.compile(r"^[a-z]{3}$")
TITLE_MAX = 200


class Action(StrEnum):
    COPY = "copy"
    """Stream-copied as it is in the master."""
    AAC = "aac"
    """Audio the deliverable cannot hold as it is, encoded once to AAC."""
    MOV_TEXT = "mov_text"
    """A text subtitle converted to mov_text (3GPP timed text)."""
    TIMECODE = "timecode"
    """A timecode track (tmcd): its start is written as the deliverable's timecode track."""
    CHAPTERS = "chapters"
    """A QuickTime chapter text track: the chapters it holds are carried as chapters."""
    DROP = "drop"
    """Left out because --drop named it."""
    SRT = "srt"
    """A mov_text subtitle converted to SubRip: Matroska has no mov_text."""


def parse_drop(text: str | None) -> frozenset[str]:
    """`--drop s:1,a:2,attachments,chapters` -> its selectors; SpecError for one it does not know."""
    found: set[str] = set()
    for raw in (text or "").split(","):
        item = raw.strip().lower()
        if not item:
            continue
        if item in WHOLE or item in NOT_STREAMS or re.fullmatch(r"[asdtv]:\d{1,3}", item):
            found.add(item)
            continue
        raise SpecError(
            f"--drop {raw.strip()!r}: name streams as KIND:N (a: audio, s: subtitle, d: data, "
            "t: attachment, v: a second video; N counts from 0 within its kind, as `farm "
            "submit` lists them) or whole kinds: audio, subtitles, data, attachments, chapters, "
            "timecode"
        )
    return frozenset(found)


def language_of(tags: dict[str, Any]) -> str:
    value = str(tags.get("language") or "").strip().lower()
    return value if LANGUAGE.fullmatch(value) and value != "und" else ""


def title_of(tags: dict[str, Any]) -> str:
    text = str(tags.get("title") or tags.get("handler_name") or "")
    text = "".join(c for c in text if c.isprintable())[:TITLE_MAX]
    # MP4 names an untitled track by its handler; that is no title
    return (
        "" if text in ("SoundHandler", "SubtitleHandler", "VideoHandler", "DataHandler") else text
    )


def _codec(stream: dict[str, Any]) -> str:
    """ffprobe's codec name; for MOV/MP4 data tracks, their tag: `tmcd` (a timecode track),
    `text` (the QuickTime chapter track, which ffprobe lists as bin_data)."""
    tag = str(stream.get("codec_tag_string") or "")
    if stream.get("codec_type") == "data" and tag in ("tmcd", "text"):
        return tag
    return str(stream.get("codec_name") or tag or "unknown")


def read_streams(data: dict[str, Any]) -> list[MasterStream]:
    """Every stream of ffprobe's JSON but the first moving video (the one the farm encodes)."""
    streams = data.get("streams") or []
    first_video = next(
        (
            s.get("index")
            for s in streams
            if s.get("codec_type") == "video"
            and not (s.get("disposition") or {}).get("attached_pic")
        ),
        None,
    )
    counts: dict[str, int] = {}
    found = []
    for s in streams:
        kind = str(s.get("codec_type") or "data")
        kind = kind if kind in KINDS else "data"
        n = counts.get(kind, 0)
        counts[kind] = n + 1
        if s.get("index") == first_video:
            continue
        tags = s.get("tags") or {}
        disposition = s.get("disposition") or {}
        found.append(
            MasterStream(
                index=int(s.get("index") or 0),
                kind=kind,
                kind_index=n,
                codec=_codec(s),
                language=language_of(tags),
                title=title_of(tags),
                default=bool(disposition.get("default")),
                forced=bool(disposition.get("forced")),
            )
        )
    return found


def read_timecode(data: dict[str, Any]) -> str:
    """The master's start timecode: the format's tag, else a stream's (a tmcd track's, the
    video's); '' when it has none."""
    places = [data.get("format") or {}, *(data.get("streams") or [])]
    for place in places:
        for key, value in (place.get("tags") or {}).items():
            if key.lower() == "timecode" and TIMECODE.fullmatch(str(value).strip()):
                return str(value).strip()
    return ""


def label(s: MasterStream) -> str:
    """`stream 4 (subtitle s:1, hdmv_pgs_subtitle, eng 'Commentary')`."""
    extra = " ".join(p for p in (s.language, repr(s.title) if s.title else "") if p)
    flags = [f for f, on in (("default", s.default), ("forced", s.forced)) if on]
    inner = ", ".join(p for p in (f"{s.kind} {KINDS[s.kind]}:{s.kind_index}", s.codec, extra) if p)
    return f"stream {s.index} ({inner}{', ' + ' '.join(flags) if flags else ''})"


def audio_action(codec: str) -> Action:
    """An audio stream in an MP4 or MOV: copied where it holds the codec, else encoded once to
    AAC (mux_options gives the bitrate)."""
    return Action.COPY if codec in MP4_AUDIO_COPY else Action.AAC


def planned_action(s: MasterStream, container: str, timecode: str, chapters: int) -> Action | str:
    """What the deliverable (MP4, MOV or MKV) does with the stream, or why it cannot hold it."""
    box = container.upper()
    if container == MKV:
        return _in_mkv(s, timecode, chapters)
    if s.kind == "audio":
        return audio_action(s.codec)
    if s.kind == "subtitle":
        if s.codec == "mov_text":
            return Action.COPY
        if s.codec in TEXT_SUBTITLES:
            return Action.MOV_TEXT
        if s.codec in MP4_BITMAP_SUBTITLES and container == "mp4":
            return Action.COPY
        if s.codec == "hdmv_pgs_subtitle":
            return f"{box} cannot hold PGS bitmap subtitles"
        return f"{box} cannot hold {s.codec} subtitles"
    if s.kind == "data" and s.codec == "tmcd":
        return Action.TIMECODE if timecode else f"its timecode track has no start {box} can write"
    if s.kind == "data" and s.codec == "text" and chapters:
        return Action.CHAPTERS
    if s.kind == "attachment":
        return f"{box} holds no attachments (fonts, images)"
    if s.kind == "video":
        return "the farm encodes the master's first video stream alone"
    return f"{box} cannot carry {s.kind} streams of codec {s.codec}"


def _in_mkv(s: MasterStream, timecode: str, chapters: int) -> Action | str:
    """planned_action for a Matroska deliverable: every audio codec, text and bitmap subtitles
    and attachments as they are; mov_text as SubRip; a timecode track as the TIMECODE tag."""
    if s.kind in ("audio", "attachment"):
        return Action.COPY
    if s.kind == "subtitle":
        if s.codec == "mov_text":
            return Action.SRT
        if s.codec in MKV_TEXT_SUBTITLES or s.codec in MKV_BITMAP_SUBTITLES:
            return Action.COPY
        return f"MKV cannot hold {s.codec} subtitles"
    if s.kind == "data" and s.codec == "tmcd":
        return Action.TIMECODE if timecode else "its timecode track has no start MKV can write"
    if s.kind == "data" and s.codec == "text" and chapters:
        return Action.CHAPTERS
    if s.kind == "video":
        return "the farm encodes the master's first video stream alone"
    return f"MKV cannot carry {s.kind} streams of codec {s.codec}"


def _dropped(s: MasterStream, drop: frozenset[str]) -> bool:
    whole = {v: k for k, v in WHOLE.items()}.get(s.kind, "")
    return f"{KINDS[s.kind]}:{s.kind_index}" in drop or whole in drop


def plan_streams(
    name: str, data: dict[str, Any], container: str, drop: frozenset[str] = frozenset()
) -> MasterInfo:
    """The plan as MasterInfo fields (streams, chapters, timecode, dropped) over a blank master:
    every stream kept as the `container` (mp4, mov or mkv) holds it, or dropped because `drop`
    names it; SpecError naming every stream it cannot hold, with the --drop that delivers
    without it, and every --drop selector that names nothing."""
    found = read_streams(data)
    timecode = read_timecode(data)
    chapters = len(data.get("chapters") or [])
    refused, planned = [], []
    for s in found:
        # a timecode or chapter track goes with --drop timecode or --drop chapters
        carries = (
            {"tmcd": "timecode", "text": "chapters"}.get(s.codec) if s.kind == "data" else None
        )
        if _dropped(s, drop) or (carries and carries in drop):
            planned.append(replace(s, action=str(Action.DROP)))
            continue
        action = planned_action(s, container, timecode, chapters)
        if isinstance(action, Action):
            planned.append(replace(s, action=str(action)))
        else:
            spec = f"{KINDS[s.kind]}:{s.kind_index}"
            refused.append(f"{label(s)}: {action}; add --drop {spec} to deliver without it")
    for selector in sorted(drop):
        if selector in NOT_STREAMS:
            if not (chapters if selector == "chapters" else timecode):
                refused.append(f"--drop {selector}: {name} has no {selector}")
        elif ":" in selector:
            if not any(f"{KINDS[s.kind]}:{s.kind_index}" == selector for s in found):
                refused.append(f"--drop {selector}: {name} has no such stream")
        elif not any(s.kind == WHOLE[selector] for s in found):
            refused.append(f"--drop {selector}: {name} has no {selector}")
    if refused:
        raise SpecError(f"{name}: " + "; ".join(refused))
    return MasterInfo(
        container="", codec="", width=0, height=0, frame_count=0, avg_frame_rate="0/1",
        time_base="1/1", start_pts=0, format_start_s=0.0, duration_s=0.0, vfr=False,
        streams=tuple(planned),
        chapters=0 if "chapters" in drop else chapters,
        timecode="" if "timecode" in drop else timecode,
        dropped=tuple(d for d in NOT_STREAMS if d in drop),
    )  # fmt: skip


def kept(master: MasterInfo, kind: str) -> list[MasterStream]:
    """The streams of `kind` the deliverable holds, in order. A spec from before plans keeps
    its audio alone, as it did."""
    if not master.streams and kind == "audio":
        return [
            MasterStream(index=-1, kind="audio", kind_index=a.index, codec=a.codec,
                         action=str(audio_action(a.codec)))
            for a in master.audio
        ]  # fmt: skip
    return [
        s
        for s in master.streams
        if s.kind == kind and s.action not in (Action.DROP, Action.TIMECODE, Action.CHAPTERS)
    ]


def carries_more_than_video(master: MasterInfo) -> bool:
    """Whether the final mux reads the master (audio, subtitles, attachments, chapters or a
    timecode)."""
    return bool(kept(master, "audio") or kept(master, "subtitle") or kept(master, "attachment")
                or master.chapters or master.timecode)  # fmt: skip


def carried_packets(master: MasterInfo) -> int:
    """Room in the deliverable's index for the master's streams the final mux carries over:
    AAC's 1024 samples a packet, doubled for other codecs; a subtitle cue (and the gap before it)
    at most every half second; the chapters' text track; the timecode track."""
    audio = sum(
        2 * int((a.duration_s or master.duration_s) * a.sample_rate / 1024) + 64
        for a in master.audio
    )
    subtitles = sum(4 * int(master.duration_s) + 64 for _ in kept(master, "subtitle"))
    return audio + subtitles + 2 * master.chapters + 128


def mux_options(master: MasterInfo, container: str = "") -> tuple[list[str], list[str]]:
    """The master's streams the final mux maps (as `a:N`, `s:N`, `t:N` of its input) and the
    output options for each: codec, language, title (as a metadata value, and MP4's handler
    name, which players show), dispositions; then chapters and timecode (in MKV, ffmpeg writes
    `-timecode` as the TIMECODE tag). Output stream 0 is the video. An attachment keeps its
    filename and mimetype tags, which ffmpeg copies with the stream."""
    maps: list[str] = []
    args: list[str] = []
    channels = {a.index: a.channels for a in master.audio}
    out = 1
    for kind in ("audio", "subtitle", "attachment"):
        letter = KINDS[kind]
        for n, s in enumerate(kept(master, kind)):
            maps.append(f"{letter}:{s.kind_index}")
            codec = {Action.AAC: "aac", Action.MOV_TEXT: "mov_text", Action.SRT: "srt"}.get(
                Action(s.action), "copy"
            )
            args += [f"-c:{letter}:{n}", codec]
            if kind == "attachment":
                out += 1
                continue
            if s.action == Action.AAC:
                bitrate = min(96 * max(channels.get(s.kind_index, 2), 1), 640)
                args += [f"-b:{letter}:{n}", f"{bitrate}k"]
            if s.index >= 0:  # an old spec's audio keeps the muxer's defaults, as before
                args += [f"-metadata:s:{out}", f"language={s.language or 'und'}"]
                if s.title:
                    args += [f"-metadata:s:{out}", f"title={s.title}"]
                    if container != MKV:  # MP4's track name; Matroska has the title alone
                        args += [f"-metadata:s:{out}", f"handler_name={s.title}"]
                flags = [f for f, on in (("default", s.default), ("forced", s.forced)) if on]
                args += [f"-disposition:{out}", "+".join(flags) or "0"]
            out += 1
    args += ["-map_chapters", "1" if master.chapters else "-1"]
    if master.timecode:
        args += ["-timecode", master.timecode]
    return maps, args


def cue_counts(
    name: str, plan: MasterInfo, container: str, cues: Callable[[int], str]
) -> MasterInfo:
    """The plan with each copied bitmap subtitle's cues counted, from `cues(n)`: ffprobe's
    `pts,duration,flags` lines of subtitle stream s:n. MP4 gives a sample the time to the next
    one, so a last cue with no duration of its own would be lost: refused by name. Matroska
    keeps each cue's own time: an MKV plan is left as it is."""
    if container == MKV:
        return plan
    counted, refused = [], []
    for s in plan.streams:
        if s.kind == "subtitle" and s.action == Action.COPY:
            lines = [line.split(",") for line in cues(s.kind_index).splitlines() if line.strip()]
            if lines and lines[-1][1:2] in (["N/A"], [""], ["0"]):
                refused.append(
                    f"{label(s)}: its cues carry no durations, and {container.upper()} would "
                    "lose the last one; remux the master with mkvmerge (which writes them), or "
                    f"add --drop s:{s.kind_index} to deliver without it"
                )
            s = replace(s, packets=len(lines))
        counted.append(s)
    if refused:
        raise SpecError(f"{name}: " + "; ".join(refused))
    return replace(plan, streams=tuple(counted))


def with_plan(master: MasterInfo, plan: MasterInfo) -> MasterInfo:
    """The master with the plan's fields (plan_streams) on it."""
    return replace(master, streams=plan.streams, chapters=plan.chapters,
                   timecode=plan.timecode, dropped=plan.dropped)  # fmt: skip

"""The checks of a transcode's stream plan (farm.media.streams): the API's of a plan a client
sent, and the stitch's of the deliverable against it (pure)."""

from __future__ import annotations

import re
from typing import Any

from farm.core.errors import SpecError
from farm.core.sources import MasterInfo
from farm.media.probe import farm_formats, format_argv
from farm.media.streams import (
    KINDS,
    LANGUAGE,
    NOT_STREAMS,
    TIMECODE,
    TITLE_MAX,
    Action,
    kept,
    label,
    language_of,
    planned_action,
    read_timecode,
    title_of,
)


def deliverable_argv(ffprobe: str, path: str) -> list[str]:
    """The deliverable's streams (their tags and dispositions) and chapters, as JSON, from its
    index, read as one of the farm's own containers (MP4, MOV, or Matroska for an .mkv)."""
    argv = format_argv(ffprobe, path, farm_formats(path))
    argv[-1:-1] = ["-show_chapters"]
    return argv


def _handler_title(stream: dict[str, Any]) -> str:
    tags = stream.get("tags") or {}
    return title_of({"title": tags.get("title") or tags.get("handler_name") or ""})


def deliverable_problems(data: dict[str, Any], master: MasterInfo) -> list[str]:
    """What the deliverable (ffprobe's JSON of it) lacks of the plan: per kind, the count, and
    per stream its codec, language, title and default flag (where the master marks one of its
    kind default: MP4 otherwise enables the first); each attachment's filename and mimetype
    (MKV); the chapters; the timecode (a tmcd track's, or Matroska's TIMECODE tag)."""
    streams = data.get("streams") or []
    problems = []
    for kind, want_codec in (("audio", None), ("subtitle", None)):
        want = kept(master, kind)
        got = [s for s in streams if s.get("codec_type") == kind]
        if len(got) != len(want):
            problems.append(f"{len(got)} {kind} streams, the plan keeps {len(want)}")
            continue
        any_default = any(w.default for w in want)
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            if w.index < 0:  # an old spec's audio: counted alone, as before
                continue
            codec = {Action.AAC: "aac", Action.MOV_TEXT: "mov_text", Action.SRT: "subrip"}.get(
                Action(w.action), w.codec
            )
            got_codec = str(g.get("codec_name") or want_codec or "")
            language = language_of(g.get("tags") or {})
            default = bool((g.get("disposition") or {}).get("default"))
            what = f"{kind} {n} (from {label(w)})"
            if got_codec != codec:
                problems.append(f"{what} is {got_codec or 'unknown'}, not {codec}")
            if language != w.language:
                problems.append(f"{what} has language {language or 'none'}")
            if w.title and _handler_title(g) != w.title:
                problems.append(f"{what} has title {_handler_title(g)!r}")
            if any_default and default != w.default:
                problems.append(f"{what} is {'' if default else 'not '}default")
            if w.packets and int(g.get("nb_frames") or 0) != w.packets:
                problems.append(f"{what} holds {g.get('nb_frames') or 0} cues of {w.packets}")
    problems += attachment_problems(streams, master)
    chapters = len(data.get("chapters") or [])
    if chapters != master.chapters:
        problems.append(f"{chapters} chapters, the master's plan keeps {master.chapters}")
    timecode = read_timecode({"format": data.get("format") or {}, "streams": streams})
    if master.timecode and timecode != master.timecode:
        problems.append(f"timecode {timecode or 'none'}, the master's is {master.timecode}")
    return problems


def attachment_problems(streams: list[dict[str, Any]], master: MasterInfo) -> list[str]:
    """The attachments the plan keeps (MKV's fonts), each with a filename and a mimetype tag,
    as many as the plan keeps."""
    want = kept(master, "attachment")
    got = [s for s in streams if s.get("codec_type") == "attachment"]
    if len(got) != len(want):
        return [f"{len(got)} attachments, the plan keeps {len(want)}"]
    return [
        f"attachment {n} (from {label(w)}) has no {tag}"
        for n, (g, w) in enumerate(zip(got, want, strict=True))
        for tag in ("filename", "mimetype")
        if not (g.get("tags") or {}).get(tag)
    ]


def check_plan(master: MasterInfo, container: str) -> None:
    """A plan from a client (the API): only plain, well-formed values, and the choice the
    submit would have made for each stream, so nothing reaches the mux's argv but a codec from
    a fixed set, integer indexes, a three-letter language and a title as a metadata value."""
    seen = set()
    for s in master.streams:
        where = f"master.streams[{s.index}]"
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1000
                   for v in (s.index, s.kind_index)):  # fmt: skip
            raise SpecError(f"{where}: index and kind_index must be whole numbers, 0 to 999")
        if s.kind not in KINDS or (s.kind, s.kind_index) in seen:
            raise SpecError(f"{where}: kind {s.kind!r} (one of {', '.join(KINDS)}), once per index")
        seen.add((s.kind, s.kind_index))
        if not (isinstance(s.codec, str) and re.fullmatch(r"[a-z0-9_]{1,32}", s.codec)):
            raise SpecError(f"{where}: codec {s.codec!r} is no codec name")
        if not (
            isinstance(s.language, str) and (s.language == "" or LANGUAGE.fullmatch(s.language))
        ):
            raise SpecError(f"{where}: language {s.language!r}: three letters (ISO 639-2) or ''")
        if not (isinstance(s.title, str) and len(s.title) <= TITLE_MAX and s.title.isprintable()):
            raise SpecError(f"{where}: title: printable text, at most {TITLE_MAX} characters")
        if not (isinstance(s.default, bool) and isinstance(s.forced, bool)):
            raise SpecError(f"{where}: default and forced are true or false")
        if not 0 <= s.packets <= 10_000_000 or (s.packets and s.kind != "subtitle"):
            raise SpecError(f"{where}: packets counts a subtitle's cues, 0 or more")
        planned = planned_action(s, container, master.timecode, master.chapters)
        if s.action != Action.DROP and planned != s.action:
            raise SpecError(f"{where}: action {s.action!r} is not what a submit plans for it")
    if not (isinstance(master.chapters, int) and 0 <= master.chapters <= 10000):
        raise SpecError("master.chapters: a whole number, 0 to 10000")
    if master.timecode and not TIMECODE.fullmatch(str(master.timecode)):
        raise SpecError(f"master.timecode {master.timecode!r}: HH:MM:SS:FF or ''")
    if any(d not in NOT_STREAMS for d in master.dropped):
        raise SpecError(f"master.dropped: only {', '.join(NOT_STREAMS)}")
    if master.field_order not in ("", "tt", "bb", "tb", "bt") or not isinstance(
        master.deinterlace, bool
    ):
        raise SpecError("master.field_order: tt, bb, tb, bt or ''; deinterlace: true or false")
    if master.field_order and not master.deinterlace:
        raise SpecError("an interlaced master is transcoded only with deinterlace: true")

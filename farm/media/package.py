"""A ladder's renditions packaged for streaming (`--package hls|dash|both`): the ffmpeg command
line, the playlists the farm writes itself, and a reader of HLS playlists (pure).

One set of CMAF (fragmented MP4) segments serves both: ffmpeg's dash muxer cuts them by stream copy
and writes the MPD and, with `hls_playlist`, a media playlist per stream. The farm writes the HLS
master playlist itself: ffmpeg 5.1's leaves out each audio track's LANGUAGE and its NAME.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import ffmpeg

from farm.core import keys
from farm.media.ffgraph import GLOBAL_ARGS
from farm.media.ladder import GOP_S
from farm.media.probe import FARM_FORMATS, input_name, whitelists

MPD = "manifest.mpd"
DASH_NAMESPACE = "urn:mpeg:dash:schema:mpd:2011"
MASTER = "master.m3u8"
INDEX = "package.json"
"""The package's list of files with their sizes and SHA-256, written last: `farm fetch` checks
each file it brings against it."""
_LANGUAGE = re.compile(r"[a-z]{2,3}(?:-[A-Za-z0-9]{1,8})*")
_ATTR = re.compile(r'([A-Z0-9-]+)=("[^"]*"|[^,]*)')


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioTrack:
    """One of the output's audio or subtitle streams, as the package names it."""

    index: int
    language: str = ""
    """ISO 639 as the master tags it ('' or 'und': none)."""
    title: str = ""
    default: bool = False
    forced: bool = False
    """Subtitles only: shown whatever the viewer chose (signs, foreign dialogue)."""


def package_key(job_id: str) -> str:
    """`jobs/<id>/output.package/`: a folder among the job's outputs (keys.output_key), so the
    roles that write a job's outputs write it, each file once."""
    return keys.output_key(job_id, "package") + "/"


def safe_language(tag: str) -> str:
    """A master's language tag, kept only when it is one (it reaches a playlist and a muxer)."""
    tag = tag.strip().lower()
    return tag if _LANGUAGE.fullmatch(tag) and tag != "und" else ""


def audio_name(track: AudioTrack) -> str:
    """The NAME a player lists: the title when it is plain text, else the language, else a number."""
    title = re.sub(r'["\x00-\x1f\x7f]', "", track.title)[:60].strip()
    return title or track.language or f"track {track.index + 1}"


def package_argv(
    *,
    ffmpeg_bin: str,
    inputs: list[str],
    audio: int,
    out_dir: str,
    hls: bool,
) -> list[str]:
    """The renditions (`inputs[0]`: the largest with the audio, the others video alone, all MP4s
    the farm made) -> CMAF segments of GOP_S seconds, the MPD, and per stream an HLS media
    playlist when `hls`. Stream copy: the segments start on the renditions' aligned keyframes."""
    sources = [ffmpeg.input(input_name(p), **whitelists(input_name(p), FARM_FORMATS))
               for p in inputs]  # fmt: skip
    streams = [s["v:0"] for s in sources] + [sources[0][f"a:{n}"] for n in range(audio)]
    videos = ",".join(str(n) for n in range(len(inputs)))
    sets = [f"id=0,streams={videos}"]
    # One adaptation set per audio track: DASH tells languages apart by set.
    sets += [f"id={n + 1},streams={len(inputs) + n}" for n in range(audio)]
    stream = ffmpeg.output(
        *streams,
        f"{out_dir}/{MPD}",
        c="copy",
        f="dash",
        seg_duration=GOP_S,
        use_template=1,
        use_timeline=1,
        hls_playlist=int(hls),
        adaptation_sets=" ".join(sets),
        init_seg_name="init-$RepresentationID$.m4s",
        media_seg_name="chunk-$RepresentationID$-$Number%05d$.m4s",
    )
    return list(stream.global_args(*GLOBAL_ARGS).compile(cmd=ffmpeg_bin))


def attributes(text: str) -> dict[str, str]:
    """An HLS tag's attribute list, quotes taken off."""
    return {k: v.strip('"') for k, v in _ATTR.findall(text)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Playlist:
    """An HLS playlist as a player reads it: a master's variants and media, or a media playlist's
    init segment and segments."""

    variants: list[tuple[dict[str, str], str]] = field(default_factory=list)
    """EXT-X-STREAM-INF attributes and the media playlist's URI."""
    media: list[dict[str, str]] = field(default_factory=list)
    """EXT-X-MEDIA attributes (URI among them)."""
    init: str = ""
    segments: list[tuple[float, str]] = field(default_factory=list)
    """Each segment's EXTINF duration and URI."""
    ended: bool = False


def parse_playlist(text: str) -> Playlist:
    """Parse an m3u8 (the tags this farm writes and players need; others are skipped)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != "#EXTM3U":
        raise ValueError("not an HLS playlist: it does not begin with #EXTM3U")
    result = Playlist()
    pending: dict[str, str] | None = None
    duration: float | None = None
    init = ""
    for line in lines[1:]:
        if line.startswith("#EXT-X-STREAM-INF:"):
            pending = attributes(line.split(":", 1)[1])
        elif line.startswith("#EXT-X-MEDIA:"):
            result.media.append(attributes(line.split(":", 1)[1]))
        elif line.startswith("#EXT-X-MAP:"):
            init = attributes(line.split(":", 1)[1]).get("URI", "")
        elif line.startswith("#EXTINF:"):
            duration = float(line.split(":", 1)[1].split(",", 1)[0])
        elif line == "#EXT-X-ENDLIST":
            result = replace(result, ended=True)
        elif not line.startswith("#"):
            if pending is not None:
                result.variants.append((pending, line))
                pending = None
            elif duration is not None:
                result.segments.append((duration, line))
                duration = None
    return replace(result, init=init)


def media_playlist(text: str) -> str:
    """ffmpeg's media playlist as a VOD one: its wall-clock PROGRAM-DATE-TIME lines (the time of
    the packaging, not of the video) dropped, PLAYLIST-TYPE:VOD added."""
    out = []
    for line in text.splitlines():
        if line.startswith("#EXT-X-PROGRAM-DATE-TIME"):
            continue
        out.append(line)
        if line.startswith("#EXT-X-TARGETDURATION"):
            out.append("#EXT-X-PLAYLIST-TYPE:VOD")
    return "\n".join(out) + "\n"


def subtitle_name(index: int) -> str:
    """A subtitle track's WebVTT file; its playlist is the same name with .m3u8."""
    return f"subtitles-{index}.vtt"


def vtt_argv(*, ffmpeg_bin: str, source: str, index: int, out: str) -> list[str]:
    """The output's subtitle stream `s:index` (mov_text, as the stitch made it) as WebVTT."""
    stream = ffmpeg.input(input_name(source), **whitelists(input_name(source), FARM_FORMATS))
    stream = stream[f"s:{index}"].output(out, **{"c:s": "webvtt"}, f="webvtt")
    return list(stream.global_args(*GLOBAL_ARGS).compile(cmd=ffmpeg_bin))


def subtitle_playlist(vtt: str, duration_s: float) -> str:
    """A subtitle track's media playlist: its whole WebVTT file as one segment the length of the
    video (players fetch a few KiB once)."""
    return "\n".join([
        "#EXTM3U", "#EXT-X-VERSION:3", f"#EXT-X-TARGETDURATION:{math.ceil(duration_s)}",
        "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-PLAYLIST-TYPE:VOD", f"#EXTINF:{duration_s:.6f},", vtt,
        "#EXT-X-ENDLIST",
    ]) + "\n"  # fmt: skip


def mpd_with_subtitles(text: str, subtitles: list[AudioTrack]) -> str:
    """ffmpeg's MPD with an adaptation set per subtitle track (its WebVTT file, whole)."""
    ET.register_namespace("", DASH_NAMESPACE)
    for prefix, uri in (("xsi", "http://www.w3.org/2001/XMLSchema-instance"),
                        ("xlink", "http://www.w3.org/1999/xlink")):  # fmt: skip
        ET.register_namespace(prefix, uri)
    root = ET.fromstring(text)
    period = root.find(f"{{{DASH_NAMESPACE}}}Period")
    if period is None:
        raise ValueError("ffmpeg's MPD has no Period")
    sets = period.findall(f"{{{DASH_NAMESPACE}}}AdaptationSet")
    next_id = 1 + max((int(s.get("id", "0")) for s in sets), default=0)
    for n, track in enumerate(subtitles):
        attrs = {"id": str(next_id + n), "contentType": "text", "mimeType": "text/vtt"}
        if track.language:
            attrs["lang"] = track.language
        found = ET.SubElement(period, f"{{{DASH_NAMESPACE}}}AdaptationSet", attrs)
        role = "forced-subtitle" if track.forced else "subtitle"
        ET.SubElement(found, f"{{{DASH_NAMESPACE}}}Role",
                      {"schemeIdUri": "urn:mpeg:dash:role:2011", "value": role})  # fmt: skip
        rep = ET.SubElement(found, f"{{{DASH_NAMESPACE}}}Representation",
                            {"id": f"subtitles-{track.index}", "bandwidth": "256"})  # fmt: skip
        ET.SubElement(rep, f"{{{DASH_NAMESPACE}}}BaseURL").text = subtitle_name(track.index)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")


def master_playlist(
    written: str,
    audio: list[AudioTrack],
    frame_rate: str,
    subtitles: Sequence[AudioTrack] = (),
) -> str:
    """The master playlist from ffmpeg's (`written`: its variants, their BANDWIDTH, RESOLUTION
    and CODECS; its audio media in stream order), each audio track with its LANGUAGE and NAME,
    one DEFAULT, each subtitle track (WebVTT, subtitle_playlist) likewise, and every variant's
    FRAME-RATE."""
    found = parse_playlist(written)
    if len(found.media) != len(audio):
        raise ValueError(f"ffmpeg's master playlist lists {len(found.media)} audio tracks, "
                         f"the output has {len(audio)}")  # fmt: skip
    group = "audio"
    lines = ["#EXTM3U", "#EXT-X-VERSION:7", "#EXT-X-INDEPENDENT-SEGMENTS"]
    default = next((t.index for t in audio if t.default), 0)
    for media, track in zip(found.media, audio, strict=True):
        attrs = [f'TYPE=AUDIO,GROUP-ID="{group}",NAME="{audio_name(track)}"']
        if track.language:
            attrs.append(f'LANGUAGE="{track.language}"')
        yes = "YES" if track.index == default else "NO"
        attrs.append(f'DEFAULT={yes},AUTOSELECT=YES,URI="{media["URI"]}"')
        lines.append("#EXT-X-MEDIA:" + ",".join(attrs))
    for track in subtitles:
        attrs = [f'TYPE=SUBTITLES,GROUP-ID="subtitles",NAME="{audio_name(track)}"']
        if track.language:
            attrs.append(f'LANGUAGE="{track.language}"')
        attrs.append(f"DEFAULT={'YES' if track.default else 'NO'},AUTOSELECT=YES")
        if track.forced:
            attrs.append("FORCED=YES")
        uri = subtitle_name(track.index).replace(".vtt", ".m3u8")
        lines.append("#EXT-X-MEDIA:" + ",".join([*attrs, f'URI="{uri}"']))
    for attrs_, uri in found.variants:
        parts = [f"BANDWIDTH={attrs_['BANDWIDTH']}", f"RESOLUTION={attrs_['RESOLUTION']}"]
        if "CODECS" in attrs_:
            parts.append(f'CODECS="{attrs_["CODECS"]}"')
        parts.append(f"FRAME-RATE={frame_rate}")
        if audio:
            parts.append(f'AUDIO="{group}"')
        if subtitles:
            parts.append('SUBTITLES="subtitles"')
        lines += ["#EXT-X-STREAM-INF:" + ",".join(parts), uri]
    return "\n".join(lines) + "\n"

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
from farm.core.hdr import HLG, PQ, HdrInfo
from farm.media.ffgraph import GLOBAL_ARGS
from farm.media.ladder import GOP_S
from farm.media.probe import FARM_FORMATS, input_name, whitelists

MPD = "manifest.mpd"
DASH_NAMESPACE = "urn:mpeg:dash:schema:mpd:2011"
MASTER = "master.m3u8"
INDEX = "package.json"
"""The package's list of files with their sizes and SHA-256, written last: `farm fetch` checks
each file it brings against it."""
VIDEO_RANGES = {PQ: "PQ", HLG: "HLG"}
"""HLS VIDEO-RANGE per transfer (RFC 8216bis 4.4.6.2); an SDR ladder leaves it out (SDR is what a
player assumes), and Apple's authoring spec asks for it on every variant once one is HDR."""
CICP = "urn:mpeg:mpegB:cicp:"
CICP_CODES = {
    "ColourPrimaries": {"bt709": 1, "bt470m": 4, "bt470bg": 5, "smpte170m": 6, "smpte240m": 7,
                        "film": 8, "bt2020": 9, "smpte428": 10, "smpte431": 11, "smpte432": 12},
    "TransferCharacteristics": {"bt709": 1, "gamma22": 4, "gamma28": 5, "smpte170m": 6,
                                "smpte240m": 7, "linear": 8, "log100": 9, "log316": 10,
                                "iec61966-2-4": 11, "bt1361e": 12, "iec61966-2-1": 13,
                                "bt2020-10": 14, "bt2020-12": 15, "smpte2084": 16, "smpte428": 17,
                                "arib-std-b67": 18},
    "MatrixCoefficients": {"gbr": 0, "bt709": 1, "fcc": 4, "bt470bg": 5, "smpte170m": 6,
                           "smpte240m": 7, "ycgco": 8, "bt2020nc": 9, "bt2020c": 10,
                           "smpte2085": 11, "chroma-derived-nc": 12, "chroma-derived-c": 13,
                           "ictcp": 14},
}  # fmt: skip
"""ffprobe's colour names as ITU-T H.273 (CICP) code points, for the MPD's descriptors."""
_PROFILE_SPACES = ("", "A", "B", "C")
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


def video_range(hdr: HdrInfo | None) -> str:
    """The ladder's VIDEO-RANGE: PQ or HLG when the master's HDR is kept, '' (left out) for SDR."""
    if hdr is None or hdr.tonemap:
        return ""
    return VIDEO_RANGES.get(hdr.transfer, "")


def hevc_codec(init: bytes) -> str:
    """An HEVC rendition's RFC 6381 codecs string (ISO/IEC 14496-15 Annex E.3), e.g.
    `hvc1.2.4.L93.90`, from its init segment's hvcC: ffmpeg 5.1 writes a bare `hvc1`, which
    names no profile, tier or level and which Apple's players and MSE cannot judge."""
    at = init.find(b"hvcC")
    record = init[at + 4 : at + 4 + 13] if at >= 4 else b""
    if len(record) < 13 or int.from_bytes(init[at - 4 : at], "big") < 8 + 23:
        raise ValueError("the init segment has no HEVC configuration (hvcC) box")
    entry = "hev1" if init.rfind(b"hev1", 0, at) > init.rfind(b"hvc1", 0, at) else "hvc1"
    space, tier, profile = record[1] >> 6, (record[1] >> 5) & 1, record[1] & 0x1F
    compatible = int(f"{int.from_bytes(record[2:6], 'big'):032b}"[::-1], 2)
    constraints = record[6:12].rstrip(b"\0")
    parts = [entry, f"{_PROFILE_SPACES[space]}{profile}", f"{compatible:X}",
             f"{'LH'[tier]}{record[12]}", *(f"{b:X}" for b in constraints)]  # fmt: skip
    return ".".join(parts)


def with_video_codec(listed: str, video: str) -> str:
    """A CODECS list (`hvc1,mp4a.40.2`) with its bare HEVC entry replaced by `video`."""
    return ",".join(video if c.strip() in ("hvc1", "hev1") else c for c in listed.split(","))


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


def _period(text: str) -> tuple[ET.Element, ET.Element]:
    """ffmpeg's MPD parsed, its namespaces kept for writing back: the root and its Period."""
    ET.register_namespace("", DASH_NAMESPACE)
    for prefix, uri in (("xsi", "http://www.w3.org/2001/XMLSchema-instance"),
                        ("xlink", "http://www.w3.org/1999/xlink")):  # fmt: skip
        ET.register_namespace(prefix, uri)
    root = ET.fromstring(text)
    period = root.find(f"{{{DASH_NAMESPACE}}}Period")
    if period is None:
        raise ValueError("ffmpeg's MPD has no Period")
    return root, period


def _mpd_text(root: ET.Element) -> str:
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")


def mpd_with_video(text: str, codecs: Sequence[str], hdr: HdrInfo | None) -> str:
    """ffmpeg's MPD with each video representation's full `codecs` (hevc_codec; none: as
    written) and, when the master's HDR is kept, its colour as CICP descriptors on the video set
    (DASH-IF IOP's HDR10/PQ10: primaries 9, transfer 16, matrix 9). The transfer is essential
    for PQ, so a player that cannot show PQ skips the set; HLG plays on SDR screens, so there it
    is supplemental like the rest."""
    root, period = _period(text)
    videos = [s for s in period.findall(f"{{{DASH_NAMESPACE}}}AdaptationSet")
              if s.get("contentType") == "video"]  # fmt: skip
    reps = [r for s in videos for r in s.findall(f"{{{DASH_NAMESPACE}}}Representation")]
    if codecs and len(codecs) != len(reps):
        raise ValueError(f"ffmpeg's MPD has {len(reps)} video representations, not {len(codecs)}")
    for rep, codec in zip(reps, codecs, strict=False):
        rep.set("codecs", codec)
    if hdr is None or hdr.tonemap or not hdr.is_hdr:
        return _mpd_text(root)
    essential = CICP + "TransferCharacteristics" if hdr.transfer == PQ else ""
    for found in videos:  # descriptors come before the set's representations (the MPD schema)
        for n, (scheme, value) in enumerate(cicp(hdr)):
            kind = "Essential" if scheme == essential else "Supplemental"
            attrs = {"schemeIdUri": scheme, "value": str(value)}
            found.insert(n, ET.Element(f"{{{DASH_NAMESPACE}}}{kind}Property", attrs))
    return _mpd_text(root)


def cicp(hdr: HdrInfo) -> list[tuple[str, int]]:
    """The master's colour tags as (CICP scheme, code point), those it sets."""
    named = {"ColourPrimaries": hdr.primaries, "TransferCharacteristics": hdr.transfer,
             "MatrixCoefficients": hdr.matrix}  # fmt: skip
    return [(CICP + what, CICP_CODES[what][name]) for what, name in named.items()
            if name in CICP_CODES[what]]  # fmt: skip


def mpd_with_subtitles(text: str, subtitles: list[AudioTrack]) -> str:
    """ffmpeg's MPD with an adaptation set per subtitle track (its WebVTT file, whole)."""
    root, period = _period(text)
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
    return _mpd_text(root)


def master_playlist(
    written: str,
    audio: list[AudioTrack],
    frame_rate: str,
    subtitles: Sequence[AudioTrack] = (),
    *,
    codecs: Sequence[str] = (),
    range_: str = "",
) -> str:
    """The master playlist from ffmpeg's (`written`: its variants, their BANDWIDTH, RESOLUTION
    and CODECS; its audio media in stream order), each audio track with its LANGUAGE and NAME,
    one DEFAULT, each subtitle track (WebVTT, subtitle_playlist) likewise, and every variant's
    FRAME-RATE; `codecs`: each variant's full video codecs string in place of a bare `hvc1`
    (hevc_codec), `range_`: every variant's VIDEO-RANGE (video_range; '' leaves it out)."""
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
    if codecs and len(codecs) != len(found.variants):
        raise ValueError(f"ffmpeg's master playlist lists {len(found.variants)} variants, "
                         f"not {len(codecs)}")  # fmt: skip
    for n, (attrs_, uri) in enumerate(found.variants):
        parts = [f"BANDWIDTH={attrs_['BANDWIDTH']}", f"RESOLUTION={attrs_['RESOLUTION']}"]
        if "CODECS" in attrs_:
            listed = with_video_codec(attrs_["CODECS"], codecs[n]) if codecs else attrs_["CODECS"]
            parts.append(f'CODECS="{listed}"')
        if range_:
            parts.append(f"VIDEO-RANGE={range_}")
        parts.append(f"FRAME-RATE={frame_rate}")
        if audio:
            parts.append(f'AUDIO="{group}"')
        if subtitles:
            parts.append('SUBTITLES="subtitles"')
        lines += ["#EXT-X-STREAM-INF:" + ",".join(parts), uri]
    return "\n".join(lines) + "\n"

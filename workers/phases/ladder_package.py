"""The package of a ladder job (farm.media.package): cut from the joined renditions by stream copy,
in the box, then checked as a player reads it: the playlists and the MPD parsed, every file they
name present, and each rendition's segments (its init segment, then its media segments) decoded to
the master's frame count at the rung's size.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from farm.adapters import proc
from farm.adapters.sandbox import Box, wrap
from farm.core.errors import PermanentError
from farm.core.spec import JobSpec
from farm.media.package import (
    MASTER,
    MPD,
    AudioTrack,
    hevc_codec,
    master_playlist,
    media_playlist,
    mpd_with_subtitles,
    mpd_with_video,
    package_argv,
    parse_playlist,
    safe_language,
    subtitle_name,
    subtitle_playlist,
    video_range,
    vtt_argv,
)
from farm.media.probe import FARM_FORMATS, capture, format_argv, input_name, probe_streams
from workers.attempt.context import WorkerContext

DASH_NS = "{urn:mpeg:dash:schema:mpd:2011}"


def tracks(ctx: WorkerContext, out: Path, box: Box | None, kind: str) -> list[AudioTrack]:
    """The output's streams of `kind` (audio, subtitle) with their language, title and
    dispositions, as the stitch tagged them."""
    result = capture(format_argv(ctx.settings.ffprobe, input_name(out), FARM_FORMATS), 600, box)
    if result.returncode != 0:
        raise PermanentError(f"ffprobe cannot read {out.name}: {result.stderr.strip()[-300:]}")
    streams = [s for s in json.loads(result.stdout).get("streams", [])
               if s.get("codec_type") == kind]  # fmt: skip
    if kind == "subtitle" and (
        pictures := [s for s in streams if s.get("codec_name") != "mov_text"]
    ):
        raise PermanentError(
            f"the output's subtitles {[s.get('codec_name') for s in pictures]} are not text, and a "
            "package's are WebVTT: submit again with --drop for them (submit refuses them now)"
        )
    return [
        AudioTrack(
            index=n,
            language=safe_language(str((s.get("tags") or {}).get("language", ""))),
            title=str((s.get("tags") or {}).get("title", "")),
            default=bool((s.get("disposition") or {}).get("default")),
            forced=bool((s.get("disposition") or {}).get("forced")),
        )
        for n, s in enumerate(streams)
    ]


def webvtt(
    ctx: WorkerContext, out: Path, subtitles: list[AudioTrack], folder: Path, box: Box | None
) -> None:
    """Each subtitle track as one WebVTT file and its media playlist, the video's length."""
    for track in subtitles:
        vtt = folder / subtitle_name(track.index)
        argv = vtt_argv(ffmpeg_bin=ctx.settings.ffmpeg, source=str(out), index=track.index,
                        out=str(vtt))  # fmt: skip
        _run(argv, "turn the subtitles into WebVTT", box)


def _run(argv: list[str], what: str, box: Box | None) -> None:
    result = proc.run(wrap(argv, box) if box is not None else argv)
    if not result.ok:
        raise PermanentError(f"ffmpeg could not {what}:\n" + "\n".join(result.tail[-15:]))


def package_renditions(
    ctx: WorkerContext, spec: JobSpec, videos: list[Path], folder: Path, box: Box | None
) -> Path:
    """`videos[0]`: the output (the largest rendition, with audio); the rest video alone."""
    assert spec.master is not None, "transcode jobs carry their master's probe"
    folder.mkdir()
    audio = tracks(ctx, videos[0], box, "audio")
    subtitles = tracks(ctx, videos[0], box, "subtitle")
    hls = spec.package in ("hls", "both")
    argv = package_argv(ffmpeg_bin=ctx.settings.ffmpeg, inputs=[str(v) for v in videos],
                        audio=len(audio), out_dir=str(folder), hls=hls)  # fmt: skip
    _run(argv, "package the renditions", box)
    webvtt(ctx, videos[0], subtitles, folder, box)
    seconds = spec.master.frame_count / float(spec.master.rate)
    # ffmpeg 5.1 names HEVC `hvc1` alone: the full string is read from each init segment.
    codecs = [hevc_codec((folder / f"init-{n}.m4s").read_bytes()) for n in range(len(videos))
              ] if spec.codec.stream_name == "hevc" else []  # fmt: skip
    if hls:
        rate = f"{float(spec.master.rate):.3f}"
        master = folder / MASTER
        written = master_playlist(master.read_text(), audio, rate, subtitles, codecs=codecs,
                                  range_=video_range(spec.master.hdr))  # fmt: skip
        master.write_text(written)
        for playlist in folder.glob("media_*.m3u8"):
            playlist.write_text(media_playlist(playlist.read_text()))
        for track in subtitles:
            name = subtitle_name(track.index)
            (folder / name.replace(".vtt", ".m3u8")).write_text(subtitle_playlist(name, seconds))
    if spec.package == "hls":
        (folder / MPD).unlink()
    else:
        mpd = mpd_with_video((folder / MPD).read_text(), codecs, spec.master.hdr)
        (folder / MPD).write_text(mpd_with_subtitles(mpd, subtitles) if subtitles else mpd)
    check_package(ctx, spec, folder, len(audio), len(subtitles), box)
    return folder


def check_package(
    ctx: WorkerContext, spec: JobSpec, folder: Path, audio: int, subtitles: int, box: Box | None
) -> None:
    """Each rendition decodes to the master's frames at its rung's size; the playlists and the
    MPD name every stream and only files that are there."""
    assert spec.master is not None
    frames = spec.master.frame_count
    for n, rung in enumerate(spec.ladder):
        whole = representation_file(folder, n)
        info = probe_streams(ctx.settings.ffprobe, whole, box)
        whole.unlink()
        if (info.frames, info.width, info.height) != (frames, rung.width, rung.height):
            raise PermanentError(
                f"the package's rendition {n} decodes to {info.frames} frames at "
                f"{info.width}x{info.height}; expected {frames} at {rung.width}x{rung.height}"
            )
    for vtt in folder.glob("*.vtt"):
        if not vtt.read_text(errors="replace").startswith("WEBVTT"):
            raise PermanentError(f"the package's {vtt.name} is not WebVTT")
    if (folder / MASTER).exists():
        check_hls(folder, len(spec.ladder), audio, subtitles)
    if (folder / MPD).exists():
        check_mpd(folder, len(spec.ladder), audio, subtitles)


def representation_file(folder: Path, rep: int) -> Path:
    """A representation's init segment and media segments, end to end: one fragmented MP4."""
    whole = folder.parent / f"rep{rep}.mp4"
    parts = [folder / f"init-{rep}.m4s", *sorted(folder.glob(f"chunk-{rep}-*.m4s"))]
    if len(parts) < 2 or not parts[0].exists():
        raise PermanentError(f"the package has no segments for stream {rep}")
    with whole.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return whole


def check_hls(folder: Path, rungs: int, audio: int, subtitles: int) -> None:
    master = parse_playlist((folder / MASTER).read_text())
    kinds = [m.get("TYPE") for m in master.media]
    if len(master.variants) != rungs or (kinds.count("AUDIO"), kinds.count("SUBTITLES")) != (
        audio, subtitles
    ):  # fmt: skip
        raise PermanentError(
            f"the master playlist lists {len(master.variants)} variants, {kinds.count('AUDIO')} "
            f"audio and {kinds.count('SUBTITLES')} subtitle tracks; the job has {rungs} "
            f"renditions, {audio} audio and {subtitles} subtitle tracks"
        )
    for uri in [u for _, u in master.variants] + [m["URI"] for m in master.media]:
        media = parse_playlist((folder / uri).read_text())
        named = [media.init] if media.init else []
        named += [u for _, u in media.segments]
        missing = [u for u in named if not (folder / u).is_file()]
        if not media.ended or not media.segments or missing:
            raise PermanentError(f"{uri} is not a whole VOD playlist (missing: {missing[:3]})")


def check_mpd(folder: Path, rungs: int, audio: int, subtitles: int) -> None:
    root = ET.fromstring((folder / MPD).read_text())
    sets = root.findall(f"{DASH_NS}Period/{DASH_NS}AdaptationSet")
    kinds = [s.get("contentType") for s in sets]
    videos = [r for s in sets if s.get("contentType") == "video"
              for r in s.findall(f"{DASH_NS}Representation")]  # fmt: skip
    if len(videos) != rungs or (kinds.count("audio"), kinds.count("text")) != (audio, subtitles):
        raise PermanentError(
            f"the MPD has {len(videos)} video representations, {kinds.count('audio')} audio "
            f"and {kinds.count('text')} text sets; the job has {rungs} renditions, {audio} audio "
            f"and {subtitles} subtitle tracks"
        )

"""The stitch of an encode job: join the segments by stream copy (farm.media.join; with the master's
audio, subtitles, chapters and timecode carried over once by ffmpeg, after checking every segment
with ffprobe), then prove the result matches the master frame for frame and holds every stream
its plan kept (farm.media.streams).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from farm.adapters.sandbox import Box
from farm.core.errors import PermanentError
from farm.core.hdr import HdrInfo
from farm.core.sources import MasterInfo
from farm.core.spec import JobSpec
from farm.media.containers import MKV
from farm.media.hdr import hdr_problems, read_hdr
from farm.media.join import join_segments, probe_joined
from farm.media.probe import Streams, capture, input_name, probe_streams
from farm.media.streamcheck import deliverable_argv, deliverable_problems
from farm.media.streams import carried_packets, carries_more_than_video, kept
from farm.media.transcode_graph import mux_argv
from workers.attempt.context import WorkerContext
from workers.host.box import media_box
from workers.phases.stitch import deliver, fetching, segment_refs, stitch_workspace
from workers.phases.transcode import local_master


def check_encoders(encoders: list[dict[str, Any]]) -> None:
    """Stream copy joins only segments made by one encoder with the same settings. Under
    `--target-quality` each segment's CRF/CQ is its own (the encoder left out of the headers
    what would differ, farm.media.ffgraph): encoder, preset and target must match, and the
    sample descriptions are compared at the join (farm.media.mp4join)."""

    def alike(e: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in e.items() if k != "quality"} if e.get("target") else e

    if any(alike(e) != alike(encoders[0]) for e in encoders):
        names = sorted({f"{e['name']} q{e['quality']} {e['preset']}" for e in encoders})
        raise PermanentError(
            f"segments were made with different encoders or settings ({', '.join(names)}); "
            "they cannot be joined by stream copy. Retry the job with --encoder set to one of them"
        )


def check_segments(found: list[Streams], spec: JobSpec, encoders: list[dict[str, Any]]) -> None:
    """Stream copy joins only segments alike in every parameter the decoder sets up once
    (farm.media.mp4join checks this from the sample descriptions; ffmpeg's join needs ffprobe)."""
    check_encoders(encoders)
    want = (spec.codec.stream_name, spec.resolution.width, spec.resolution.height)
    first = found[0]
    for n, seg in enumerate(found):
        params = (seg.codec, seg.width, seg.height, seg.pix_fmt, seg.rate, seg.time_base)
        if (seg.codec, seg.width, seg.height) != want or params != (
            first.codec, first.width, first.height, first.pix_fmt, first.rate, first.time_base
        ):  # fmt: skip
            raise PermanentError(
                f"segment {n} is {seg.codec} {seg.width}x{seg.height} {seg.pix_fmt} {seg.rate} fps "
                f"tb {seg.time_base}; segment 0 is {first.codec} {first.width}x{first.height} "
                f"{first.pix_fmt} {first.rate} tb {first.time_base}; asked for {want[0]} "
                f"{want[1]}x{want[2]}"
            )


def check_output(out: Streams, spec: JobSpec, master: MasterInfo) -> None:
    """Frame count exact, durations within one frame of the master's, size and codec as asked."""
    frame_s = float(1 / master.rate)
    problems = []
    if out.frames != master.frame_count:
        problems.append(f"{out.frames} frames, the master has {master.frame_count}")
    if abs(out.duration_s - master.duration_s) > frame_s:
        problems.append(f"video lasts {out.duration_s:.3f} s, the master {master.duration_s:.3f} s")
    if (out.codec, out.width, out.height) != (
        spec.codec.stream_name, spec.resolution.width, spec.resolution.height
    ):  # fmt: skip
        problems.append(
            f"{out.codec} {out.width}x{out.height}, asked for {spec.codec} {spec.resolution}"
        )
    audio = {a.index: a for a in master.audio}
    keeps = [audio[s.kind_index] for s in kept(master, "audio") if s.kind_index in audio]
    if len(out.audio_s) != len(keeps):
        problems.append(f"{len(out.audio_s)} audio streams, the plan keeps {len(keeps)}")
    for n, (got, src) in enumerate(zip(out.audio_s, keeps, strict=False)):
        if src.duration_s is not None and abs(got - src.duration_s) > frame_s:
            problems.append(f"audio {n} lasts {got:.3f} s, the master's {src.duration_s:.3f} s")
    if problems:
        raise PermanentError("the joined video does not match the master: " + "; ".join(problems))


def check_streams_kept(data: dict[str, Any], master: MasterInfo) -> None:
    """The deliverable holds every stream, chapter and timecode the plan promised, as ffprobe
    reads them (farm.media.streams)."""
    problems = deliverable_problems(data, master)
    if problems:
        raise PermanentError(
            "the joined video does not keep the master's streams: " + "; ".join(problems)
        )


def read_deliverable(ffprobe: str, out: Path, box: Box | None) -> dict[str, Any]:
    """ffprobe's JSON of the deliverable's streams and chapters, in `box`."""
    shown = capture(deliverable_argv(ffprobe, input_name(out)), 600, box)
    if shown.returncode != 0:
        raise PermanentError(f"ffprobe cannot read {out.name}: {shown.stderr.strip()[-300:]}")
    data: dict[str, Any] = json.loads(shown.stdout or "{}")
    return data


def check_hdr(want: HdrInfo, got: HdrInfo | None, what: str = "the joined video") -> None:
    """The joined video's first frame (`what`: a ladder's rendition, named) carries what the job
    promised of its HDR master."""
    problems = hdr_problems(want, got)
    if problems:
        raise PermanentError(f"{what} does not keep the master's HDR: " + "; ".join(problems))


def final_mux_argv(
    ffmpeg_bin: str, list_file: Path, source: Path | None, out: Path, master: MasterInfo
) -> list[str]:
    """The video joined from `list_file` with every stream of the master's plan carried over
    once from its local copy `source` (None: nothing but video to carry)."""
    return mux_argv(
        ffmpeg_bin=ffmpeg_bin,
        list_file=str(list_file),
        master=source,
        out=str(out),
        plan=master,
        offset_s=min(0.0, master.format_start_s - master.start_s),
        frames=master.frame_count,
        audio_packets=carried_packets(master),
    )


def _why_ffmpeg_joins(carried: bool, spec: JobSpec) -> str:
    """Why the join cannot be the farm's own MP4 joiner (join_segments' `skip`), or ''."""
    if carried:
        return "the master's other streams are carried over by ffmpeg"
    return "the deliverable is Matroska" if spec.deliverable == MKV else ""


def stitch_master(
    ctx: WorkerContext, job_id: str, job: dict[str, str], spec: JobSpec
) -> dict[str, object]:
    """A transcode job's stitch: the render stitch's ledger moves, plus audio and master checks."""
    assert spec.master is not None, "transcode jobs carry their master's probe"
    master = spec.master
    started = time.monotonic()
    with stitch_workspace(ctx, job_id) as work:
        refs = segment_refs(ctx, job_id)
        encoders = [{k: v for k, v in ref.encoder.items() if k != "argv"} for ref in refs]
        check_encoders(encoders)
        out = work / f"output.{spec.deliverable}"  # the segments' MP4/MOV, or MKV
        # The master's other streams are read from its local copy (checked here too), in the box.
        carried = carries_more_than_video(master)
        source = local_master(ctx, job["source_key"], spec.source_name)[0] if carried else None
        box = media_box(ctx.settings, writable=(work,), readable=(source,) if source else ())

        def mux(list_file: Path, paths: list[Path]) -> list[str]:
            found = [probe_streams(ctx.settings.ffprobe, p, box) for p in paths]
            check_segments(found, spec, encoders)
            return final_mux_argv(ctx.settings.ffmpeg, list_file, source, out, master)

        joining = time.monotonic()
        with fetching(ctx, refs, work) as paths:
            joined = join_segments(
                paths=paths,
                lengths=[ref.length for ref in refs],
                out=out,
                concat=mux,
                skip=_why_ffmpeg_joins(carried, spec),
                box=box,
            )
        join_s = time.monotonic() - joining
        info = probe_joined(ctx.settings.ffprobe, out, joined, master.frame_count, master.rate, box)
        check_output(info, spec, master)
        if carried:
            check_streams_kept(read_deliverable(ctx.settings.ffprobe, out, box), master)
        if master.hdr is not None:  # the HDR the job kept, on the first frame as a player reads it
            check_hdr(master.hdr, read_hdr(ctx.settings.ffprobe, out, box))
        output_key = deliver(
            ctx, job_id, out, started, fetch_join_s=round(join_s, 3), stitch_join=joined.method
        )
    return {"job_id": job_id, "output": output_key, "frames": master.frame_count}

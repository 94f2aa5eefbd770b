"""A ladder job's stitch: each rendition's segments joined by stream copy and checked like a single
output (frames exact, size, codec); the largest, with the master's audio, is the job's output; then
the package (farm.media.package), checked as a player reads it, and uploaded under the job's outputs.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from farm.adapters import proc
from farm.adapters.sandbox import Box, wrap
from farm.adapters.store import sha256_file
from farm.core.errors import PermanentError
from farm.core.sources import MasterInfo
from farm.core.spec import JobSpec, Rung
from farm.media.ffgraph import concat_argv, concat_list
from farm.media.hdr import read_hdr
from farm.media.join import join_segments, probe_joined
from farm.media.package import INDEX, package_key
from farm.media.probe import Streams, probe_streams
from farm.media.streams import carries_more_than_video
from workers.attempt.context import WorkerContext
from workers.host.box import media_box
from workers.phases.ladder_package import package_renditions
from workers.phases.stitch import (
    SegmentRef,
    check_delivered,
    deliver,
    fetching,
    segment_refs,
    stitch_workspace,
)
from workers.phases.transcode import local_master
from workers.phases.transcode_stitch import (
    check_encoders,
    check_hdr,
    check_output,
    check_streams_kept,
    final_mux_argv,
    read_deliverable,
    stitch_master,
)


def rendition_refs(ctx: WorkerContext, job_id: str, rungs: int) -> list[list[SegmentRef]]:
    """Per rung, the segments in join order, as each chunk's manifest lists them (read once, by
    segment_refs)."""
    refs = segment_refs(ctx, job_id)
    listed = [ref.renditions or () for ref in refs]
    if any(len(renditions) != rungs for renditions in listed):
        raise PermanentError(
            f"a segment's manifest lists no {rungs} renditions; the job's segments were not made "
            "as its ladder asks: `farm retry` the job"
        )
    return [
        [replace(ref, key=str(rs[n]["key"]), size_bytes=int(rs[n]["size"]), sha256=str(rs[n]["sha256"]))
         for ref, rs in zip(refs, listed, strict=True)]
        for n in range(rungs)
    ]  # fmt: skip


def check_rendition(info: Streams, n: int, rung: Rung, spec: JobSpec, master: MasterInfo) -> None:
    """A rendition has the master's frames, the rung's size and the job's codec."""
    want = (master.frame_count, rung.width, rung.height, spec.codec.stream_name)
    got = (info.frames, info.width, info.height, info.codec)
    if got != want:
        raise PermanentError(
            f"rendition {n} ({rung}) is {info.codec} {info.width}x{info.height} with "
            f"{info.frames} frames; the master has {master.frame_count} frames"
        )


def join_rendition(
    ctx: WorkerContext, refs: list[SegmentRef], out: Path, frames: int, box: Box | None
) -> Path:
    """One rendition's segments joined, video alone, index first."""
    with fetching(ctx, refs, out.parent) as paths:
        joined = join_segments(
            paths=paths,
            lengths=[ref.length for ref in refs],
            out=out,
            concat=lambda list_file, _: concat_argv(
                ffmpeg_bin=ctx.settings.ffmpeg, list_file=list_file, out=out, frames=frames
            ),
            box=box,
        )
    fps = refs[0].fps
    probe_joined(ctx.settings.ffprobe, out, joined, frames, fps, box)
    return out


def with_audio(
    ctx: WorkerContext, video: Path, out: Path, master: MasterInfo, source: Path, box: Box | None
) -> None:
    """The largest rendition with the master's other streams carried over once (farm.media.transcode_graph
    mux_argv, over a one-file concat list)."""
    length = Fraction(master.frame_count) / master.rate
    list_file = out.with_name("top-segments.txt")
    list_file.write_text(concat_list([(video, length)]))
    argv = final_mux_argv(ctx.settings.ffmpeg, list_file, source, out, master)
    result = proc.run(wrap(argv, box) if box is not None else argv)
    if not result.ok:
        raise PermanentError(
            "ffmpeg could not add the master's audio:\n" + "\n".join(result.tail[-15:])
        )


def stitch_ladder(
    ctx: WorkerContext, job_id: str, job: dict[str, str], spec: JobSpec
) -> dict[str, object]:
    """Every rendition joined and checked; the largest with audio delivered as the job's output;
    the package (when asked) made from them, checked, and uploaded before the job is done."""
    assert spec.master is not None, "transcode jobs carry their master's probe"
    master = spec.master
    started = time.monotonic()
    with stitch_workspace(ctx, job_id) as work:
        per_rung = rendition_refs(ctx, job_id, len(spec.ladder))
        check_encoders([{k: v for k, v in r.encoder.items() if k != "argv"} for r in per_rung[0]])
        carried = carries_more_than_video(master)
        source = local_master(ctx, job["source_key"], spec.source_name)[0] if carried else None
        box = media_box(ctx.settings, writable=(work,), readable=(source,) if source else ())
        ext = spec.codec.container
        videos = []
        for n, (refs, rung) in enumerate(zip(per_rung, spec.ladder, strict=True)):
            video = join_rendition(ctx, refs, work / f"r{n}.{ext}", master.frame_count, box)
            check_rendition(probe_streams(ctx.settings.ffprobe, video, box), n, rung, spec, master)
            if master.hdr is not None:  # each rendition keeps the HDR, or its tone-map, by name
                check_hdr(master.hdr, read_hdr(ctx.settings.ffprobe, video, box),
                          f"rendition {n} ({rung})")  # fmt: skip
            videos.append(video)
        out = work / f"output.{ext}"
        if source is not None:
            with_audio(ctx, videos[0], out, master, source, box)
        else:
            videos[0].rename(out)
        videos[0] = out
        check_output(probe_streams(ctx.settings.ffprobe, out, box), spec, master)
        if carried:
            check_streams_kept(read_deliverable(ctx.settings.ffprobe, out, box), master)
        if master.hdr is not None:
            check_hdr(master.hdr, read_hdr(ctx.settings.ffprobe, out, box))
        join_s = time.monotonic() - started
        fields: dict[str, float | str] = {
            "fetch_join_s": round(join_s, 3),
            "renditions": len(videos),
        }
        if spec.package:
            prefix = package_key(job_id)
            folder = package_renditions(ctx, spec, videos, work / "package", box)
            upload_package(ctx, folder, prefix)
            fields["package"] = prefix
        output_key = deliver(ctx, job_id, out, started, stitch_join="ladder", **fields)
    return {"job_id": job_id, "output": output_key, "frames": master.frame_count}


def upload_package(ctx: WorkerContext, folder: Path, prefix: str) -> None:
    """Every file of the package, once each (a retried stitch finds its own bytes there), then
    the index."""
    files: dict[str, Any] = {}
    for path in sorted(folder.iterdir()):
        files[path.name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
        if not ctx.store.put_file_once(prefix + path.name, path):
            check_delivered(ctx, prefix + path.name, path)
    index = folder.parent / INDEX
    index.write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    if not ctx.store.put_file_once(prefix + INDEX, index):
        check_delivered(ctx, prefix + INDEX, index)


def stitch_encode(
    ctx: WorkerContext, job_id: str, job: dict[str, str], spec: JobSpec
) -> dict[str, object]:
    """An encode job's stitch: its ladder's (this module), or its single output's (stitch_master)."""
    if spec.ladder:
        return stitch_ladder(ctx, job_id, job, spec)
    return stitch_master(ctx, job_id, job, spec)

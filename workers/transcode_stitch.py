"""The stitch of an encode job: check every segment with ffprobe, join them by stream copy with the
master's audio carried over once, then prove the result matches the master frame for frame.
"""

from __future__ import annotations

import time
from typing import Any

from farm import keys
from farm.errors import PermanentError
from farm.master import MasterInfo
from farm.probe import Streams, probe_streams
from farm.proc import run
from farm.spec import JobSpec
from workers.context import WorkerContext
from workers.ffgraph import concat_list
from workers.stitch import deliver, stitch_workspace, verified_segments
from workers.transcode import master_source
from workers.transcode_graph import mux_argv


def check_segments(found: list[Streams], spec: JobSpec, encoders: list[dict[str, Any]]) -> None:
    """Stream copy joins only segments alike in every parameter the decoder sets up once."""
    if any(e != encoders[0] for e in encoders):
        names = sorted({f"{e['name']} q{e['quality']} {e['preset']}" for e in encoders})
        raise PermanentError(
            f"segments were made with different encoders or settings ({', '.join(names)}); "
            "they cannot be joined by stream copy. Retry the job with --encoder set to one of them"
        )
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
    if len(out.audio_s) != len(master.audio):
        problems.append(f"{len(out.audio_s)} audio streams, the master has {len(master.audio)}")
    for n, (got, src) in enumerate(zip(out.audio_s, master.audio, strict=False)):
        if src.duration_s is not None and abs(got - src.duration_s) > frame_s:
            problems.append(f"audio {n} lasts {got:.3f} s, the master's {src.duration_s:.3f} s")
    if problems:
        raise PermanentError("the joined video does not match the master: " + "; ".join(problems))


def stitch_master(
    ctx: WorkerContext, job_id: str, job: dict[str, str], spec: JobSpec
) -> dict[str, object]:
    """A transcode job's stitch: the render stitch's ledger moves, plus audio and master checks."""
    assert spec.master is not None, "transcode jobs carry their master's probe"
    master = spec.master
    started = time.monotonic()
    total = int(job["chunks_total"])
    with stitch_workspace(ctx, job_id) as work:
        segments = verified_segments(ctx, job_id, total, work)
        encoders = [
            ctx.store.get_json(keys.manifest_key(job_id, i))["encoder"] for i in range(total)
        ]
        for encoder in encoders:
            encoder.pop("argv", None)
        check_segments(
            [probe_streams(ctx.settings.ffprobe, p) for p, _ in segments], spec, encoders
        )
        list_file = work / "segments.txt"
        list_file.write_text(concat_list(segments))
        out = work / f"output.{spec.codec.container}"
        source = master_source(ctx, job["source_key"])[0] if master.audio else ""
        joined = time.monotonic()
        result = run(
            mux_argv(
                ffmpeg_bin=ctx.settings.ffmpeg,
                list_file=str(list_file),
                master=source,
                out=str(out),
                audio=[(a.codec, a.channels) for a in master.audio],
                offset_s=min(0.0, master.format_start_s - master.start_s),
                frames=master.frame_count,
                ca_file=ctx.settings.ca_file,
                audio_packets=sum(
                    # AAC and most codecs carry 1024 samples a packet; 2x covers the rest.
                    2 * int((a.duration_s or master.duration_s) * a.sample_rate / 1024) + 64
                    for a in master.audio
                ),
            )
        )
        join_s = time.monotonic() - joined
        if not result.ok:
            tail = "\n".join(result.tail[-15:])
            raise PermanentError(
                "ffmpeg could not join the segments:\n"
                + tail.replace(source or "\0", "<master URL>")
            )
        check_output(probe_streams(ctx.settings.ffprobe, out), spec, master)
        output_key = deliver(ctx, job_id, out, started, join_s=round(join_s, 3))
    return {"job_id": job_id, "output": output_key, "frames": master.frame_count}

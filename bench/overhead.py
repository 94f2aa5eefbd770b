"""Farm overhead: one `blender -b` run over every frame plus one ffmpeg encode of its frames, run
directly with the farm's own argv builders, against the local farm from `farm submit` to the
stitched video in the store. Prints b/a and where each chunk's time went.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from bench.common import ROOT, LocalFarm, Row
from bench.timeline import breakdown
from farm.proc import run as run_program
from workers import blender
from workers.ffgraph import EncodeSettings, frames_to_segment_argv

SCENE = ROOT / "scenes" / "demo.blend"


def direct(frames: int, width: int, height: int, samples: int) -> dict[str, Any]:
    """Blender over all frames on every core, then one libx264 encode: what a user would run."""
    with tempfile.TemporaryDirectory(prefix="farm-bench-direct-") as tmp:
        out_dir, seq = Path(tmp) / "frames", Path(tmp) / "seq"
        out_dir.mkdir()
        seq.mkdir()
        argv = blender.render_argv(
            blender="blender",
            scene=SCENE,
            out_dir=out_dir,
            frames=list(range(1, frames + 1)),
            settings=blender.RenderSettings(width=width, height=height, samples=samples),
        )
        marks: dict[str, float] = {}
        saved: list[float] = []
        started = time.monotonic()

        def on_line(line: str) -> None:
            now = time.monotonic() - started
            if line.startswith("Read blend:"):
                marks.setdefault("read", now)
            elif line.startswith("Fra:"):
                marks.setdefault("first_fra", now)
            elif blender.saved_frame(line):
                saved.append(now)

        result = run_program(argv, on_line=on_line)
        render_s = time.monotonic() - started
        if not result.ok or len(saved) != frames:
            raise RuntimeError("direct Blender run failed:\n" + "\n".join(result.tail[-20:]))
        for n in range(frames):
            os.link(blender.frame_file(out_dir, n + 1), seq / f"{n:06d}.png")
        encode_started = time.monotonic()
        settings = EncodeSettings(codec="h264", encoder="libx264", fps=Fraction(24))
        encode = run_program(
            frames_to_segment_argv(
                ffmpeg_bin="ffmpeg",
                pattern=seq / "%06d.png",
                out=Path(tmp) / "out.mp4",
                settings=settings,
                frame_count=frames,
            )
        )
        if not encode.ok:
            raise RuntimeError("direct ffmpeg encode failed:\n" + "\n".join(encode.tail[-20:]))
        encode_s = time.monotonic() - encode_started
    gaps = [b - a for a, b in itertools.pairwise(saved)]
    return {
        "total_s": round(render_s + encode_s, 2),
        "blender_s": round(render_s, 2),
        "encode_s": round(encode_s, 2),
        "blender_launch_s": round(marks.get("read", 0.0), 2),
        "scene_load_s": round(marks.get("first_fra", 0.0) - marks.get("read", 0.0), 2),
        "frame_s": round(statistics.median(gaps), 3) if gaps else None,
    }


def on_farm(
    farm: LocalFarm, frames: int, width: int, height: int, samples: int, chunk_size: str
) -> dict[str, Any]:
    started_wall, started = time.time(), time.monotonic()
    out = farm.farm(
        "submit", str(SCENE), "--frames", f"1-{frames}", "--chunk-size", chunk_size,
        "--resolution", f"{width}x{height}", "--samples", str(samples), "--wait", "--json",
    )  # fmt: skip
    total_s = time.monotonic() - started
    summary = json.loads(out.stdout)
    if summary["state"] != "done":
        raise RuntimeError(f"farm job {summary['id']} {summary['state']}: {summary['error']}")
    ledger = farm.ledger()
    job_id = summary["id"]
    if not farm.store().exists(ledger.job(job_id)["output"]):
        raise RuntimeError(f"job {job_id} is done but its video is not in the store")
    detail = breakdown(
        ledger.job(job_id), ledger.chunks(job_id), ledger.events(job_id), started_wall, farm.workers
    )
    return {"job": job_id, "total_s": round(total_s, 2), "chunk_size": chunk_size, **detail}


def run(farm: LocalFarm, quick: bool) -> tuple[dict[str, Any], list[Row]]:
    width, height, samples = (160, 90, 1) if quick else (320, 180, 8)
    cases = [(8, "auto")] if quick else [(48, "auto"), (192, "auto"), (192, "24")]
    results: list[dict[str, Any]] = []
    rows = []
    baselines: dict[int, dict[str, Any]] = {}
    for frames, chunk_size in cases:
        if frames not in baselines:
            baselines[frames] = direct(frames, width, height, samples)
        a = baselines[frames]
        b = on_farm(farm, frames, width, height, samples, chunk_size)
        results.append({"frames": frames, "direct": a, "farm": b})
        rows.append(
            Row(
                bench="overhead",
                case=f"{frames} frames {width}x{height} {samples} spp, chunk {chunk_size}"
                f" -> {b['chunk_size_chosen']} ({b['chunks']} chunks)",
                farm=f"{b['total_s']:.1f} s ({farm.workers} x 1-thread workers)",
                baseline=f"{a['total_s']:.1f} s (blender {a['blender_s']:.1f} + ffmpeg "
                f"{a['encode_s']:.1f})",
                ratio=b["total_s"] / a["total_s"],
                note=f"b/a; per chunk: {b['per_chunk_line']}",
            )
        )
    extra = "\n".join(
        f"{r['frames']} frames, chunk {r['farm']['chunk_size']}: {r['farm']['table']}"
        for r in results
    )
    return {"resolution": f"{width}x{height}", "samples": samples, "cases": results,
            "table": extra}, rows  # fmt: skip

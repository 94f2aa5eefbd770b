"""Farm overhead: one run of the farm's Blender over every frame plus one ffmpeg encode of its
frames, run directly (bench.direct), against the local farm from `farm submit` to the stitched
video in the store. Prints b/a, where each chunk's time went, and the time to the first frame.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

from bench.common import ROOT, LocalFarm, Row
from bench.direct import render_all
from bench.timeline import breakdown
from farm.adapters.proc import run as run_program
from farm.media.ffgraph import EncodeSettings, frames_to_segment_argv

SCENE = ROOT / "scenes" / "demo.blend"


def direct(frames: int, width: int, height: int, samples: int) -> dict[str, Any]:
    """The farm's Blender over all frames in one process on every core, then one libx264 encode:
    what a user would run (bench.direct)."""
    with tempfile.TemporaryDirectory(prefix="farm-bench-direct-") as tmp:
        out_dir, seq = Path(tmp) / "frames", Path(tmp) / "seq"
        out_dir.mkdir()
        seq.mkdir()
        done = render_all(SCENE, out_dir, frames, width, height, samples)
        for n in range(frames):
            os.link(out_dir / f"frame_{n + 1:06d}.png", seq / f"{n:06d}.png")
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
    gaps = [b - a for a, b in itertools.pairwise(done.saved_s)]
    return {
        "total_s": round(done.total_s + encode_s, 2),
        "blender_s": round(done.total_s, 2),
        "encode_s": round(encode_s, 2),
        "scene_load_s": round(done.load_s, 2),
        "first_frame_s": round(done.saved_s[0], 2),
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
    job = ledger.job(job_id)
    firsts = {  # from `farm submit` starting to the job's first frame (and thumbnail) in the store
        name: round(float(job[field]) - started_wall, 2) if job.get(field) else None
        for name, field in (("first_frame_s", "first_frame_at"),
                            ("first_thumbnail_s", "first_thumbnail_at"))
    }  # fmt: skip
    return {"job": job_id, "total_s": round(total_s, 2), "chunk_size": chunk_size, **firsts,
            **detail}  # fmt: skip


def sandwich(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The direct baseline of the farm runs between two direct runs: each figure their mean, so a
    machine that speeds up or slows down over the minutes (a shared VM's neighbours) moves both
    sides alike; `drift` is the second direct run's time over the first's."""
    mean = {k: round((before[k] + after[k]) / 2, 3) for k in before if before[k] is not None}
    return {**mean, "drift": round(after["total_s"] / before["total_s"], 3),
            "runs": [before, after]}  # fmt: skip


def _rows(
    farm: LocalFarm, frames: int, chunk_size: str, rounds: list[dict[str, Any]], look: str
) -> list[Row]:
    """A row for the first frame and one for the whole job; over several rounds each figure is
    the median of the rounds' and the note gives every round's ratio ("probe": that job measured
    the scene itself; later auto jobs of the same scene are sized from its measurement)."""
    ratios = [r["farm"]["total_s"] / r["direct"]["total_s"] for r in rounds]
    firsts = [(r["farm"]["first_frame_s"] or 0.0) / r["direct"]["first_frame_s"] for r in rounds]
    a, b = rounds[0]["direct"], rounds[-1]["farm"]  # the last round's plan: no probe after one
    if len(rounds) == 1:
        first, second = (r["total_s"] for r in a["runs"])
        baseline = (
            f"{a['total_s']:.1f} s (blender {a['blender_s']:.1f} + ffmpeg {a['encode_s']:.1f}; "
            f"mean of the direct runs before and after, {first:.1f} and {second:.1f} s)"
        )
        spread = ""
    else:
        baseline = (
            f"{_median(r['direct']['total_s'] for r in rounds):.1f} s (median; each round's is "
            "the mean of the direct runs either side of its farm run)"
        )
        spread = f", median of {len(rounds)} rounds: " + ", ".join(
            f"{x:.2f}{' (probe)' if r['farm']['probed'] else ''}"
            for x, r in zip(ratios, rounds, strict=True)
        )
    thumb = _median_of_some(r["farm"]["first_thumbnail_s"] for r in rounds)
    first_s = _median_of_some(r["farm"]["first_frame_s"] for r in rounds)
    return [
        Row(
            bench="overhead",
            case=f"first frame, {frames} frames, chunk {chunk_size}: submit to the first frame"
            f" in the store (thumbnail {thumb} s)",
            farm=f"{first_s} s",
            baseline=f"{_median(r['direct']['first_frame_s'] for r in rounds):.1f} s (direct: "
            "launch to the first frame written)",
            ratio=statistics.median(firsts),
            note="b/a" + ("" if len(rounds) == 1 else f", median of {len(rounds)} rounds"),
        ),
        Row(
            bench="overhead",
            case=f"{frames} frames {look}, chunk {chunk_size} -> {b['chunk_size_chosen']}"
            f" ({b['chunks']} chunks)",
            farm=f"{_median(r['farm']['total_s'] for r in rounds):.1f} s ({farm.workers} x "
            "1-thread workers)",
            baseline=baseline,
            ratio=statistics.median(ratios),
            note=f"b/a{spread}; per chunk: {b['per_chunk_line']}",
        ),
    ]


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def _median_of_some(values: Iterable[float | None]) -> float | None:
    """The median of the figures a round has, to 0.01 s; None where no round has one."""
    found = [v for v in values if v is not None]
    return round(_median(found), 2) if found else None


def run(
    farm: LocalFarm, quick: bool, *, rounds: int = 1, frame_counts: list[int] | None = None
) -> tuple[dict[str, Any], list[Row]]:
    """Each frame count's farm runs between direct runs; `rounds` > 1 repeats that (direct, farm,
    direct, farm, ..., direct), each round's baseline the direct runs either side of it, and
    prints the medians: a shared VM's speed swings by 5 to 20% over minutes."""
    width, height, samples = (160, 90, 1) if quick else (320, 180, 8)
    groups = {8: ["auto"]} if quick else {48: ["auto"], 96: ["auto"], 192: ["auto", "24"]}
    if frame_counts:
        groups = {n: groups.get(n, ["auto"]) for n in frame_counts}
    results: list[dict[str, Any]] = []
    rows = []
    for frames, sizes in groups.items():
        directs = [direct(frames, width, height, samples)]
        by_size: dict[str, list[dict[str, Any]]] = {size: [] for size in sizes}
        for n in range(rounds):
            runs = [on_farm(farm, frames, width, height, samples, size) for size in sizes]
            directs.append(direct(frames, width, height, samples))
            a = sandwich(directs[-2], directs[-1])
            for chunk_size, b in zip(sizes, runs, strict=True):
                case = {"frames": frames, "round": n + 1, "direct": a, "farm": b}
                results.append(case)
                by_size[chunk_size].append(case)
        for chunk_size, cases in by_size.items():
            rows += _rows(farm, frames, chunk_size, cases, f"{width}x{height} {samples} spp")
    extra = "\n".join(
        f"{r['frames']} frames, chunk {r['farm']['chunk_size']}"
        f"{'' if rounds == 1 else ', round ' + str(r['round'])}: {r['farm']['table']}"
        for r in results
    )
    return {"resolution": f"{width}x{height}", "samples": samples, "rounds": rounds,
            "cases": results, "table": extra}, rows  # fmt: skip

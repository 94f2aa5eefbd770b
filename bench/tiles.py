"""`python -m bench tiles`: a 4K still (3840x2160, few samples) in 4 tiles on 2 workers against
one worker rendering it whole, same run. Each "worker" is the farm's render script in its own
Blender with an equal share of the cores (threads = cores / 2), as two render workers on one
host would be; the tiles go two to a worker, one after the other, then the merge
(farm/blender/tilemerge.py). What this measures: border render and merge cost against the
parallelism they buy; the ledger and store around them are the overhead bench's business.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import ROOT, Row
from farm.adapters.proc import run as run_program
from farm.blender import command as blender
from farm.core.tiles import Rect, border_of, tile_rects
from workers.phases.tiles import merge_tiles

FRAME = 9
TILES, WORKERS = 4, 2


def _render(
    scene: Path, out: Path, threads: int, border: Rect | None, size: tuple[int, int]
) -> float:
    out.mkdir(parents=True)
    edge = border_of(border, *size).corners if border is not None else None
    settings = blender.RenderSettings(threads=threads, border=edge)
    job = blender.job_file(scene=scene, out_dir=out, frames=[FRAME], settings=settings,
                           nonce=secrets.token_hex(16))  # fmt: skip
    job_path = out / "job.json"
    job_path.write_text(json.dumps(job))
    started = time.monotonic()
    result = run_program(blender.script_argv(blender=blender.WHEEL, job_path=job_path))
    if not result.ok:
        raise RuntimeError(f"render failed: {result.tail[-5:]}")
    return time.monotonic() - started


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    width, height = (960, 540) if quick else (3840, 2160)
    samples = 2 if quick else 4
    threads = max(1, (os.cpu_count() or 2) // WORKERS)
    with tempfile.TemporaryDirectory(prefix="bench-tiles-") as tmp:
        work = Path(tmp)
        scene = work / "still.blend"
        subprocess.run([sys.executable, "-I", str(ROOT / "scenes" / "build_still.py"), str(scene),
                        str(width), str(height), str(samples), "0"], check=True,
                       capture_output=True)  # fmt: skip
        whole_s = _render(scene, work / "whole", threads, None, (width, height))
        rects = tile_rects(TILES, width, height)
        started = time.monotonic()

        def worker(mine: list[Rect]) -> list[tuple[Path, Rect]]:
            done = []
            for rect in mine:
                _render(scene, work / f"tile{rect.index}", threads, rect, (width, height))
                done.append((work / f"tile{rect.index}" / f"frame_{FRAME:06d}.png", rect))
            return done

        with ThreadPoolExecutor(WORKERS) as pool:
            shares = [rects[i::WORKERS] for i in range(WORKERS)]
            tiles = [t for done in pool.map(worker, shares) for t in done]
        rendered_s = time.monotonic() - started
        merge_tiles(blender_bin=blender.WHEEL, work=work, out=work / "still.png", width=width,
                    height=height, tiles=sorted(tiles, key=lambda t: t[1].index),
                    file_format={"file_format": "PNG", "color_mode": "RGBA"})  # fmt: skip
        tiled_s = time.monotonic() - started
    result = {
        "size": f"{width}x{height}",
        "samples": samples,
        "threads_per_worker": threads,
        "whole_one_worker_s": round(whole_s, 2),
        "tiles_rendered_s": round(rendered_s, 2),
        "merge_s": round(tiled_s - rendered_s, 2),
        "tiled_two_workers_s": round(tiled_s, 2),
    }
    row = Row(
        bench="tiles",
        case=f"{width}x{height} still, {TILES} tiles on {WORKERS} workers",
        farm=f"{tiled_s:.1f} s (merge {tiled_s - rendered_s:.1f} s)",
        baseline=f"{whole_s:.1f} s whole on one worker",
        ratio=tiled_s / whole_s,
        note=f"{threads} thread(s) a worker, {samples} samples",
    )
    return result, [row]

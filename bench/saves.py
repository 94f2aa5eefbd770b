"""Frame saves: the seconds the render script (farm/blender/script.py, run as a worker runs it)
spends on each frame after Blender has rendered it, beside Blender saving the same frame alone,
as `blender -a` does. What the farm adds to every frame: the video's preview (linked to the frame
where the frame already is it), the job page's thumbnail. On a GPU host that is time the GPU
waits, so it is measured at 4K, on the demo scene as its artist saved it (8-bit PNG, RGBA).
"""

from __future__ import annotations

import json
import secrets
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import ROOT, Row
from farm.adapters.proc import run as run_program
from farm.blender import command as blender

SCENE = ROOT / "scenes" / "demo.blend"
_BASELINE = """
import json, sys, time
import bpy
job = json.loads(sys.argv[-1])
bpy.ops.wm.open_mainfile(filepath=job["scene"], load_ui=False, use_scripts=False)
scene = bpy.context.scene
scene.render.resolution_x, scene.render.resolution_y = job["width"], job["height"]
scene.render.resolution_percentage = 100
scene.cycles.samples = job["samples"]
scene.cycles.device = "CPU"
for frame in job["frames"]:
    scene.frame_set(frame)
    bpy.ops.render.render(write_still=False)
    started = time.monotonic()
    bpy.data.images["Render Result"].save_render(f"{job['out']}/{frame:06d}.png", scene=scene)
    print("SAVED", time.monotonic() - started, flush=True)
import os
os._exit(0)  # bpy 4.5 can hang in its static destructors (see farm/blender/script.finish)
"""


def blender_saves(out: Path, frames: list[int], width: int, height: int) -> list[float]:
    """Seconds Blender takes to save each rendered frame in the scene's format, and nothing else."""
    job = {"scene": str(SCENE), "out": str(out), "frames": frames, "width": width,
           "height": height, "samples": 1}  # fmt: skip
    found: list[float] = []

    def on_line(line: str) -> None:
        if line.startswith("SAVED "):
            found.append(float(line.split()[1]))

    result = run_program([sys.executable, "-I", "-c", _BASELINE, json.dumps(job)], on_line=on_line)
    if not result.ok or len(found) != len(frames):
        raise RuntimeError("direct Blender save failed:\n" + "\n".join(result.tail[-20:]))
    return found


def script_saves(out: Path, frames: list[int], width: int, height: int) -> dict[str, Any]:
    """The render script's seconds after each frame's render (its FRAME line's save_s), and
    whether each frame's preview is the frame's own file."""
    nonce = secrets.token_hex(16)
    job = blender.job_file(
        scene=SCENE, out_dir=out, frames=frames, nonce=nonce,
        settings=blender.RenderSettings(width=width, height=height, samples=1),
    )  # fmt: skip
    job_path = out.parent / "job.json"
    job_path.write_text(json.dumps(job))
    saves: list[float] = []

    def on_line(line: str) -> None:
        parsed = blender.script_line(line, nonce)
        if parsed is not None and parsed.kind == "FRAME":
            saves.append(float(parsed.body["save_s"]))

    argv = blender.script_argv(blender=blender.WHEEL, job_path=job_path, trusted=False)
    result = run_program(argv, on_line=on_line, tail_lines=50)
    if not result.ok or len(saves) != len(frames):
        raise RuntimeError("the render script failed:\n" + "\n".join(result.tail[-20:]))
    linked = [(out / f"preview_{f:06d}.png").samefile(out / f"frame_{f:06d}.png") for f in frames]
    return {"save_s": saves, "linked": linked}


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    (width, height), frames = ((1920, 1080), [1]) if quick else ((3840, 2160), [1, 2, 3])
    with tempfile.TemporaryDirectory(prefix="farm-bench-saves-") as tmp:
        base_dir, farm_dir = Path(tmp) / "blender", Path(tmp) / "script" / "frames"
        base_dir.mkdir()
        farm_dir.mkdir(parents=True)
        base = blender_saves(base_dir, frames, width, height)
        farm = script_saves(farm_dir, frames, width, height)
    a, b = statistics.median(base), statistics.median(farm["save_s"])
    linked = sum(farm["linked"])
    result = {"resolution": f"{width}x{height}", "frames": frames, "blender_save_s": base,
              **farm}  # fmt: skip
    row = Row(
        bench="saves",
        case=f"{width}x{height} demo frame (PNG RGBA 8-bit, as saved), median of {len(frames)}",
        farm=f"{b:.2f} s a frame (frame, preview, thumbnail)",
        baseline=f"{a:.2f} s (Blender saving the frame alone)",
        ratio=b / a,
        note=f"b/a; the preview is the frame's own file for {linked} of {len(frames)} frames "
        "(its alpha read back, the thumbnail made from that read); a preview saved apart would "
        "add a second pass through the view transform",
    )
    return result, [row]

"""Blender run directly, as an artist would without a farm: the farm's Blender release (the bpy
wheel the workers run) opens the scene and renders every frame in one process on every core,
`bpy.ops.render.render(animation=True)`, the equivalent of `blender -b scene.blend -a`."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from farm.adapters.proc import run

_SCRIPT = """
import json, sys
import bpy
job = json.loads(sys.argv[-1])
bpy.ops.wm.open_mainfile(filepath=job["scene"], load_ui=False, use_scripts=False)
print("LOADED", flush=True)
scene = bpy.context.scene
scene.render.resolution_x, scene.render.resolution_y = job["width"], job["height"]
scene.render.resolution_percentage = 100
if scene.render.engine == "CYCLES":
    scene.cycles.samples = job["samples"]
    scene.cycles.device = "CPU"
scene.frame_start, scene.frame_end = 1, job["frames"]
scene.render.image_settings.file_format = "PNG"
scene.render.filepath = job["out"] + "/frame_######"
scene.render.use_file_extension = True
bpy.app.handlers.render_write.append(lambda *_: print("WROTE", flush=True))
bpy.ops.render.render(animation=True)
import os
os._exit(0)  # bpy 4.5 can hang in its static destructors (see farm/blender/script.finish)
"""


@dataclass(slots=True)
class DirectRun:
    total_s: float = 0.0
    load_s: float = 0.0
    """Launch to the scene loaded."""
    saved_s: list[float] = field(default_factory=list)
    """Seconds from launch to each frame written."""


def render_all(
    scene: Path, out: Path, frames: int, width: int, height: int, samples: int
) -> DirectRun:
    job = {"scene": str(scene), "out": str(out), "frames": frames, "width": width,
           "height": height, "samples": samples}  # fmt: skip
    found = DirectRun()
    started = time.monotonic()

    def on_line(line: str) -> None:
        if line == "LOADED":
            found.load_s = time.monotonic() - started
        elif line == "WROTE":
            found.saved_s.append(time.monotonic() - started)

    result = run([sys.executable, "-I", "-c", _SCRIPT, json.dumps(job)], on_line=on_line)
    found.total_s = time.monotonic() - started
    written = sorted(out.glob("frame_*.png"))
    if not result.ok or len(written) != frames:
        raise RuntimeError("direct Blender run failed:\n" + "\n".join(result.tail[-20:]))
    return found

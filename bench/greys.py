"""A scene whose frames say which frame they are: frame f is a flat grey of its own level, so a
decoded video is checked frame by frame by its pixels (each frame once, in order), not by count.
The scene of the soak (bench/soak.py) and of tests/e2e/test_store_faults.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FRAMES = 12
WIDTH, HEIGHT = 64, 36
STEP = 17
TOLERANCE = 6
"""How far a decoded frame's mean grey may be from its level (levels are STEP apart)."""


def level(frame: int) -> int:
    """Frame `frame`'s grey as 8-bit sRGB: 12 levels 17 apart, from 34 to 221."""
    return STEP * (frame + 1)


# Run by the bpy wheel (the farm's Blender): a camera facing the world only, whose colour is
# keyed per frame (constant between keys) to that frame's grey, shown as is (Standard view,
# no dither).
_BUILD = f"""
import sys
import bpy

out = sys.argv[1]
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.context.preferences.edit.keyframe_new_interpolation_type = "CONSTANT"
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 1
scene.cycles.use_denoising = False
scene.cycles.use_adaptive_sampling = False
scene.render.resolution_x, scene.render.resolution_y = {WIDTH}, {HEIGHT}
scene.render.resolution_percentage = 100
scene.render.fps = 24
scene.render.dither_intensity = 0.0
scene.view_settings.view_transform = "Standard"
scene.view_settings.look = "None"
scene.frame_start, scene.frame_end = 1, {FRAMES}
scene.world = bpy.data.worlds.new("World")
for frame in range(1, {FRAMES} + 1):
    srgb = {STEP} * (frame + 1) / 255
    linear = srgb / 12.92 if srgb <= 0.04045 else ((srgb + 0.055) / 1.055) ** 2.4
    scene.world.color = (linear, linear, linear)
    scene.world.keyframe_insert("color", frame=frame)
bpy.ops.object.camera_add(location=(0, -4, 0), rotation=(1.5708, 0, 0))
scene.camera = bpy.context.object
bpy.ops.wm.save_as_mainfile(filepath=out)
"""


def build(path: Path) -> Path:
    """The scene, saved at `path` by the farm's Blender (the bpy wheel)."""
    subprocess.run([sys.executable, "-I", "-c", _BUILD, str(path)], check=True,
                   capture_output=True, timeout=600)  # fmt: skip
    return path


def frames_shown(video: Path) -> list[int | None]:
    """Which frame each frame of `video` is, by its mean grey (the nearest level); None for a
    frame whose grey is no frame's."""
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(video), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    size = WIDTH * HEIGHT * 3
    if len(raw) % size:
        raise ValueError(f"{video.name}: {len(raw)} bytes of frames is no whole number of frames")
    shown: list[int | None] = []
    for at in range(0, len(raw), size):
        grey = sum(raw[at : at + size]) / size
        frame = min(range(1, FRAMES + 1), key=lambda f: abs(level(f) - grey))
        shown.append(frame if abs(level(frame) - grey) < TOLERANCE else None)
    return shown

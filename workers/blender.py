"""Blender's command line for one chunk, and reading its progress (pure).

Auto-execution of Python stored in the .blend is always off (`-Y`, before the file loads), and a
failing setup script fails the render (`--python-exit-code`) instead of rendering defaults.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FRAME_PATTERN = "frame_######"
_SAVED = re.compile(r"Saved: '(?P<path>.+?)'")
_FRA = re.compile(r"^Fra:(?P<frame>\d+) .*?(?:Sample (?P<done>\d+)/(?P<total>\d+))?$")
_FILE_FRAME = re.compile(r"frame_(\d+)\.\w+$")
_TIME = re.compile(r"^\s*Time: (?:(\d+):)?(\d+):(\d+(?:\.\d+)?) \(Saving: ")


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderSettings:
    width: int
    height: int
    samples: int
    device: str = "CPU"
    """CPU, CUDA or OPTIX: chosen by the worker's capability probe."""
    threads: int = 0
    """CPU threads for Cycles; 0 lets Blender use every core."""


def setup_script(settings: RenderSettings) -> str:
    """Python run after the scene loads: output size, samples, device, PNG output."""
    lines = [
        "import bpy",
        "scene = bpy.context.scene",
        "scene.render.engine = 'CYCLES'",
        f"scene.render.resolution_x = {settings.width}",
        f"scene.render.resolution_y = {settings.height}",
        "scene.render.resolution_percentage = 100",
        f"scene.cycles.samples = {settings.samples}",
        "scene.render.image_settings.file_format = 'PNG'",
        "scene.render.image_settings.color_mode = 'RGB'",
        "scene.render.image_settings.color_depth = '8'",
        "scene.render.use_file_extension = True",
        "scene.render.use_overwrite = True",
        "scene.render.use_placeholder = False",
    ]
    if settings.device in ("CUDA", "OPTIX"):
        lines += [
            "prefs = bpy.context.preferences.addons['cycles'].preferences",
            f"prefs.compute_device_type = '{settings.device}'",
            "prefs.get_devices()",
            f"gpus = [d for d in prefs.devices if d.type == '{settings.device}']",
            "assert gpus, 'no " + settings.device + " device visible to Cycles'",
            "for d in prefs.devices: d.use = d.type == '" + settings.device + "'",
            "scene.cycles.device = 'GPU'",
        ]
    else:
        lines.append("scene.cycles.device = 'CPU'")
    return "\n".join(lines) + "\n"


def render_argv(
    *,
    blender: str,
    scene: Path,
    out_dir: Path,
    frames: Sequence[int],
    settings: RenderSettings,
) -> list[str]:
    """`blender -b -Y … scene.blend --python-expr … -o out/frame_###### -F PNG -f 1,2,3`."""
    argv = [
        blender,
        "--background",
        "--disable-autoexec",
        "--python-exit-code",
        "3",
        str(scene),
        "--python-expr",
        setup_script(settings),
        "--render-output",
        str(out_dir / FRAME_PATTERN),
        "--render-format",
        "PNG",
        "--use-extension",
        "1",
    ]
    if settings.threads > 0:
        argv += ["--threads", str(settings.threads)]
    argv += ["--render-frame", ",".join(str(f) for f in frames)]
    return argv


def frame_file(out_dir: Path, frame: int) -> Path:
    return out_dir / f"frame_{frame:06d}.png"


def saved_frame(line: str) -> tuple[int, Path] | None:
    """`Saved: '/x/frame_000012.png'` -> (12, Path); anything else -> None."""
    match = _SAVED.search(line)
    if not match:
        return None
    path = Path(match.group("path"))
    number = _FILE_FRAME.search(path.name)
    if not number:
        return None
    return int(number.group(1)), path


def frame_progress(line: str) -> tuple[int, int, int] | None:
    """`Fra:12 … Sample 8/16` -> (12, 8, 16); a Fra line without samples -> (12, 0, 0)."""
    match = _FRA.match(line)
    if not match:
        return None
    done = int(match.group("done") or 0)
    total = int(match.group("total") or 0)
    return int(match.group("frame")), done, total


def frame_time_s(line: str) -> float | None:
    """` Time: 00:01.23 (Saving: 00:00.01)` -> 1.23, the render time Blender reports per frame."""
    match = _TIME.match(line)
    if not match:
        return None
    hours = int(match.group(1) or 0)
    return hours * 3600 + int(match.group(2)) * 60 + float(match.group(3))

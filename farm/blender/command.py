"""Running Blender for one chunk, as pure functions: the job file, the command line, its lines.

One render script (farm/blender/script.py) runs as a child process either inside a `blender`
binary (the worker image's 4.5 LTS) or under this Python with the `bpy` wheel (the local farm),
chosen by `settings.blender`: "bpy", or a path to a blender binary. Scripts stored in the .blend
stay off unless the job is trusted. Frames are announced on `FARM-FRAME <nonce> {...}` lines; only
lines with this run's nonce, naming the chunk's own files for that frame, are believed.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.blender.script import MAX_OUTPUTS, outputs_name

SCRIPT = Path(__file__).with_name("script.py")
WHEEL = "bpy"
"""`settings.blender` value for the bpy wheel run by this worker's own Python."""
OVERRIDABLE = ("resolution", "samples", "engine", "camera", "view_layer", "fixed_camera")
"""The render overrides the script applies; frames and fps are the plan's, not Blender's."""
_LINE = re.compile(r"FARM-(?P<kind>[A-Z]+) (?P<nonce>[0-9a-f]{16,64}) (?P<body>\{.*\})$")
"""Found anywhere in a line: Blender's C output, buffered apart from Python's, may have left
part of a line of its own in front of it."""
_FRA = re.compile(
    r"^Fra:(?P<frame>\d+) .*?"
    r"(?:Sample (?P<done>\d+)/(?P<total>\d+)|Rendering (?P<edone>\d+) / (?P<etotal>\d+) samples)?$"
)
_TIME = re.compile(r"^\s*Time: (?:(\d+):)?(\d+):(\d+(?:\.\d+)?) \(Saving: ")
_FRAME_FILE = re.compile(r"^frame_(?P<frame>\d{6,})\.(?P<ext>[a-z0-9]{2,4})$")
_PREVIEW_FILE = re.compile(r"^preview_(?P<frame>\d{6,})\.png$")
_THUMB_FILE = re.compile(r"^thumb_(?P<frame>\d{6,})\.jpg$")
_OUTPUT_PART = re.compile(r"^[\w#-][\w.#-]{0,199}$")
"""A File Output node's folder or file name as the render script leaves it (safe_slot)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderSettings:
    """What the job changes in the scene; None leaves the scene's own value."""

    width: int | None = None
    height: int | None = None
    samples: int | None = None
    engine: str | None = None
    """CYCLES, BLENDER_EEVEE(_NEXT) or BLENDER_WORKBENCH; mapped to this Blender's name."""
    camera: str | None = None
    view_layer: str | None = None
    """`--each view-layer`: render this layer alone (the others' Use for Rendering off)."""
    fixed_camera: bool = False
    """`--each camera`: `camera` on every frame, the timeline markers' switches overridden."""
    scene_engine: str | None = None
    """The engine name saved in the file (read at submit), so a 5.0 `BLENDER_EEVEE` still maps."""
    device: str = "CPU"
    """CPU, CUDA or OPTIX: chosen by the worker's capability probe."""
    threads: int = 0
    """CPU threads; 0 lets Blender use every core."""
    trusted: bool = False
    """Run scripts stored in the .blend (`--trusted-scripts`)."""
    preview_depth: str = "8"
    """Bit depth of the display-referred PNG the video is made from: 8 or 16."""
    allow_missing: tuple[str, ...] = ()
    """Paths as the .blend stores them (`//tex/a.png`) that were missing at submit and that the
    user chose to render without (`--allow-missing`); any other missing file fails the chunk."""

    border: tuple[float, float, float, float] | None = None
    """A still's tile (`--tiles`): border min x, min y, max x, max y (farm.core.tiles.Border)."""

    def overrides(self) -> dict[str, object]:
        over: dict[str, object] = {}
        if self.width is not None and self.height is not None:
            over["resolution"] = [self.width, self.height]
        if self.samples is not None:
            over["samples"] = self.samples
        if self.engine:
            over["engine"] = self.engine
        if self.camera:
            over["camera"] = self.camera
        if self.view_layer:
            over["view_layer"] = self.view_layer
        if self.fixed_camera and self.camera:
            over["fixed_camera"] = True
        if self.border is not None:
            over["border"] = list(self.border)
        return over


def settings_from_spec(
    spec: object, *, device: str, threads: int, preview_depth: str = "8"
) -> RenderSettings:
    """RenderSettings for a JobSpec: only the values its `overrides` names are applied. A job
    from before scenes were read (no `scene`) keeps its resolution and samples, as it always did;
    a scene whose size is odd renders at the spec's even size the video encoders need."""
    scene = getattr(spec, "scene", None)
    named = set(getattr(spec, "overrides", ()) or ())
    if scene is None:
        named |= {"resolution", "samples"}
    wanted = getattr(spec, "resolution", None)
    size = (getattr(wanted, "width", None), getattr(wanted, "height", None))
    if scene is not None and tuple(getattr(scene, "render_size", size)) != size:
        named.add("resolution")
    resolution = wanted if "resolution" in named else None
    return RenderSettings(
        width=getattr(resolution, "width", None),
        height=getattr(resolution, "height", None),
        samples=getattr(spec, "samples", None) if "samples" in named else None,
        engine=getattr(spec, "engine", None) if "engine" in named else None,
        camera=getattr(spec, "camera", None) if "camera" in named else None,
        view_layer=getattr(spec, "view_layer", None),
        # A camera named by a flag (--camera, --each camera) holds on every frame: markers that
        # bind cameras would switch away from it at each frame_set (flags override the scene).
        fixed_camera="camera" in named
        or str(getattr(getattr(spec, "group", None), "each", "")) == "camera",
        scene_engine=getattr(scene, "engine", None) or getattr(spec, "engine", None),
        device=device,
        threads=threads,
        trusted=trusts(spec),
        preview_depth=preview_depth,
        allow_missing=tuple(stored_path(str(m)) for m in getattr(spec, "missing_assets", ()) or ()),
    )


_MISSING = re.compile(r"(?s)(?P<stored>.*) \([a-z_]+ ['\"].*; looked for .*\)\Z")
_UNFOLLOWED = re.compile(r"(?s)(?P<stored>.*) \(in [^/]*\)\Z")
"""A path a linked library stores that the farm cannot follow: "STORED_PATH (in lib.blend)"."""


def stored_path(missing: str) -> str:
    """The path as the scene stores it, of a file farm.blender.assets recorded missing as
    "STORED_PATH (kind 'name'; looked for …)": `//tex/wood (1).png` whole, not `//tex/wood`."""
    found = _MISSING.match(missing) or _UNFOLLOWED.match(missing)
    return found["stored"] if found else missing


def trusts(spec: object) -> bool:
    """Whether the job runs the scripts stored in its .blend (`--trusted-scripts`)."""
    return bool(getattr(spec, "trusted_scripts", False) or getattr(spec, "trusted", False))


def job_file(
    *,
    scene: Path,
    out_dir: Path,
    frames: Sequence[int],
    settings: RenderSettings,
    nonce: str,
    remap: Mapping[str, str] | None = None,
    permit: Path | None = None,
    source: str = "",
) -> dict[str, object]:
    """The JSON the render script reads: what to open, which frames, where they go, what to change.
    `remap`: stored paths that would not resolve on this worker, to their copies in the tree;
    `source`: the scene's key in the store (its content hash), so a warm Blender that opened
    the job's scene before `farm retry --scene` replaced it is never used for the fixed one."""
    job: dict[str, object] = {
        "scene": str(scene),
        "source": source,
        "out_dir": str(out_dir),
        "frames": list(frames),
        "nonce": nonce,
        "trusted": settings.trusted,
        "overrides": settings.overrides(),
        "scene_engine": settings.scene_engine,
        "device": settings.device,
        "threads": settings.threads,
        "preview_depth": settings.preview_depth,
        "allow_missing": list(settings.allow_missing),
        "remap": dict(remap or {}),
    }
    if permit is not None:
        # No idle tail: once the chunk is split the worker writes {"last": N} here, and the
        # script renders no frame after N (it reads the file before each frame).
        job["permit"] = str(permit)
    return job


def script_argv(
    *, blender: str, job_path: Path | None, trusted: bool = False, python: str = sys.executable
) -> list[str]:
    """The render script's command line: under `python -I` with the wheel, or inside `blender`.
    `job_path` None: a warm Blender (`--serve`), which reads job files' paths from stdin."""
    job = ["--job", str(job_path)] if job_path is not None else ["--serve"]
    if blender == WHEEL:
        return [python, "-I", str(SCRIPT), *job]
    autoexec = [] if trusted else ["--disable-autoexec"]
    return [
        blender,
        "--background",
        "--factory-startup",
        *autoexec,
        "--python-exit-code",
        "3",
        "--python",
        str(SCRIPT),
        "--",
        *job,
    ]


def probe_argv(*, blender: str, python: str = sys.executable) -> list[str]:
    """The script's `--probe`: one `FARM-CAPS {...}` line with version, engines and devices."""
    if blender == WHEEL:
        return [python, "-I", str(SCRIPT), "--probe"]
    return [
        blender,
        "--background",
        "--factory-startup",
        "--disable-autoexec",
        "--python-exit-code",
        "3",
        "--python",
        str(SCRIPT),
        "--",
        "--probe",
    ]


def parse_caps(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        if line.startswith("FARM-CAPS {"):
            data: dict[str, Any] = json.loads(line.removeprefix("FARM-CAPS "))
            return data
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptLine:
    """One `FARM-<KIND> <nonce> {json}` line of the render script."""

    kind: str
    """LOADED, START or FRAME."""
    body: Mapping[str, Any] = field(default_factory=dict)


def script_line(line: str, nonce: str) -> ScriptLine | None:
    """The script's own line when it is whole and carries this run's nonce; else None."""
    match = _LINE.search(line)
    if not match or match.group("nonce") != nonce:
        return None
    try:
        body = json.loads(match.group("body"))
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    return ScriptLine(kind=match.group("kind"), body=body)


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedFrame:
    frame: int
    files: tuple[Path, ...]
    """The frame in the scene's output format (PNG, EXR, multilayer EXR)."""
    preview: Path
    """Display-referred PNG of the same render: what the video is made from."""
    render_s: float
    thumbnail: Path | None = None
    """The job page's small JPEG of the preview, when the script made one."""
    outputs: tuple[str, ...] = ()
    """What the scene's File Output nodes wrote for the frame: paths relative to `outputs_dir`
    (`Node/Image0001.png`, or a node's multilayer `Node0001.exr`), stored as the scene laid them
    out (keys.output_key)."""
    outputs_dir: Path = Path()


class FrameRejected(ValueError):
    """A FARM-FRAME line that names something other than the chunk's own files for the frame."""


def accept_frame(
    line: ScriptLine, *, out_dir: Path, frames: Sequence[int], nonce: str
) -> RenderedFrame:
    """Check a FRAME line: a frame of this chunk, plain file names for that frame, in `out_dir`
    (its File Output files in this run's folder for the frame: `nonce`)."""
    body = line.body
    frame = body.get("frame")
    if not isinstance(frame, int) or isinstance(frame, bool) or frame not in frames:
        raise FrameRejected(f"frame {frame!r} is not one of this chunk's frames")
    names = body.get("files")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise FrameRejected(f"frame {frame}: no file list")
    files = tuple(_own_file(out_dir, n, frame, _FRAME_FILE) for n in names)
    preview = _own_file(out_dir, str(body.get("preview")), frame, _PREVIEW_FILE)
    thumb = body.get("thumbnail")
    render_s = body.get("render_s")
    outputs_dir = out_dir / outputs_name(nonce, frame)
    return RenderedFrame(
        frame=frame,
        files=files,
        preview=preview,
        render_s=float(render_s) if isinstance(render_s, int | float) else 0.0,
        thumbnail=_own_file(out_dir, str(thumb), frame, _THUMB_FILE) if thumb else None,
        outputs=_outputs(outputs_dir, body.get("outputs", []), frame),
        outputs_dir=outputs_dir,
    )


def _outputs(folder: Path, names: Any, frame: int) -> tuple[str, ...]:
    """The frame's File Output files as announced: plain relative paths, a folder deep at most,
    each a file (not a link) in the frame's own outputs folder (checked again as it is opened:
    workers.host.box.open_boxed_under)."""
    if not isinstance(names, list) or len(names) > MAX_OUTPUTS:
        raise FrameRejected(f"frame {frame}: its File Output list is not a list of names")
    for name in names:
        parts = name.split("/") if isinstance(name, str) else []
        if not 1 <= len(parts) <= 2 or not all(_OUTPUT_PART.match(p) for p in parts):
            raise FrameRejected(f"frame {frame}: File Output {name!r} is not a plain path")
        path = folder / name
        if any(p.is_symlink() for p in (folder, *path.parents[: len(parts) - 1], path)):
            raise FrameRejected(f"frame {frame}: File Output {name} is a link")
        if not path.is_file():
            raise FrameRejected(f"frame {frame}: File Output {name} is not a file")
    return tuple(names)


def _own_file(out_dir: Path, name: str, frame: int, pattern: re.Pattern[str]) -> Path:
    match = pattern.match(name)
    if not match or int(match.group("frame")) != frame:
        raise FrameRejected(f"frame {frame}: {name!r} is not a file name for this frame")
    path = out_dir / name
    if path.is_symlink() or not path.is_file():
        raise FrameRejected(f"frame {frame}: {name} is not a file in the chunk's folder")
    return path


def frame_file(out_dir: Path, frame: int, ext: str = "png") -> Path:
    return out_dir / f"frame_{frame:06d}.{ext}"


def preview_file(out_dir: Path, frame: int) -> Path:
    """The display-referred PNG of `frame` the encode step reads."""
    return out_dir / f"preview_{frame:06d}.png"


def local_files(out_dir: Path, frame: int) -> list[Path]:
    """Every file the script left for `frame` (its preview, its frames in any format and its
    thumbnail)."""
    return [
        preview_file(out_dir, frame),
        *sorted(out_dir.glob(f"frame_{frame:06d}.*")),
        out_dir / f"thumb_{frame:06d}.jpg",
    ]


def frame_progress(line: str) -> tuple[int, int, int] | None:
    """`Fra:12 … Sample 8/16` (Cycles) or `… Rendering 8 / 16 samples` (Eevee) -> (12, 8, 16);
    a Fra line without samples -> (12, 0, 0)."""
    match = _FRA.match(line)
    if not match:
        return None
    done = match.group("done") or match.group("edone") or 0
    total = match.group("total") or match.group("etotal") or 0
    return int(match.group("frame")), int(done), int(total)


def frame_time_s(line: str) -> float | None:
    """` Time: 00:01.23 (Saving: 00:00.01)` -> 1.23, the render time Blender reports per frame."""
    match = _TIME.match(line)
    if not match:
        return None
    hours = int(match.group(1) or 0)
    return hours * 3600 + int(match.group(2)) * 60 + float(match.group(3))


MERGE_SCRIPT = Path(__file__).with_name("tilemerge.py")


def merge_argv(*, blender: str, plan_path: Path, python: str = sys.executable) -> list[str]:
    """farm/blender/tilemerge.py's command line: a still's tiles merged into one image."""
    plan = ["--plan", str(plan_path)]
    if blender == WHEEL:
        return [python, "-I", str(MERGE_SCRIPT), *plan]
    return [blender, "--background", "--factory-startup", "--disable-autoexec",
            "--python-exit-code", "3", "--python", str(MERGE_SCRIPT), "--", *plan]  # fmt: skip

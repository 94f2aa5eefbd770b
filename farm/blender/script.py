"""Render one chunk inside Blender: open the scene, apply the job's overrides, write each frame.

Runs as a child process, never imported by the worker with bpy present, two ways:
    blender -b --factory-startup --python-exit-code 3 --python blender_render.py -- --job job.json
    python -I blender_render.py --job job.json          # the `bpy` wheel
It imports nothing from the farm, so any Blender can run it. Each finished frame is announced on
one stdout line carrying the job's nonce (`FARM-FRAME <nonce> {...}`); any error exits non-zero
with its message on stderr. The job file is built by farm/blender/command.py (`job_file`).

With `--serve` instead of `--job` it is a warm Blender (workers/host/serving.py, warm.py): it reads job files' paths
from stdin, one a line, opens the scene for the first and keeps it open for the next ones, which
must differ from the first only in their frames, nonce and permit (one job's next chunks), and
says `FARM-DONE <nonce> {}` after each; an empty line or the end of stdin ends it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

EXIT_FAILED = 3
"""Matches `--python-exit-code 3`: the script itself refused or failed the chunk."""
ENGINE_ALIASES = {
    "BLENDER_EEVEE": "BLENDER_EEVEE_NEXT",
    "BLENDER_EEVEE_NEXT": "BLENDER_EEVEE",
}
"""Eevee is BLENDER_EEVEE_NEXT in 4.2-4.5 and BLENDER_EEVEE before and since 5.0."""
PREVIEW_DEPTHS = ("8", "16")
MOVIE_FORMATS = frozenset({"FFMPEG", "AVI_JPEG", "AVI_RAW"})
PER_CHUNK = frozenset({"frames", "nonce", "permit"})
"""The only fields in which a warm Blender's later job files may differ from its first."""
_UNSAFE = re.compile(r"[^\w.#-]+")


class ChunkFailed(Exception):
    """The chunk cannot render as asked; the message names what to fix."""


def map_engine(name: str, available: Iterable[str]) -> str:
    """The engine called `name` in this Blender: itself, or its other release's name."""
    names = set(available)
    if name in names:
        return name
    alias = ENGINE_ALIASES.get(name)
    if alias and alias in names:
        return alias
    raise ChunkFailed(
        f"render engine {name} is not in this Blender (it has {', '.join(sorted(names))})"
    )


def safe_slot(path: str) -> str:
    """A File Output slot path made into one plain name (no folders, no `..`, no absolute, not
    hidden, at most 150 characters), kept as the artist typed it where it already is one
    (`beauty_` still writes `beauty_0001.png`, `beauty.` writes `beauty.0001.exr`)."""
    plain = path.replace("\\", "/").lstrip("./")  # what aims it elsewhere, or hides it
    name = _UNSAFE.sub("_", plain.replace("/", "_"))[:150]
    return name or "slot"


def unique(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`... where it is taken already (two slots made plain alike:
    `a b` and `a_b`); added to `taken`."""
    found, n = name, 1
    while found.casefold() in taken:  # a case-insensitive disk would merge them too
        n += 1
        found = f"{name}_{n}"
    taken.add(found.casefold())
    return found


def only_layer(scene: Any, name: str) -> None:
    """`--each view-layer`: the scene renders the layer `name` alone."""
    names = [layer.name for layer in scene.view_layers]
    if name not in names:
        raise ChunkFailed(
            f"the scene has no view layer named {name!r} (it has {', '.join(names)}); submit "
            "the scene again"
        )
    for layer in scene.view_layers:
        layer.use = layer.name == name


def set_border(render: Any, border: list[float]) -> None:
    """A tile of a still (`--tiles`): Blender renders the region alone, the file cropped to it.
    The fractions come from farm.core.tiles, chosen to land on whole pixels."""
    render.use_border = True
    render.use_crop_to_border = True
    render.border_min_x, render.border_min_y, render.border_max_x, render.border_max_y = border


def frame_name(frame: int, extension: str) -> str:
    return f"frame_{frame:06d}{extension}"


def frame_is_preview(scene: Any, preview_depth: str) -> bool:
    """Whether the frame as the scene saves it can be the preview the video is made from: a PNG
    at the preview's depth in the scene's own view transform, RGB, or RGBA with an opaque film
    (Renderer.read_preview then reads its alpha back: holdouts, the compositor and sequencer strips
    can make it less than 1 whatever the film, and where it is, Blender's RGB save darkens the
    pixel as alpha over black does while a video encoder would drop alpha). Then the preview is
    the frame's file, not a second save: each save converts the whole render through the view
    transform again (0.4 s of a 4K frame before any compression, 0.8 s with the PNG's), time a
    GPU waits."""
    render, image = scene.render, scene.render.image_settings
    if image.file_format != "PNG" or image.color_depth != preview_depth:
        return False
    if getattr(render, "use_multiview", False):
        return False
    if getattr(image, "color_management", "FOLLOW_SCENE") != "FOLLOW_SCENE":
        return False
    return image.color_mode == "RGB" or (image.color_mode == "RGBA" and not render.film_transparent)


def preview_name(frame: int) -> str:
    return f"preview_{frame:06d}.png"


MAX_OUTPUTS = 256
"""File Output files one frame may announce: a scene's passes, not a flood of uploads."""


def outputs_name(nonce: str, frame: int) -> str:
    """The folder the File Output nodes write one frame into, this run's own (its nonce): no
    other run, a killed one's leftovers or a second chunk of the job beside it, writes there."""
    return f"outputs_{nonce}_{frame:06d}"


def list_outputs(folder: str, frame: int) -> list[str]:
    """What the File Output nodes wrote into the frame's folder: their paths relative to it,
    plain files a node's folder deep at most (anything else is not announced)."""
    found = sorted(_output_files(folder))
    if len(found) > MAX_OUTPUTS:
        raise ChunkFailed(
            f"frame {frame}: the scene's File Output nodes wrote {len(found)} files, more than "
            f"the {MAX_OUTPUTS} a frame may keep; write fewer passes (a multilayer EXR holds many)"
        )
    return found


def _output_files(folder: str) -> Iterator[str]:
    try:
        top = list(os.scandir(folder))
    except OSError:
        return
    for entry in top:
        if entry.is_file(follow_symlinks=False):
            yield entry.name
        elif entry.is_dir(follow_symlinks=False):
            for inner in os.scandir(entry.path):
                if inner.is_file(follow_symlinks=False):
                    yield f"{entry.name}/{inner.name}"


def thumb_name(frame: int) -> str:
    return f"thumb_{frame:06d}.jpg"


THUMB_WIDTH = 320
"""The job page's thumbnails: at most this wide, the frame's aspect, an even height."""


def announce(kind: str, nonce: str, **fields: Any) -> None:
    flush_c_output()  # Blender's lines before it stay before it in the log
    print(f"FARM-{kind} {nonce} {json.dumps(fields, sort_keys=True)}", flush=True)


SERVING = "FARM-SERVING"
"""A serve-mode script's first line."""


def job_path(argv: list[str]) -> str:
    """`--job PATH`, after a `--` when run inside the blender binary."""
    args = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
    if "--job" not in args or args.index("--job") + 1 >= len(args):
        raise ChunkFailed("usage: script.py --job JOB.json")
    return args[args.index("--job") + 1]


def main(argv: list[str]) -> None:
    # `python -I script.py` puts farm/blender/ first on sys.path: keep its modules out of Blender's way.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if "--probe" in argv:
        import bpy

        print("FARM-CAPS " + json.dumps(capabilities(bpy), sort_keys=True), flush=True)
        return
    if "--serve" in argv:
        print(SERVING, flush=True)  # running, its box set up (workers.host.warm); bpy loads next
        import bpy

        serve(bpy, sys.stdin)
        return
    import bpy

    Renderer(bpy, read_job(job_path(argv))).run()


def read_job(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        job = json.load(fh)
    if not isinstance(job, dict):
        raise ChunkFailed(f"{path} is not a job file")
    return job


def scene_part(job: Mapping[str, Any]) -> dict[str, Any]:
    """A job file less its chunk's own fields: what opens and sets up the scene."""
    return {k: v for k, v in job.items() if k not in PER_CHUNK}


def same_scene(first: dict[str, Any], job: dict[str, Any]) -> bool:
    """Whether `job` is another chunk of the scene `first` opened, set up the same way."""
    return scene_part(first) == scene_part(job)


def serve(bpy: Any, commands: Iterable[str]) -> None:
    """A warm Blender: each line of `commands` names a job file; the first opens the scene, the
    next ones render more of its frames as they are (no second load), and each ends with DONE."""
    renderer: Renderer | None = None
    for command in commands:
        path = command.strip()
        if not path:
            return
        job = read_job(path)
        if renderer is None:
            renderer = Renderer(bpy, job)
            renderer.run()
        else:
            renderer.next_chunk(job)
        flush_c_output()  # Blender's own lines belong to this chunk's log, before DONE
        print(flush=True)
        announce("DONE", renderer.nonce)


def capabilities(bpy: Any) -> dict[str, Any]:
    """This Blender's version, file version, engines, Cycles devices and denoisers."""
    import _cycles

    devices: dict[str, list[str]] = {}
    for kind in ("CPU", "CUDA", "OPTIX", "HIP", "ONEAPI"):
        try:
            found = _cycles.available_devices(kind)
        except Exception:
            found = ()
        devices[kind] = [d[0] for d in found if d[1] == kind]
    denoisers = ["OPENIMAGEDENOISE"] if getattr(_cycles, "with_openimagedenoise", False) else []
    if devices["OPTIX"]:
        denoisers.append("OPTIX")
    return {
        "version": bpy.app.version_string.split()[0],
        "file_version": list(bpy.app.version_file),
        "engines": engine_names(bpy),
        "devices": {k: v for k, v in devices.items() if v},
        "denoisers": denoisers,
    }


def engine_names(bpy: Any) -> list[str]:
    """Render engines this Blender has. The RNA enum is filled at run time (its static list
    misses most), so the built-in ones are named and registered engine classes added."""
    names = {"BLENDER_WORKBENCH", "CYCLES"}
    names.update(
        item.identifier for item in bpy.types.RenderSettings.bl_rna.properties["engine"].enum_items
    )
    todo = list(bpy.types.RenderEngine.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        names.add(getattr(cls, "bl_idname", "") or "")
    return sorted(n for n in names if n)


class Renderer:
    """One chunk's render: every bpy call lives here."""

    def __init__(self, bpy: Any, job: dict[str, Any]) -> None:
        self.bpy = bpy
        self.job = job
        self.nonce = str(job["nonce"])
        self.out_dir = os.path.abspath(job["out_dir"])
        self.scene: Any = None
        self.loaded: dict[str, Any] = {}
        """LOADED's fields (what renders, where): a warm Blender's later chunks say them again."""
        depth = str(job.get("preview_depth", "8"))
        self.preview_depth = depth if depth in PREVIEW_DEPTHS else "8"
        self.can_link = True
        """False once the folder's filesystem refused a hard link (Renderer.link)."""
        self.file_outputs: list[tuple[Any, str]] = []
        """The scene's File Output nodes and the plain name each writes under."""

    def run(self) -> None:
        self.scene = self.load()
        self.render_chunk()

    def next_chunk(self, job: dict[str, Any]) -> None:
        """The next chunk of the same scene, already open and set up: only its frames."""
        if not same_scene(self.job, job):
            raise ChunkFailed("a warm Blender was given another scene or other settings")
        self.job, self.nonce = job, str(job["nonce"])
        announce("LOADED", self.nonce, **{**self.loaded, "load_s": 0.0, "warm": True})
        self.render_chunk()

    def load(self) -> Any:
        """Open the scene and set it up as the job asks; announce LOADED with what it renders."""
        started = time.monotonic()
        scene = self.open_scene()
        self.remap_paths()
        self.check_files()
        self.apply_overrides(scene)
        self.select_device(scene)
        self.check_denoiser(scene)
        self.confine_file_outputs(scene)
        image = scene.render.image_settings
        if image.file_format in MOVIE_FORMATS:
            # Frames are kept as images; the farm makes the video.
            image.file_format, image.color_mode, image.color_depth = "PNG", "RGB", "8"
        self.loaded = dict(
            blender=self.bpy.app.version_string,
            engine=scene.render.engine,
            width=scene.render.resolution_x * scene.render.resolution_percentage // 100,
            height=scene.render.resolution_y * scene.render.resolution_percentage // 100,
            format=image.file_format,
            color_mode=image.color_mode,
            color_depth=image.color_depth,
            # Where it runs: the worker's CPUs (farm up gives each worker its own) and the
            # render threads Blender uses on them.
            cpus=sorted(os.sched_getaffinity(0)),
            threads=scene.render.threads,
        )
        announce("LOADED", self.nonce, **self.loaded, load_s=round(time.monotonic() - started, 3))
        return scene

    def render_chunk(self) -> None:
        scene = self.scene
        for frame in self.job["frames"]:
            last = self.permitted_last()
            if last is not None and int(frame) > last:
                # The chunk was split: the frames after `last` are another chunk's now.
                announce("STOPPED", self.nonce, frame=int(frame), last=last)
                return
            self.render_frame(scene, int(frame))

    def permitted_last(self) -> int | None:
        """The last frame the worker still permits (its permit file, written whole by a rename),
        or None when it permits every frame of the chunk."""
        path = self.job.get("permit") or ""
        try:
            with open(path, encoding="utf-8") as fh:
                last = json.load(fh).get("last")
        except (OSError, ValueError, AttributeError):
            return None
        return int(last) if isinstance(last, int) else None

    def open_scene(self) -> Any:
        bpy = self.bpy
        # Factory settings: no user preferences or add-ons of whoever runs the worker.
        bpy.ops.wm.read_factory_settings(use_empty=True)
        trusted = bool(self.job.get("trusted", False))
        try:
            bpy.ops.wm.open_mainfile(filepath=self.job["scene"], load_ui=False, use_scripts=trusted)
        except RuntimeError as exc:
            raise ChunkFailed(
                f"Blender {bpy.app.version_string} cannot open the scene: {exc}"
            ) from None
        scene = bpy.context.scene
        if scene is None:
            raise ChunkFailed("the .blend file has no scene")
        return scene

    def remap_paths(self) -> None:
        """Point datablocks whose stored path is absolute (or outside the scene's folder) at their
        copy in the job's tree (the table comes from the asset manifest made at submit).
        Libraries are reloaded from their new place; linked data cannot be rewritten."""
        remap: dict[str, str] = self.job.get("remap") or {}
        if not remap:
            return
        data = self.bpy.data
        for lib in list(data.libraries):
            if lib.filepath in remap:
                lib.filepath = remap[lib.filepath]
                lib.reload()
        for kind in ("images", "movieclips", "sounds", "fonts", "cache_files", "volumes"):
            for item in getattr(data, kind, ()):
                if item.library is None and getattr(item, "filepath", "") in remap:
                    item.filepath = remap[item.filepath]

    def check_files(self) -> None:
        """A file the scene uses but Blender cannot find renders magenta or empty: refuse it."""
        allowed = set(self.job.get("allow_missing", ()))
        missing = sorted(
            f"{path} ({what})" for path, what in set(self._missing_files()) if path not in allowed
        )
        if missing:
            raise ChunkFailed(
                f"{len(missing)} file(s) the scene uses are missing: " + ", ".join(missing)
            )

    def _missing_files(self) -> Iterator[tuple[str, str]]:
        """(the path as the scene stores it, what uses it) of each file Blender cannot find."""
        data, abspath = self.bpy.data, self.bpy.path.abspath
        for lib in data.libraries:
            if lib.is_missing:
                yield lib.filepath, "linked library"
        for image in data.images:
            if image.source not in {"FILE", "SEQUENCE", "TILED"} or image.packed_file:
                continue
            if image.packed_files and len(image.packed_files):
                continue
            path = abspath(image.filepath, library=image.library)
            if image.source == "TILED":
                tiles = [path.replace("<UDIM>", str(t.number)) for t in image.tiles]
                if not any(os.path.isfile(t) for t in tiles):
                    yield image.filepath, f"image {image.name}, UDIM tiles"
                continue
            if not os.path.isfile(path):
                yield image.filepath, f"image {image.name}"
        for kind in ("volumes", "cache_files", "movieclips", "fonts"):
            for block in getattr(data, kind, ()):
                filepath = getattr(block, "filepath", "")
                if not filepath or filepath == "<builtin>" or getattr(block, "packed_file", None):
                    continue
                library = getattr(block, "library", None)
                path = abspath(filepath, library=library)
                if "#" in os.path.basename(path) or "<" in path:
                    continue  # a frame-numbered sequence; Blender resolves it per frame
                if not os.path.exists(path):
                    yield filepath, f"{kind[:-1].replace('_', ' ')} {block.name}"

    def apply_overrides(self, scene: Any) -> None:
        """Only what the job names; everything else stays the scene's own."""
        over = self.job.get("overrides", {})
        render = scene.render
        engines = engine_names(self.bpy)
        # Set even when not overridden: a name this release lacks (5.0's BLENDER_EEVEE in 4.5)
        # reads back as another engine but renders with none until it is set to a real one.
        engine = over.get("engine") or self.job.get("scene_engine") or render.engine
        render.engine = map_engine(str(engine), engines)
        if "resolution" in over:
            render.resolution_x, render.resolution_y = (int(v) for v in over["resolution"])
            render.resolution_percentage = 100
        if "samples" in over:
            samples = int(over["samples"])
            if render.engine == "CYCLES":
                scene.cycles.samples = samples
            elif render.engine.startswith("BLENDER_EEVEE"):
                scene.eevee.taa_render_samples = samples
        if over.get("camera"):
            camera = self.bpy.data.objects.get(over["camera"])
            if camera is None or camera.type != "CAMERA":
                raise ChunkFailed(f"the scene has no camera object named {over['camera']!r}")
            scene.camera = camera
        if over.get("fixed_camera"):
            # `--each camera`: markers bound to cameras would switch away from it at frame_set.
            for marker in scene.timeline_markers:
                marker.camera = None
        if scene.camera is None:
            raise ChunkFailed("the scene has no active camera; set one or pass --camera")
        if over.get("view_layer"):
            only_layer(scene, str(over["view_layer"]))
        if over.get("border"):
            set_border(render, [float(v) for v in over["border"]])
        threads = int(self.job.get("threads", 0))
        if threads > 0:
            render.threads_mode = "FIXED"
            render.threads = threads

    def select_device(self, scene: Any) -> None:
        device = str(self.job.get("device", "CPU"))
        if scene.render.engine != "CYCLES":
            return
        if device == "CPU":
            scene.cycles.device = "CPU"
            return
        prefs = self.bpy.context.preferences.addons["cycles"].preferences
        prefs.compute_device_type = device
        prefs.get_devices()
        found = [d for d in prefs.devices if d.type == device]
        if not found:
            raise ChunkFailed(f"no {device} device visible to Cycles")
        for d in prefs.devices:
            d.use = d.type == device
        scene.cycles.device = "GPU"

    def check_denoiser(self, scene: Any) -> None:
        if scene.render.engine != "CYCLES" or not scene.cycles.use_denoising:
            return
        import _cycles

        has_oidn = bool(getattr(_cycles, "with_openimagedenoise", False))
        denoiser = getattr(scene.cycles, "denoiser", "")
        if denoiser == "OPTIX" and self.job.get("device") == "OPTIX":
            return
        if not has_oidn:
            raise ChunkFailed(
                f"the scene denoises with OpenImageDenoise but Blender "
                f"{self.bpy.app.version_string} here was built without it; render with "
                "the farm's Blender (the bpy wheel or the worker image)"
            )
        if denoiser != "OPENIMAGEDENOISE":
            # OptiX denoising needs an NVIDIA GPU; OIDN gives the same kind of image on any host.
            scene.cycles.denoiser = "OPENIMAGEDENOISE"

    def confine_file_outputs(self, scene: Any) -> None:
        """File Output nodes write into the chunk folder, whatever path the scene gave them:
        each frame into a folder of its own (aim_file_outputs), each node in a folder (or, for a
        multilayer EXR, a file) named after it. Names are made plain, and names that would
        clash once plain get a number, so no pass overwrites another."""
        trees = [getattr(scene, "node_tree", None), getattr(scene, "compositing_node_group", None)]
        seen: set[int] = set()
        # A tiled still's passes file (`tiles.passes`) is named beside the nodes' own: kept free.
        folders: set[str] = {str((self.job.get("tiles") or {}).get("passes", "")).casefold()}
        for tree in trees:
            for node in self._nodes(tree, seen):
                if node.bl_idname != "CompositorNodeOutputFile":
                    continue
                self.file_outputs.append((node, unique(safe_slot(node.name), folders)))
                names: set[str] = set()
                for slot in getattr(node, "file_slots", ()):
                    slot.path = unique(safe_slot(slot.path), names)
                for slot in getattr(node, "layer_slots", ()):
                    slot.name = unique(safe_slot(slot.name), names)
                if hasattr(node, "file_name"):  # 5.0's File Output node
                    node.file_name = unique(safe_slot(node.file_name), names)

    def aim_file_outputs(self, frame: int) -> str:
        """Point every File Output node at this run's folder for `frame`; the folder."""
        folder = os.path.join(self.out_dir, outputs_name(self.nonce, frame))
        for node, name in self.file_outputs:
            node.base_path = os.path.join(folder, name)
            if hasattr(node, "directory"):  # 5.0's File Output node
                node.directory = node.base_path
        return folder

    def _nodes(self, tree: Any, seen: set[int]) -> Iterator[Any]:
        if tree is None or id(tree) in seen:
            return
        seen.add(id(tree))
        for node in tree.nodes:
            yield node
            if getattr(node, "node_tree", None) is not None:
                yield from self._nodes(node.node_tree, seen)

    def render_frame(self, scene: Any, frame: int) -> None:
        bpy = self.bpy
        announce("START", self.nonce, frame=frame)
        started = time.monotonic()
        outputs = self.aim_file_outputs(frame)
        scene.frame_set(self.tile(scene, frame))
        bpy.ops.render.render(write_still=False, scene=scene.name)
        render_s = time.monotonic() - started
        result = bpy.data.images.get("Render Result")
        if result is None:
            raise ChunkFailed(f"frame {frame}: Blender made no render result")
        name, preview, thumb_file = frame_name(frame, scene.render.file_extension), \
            preview_name(frame), thumb_name(frame)  # fmt: skip
        # Each file is written under a name of this run's own, then renamed into place: a frame
        # rendered again in this folder (a retry; after a split, the old attempt and the new
        # chunk both on frame N) never has a save write through an old name into a file
        # another name still shows (the master of a linked preview).
        saved, previewed, thumbed = (self.private(n) for n in (name, preview, thumb_file))
        result.save_render(saved, scene=scene)
        read = self.read_preview(scene, saved)
        try:
            linked = read is not None and self.link(saved, previewed)
            if not linked:
                self.save_preview(scene, result, previewed)
            made = self.save_thumbnail(frame, previewed, thumbed, read if linked else None)
        finally:
            if read is not None:
                bpy.data.images.remove(read)
        self.save_tile_passes(scene, result, outputs)
        os.replace(saved, os.path.join(self.out_dir, name))
        os.replace(previewed, os.path.join(self.out_dir, preview))
        thumb = None
        if made:
            os.replace(thumbed, os.path.join(self.out_dir, thumb_file))
            thumb = thumb_file
        announce(
            "FRAME",
            self.nonce,
            frame=frame,
            files=[name],
            preview=preview,
            thumbnail=thumb,
            outputs=list_outputs(outputs, frame),
            render_s=round(render_s, 3),
            save_s=round(time.monotonic() - started - render_s, 3),
        )

    def tile(self, scene: Any, frame: int) -> int:
        """The Blender frame to render for `frame`: itself, or for a tiled still (`--tiles`,
        farm.core.tiles) the still's frame, with slot `frame`'s border set; files keep the slot."""
        tiles = self.job.get("tiles")
        if not tiles:
            return frame
        set_border(scene.render, [float(v) for v in tiles["borders"][frame]])
        if tiles.get("denoise"):
            # Denoised once, after the merge (farm/blender/tilemerge.py): the tile is a full
            # frame, black outside its region, in multilayer EXR with the denoiser's passes.
            scene.cycles.use_denoising = False
            for layer in scene.view_layers:
                layer.cycles.denoising_store_passes = True
            scene.render.use_crop_to_border = False
            image = scene.render.image_settings
            image.file_format, image.color_depth = "OPEN_EXR_MULTILAYER", "32"
            image.exr_codec = "ZIP"  # lossless, and what the merge reads the passes of
        return int(tiles["frame"])

    def save_tile_passes(self, scene: Any, result: Any, folder: str) -> None:
        """A tiled still's tile: every pass its view layers render, in a 32-bit multilayer EXR
        (ZIP, which farm/blender/tilemerge.py reads) among the frame's File Output files, for
        the merge to make the still's passes from. A denoised still's tile is that file itself."""
        tiles = self.job.get("tiles")
        if not tiles or tiles.get("denoise") or not tiles.get("passes"):
            return
        image = scene.render.image_settings
        kept = image.file_format, image.color_depth, image.exr_codec
        os.makedirs(folder, exist_ok=True)
        try:
            image.file_format, image.color_depth = "OPEN_EXR_MULTILAYER", "32"
            image.exr_codec = "ZIP"
            result.save_render(os.path.join(folder, str(tiles["passes"])), scene=scene)
        finally:
            image.file_format = kept[0]
            image.color_depth, image.exr_codec = kept[1], kept[2]

    def read_preview(self, scene: Any, path: str) -> Any:
        """The frame saved at `path`, loaded, where it can be the preview (frame_is_preview) and
        every pixel's alpha, read back, is 1; else None. Reading it (0.24 s of a 4K frame) costs
        less than the save it spares, and the thumbnail is made from it, not read again."""
        if not self.can_link or not frame_is_preview(scene, self.preview_depth):
            return None
        image = None
        try:
            import numpy

            image = self.bpy.data.images.load(path, check_existing=False)
            if scene.render.image_settings.color_mode == "RGB":
                return image
            pixels = numpy.empty(len(image.pixels), dtype=numpy.float32)
            image.pixels.foreach_get(pixels)
            alpha = pixels[image.channels - 1 :: image.channels]
            if image.channels == 4 and alpha.size and alpha.min() >= 1.0:
                return image
        except Exception as exc:  # out of memory for the read, say: the preview is saved apart
            print(f"farm: frame not read back, preview saved apart ({exc})", file=sys.stderr,
                  flush=True)  # fmt: skip
        if image is not None:
            self.bpy.data.images.remove(image)
        return None

    def private(self, name: str) -> str:
        """`name` in the chunk's folder as only this run writes it (renamed into place after)."""
        return os.path.join(self.out_dir, f".{self.nonce}.{name}")

    def link(self, frame: str, preview: str) -> bool:
        """The frame's file under the preview's name too (a hard link, same bytes); False when
        the link cannot be made: the preview is then saved, and after a filesystem refused one,
        no frame is read back for a link again."""
        try:
            os.link(frame, preview)
            return True
        except OSError as exc:
            self.can_link = False
            print(f"farm: previews saved apart, no link ({exc})", file=sys.stderr, flush=True)
            return False

    def save_preview(self, scene: Any, result: Any, path: str) -> None:
        """The same render as PNG with the scene's view transform applied once (for the video)."""
        image = scene.render.image_settings
        kept = {k: getattr(image, k) for k in ("file_format", "color_mode", "color_depth")}
        managed = getattr(image, "color_management", None)
        try:
            image.file_format = "PNG"
            image.color_mode = "RGB"
            image.color_depth = self.preview_depth
            if managed is not None:
                image.color_management = "FOLLOW_SCENE"
            result.save_render(path, scene=scene)
        finally:
            for key, value in kept.items():
                setattr(image, key, value)
            if managed is not None:
                image.color_management = managed

    def save_thumbnail(self, frame: int, preview: str, path: str, loaded: Any = None) -> bool:
        """The preview scaled to THUMB_WIDTH as a JPEG at `path`, made here where the pixels
        already are (an ffmpeg per frame costs a tenth of a small frame's CPU); False when it
        cannot be made: a thumbnail is a convenience, never part of the frame. `loaded`: the
        preview already read (the caller removes it)."""
        bpy = self.bpy
        image = None
        try:
            image = (
                loaded
                if loaded is not None
                else bpy.data.images.load(preview, check_existing=False)
            )
            width, height = image.size
            if width > THUMB_WIDTH:
                image.scale(THUMB_WIDTH, max(2, round(height * THUMB_WIDTH / width / 2) * 2))
            image.file_format = "JPEG"
            image.filepath_raw = path
            image.save(quality=80)  # the display-referred bytes as they are, no second transform
            return True
        except (RuntimeError, TypeError, ValueError) as exc:
            print(f"farm: no thumbnail of frame {frame}: {exc}", file=sys.stderr, flush=True)
            return False
        finally:
            if image is not None and loaded is None:
                bpy.data.images.remove(image)


def finish(code: int) -> None:
    """Leave without Blender's own teardown: every frame is written and closed by now, and bpy
    4.5's static destructors can hang forever at exit (a condition variable destroyed while its
    sound-device thread still waits on it), which would hold the chunk's lease for good."""
    flush_c_output()  # os._exit does not flush them
    os._exit(code)


def flush_c_output() -> None:
    """Python's streams, then the C stdio buffers Blender's own log lines wait in."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    try:
        main(sys.argv)
    except ChunkFailed as exc:
        print(f"FARM-ERROR {exc}", file=sys.stderr, flush=True)
        finish(EXIT_FAILED)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        print(f"FARM-ERROR {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        finish(EXIT_FAILED)
    finish(0)

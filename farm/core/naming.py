"""The names `farm fetch --frames` gives a job's frames: the scene's own Output path with
Blender's rules for `#` and file extensions, placed under the frames folder and never above it
(pure)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from farm.core import keys
from farm.core.spec import JobSpec

DEFAULT_DIGITS = 4
"""Blender appends the frame number in 4 digits to an Output path with no `#` in its file name."""

IMAGE_EXTENSIONS = frozenset({
    ".bmp", ".cin", ".dds", ".dpx", ".exr", ".hdr", ".j2c", ".jp2", ".jpeg", ".jpg", ".pdd",
    ".png", ".psb", ".psd", ".rgb", ".rgba", ".sgi", ".tga", ".tif", ".tiff", ".tx", ".webp",
})  # fmt: skip
"""bpy.path.extensions_image of Blender 4.5: an Output path ending in one of these has it
replaced by the format's own, not doubled (`beauty_####.png` saved as EXR: `beauty_0001.exr`)."""

_SAME_FORMAT = {".jpg": (".jpg", ".jpeg"), ".tif": (".tif", ".tiff")}
"""Extensions Blender takes as the format's own besides the one it writes."""

MAX_PART_BYTES = 255
"""The longest file or folder name most filesystems take (NAME_MAX)."""

_HASHES = re.compile(r"#+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:$")
_STORED_MASTER = re.compile(r"frame_(-?\d+)\.[^/]+")


class NamingError(ValueError):
    """An Output path that gives no usable name under the frames folder."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputPattern:
    """The scene's Output path and its File Extensions switch, as saved in the .blend."""

    path: str
    use_extension: bool = True

    @classmethod
    def of_spec(cls, spec_json: str | None) -> OutputPattern | None:
        """The pattern a job recorded at submit (its spec's scene), None for a job submitted
        before the farm recorded one, or one with no scene (a transcode)."""
        if not spec_json:
            return None
        scene = JobSpec.from_json(json.loads(spec_json)).scene
        if scene is None or scene.output_path is None:
            return None
        return cls(path=scene.output_path, use_extension=scene.file_extension)


def frame_path(pattern: OutputPattern, frame: int, extension: str) -> str:
    """What Blender names `frame` of a scene with this Output path saving files with
    `extension` (`.exr`), as scene.render.frame_path(frame=...) does: the last run of `#` in
    the file name is the frame number padded to the run's length (`-0005` for frame -5 in four
    `#`), or four digits are appended where the file name has none; the extension added when
    the scene adds one, replacing an image extension of another format. `\\` is a folder
    separator, as Blender reads it."""
    head, sep, name = pattern.path.replace("\\", "/").rpartition("/")
    if "#" not in name:
        name += "#" * DEFAULT_DIGITS
    run = list(_HASHES.finditer(name))[-1]
    digits = run.end() - run.start()
    number = ("-" if frame < 0 else "") + f"{abs(frame):0{digits}d}"
    name = name[: run.start()] + number + name[run.end() :]
    if pattern.use_extension:
        name = _with_extension(name, extension)
    return head + sep + name


def _with_extension(name: str, extension: str) -> str:
    lower = name.lower()
    if lower.endswith(_SAME_FORMAT.get(extension.lower(), (extension.lower(),))):
        return name
    stem, dot, suffix = name.rpartition(".")
    if dot and f".{suffix.lower()}" in IMAGE_EXTENSIONS:
        return stem + extension
    return name + extension


def placed(name: str) -> PurePosixPath:
    """`name` (frame_path's) as a path inside the frames folder, never above it: `//` (the
    .blend's folder) and a plain relative path keep their folders, `..` going no higher than the
    frames folder; an absolute path (`/mnt/renders/shot010/beauty_0001.exr`, `C:/renders/...`,
    Blender's default `/tmp/0001.png`) keeps its file name alone. Control characters become `_`.
    NamingError where no usable name is left."""
    relative = name.startswith("//")
    parts = name.removeprefix("//").split("/")
    absolute = not relative and (name.startswith("/") or bool(_DRIVE.match(parts[0])))
    kept: list[str] = []
    for part in parts[1:] if absolute else parts:
        if part in ("", "."):
            continue
        if part == "..":
            if kept:
                kept.pop()
            continue
        kept.append(_CONTROL.sub("_", part))
    if absolute:  # a place on the artist's machine: the name is the scene's, not the place
        kept = kept[-1:]
    if not kept:
        raise NamingError(f"{name!r} names no file")
    for part in kept:
        if len(part.encode("utf-8", "surrogateescape")) > MAX_PART_BYTES:
            raise NamingError(f"{part[:40]!r}... is longer than {MAX_PART_BYTES} bytes")
    return PurePosixPath(*kept)


@dataclass(frozen=True, slots=True, kw_only=True)
class Named:
    """The files to fetch, each with its place in the frames folder, and a line for the user
    where the frames keep the farm's own names (or None)."""

    files: list[tuple[str, PurePosixPath]]
    note: str | None = None


def scene_named(
    job_id: str, pattern: OutputPattern | None, files: Sequence[tuple[str, PurePosixPath]]
) -> Named:
    """`files` (farm.control.jobs.frame_files) with each frame's master renamed as the scene's
    Output path names it; File Output files as they are. Where the job recorded no pattern, or
    the pattern gives a name that cannot be used or two files one place, every file keeps the
    farm's name and the note says why: nothing is written over."""
    masters = keys.masters_prefix(job_id)
    if not any(key.startswith(masters) for key, _ in files):
        return Named(files=list(files))
    stored = "frames named as the farm stores them (frame_000019.exr)"
    if pattern is None:
        return Named(
            files=list(files),
            note=f"{stored}: job {job_id} was submitted before the farm recorded the "
            "scene's output path",
        )
    renamed: list[tuple[str, PurePosixPath]] = []
    frames: list[PurePosixPath] = []
    others: list[PurePosixPath] = []
    try:
        for key, path in files:
            frame = _master_frame(key, masters)
            if frame is None:
                others.append(path)
            else:
                path = placed(frame_path(pattern, frame, path.suffix))
                frames.append(path)
            renamed.append((key, path))
    except NamingError as exc:
        return Named(files=list(files), note=f"{stored}: the scene's output path {_shown(pattern)} "
                     f"gives no usable file name ({exc})")  # fmt: skip
    if clash := _clash(frames, others):
        return Named(files=list(files), note=f"{stored}: the scene's output path "
                     f"{_shown(pattern)} puts two files at {clash}")  # fmt: skip
    return Named(files=renamed)


def _master_frame(key: str, masters: str) -> int | None:
    if not key.startswith(masters):
        return None
    if placed_in := keys.in_frame_folder(key, masters):
        return placed_in[0]
    found = _STORED_MASTER.fullmatch(PurePosixPath(key).name)
    return int(found[1]) if found else None  # stored before frame folders: frame_000012.exr


def _clash(renamed: Sequence[PurePosixPath], others: Sequence[PurePosixPath]) -> str | None:
    """A place a renamed frame would share with another file, or a folder it needs that is
    another's file (or the reverse); compared as a case-insensitive disk (macOS, Windows)
    compares names. Clashes among the other files alone are not the pattern's doing."""
    files = {_fold(p) for p in others}
    folders = {_fold(f) for p in (*renamed, *others) for f in _folders(p)}
    for path in renamed:
        name = _fold(path)
        if name in files or name in folders:
            return path.as_posix()
        files.add(name)
    for path in renamed:
        for folder in _folders(path):
            if _fold(folder) in files:
                return folder.as_posix()
    return None


def _folders(path: PurePosixPath) -> list[PurePosixPath]:
    return [p for p in path.parents if p != PurePosixPath(".")]


def _fold(path: PurePosixPath) -> str:
    return path.as_posix().casefold()


def _shown(pattern: OutputPattern) -> str:
    return repr(_CONTROL.sub("?", pattern.path))

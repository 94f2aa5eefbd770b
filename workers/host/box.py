"""The boxes a chunk's Blender and the worker's ffmpeg and ffprobe run in, from the worker's
settings and what this host's bwrap can do (farm.adapters.boxes tries it and builds media_box, the
one the submit's probe of a master uses too; farm.adapters.sandbox builds the argv,
farm.adapters.proc runs it).

`sandbox = "bwrap"` (the default) refuses to render or encode when bwrap is missing: an untrusted
scene or master never meets Blender or ffmpeg unboxed unless the settings say `off` explicitly.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import stat
from pathlib import Path

from farm.adapters.boxes import box_fault, host_box, installed_bwrap
from farm.adapters.boxes import media_box as media_box
from farm.adapters.boxes import tmpfs_cap as tmpfs_cap
from farm.adapters.boxes import userns_cap as userns_cap
from farm.adapters.sandbox import Box, program_dirs
from farm.adapters.settings import Settings
from farm.core.errors import ConfigError, PermanentError

log = logging.getLogger(__name__)


def render_box(
    settings: Settings, *, workspace: Path, out_dir: Path, scene: Path, tree: bool
) -> Box | None:
    """Writable: the workspace (HOME: the chunk's, or a warm Blender's for its job) and the
    output folder; readable: the scene (its whole asset tree when `tree`) and the program's own
    files. None when the box is turned off."""
    if settings.sandbox == "off":
        log.warning("rendering without a box (FARM_SANDBOX=off): the scene can reach this host")
        return None
    bwrap = installed_bwrap()
    program = shutil.which(settings.blender) or settings.blender
    (workspace / "tmp").mkdir(
        parents=True, exist_ok=True
    )  # TMPDIR inside (farm.adapters.sandbox.wrap)
    return host_box(
        bwrap,
        writable=(workspace, out_dir),
        readable=(scene.parent if tree else scene, *program_dirs(program)),
    )


def check_host(settings: Settings, queues: list[str], bwrap: str | None = None) -> None:
    """A worker that would run Blender or ffmpeg without a box, or on a host where no box can
    be made, refuses to start (ConfigError), rather than failing each chunk it takes (and with
    them the farm's jobs). Every queue boxes its program: render Blender, encode and stitch
    ffmpeg. `bwrap`: the one to check (default: the one on PATH)."""
    if not queues or settings.sandbox != "bwrap":
        return
    bwrap = bwrap or shutil.which("bwrap")
    if bwrap is None:
        raise ConfigError(
            "bwrap is not installed, so this worker will not run untrusted scenes or masters: "
            "install bubblewrap (apt-get install bubblewrap), or set FARM_SANDBOX=off on a host "
            "that only takes scenes and masters you trust"
        )
    trial = host_box(bwrap)  # a box as a chunk gets one
    said = box_fault(trial)
    if said:
        raise ConfigError(
            f"bwrap cannot make a box on this host ({said[-300:]}), so this worker would fail "
            "every scene: in a container, run it as docker-compose.yml does (docker: "
            "--security-opt seccomp=unconfined --security-opt apparmor=unconfined "
            "--security-opt systempaths=unconfined; Kubernetes: seccompProfile Unconfined and "
            "procMount: Unmasked, with the pod's hostUsers: false; the box takes their place), "
            "or set FARM_SANDBOX=off on a host that only takes scenes and masters you trust"
        )
    if not trial.tmpfs_bytes:
        log.warning("this bwrap has no --size (bubblewrap 0.7+): the box's /tmp is not capped")
    if not trial.no_userns:
        log.warning(
            "this bwrap has no --disable-userns (bubblewrap 0.8+): a scene's code could make "
            "user namespaces inside the box"
        )


_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_boxed(path: Path) -> io.BufferedReader:
    """A file the box wrote, opened as what it is now: never through a symlink, and only a
    regular file. A trusted scene's script could otherwise swap a frame it announced for a link
    to a host file (the farm's config) before the upload, or for a FIFO that blocks the reader.
    Read the size, checksum and bytes from this one open file."""
    return _regular(os.open(path, _FILE), path.name)


def open_boxed_under(folder: Path, rel: str) -> io.BufferedReader:
    """`open_boxed` of `folder/rel`, where `folder` and the folders of `rel` are the box's too:
    each is opened in turn, never through a symlink, so one swapped for a link to a host folder
    after the file was announced is refused rather than followed. `folder`'s parent is the
    worker's own."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise PermanentError(f"{rel!r} is not a plain path in the chunk's folder")
    try:
        fd = os.open(folder, _FOLDER)
        try:
            for part in parts[:-1]:
                inner = os.open(part, _FOLDER, dir_fd=fd)
                os.close(fd)
                fd = inner
            leaf = os.open(parts[-1], _FILE, dir_fd=fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise PermanentError(
            f"{rel} in the chunk's folder cannot be read as a file: {exc.strerror}"
        ) from exc
    return _regular(leaf, rel)


def _regular(fd: int, name: str) -> io.BufferedReader:
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PermanentError(f"{name} in the chunk's folder is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise

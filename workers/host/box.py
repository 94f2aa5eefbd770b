"""The boxes a chunk's Blender and the worker's ffmpeg and ffprobe run in, from the worker's
settings and what this host's bwrap can do (farm.adapters.sandbox builds the argv,
farm.adapters.proc runs it).

`sandbox = "bwrap"` (the default) refuses to render or encode when bwrap is missing: an untrusted
scene or master never meets Blender or ffmpeg unboxed unless the settings say `off` explicitly.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import shutil
import stat
from pathlib import Path

from farm.adapters import proc
from farm.adapters.sandbox import (
    SYSTEM_DIRS,
    TMPFS_BYTES,
    Box,
    gpu_devices,
    program_dirs,
    tmpfs_trial,
    userns_trial,
    wrap,
)
from farm.adapters.settings import Settings
from farm.core.errors import ConfigError, PermanentError

log = logging.getLogger(__name__)

TRIAL_TIMEOUT_S = 30.0
"""A box around `true` starts in milliseconds; one still not done by then will not be."""


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


def media_box(
    settings: Settings,
    *,
    writable: tuple[Path, ...] = (),
    readable: tuple[Path, ...] = (),
    gpu: bool = False,
) -> Box | None:
    """The box the worker's ffmpeg and ffprobe run in: a master is untrusted like a scene (a
    crafted file aimed at a demuxer's bugs), and segments and frames are made from untrusted
    input. Writable: the step's own folder (HOME; the output goes there); readable: its inputs
    (the master's local copy, the frames, the segments); `gpu`: the GPUs, for NVENC alone. No
    network. None when the box is turned off (FARM_SANDBOX=off): the whitelists on every input
    (farm.media.probe) still keep ffmpeg to local files, the master to its own file."""
    if settings.sandbox == "off":
        return None
    found = (shutil.which(p) for p in (settings.ffmpeg, settings.ffprobe))
    folders = {Path(p).resolve().parent for p in found if p}
    # A build of its own (/srv/ffmpeg/bin) is read there; the system's are in the box already.
    own = sorted(d for d in folders if not any(d.is_relative_to(s) for s in SYSTEM_DIRS))
    return host_box(installed_bwrap(), writable=writable, readable=(*readable, *own), gpu=gpu)


def installed_bwrap() -> str:
    """The bwrap on PATH; PermanentError (the chunk fails, saying what to do) when there is none."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise PermanentError(
            "bwrap is not installed, so this worker will not run a scene or read a master: "
            "install bubblewrap (apt-get install bubblewrap), or set FARM_SANDBOX=off on a host "
            "that only takes scenes and masters you trust"
        )
    return bwrap


def host_box(
    bwrap: str,
    *,
    writable: tuple[Path, ...] = (),
    readable: tuple[Path, ...] = (),
    gpu: bool = True,
) -> Box:
    """A box over these folders with what this host's bwrap can do: its GPUs (unless not
    `gpu`), a capped /tmp, no user namespaces inside."""
    return Box(
        writable=writable, readable=readable, devices=gpu_devices() if gpu else (), bwrap=bwrap,
        tmpfs_bytes=tmpfs_cap(bwrap), no_userns=userns_cap(bwrap),
    )  # fmt: skip


@functools.cache
def userns_cap(bwrap: str) -> bool:
    """Whether this bwrap can keep a box from making user namespaces (Box.no_userns)."""
    return proc.capture(userns_trial(bwrap), TRIAL_TIMEOUT_S).returncode == 0


@functools.cache
def tmpfs_cap(bwrap: str) -> int:
    """TMPFS_BYTES where this bwrap can cap a tmpfs (`--size`, bubblewrap 0.7 and later), else 0:
    Ubuntu 22.04's 0.6 would refuse every box with it."""
    return TMPFS_BYTES if proc.capture(tmpfs_trial(bwrap), TRIAL_TIMEOUT_S).returncode == 0 else 0


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
    # A box as a chunk gets one, around `true`: a container without the rights bwrap needs
    # (Docker's default seccomp and AppArmor profiles refuse its namespaces) fails here.
    trial = host_box(bwrap)
    try:
        done = proc.capture(wrap(["true"], trial), TRIAL_TIMEOUT_S)
        said = done.stderr.strip() or f"exit {done.returncode}"
    except (OSError, PermanentError, proc.Timeout) as exc:  # PermanentError: bwrap is gone
        done, said = None, str(exc)
    if done is None or done.returncode != 0:
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

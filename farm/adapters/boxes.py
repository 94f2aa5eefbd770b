"""The boxes this machine can make: its bwrap found, and what it can do tried once (the argv is
built by farm.adapters.sandbox, run by farm.adapters.proc). Shared by the worker
(workers.host.box) and the submit's probe of a master (farm.media.probe.submit_box); it lives
apart from sandbox because proc, which runs the trials, imports sandbox.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from farm.adapters import proc
from farm.adapters.sandbox import (
    SYSTEM_DIRS,
    TMPFS_BYTES,
    Box,
    gpu_devices,
    tmpfs_trial,
    userns_trial,
    wrap,
)
from farm.adapters.settings import Settings
from farm.core.errors import PermanentError

TRIAL_TIMEOUT_S = 30.0
"""A box around `true` starts in milliseconds; one still not done by then will not be."""


def media_box(
    settings: Settings,
    *,
    writable: tuple[Path, ...] = (),
    readable: tuple[Path, ...] = (),
    gpu: bool = False,
    programs: tuple[str, ...] = (),
) -> Box | None:
    """The box ffmpeg and ffprobe run in: a master is untrusted like a scene (a crafted file
    aimed at a demuxer's bugs), and segments and frames are made from untrusted input.
    Writable: the step's own folder (HOME; the output goes there); readable: its inputs (the
    master, the frames, the segments); `gpu`: the GPUs, for NVENC alone; `programs`: binaries
    run in it besides the ffmpeg and ffprobe settings name (the VMAF ffmpeg). No network. None when
    the box is turned off (FARM_SANDBOX=off): the whitelists on every input (farm.media.probe)
    still keep ffmpeg to local files, the master to its own file."""
    if settings.sandbox == "off":
        return None
    found = (shutil.which(p) for p in (settings.ffmpeg, settings.ffprobe, *programs))
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


def box_fault(box: Box) -> str:
    """Why bwrap cannot make `box` on this machine, in its own words ('' when it can): `box`
    around `true`. A container without the rights bwrap needs (Docker's default seccomp and
    AppArmor profiles refuse its namespaces) fails here, as would every program put in it."""
    try:
        done = proc.capture(wrap(["true"], box), TRIAL_TIMEOUT_S)
    except (OSError, PermanentError, proc.Timeout) as exc:  # PermanentError: bwrap is gone
        return str(exc) or type(exc).__name__
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@functools.cache
def userns_cap(bwrap: str) -> bool:
    """Whether this bwrap can keep a box from making user namespaces (Box.no_userns)."""
    return proc.capture(userns_trial(bwrap), TRIAL_TIMEOUT_S).returncode == 0


@functools.cache
def tmpfs_cap(bwrap: str) -> int:
    """TMPFS_BYTES where this bwrap can cap a tmpfs (`--size`, bubblewrap 0.7 and later), else 0:
    Ubuntu 22.04's 0.6 would refuse every box with it."""
    return TMPFS_BYTES if proc.capture(tmpfs_trial(bwrap), TRIAL_TIMEOUT_S).returncode == 0 else 0

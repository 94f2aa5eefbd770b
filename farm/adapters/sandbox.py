"""The box a scene's program runs in: bubblewrap (`bwrap`) around an argv, built purely (it is run
by farm.adapters.proc, the one place that runs programs).

A .blend is untrusted: inside the box the system is read-only, only the chunk's own folders are
writable, the job's asset tree is read-only, there is no network, no farm file (config, secrets,
other jobs) is visible and the environment carries no farm credential.
"""

from __future__ import annotations

import functools
import glob
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/sys")
"""Read-only inside the box: programs, libraries, fonts, certificates, GPU discovery (/sys)."""
GPU_DEVICES = ("/dev/nvidia*", "/dev/dri")
ENV_ALLOWED = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
)
"""Variables a child may inherit (farm.adapters.proc uses the same list for every child)."""
TMPFS_BYTES = 256 * 1024 * 1024
"""Cap on the box's RAM-backed /tmp and /run (each): a script filling them would take the host's
memory. Blender's and Python's temporary files go to TMPDIR, on disk in the box's home."""
HIDDEN = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers")
"""Files in the system dirs a worker running as root could read (their owner's bits): empty
inside the box, with every other file and folder of /etc that not everyone may read
(`private_system_paths`)."""
ENV_FORBIDDEN = ("FARM_", "AWS_", "REDIS", "CELERY", "FLOWER")
"""Prefixes never passed on, whatever the caller asks: these carry the farm's credentials."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Box:
    """Where a boxed program may read and write. Paths are made absolute when the argv is built."""

    writable: tuple[Path, ...]
    """The folders it may write: the chunk's workspace, or for a warm Blender (workers.host.warm) its
    job's on this worker, and the job's frames folder; the first is HOME."""
    readable: tuple[Path, ...] = ()
    """The job's asset tree or scene, and the program's own files (the render script)."""
    devices: tuple[str, ...] = ()
    """Device nodes passed through (GPUs); see `gpu_devices`."""
    bwrap: str = "bwrap"
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra variables for the program (filtered like the inherited ones)."""
    tmpfs_bytes: int = TMPFS_BYTES
    """Cap on /tmp and /run; 0: none (a bwrap before 0.7 has no --size; see `tmpfs_trial`)."""
    no_userns: bool = False
    """Keep the program from making user namespaces of its own (`--disable-userns`, bubblewrap
    0.8 and later; see `userns_trial`): with one, code run by a crafted scene holds every
    capability again inside it, the usual first step of a kernel exploit."""


def minimal_env(source: Mapping[str, str], home: str = "") -> dict[str, str]:
    """The allowlisted part of `source`, never a farm credential; HOME set when given."""
    env = {k: v for k, v in source.items() if k in ENV_ALLOWED and not forbidden(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    if home:
        env["HOME"] = home
    return env


def forbidden(name: str) -> bool:
    return any(name.upper().startswith(prefix) for prefix in ENV_FORBIDDEN)


def gpu_devices() -> tuple[str, ...]:
    """The GPU device nodes of this host (none on a CPU host)."""
    return tuple(sorted(p for pattern in GPU_DEVICES for p in glob.glob(pattern)))


def program_dirs(argv0: str) -> tuple[Path, ...]:
    """What the program itself needs to read: this Python's prefixes (the bpy wheel and the render
    script run under it) and the folder of the program when it lives outside the system dirs."""
    # The render script's folder only, not the whole checkout: a data dir inside it holds secrets.
    dirs = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(__file__).resolve().parents[1] / "blender",
    }
    program = Path(argv0)
    if program.is_absolute():
        dirs.add(program.resolve().parent)
    return tuple(sorted(dirs))


def wrap(argv: Sequence[str], box: Box, environ: Mapping[str, str] | None = None) -> list[str]:
    """`argv` run inside bwrap with `box`'s folders and no network. `environ`: what the minimal
    environment is taken from (default: this process's)."""
    home = str(Path(box.writable[0]).absolute()) if box.writable else "/tmp"
    env = minimal_env(os.environ if environ is None else environ, home)
    if box.writable:  # temporary files on disk, in the box's home (render_box makes the folder)
        env["TMPDIR"] = f"{home}/tmp"
    env.update({k: v for k, v in box.env.items() if not forbidden(k)})
    # No capability inside, even for a worker running as root: with them a trusted scene's
    # script could remount the read-only system and its tree writable.
    out = [box.bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--clearenv"]  # fmt: skip
    if box.no_userns:
        out[2:2] = ["--unshare-user", "--disable-userns"]
    for name, value in sorted(env.items()):
        out += ["--setenv", name, value]
    out += ["--dev", "/dev", "--proc", "/proc"]
    for folder in ("/tmp", "/run"):
        out += [*(["--size", str(box.tmpfs_bytes)] if box.tmpfs_bytes else []), "--tmpfs", folder]
    for device in box.devices:
        out += ["--dev-bind-try", device, device]
    mounts: list[tuple[str, str]] = [("--ro-bind-try", d) for d in SYSTEM_DIRS]
    mounts += [("--ro-bind", str(Path(p).absolute())) for p in box.readable]
    mounts += [("--bind", str(Path(p).absolute())) for p in box.writable]
    # Parents before children, so a writable folder inside a read-only tree stays writable.
    for flag, path in sorted(mounts, key=lambda m: (m[1].count("/"), m[1])):
        out += [flag, path, path]
    files, folders = private_system_paths()
    for secret in sorted({*filter(os.path.exists, HIDDEN), *files}):
        out += ["--ro-bind", "/dev/null", secret]  # bwrap cannot make one in a read-only /etc
    for folder in folders:
        out += ["--tmpfs", folder, "--remount-ro", folder]
    out += ["--chdir", home, "--", *argv]
    return out


@functools.cache
def private_system_paths(root: str = "/etc") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The files and folders under `root` that not everyone may read (a Redis config with its
    password, TLS private keys, shadow's backups, a database's access rules): a worker running
    as root, or in their group, could, so inside the box they are empty. Read once a process."""
    files: list[str] = []
    folders: list[str] = []
    for here, subdirs, names in os.walk(root, onerror=lambda _: None):
        for name in list(subdirs):
            path = os.path.join(here, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) and mode & 0o005 != 0o005:  # not everyone may list or enter
                folders.append(path)
                subdirs.remove(name)
        for name in names:
            path = os.path.join(here, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) and not mode & 0o004:
                files.append(path)
    return tuple(sorted(files)), tuple(sorted(folders))


def userns_trial(bwrap: str) -> list[str]:
    """A box around `true` that makes no user namespaces inside: it exits 0 where this bwrap
    can keep a box from making them (Box.no_userns; workers.host.box runs it)."""
    return [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--ro-bind", "/", "/",
            "true"]  # fmt: skip


def tmpfs_trial(bwrap: str) -> list[str]:
    """A box around `true` with a capped tmpfs: it exits 0 where this bwrap has `--size`
    (bubblewrap 0.7 and later; Box.tmpfs_bytes; workers.host.box runs it)."""
    return [bwrap, "--size", "1", "--tmpfs", "/tmp", "--ro-bind", "/", "/", "true"]


def unwrapped_returncode(returncode: int) -> int:
    """bwrap exits 128+N when the program inside died of signal N: give it back as -N, as the
    program run unboxed would have (a crash reads SIGSEGV, the OOM killer SIGKILL). bwrap's own
    death by a signal (a stop) is already negative."""
    if 128 < returncode < 128 + 65:
        return -(returncode - 128)
    return returncode

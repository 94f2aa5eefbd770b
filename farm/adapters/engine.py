"""The container engine the farm's images are built and run with: podman (Debian's, with runc and
the project's containers.conf) or Docker where an engine answers, and the compose beside it.

Every engine command goes through farm.adapters.proc; a failure is a ContainerError (exit 2) carrying the
engine's own last lines, so the CLI prints them and exits 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from farm.adapters import proc
from farm.core.errors import ContainerError, PermanentError

ROOT = Path(__file__).resolve().parents[2]
"""The checkout farm runs from: docker-compose.yml, the Dockerfiles and containers.conf."""
CONTAINERS_CONF = ROOT / "infra/containers/containers.conf"
INSTALL_HINT = (
    "install podman, runc and podman-compose (apt-get install podman runc; "
    "pip install podman-compose), or Docker with its compose plugin"
)


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    """podman or docker."""
    binary: str
    compose_argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, *args]

    def capture(self, *args: str, timeout_s: float = 120.0) -> proc.CompletedProcess[str]:
        try:
            return proc.capture(self.argv(*args), timeout_s=timeout_s, env=self.env)
        except proc.Timeout as exc:
            what = f"{self.name} {' '.join(args[:2])}"
            raise ContainerError(f"`{what}` took over {timeout_s:.0f} s") from exc
        except PermanentError as exc:
            raise ContainerError(f"{exc}: {INSTALL_HINT}") from exc

    def check(self, *args: str, what: str = "", timeout_s: float = 120.0) -> str:
        """Run `args`; its stdout, or a ContainerError with the engine's own words."""
        done = self.capture(*args, timeout_s=timeout_s)
        if done.returncode != 0:
            raise ContainerError(
                f"{what or self.name + ' ' + args[0]} failed: {_last(done.stderr)}"
            )
        return str(done.stdout)

    def stream(
        self, argv: Sequence[str], *, what: str, log_path: Path, on_line: Callable[[str], None]
    ) -> None:
        """Run a long command (a build, compose up), each line to `on_line` and the log; a
        failure says `what` failed and shows the command's last lines."""
        try:
            result = proc.run(argv, on_line=on_line, log_path=log_path, env=self.env)
        except PermanentError as exc:
            raise ContainerError(f"{exc}: {INSTALL_HINT}") from exc
        if result.returncode != 0:
            errors = [ln for ln in result.tail if "error" in ln.lower() and not _NOISE.search(ln)]
            tail = "\n  ".join((errors or result.tail)[-12:])
            raise ContainerError(f"{what} failed (exit {result.returncode}; {log_path}):\n  {tail}")

    def image_info(self, ref: str) -> dict[str, object]:
        """`image inspect` of `ref`; empty where there is no such image."""
        done = self.capture("image", "inspect", ref)
        return _first(done.stdout) if done.returncode == 0 else {}

    def image_exists(self, ref: str) -> bool:
        return bool(self.image_info(ref))

    def inspect(self, name: str) -> dict[str, object]:
        return _first(self.check("inspect", name))


def _first(text: str) -> dict[str, object]:
    """The first object of an `inspect`'s JSON list."""
    raw = json.loads(text or "[]")
    return dict(raw[0]) if raw else {}


_NOISE = re.compile(r"systemd connection|healthcheck timer|Removing timer for container")
"""What podman says on every command on a host without systemd (its healthcheck timers): never
the error a person needs to see."""


def _last(text: str, lines: int = 6) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip() and not _NOISE.search(ln)]
    kept = kept[-lines:]
    return "\n  ".join(kept) or "(no output)"


def find(prefer: str = "") -> Engine:
    """podman with runc and the project's containers.conf, else a Docker whose engine answers.
    `prefer` ("podman", "docker"; default $FARM_ENGINE) picks one."""
    prefer = prefer or os.environ.get("FARM_ENGINE", "")
    # Never the caller's FARM_* variables: compose would take them over the farm's env file.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env = {**clean, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    here = Path(sys.executable).parent
    podman = shutil.which("podman")
    if podman and prefer in ("", "podman"):
        if not shutil.which("runc"):
            raise ContainerError(
                "podman needs runc here (crun refuses hybrid cgroups): apt-get install runc"
            )
        compose = shutil.which("podman-compose") or shutil.which("podman-compose", path=str(here))
        if not compose:
            raise ContainerError("podman-compose is not installed: pip install podman-compose")
        return Engine("podman", podman, (compose,), env)
    docker = shutil.which("docker")
    if docker and prefer in ("", "docker"):
        engine = Engine("docker", docker, (docker, "compose"), clean)
        if engine.capture("info", "--format", "{{.ServerVersion}}", timeout_s=20).returncode == 0:
            return engine
        raise ContainerError(
            f"docker is installed but no Docker engine answers (`docker info` fails): start it, or {INSTALL_HINT}"
        )
    raise ContainerError(
        f"no container engine{f' {prefer!r}' if prefer else ''} found: {INSTALL_HINT}"
    )


def nvidia_gpu() -> bool:
    """This host has an NVIDIA GPU (nvidia-smi lists one): compose's GPU reservation applies."""
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return proc.capture(["nvidia-smi", "-L"], timeout_s=20).returncode == 0
    except proc.Timeout:
        return False

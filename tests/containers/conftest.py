"""The container farm: docker-compose.yml run by `farm up --containers` (podman here), with the
images built by `make image` (cached: rebuilt only when their inputs change).

A missing engine fails the run with what to install; it never turns into a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT, LocalFarm, farm_env

PROJECT_CONF = ROOT / "infra/containers/containers.conf"


def podman(
    *args: str, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "CONTAINERS_CONF": str(PROJECT_CONF)},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} -> {result.returncode}\n{result.stderr}")
    return result


@dataclass
class ContainerFarm(LocalFarm):
    project: str = ""

    def container(self, service: str, number: int = 1) -> str:
        return f"{self.project}_{service}_{number}"

    def containers(self, service: str = "") -> list[str]:
        out = podman(
            "ps", "-a", "--filter", f"label=com.docker.compose.project={self.project}",
            "--format", "{{.Names}}",
        ).stdout.split()  # fmt: skip
        return sorted(n for n in out if not service or n.startswith(f"{self.project}_{service}_"))

    def inspect(self, name: str) -> dict[str, object]:
        return dict(json.loads(podman("inspect", name).stdout)[0])

    def worker_name(self, container: str) -> str:
        """The Celery name of the worker in `container` (farm@HOSTNAME, as `farm worker` says)."""
        config = self.inspect(container)["Config"]
        assert isinstance(config, dict)
        return f"farm@{config['Hostname']}"

    def logs(self) -> str:
        out = [super().logs()]
        for name in self.containers():
            tail = podman("logs", "--tail", "40", name, check=False)
            out.append(f"===== {name}\n{tail.stdout}{tail.stderr}")
        return "\n".join(out)


def require_engine() -> None:
    missing = [t for t in ("podman", "runc", "debootstrap") if not shutil.which(t)]
    if missing:
        pytest.fail(
            f"missing on this machine: {', '.join(missing)}; run `make setup` "
            "(apt-get install podman runc debootstrap)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def container_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerFarm]:
    """docker-compose.yml's farm, 2 worker containers, as `farm up --containers` starts it; short
    leases and no drain grace, as the process farm's tests run theirs."""
    require_engine()
    base = tmp_path_factory.mktemp("container-farm")
    config = base / "config.json"
    env = farm_env(config, FARM_SHUTDOWN_GRACE_S="0")
    farm = ContainerFarm(data=base / "data", config=config, env=env)
    # A cold image build (debootstrap, apt, the bpy wheel) takes minutes; cached, seconds.
    try:
        up = farm.farm(
            "up", "--containers", "--data", str(farm.data), "--workers", "2", timeout=1800
        )
        state = farm.data / "containers.json"
        if state.exists():
            farm.project = json.loads(state.read_text())["project"]
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{farm.logs()}"
        yield farm
    finally:
        from farm.control import containers

        containers.down(farm.data, volumes=True)


_WRITER = re.compile(r"\.c(\d+-\d+)[./]|/(\d{5})-(?:\w+-attempt\d+-)?claim(\d+)\.")
"""The claim an object's key names, as `CHUNK-CLAIM` (farm.core.keys.writer): frames, thumbnails,
frame folders and manifests (`.c0-3`); logs and segments (`00000-...claim3`)."""


def writer_of(key: str) -> str | None:
    """The claim (keys.writer) whose attempt wrote `key`; None for a key no claim names."""
    found = _WRITER.search(key)
    if found is None:
        return None
    return found[1] or f"{int(found[2])}-{found[3]}"


def job_objects(farm: LocalFarm, job_id: str) -> dict[str, tuple[int, str] | None]:
    """Every object of the job in the store: its size and ETag."""
    store = farm.store()
    return {key: store.head(key) for key in store.keys(f"jobs/{job_id}/")}

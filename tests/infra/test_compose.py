"""docker-compose.yml and the Dockerfile run real farm commands, safely, with healthchecks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; moto depends on it

from .commands import check_farm_argv
from .tfdoc import COMPOSE_FILE, DOCKERFILE, TERRAFORM_DIR

FARM_IMAGE_SERVICES = ("reconciler", "flower", "worker")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE_FILE.read_text()))


@pytest.fixture(scope="module")
def farm_cli() -> click.Group:
    try:
        from farm.cli.main import cli
    except ImportError as exc:
        pytest.fail(f"farm.cli.main.cli (the click group of `farm`) cannot be imported: {exc}")
    assert isinstance(cli, click.Group)
    return cli


def _dockerfile_json(instruction: str) -> list[str]:
    match = re.search(
        rf"^{instruction}\s+(?:.*\\\n\s*)?(?:CMD\s+)?(\[.*\])\s*$", DOCKERFILE.read_text(), re.M
    )
    assert match, f"no exec-form {instruction} in the Dockerfile"
    return list(yaml.safe_load(match.group(1)))


def farm_commands(compose: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(where, argv after `farm`) for every farm invocation in compose, Dockerfile, user data."""
    found: list[tuple[str, list[str]]] = []
    for name in FARM_IMAGE_SERVICES:
        service = compose["services"][name]
        found.append((f"compose {name} command", list(service["command"])))
        test = service["healthcheck"]["test"]
        if test[:2] == ["CMD", "farm"]:
            found.append((f"compose {name} healthcheck", list(test[2:])))
    assert _dockerfile_json("ENTRYPOINT") == ["farm"]
    found.append(("Dockerfile CMD", _dockerfile_json("CMD")))
    health = _dockerfile_json("HEALTHCHECK")
    assert health[0] == "farm"
    found.append(("Dockerfile HEALTHCHECK", health[1:]))
    worker = (TERRAFORM_DIR / "modules/workers/user-data.sh.tftpl").read_text()
    argv = re.search(r"\$\{image\} (worker .*)$", worker, re.M)
    assert argv
    line = argv.group(1).replace("${queues}", "render,encode,stitch").replace("%H", "host")
    found.append(("worker user data", line.split()))
    control = (TERRAFORM_DIR / "modules/control_plane/user-data.sh.tftpl").read_text()
    for unit, args in re.findall(r'^unit (\S+) "([^"]+)"$', control, re.M):
        args = args.replace("${metric_namespace}", "Farm").replace("${farm_name}", "farm")
        found.append((f"control plane {unit}", args.split()))
    return found


def test_every_farm_invocation_is_a_real_command(
    compose: dict[str, Any], farm_cli: click.Group
) -> None:
    problems = []
    for where, argv in farm_commands(compose):
        try:
            check_farm_argv(farm_cli, argv)
        except click.UsageError as exc:
            problems.append(f"{where}: farm {' '.join(argv)}: {exc.format_message()}")
    assert not problems, "\n".join(problems)


def test_the_argv_check_rejects_what_farm_would_reject() -> None:
    @click.group()
    def demo() -> None: ...

    @demo.command()
    @click.option("--port", type=int)
    def flower(port: int) -> None: ...

    assert check_farm_argv(demo, ["flower", "--port", "5555"]) == "farm flower"
    for bad in (["flower", "--prot", "1"], ["flower", "--port", "x"], ["flow"], []):
        with pytest.raises(click.UsageError):
            check_farm_argv(demo, bad)


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    """Every long-running service; a one-shot step is waited for by its exit code instead."""
    for name, service in compose["services"].items():
        if service.get("restart") == "no":
            waiting = [s["depends_on"][name]["condition"] for s in compose["services"].values()
                       if name in s.get("depends_on", {})]  # fmt: skip
            assert waiting == ["service_completed_successfully"] * len(waiting) != [], name
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_ports_are_published_on_loopback_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_redis_requires_a_password_and_appends(compose: dict[str, Any]) -> None:
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--requirepass") + 1].startswith("${FARM_REDIS_PASSWORD:?")
    assert command[command.index("--appendonly") + 1] == "yes"


def test_seaweedfs_image_is_pinned(compose: dict[str, Any]) -> None:
    image = compose["services"]["s3"]["image"]
    assert re.fullmatch(r"chrislusf/seaweedfs:\d+\.\d+", image), image


def test_worker_reserves_gpus_with_video_and_waits_out_a_spot_notice(
    compose: dict[str, Any],
) -> None:
    worker = compose["services"]["worker"]
    [device] = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert {"gpu", "video"} <= set(device["capabilities"])
    grace = re.fullmatch(r"(\d+)s", worker["stop_grace_period"])
    assert grace and int(grace.group(1)) >= 120
    assert "STOPSIGNAL SIGTERM" in DOCKERFILE.read_text()


def test_the_worker_container_caps_its_processes_where_the_box_cannot(
    compose: dict[str, Any],
) -> None:
    """A trusted scene's fork bomb stops at the container's cap, in compose and on AWS alike."""
    assert compose["services"]["worker"]["pids_limit"] == 4096
    user_data = (TERRAFORM_DIR / "modules/workers/user-data.sh.tftpl").read_text()
    assert "--cap-drop ALL --pids-limit 4096 " in user_data


def test_compose_uses_the_farm_settings_names(compose: dict[str, Any]) -> None:
    env = compose["x-farm-env"]
    expected = {"FARM_REDIS_URL", "FARM_S3_ENDPOINT", "FARM_S3_REGION", "FARM_S3_BUCKET"}
    assert expected | {"FARM_S3_ACCESS_KEY", "FARM_S3_SECRET_KEY"} <= set(env)
    flower = compose["services"]["flower"]["environment"]
    assert {"FARM_FLOWER_USER", "FARM_FLOWER_PASSWORD"} <= set(flower)


def test_every_seaweedfs_port_but_s3_wants_the_stores_certificate(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """Every container on the network reaches SeaweedFS's master, volume, filer and admin ports,
    HTTP and gRPC; the one-shot `s3-security` step writes, with `farm up`'s own code, the
    security.toml that makes each want the store's client certificate (and the filer and volume
    JWTs), into the volume the s3 service reads as $HOME. Only S3 is published."""
    services = compose["services"]
    s3, step = services["s3"], services["s3-security"]
    assert s3["depends_on"]["s3-security"]["condition"] == "service_completed_successfully"
    home = s3["environment"]["HOME"]
    [mount] = [v for v in s3["volumes"] if v.split(":")[1] == home]
    assert mount.endswith(":ro") and mount.split(":")[0] in compose["volumes"]
    command = step["command"]
    assert (
        command[0] == "store-security" and f"{mount.split(':')[0]}:{command[1]}" in step["volumes"]
    )
    assert step["network_mode"] == "none" and step["cap_drop"] == ["ALL"] and step["read_only"]
    assert str(step["environment"]["FARM_WEED_JWT_KEY"]).startswith("${FARM_WEED_JWT_KEY:?")
    assert "-ip=127.0.0.1" in s3["command"]  # the name on the store's certificate
    assert [str(p).rsplit(":", 1)[-1] for p in s3.get("ports", [])] == ["8333"]
    assert "expose" not in s3

    # The step itself, as the container runs it (its entrypoint is `farm`).
    key = "k" * 40
    done = subprocess.run(
        [sys.executable, "-m", "farm", *command[:1], str(tmp_path)],
        env={**os.environ, "FARM_WEED_JWT_KEY": key}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    toml = tomllib.loads((tmp_path / ".seaweedfs" / "security.toml").read_text())
    assert {"master", "volume", "filer", "s3", "admin", "client"} <= set(toml["grpc"])
    assert {"master", "volume", "filer", "client"} <= set(toml["https"])
    assert (
        toml["jwt"]["signing"]["key"] == key and toml["jwt"]["filer_signing"]["read"]["key"] == key
    )
    for section in ("ca", "master", "client"):
        cert = toml["grpc"][section] if section == "ca" else toml["grpc"][section]["cert"]
        assert Path(cert).is_file() and Path(cert).parent == tmp_path / "tls"
    weak = subprocess.run(
        [sys.executable, "-m", "farm", "store-security", str(tmp_path / "x")],
        env={**os.environ, "FARM_WEED_JWT_KEY": "short"}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert weak.returncode != 0 and "openssl rand -hex 32" in weak.stderr

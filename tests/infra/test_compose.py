"""docker-compose.yml and the Dockerfile run real farm commands, safely, with healthchecks."""

from __future__ import annotations

import re
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
        from farm.cli import cli
    except ImportError as exc:
        pytest.fail(f"farm.cli.cli (the click group of `farm`) cannot be imported: {exc}")
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
    for name, service in compose["services"].items():
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


def test_compose_uses_the_farm_settings_names(compose: dict[str, Any]) -> None:
    env = compose["x-farm-env"]
    expected = {"FARM_REDIS_URL", "FARM_S3_ENDPOINT", "FARM_S3_REGION", "FARM_S3_BUCKET"}
    assert expected | {"FARM_S3_ACCESS_KEY", "FARM_S3_SECRET_KEY"} <= set(env)
    flower = compose["services"]["flower"]["environment"]
    assert {"FARM_FLOWER_USER", "FARM_FLOWER_PASSWORD"} <= set(flower)


def test_seaweedfs_filer_and_volume_ports_demand_jwts(compose: dict[str, Any]) -> None:
    """Every container on the network reaches SeaweedFS's filer and volume ports; reads and writes
    there need JWTs signed with a key only SeaweedFS holds, and only S3 is published."""
    s3 = compose["services"]["s3"]
    env = s3["environment"]
    for name in ("WEED_JWT_SIGNING_KEY", "WEED_JWT_SIGNING_READ_KEY",
                 "WEED_JWT_FILER_SIGNING_KEY", "WEED_JWT_FILER_SIGNING_READ_KEY"):  # fmt: skip
        assert str(env[name]).startswith("${FARM_WEED_JWT_KEY:?"), name
    assert [str(p).rsplit(":", 1)[-1] for p in s3.get("ports", [])] == ["8333"]
    assert "expose" not in s3

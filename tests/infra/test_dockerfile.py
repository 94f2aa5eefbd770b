"""workers/Dockerfile runs the Blender release the farm supports: the pinned bpy wheel, installed
from the wheelhouse `make image` makes, on a Debian 12 (bookworm) base given as a build argument."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from farm.control import images
from farm.core import versions

from .tfdoc import DOCKERFILE, REPO

TEXT = DOCKERFILE.read_text()


def _arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", TEXT, re.M)
    assert match, f"workers/Dockerfile has no ARG {name}=..."
    return match.group(1)


def _bpy() -> Requirement:
    """The bpy requirement in pyproject.toml: what the wheelhouse, and so the image, installs."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [bpy] = [r for r in map(Requirement, deps) if canonicalize_name(r.name) == "bpy"]
    return bpy


def _env(name: str) -> str:
    match = re.search(rf"^(?:ENV\s+|\s+){name}=(\S+?)(?:\s+\\)?$", TEXT, re.M)
    assert match, f"workers/Dockerfile sets no ENV {name}"
    return match.group(1)


def test_pinned_blender_is_the_release_the_farm_names() -> None:
    [spec] = _bpy().specifier
    assert (spec.operator, spec.version) == ("==", versions.BLENDER_RELEASE)


def test_pinned_blender_is_within_the_supported_range() -> None:
    release = versions.parse_version(versions.BLENDER_RELEASE)
    assert release[:2] >= versions.BLENDER_MIN_VERSION
    assert release[:2] <= versions.BLENDER_MAX_TESTED
    assert versions.is_supported(release)
    # The wheel is installed only where its marker holds: it must hold for the image's Python
    # (Debian 12's), which makes the wheelhouse.
    marker = _bpy().marker
    python = {"python_version": "{}.{}".format(*images.PYTHON)}
    assert marker is None or marker.evaluate({**python, "python_full_version": images.IMAGE_PYTHON})


def test_blender_is_the_bpy_wheel_from_the_wheelhouse() -> None:
    """No download at build time: pip takes every package, bpy among them, from the wheelhouse
    with no index, pinned by its requirements.txt, checks that bpy imports, and the farm runs
    Blender as the wheel (FARM_BLENDER=bpy), as on the local farm."""
    assert not re.search(r"\b(?:curl|wget)\b|^ADD\s+https?:", TEXT, re.M), "no downloads"
    assert "BLENDER_SHA256" not in TEXT and "download.blender.org" not in TEXT
    assert "COPY build/image/wheels/requirements.txt /opt/farm-requirements.txt" in TEXT
    assert "--mount=type=bind,source=build/image/wheels,target=/wheels" in TEXT
    install = re.search(r"/opt/farm/bin/pip install ([^\n]*\\\n[^\n]*)", TEXT)
    assert install, "no pip install of the requirements"
    args = install.group(1).replace("\\\n", " ").split()
    assert {"--no-index", "--find-links", "/wheels"} <= set(args)
    assert args[args.index("-r") + 1] == "/opt/farm-requirements.txt"
    assert "import bpy" in TEXT
    assert _env("FARM_BLENDER") == "bpy"


def test_base_image_is_a_build_argument_defaulting_to_debian_bookworm() -> None:
    """Debian 12: its Python is the 3.11 the bpy wheel is built for. `make image` passes BASE
    (a local debootstrap base, or the same registry image as this default)."""
    [base_from] = re.findall(r"^FROM (\S+)", TEXT, re.M)
    assert base_from == "${BASE}"
    assert TEXT.index("ARG BASE=") < TEXT.index("FROM ${BASE}")
    default = _arg("BASE")
    assert re.fullmatch(r"(?:docker\.io/library/)?debian:bookworm(?:-slim)?", default), default
    assert default == images.REGISTRY_BASE
    assert images.PYTHON == (3, 11) and images.IMAGE_PYTHON.startswith("3.11.")
    for image in images.IMAGES:  # redis and SeaweedFS are built from the same base
        text = (REPO / image.dockerfile).read_text()
        assert f"ARG BASE={default}\nFROM ${{BASE}}\n" in text, image.dockerfile


def test_image_runs_as_non_root_and_stops_gracefully() -> None:
    user = re.findall(r"^USER (\S+)$", TEXT, re.M)
    assert user and user[-1].split(":")[0] not in {"root", "0"}
    assert re.search(r"^STOPSIGNAL SIGTERM$", TEXT, re.M)
    assert re.search(r"^HEALTHCHECK ", TEXT, re.M)
    assert "120 s" in TEXT, "say that the stop grace must cover the two-minute spot notice"
    # The root filesystem is read-only at run time: HOME is on the tmpfs /tmp.
    assert _env("HOME") == "/tmp"


def test_tini_is_installed_to_be_pid_1() -> None:
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", TEXT, re.M)
    assert entrypoint and entrypoint.group(1).startswith('["tini", "--"')
    install = re.search(r"apt-get install ((?:[^\n]*\\\n)*[^\n]*)", TEXT)
    assert install and "tini" in install.group(1).replace("\\\n", " ").split()


def test_versions_parse() -> None:
    assert versions.parse_version("3.4.1") == (3, 4, 1)
    assert versions.parse_version("4.5.4 LTS") == (4, 5, 4)
    assert not versions.is_supported((3, 3, 0))
    assert versions.is_supported((3, 4, 1))

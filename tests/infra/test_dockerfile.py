"""workers/Dockerfile pins the Blender release the farm supports, verified by its SHA-256."""

from __future__ import annotations

import re

from farm.core import versions

from .tfdoc import DOCKERFILE

TEXT = DOCKERFILE.read_text()


def _arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", TEXT, re.M)
    assert match, f"workers/Dockerfile has no ARG {name}=..."
    return match.group(1)


def test_pinned_blender_is_the_release_the_farm_names() -> None:
    assert _arg("BLENDER_VERSION") == versions.BLENDER_RELEASE


def test_pinned_blender_is_within_the_supported_range() -> None:
    release = versions.parse_version(versions.BLENDER_RELEASE)
    assert release[:2] >= versions.BLENDER_MIN_VERSION
    assert release[:2] <= versions.BLENDER_MAX_TESTED
    assert versions.is_supported(release)
    assert _arg("BLENDER_SERIES") == "{}.{}".format(*release[:2])


def test_blender_download_is_official_and_checksum_verified() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", _arg("BLENDER_SHA256"))
    assert "https://download.blender.org/release/Blender${BLENDER_SERIES}/" in TEXT
    assert 'echo "${BLENDER_SHA256}  /tmp/blender.tar.xz" | sha256sum -c -' in TEXT


def test_base_image_is_a_pinned_cuda_runtime() -> None:
    match = re.search(r"^FROM (\S+)", TEXT, re.M)
    assert match
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-runtime-ubuntu\d+\.\d+", match.group(1))


def test_image_runs_as_non_root_and_stops_gracefully() -> None:
    user = re.findall(r"^USER (\S+)$", TEXT, re.M)
    assert user and user[-1].split(":")[0] not in {"root", "0"}
    assert re.search(r"^STOPSIGNAL SIGTERM$", TEXT, re.M)
    assert re.search(r"^HEALTHCHECK ", TEXT, re.M)
    assert "120 s" in TEXT, "say that the stop grace must cover the two-minute spot notice"


def test_versions_parse() -> None:
    assert versions.parse_version("3.4.1") == (3, 4, 1)
    assert versions.parse_version("4.5.4 LTS") == (4, 5, 4)
    assert not versions.is_supported((3, 3, 0))
    assert versions.is_supported((3, 4, 1))

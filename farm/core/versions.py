"""The Blender release the farm renders with, and which Blender can open a file saved by another.

tests/infra checks workers/Dockerfile against BLENDER_RELEASE; the local farm installs the same
release as the `bpy` wheel (pyproject.toml). Workers report their version in their heartbeat.
"""

from __future__ import annotations

BLENDER_RELEASE = "4.5.4"
"""The release every worker runs (Blender 4.5 LTS): the `bpy==4.5.4` wheel pinned in
pyproject.toml, the same wheel in the worker image (workers/Dockerfile) as on the local farm."""

BLENDER_MIN_VERSION: tuple[int, int] = (3, 4)
"""Oldest Blender the render script supports (Debian 12's 3.4.1, still used to build fixtures)."""

BLENDER_MAX_TESTED: tuple[int, int] = (4, 5)
"""Newest series the farm is built against: the worker image's LTS release."""

OLDEST_READER: dict[tuple[int, int], tuple[int, int]] = {(5, 0): (4, 5)}
"""For series newer than a worker's: the oldest series that opens their files. Blender 5.0
writes a new file header (blocks over 2 GB) that 4.5 LTS reads, and stamps its files with a
minimum reader of file version 4.5 (subversion 85; 4.5.4 is 4.5.91), so 4.5 opens 5.0 files,
dropping only data of features 4.5 lacks. Blender before 4.5 cannot read the 5.0 header at all
("not a blend file"). Series not listed are assumed to need themselves."""


def parse_version(text: str) -> tuple[int, ...]:
    """'4.5.4' -> (4, 5, 4); the numeric prefix of each dot-separated part."""
    parts: list[int] = []
    for piece in text.strip().split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return tuple(parts)


def is_supported(version: tuple[int, ...]) -> bool:
    """Within [BLENDER_MIN_VERSION, BLENDER_MAX_TESTED] by major.minor."""
    return BLENDER_MIN_VERSION <= version[:2] <= BLENDER_MAX_TESTED


def oldest_reader(saved_version: tuple[int, ...]) -> tuple[int, int]:
    """The oldest Blender series that opens a file saved by `saved_version`."""
    series = (*saved_version, 0)[:2]
    return OLDEST_READER.get((series[0], series[1]), (series[0], series[1]))


def can_open(saved_version: tuple[int, ...], worker_version: tuple[int, ...]) -> bool:
    """Whether a Blender of `worker_version` opens a file saved by `saved_version` (major.minor):
    any file saved by its own or an older series, and newer files whose minimum reader it meets
    (5.0 files in 4.5). Files from before 2.50 (the 2.4x format) are refused by Blender 4.x."""
    worker = (*worker_version, 0)[:2]
    saved = (*saved_version, 0)[:2]
    if saved < (2, 50):
        return False
    if saved <= worker:
        return True
    return worker >= oldest_reader(saved_version)


def needs_text(saved_version: tuple[int, ...]) -> str:
    """Which Blender a file needs, for the message refusing a job no worker can open."""
    series = oldest_reader(saved_version)
    saved = ".".join(str(p) for p in saved_version[:2])
    return f"saved by Blender {saved}: needs Blender {series[0]}.{series[1]} or newer"


def refusal(saved_version: tuple[int, ...], worker_versions: list[tuple[int, ...]]) -> str | None:
    """Why the farm cannot render a file saved by `saved_version`, or None when it can: a live
    worker's Blender opens it, or, with no worker reporting yet, the farm's own release does."""
    candidates = worker_versions or [parse_version(BLENDER_RELEASE)]
    if any(can_open(saved_version, version) for version in candidates):
        return None
    have = ", ".join(sorted({".".join(str(p) for p in v[:3]) for v in candidates}))
    return f"the scene was {needs_text(saved_version)}; this farm's workers run Blender {have}"

"""The Blender releases the farm supports, and the one the worker image pins.

tests/infra checks workers/Dockerfile against BLENDER_RELEASE; workers check `blender --version`.
"""

from __future__ import annotations

BLENDER_MIN_VERSION: tuple[int, int] = (3, 4)
"""Oldest supported: Debian 12's Blender 3.4.1 runs the local farm and saved the demo scene."""

BLENDER_MAX_TESTED: tuple[int, int] = (4, 5)
"""Newest series the farm is built against: the worker image's LTS release."""

BLENDER_RELEASE = "4.5.4"
"""The official release workers/Dockerfile downloads and verifies (Blender 4.5 LTS)."""


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

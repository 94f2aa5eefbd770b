"""Which API this is and which clients it serves: a client older than MIN_CLIENT (its
X-Farm-Client header) is answered 426 with what to install."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from farm.core.versions import parse_version

API_VERSION = 1
MIN_CLIENT = "0.1.0"
"""The oldest farm whose client speaks this API as it is now."""


def _installed() -> str:
    try:
        return version("farm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0.0.0"


FARM_VERSION = _installed()


def too_old(client: str, minimum: str = MIN_CLIENT) -> bool:
    """Whether a client's version is older than `minimum`; ValueError for one that is no
    version."""
    given, least = parse_version(client), parse_version(minimum)
    width = max(len(given), len(least))
    return given + (0,) * (width - len(given)) < least + (0,) * (width - len(least))


def upgrade_message(minimum: str = MIN_CLIENT) -> str:
    return (
        f"this farm's API needs farm >= {minimum}; install it with "
        f"`pip install -U 'farm>={minimum}'`"
    )

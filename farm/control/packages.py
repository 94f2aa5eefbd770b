"""A ladder job's package (farm.media.package) as `farm fetch` brings it, in direct mode from the
store and through the API by presigned GET: every file its index lists, each checked against the
size and SHA-256 the stitch recorded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.adapters.store import Store, sha256_file
from farm.core.errors import FarmError
from farm.media.package import INDEX


@dataclass(frozen=True, slots=True, kw_only=True)
class PackageFile:
    """One file of a package, as its index lists it."""

    name: str
    size: int
    sha256: str


def package_files(index: dict[str, Any]) -> list[PackageFile]:
    """The files an index lists, by name; FarmError for a name that is not a plain file name
    (the index is read back from the store, or from the API, and names paths on disk)."""
    files: dict[str, dict[str, Any]] = index["files"]
    listed = []
    for name, want in sorted(files.items()):
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise FarmError(f"the package's index names {name!r}, not a file of the package")
        listed.append(PackageFile(name=name, size=int(want["size"]), sha256=str(want["sha256"])))
    return listed


def stored_files(store: Store, prefix: str) -> list[PackageFile]:
    """The files of the package at `prefix` in the store, from its index."""
    return package_files(store.get_json(prefix + INDEX))


def fetch_files(
    files: list[PackageFile], folder: Path, get: Callable[[PackageFile, Path], object]
) -> int:
    """Each file into `folder` by `get(file, path)`, then checked; the number of files.
    FarmError naming a file that is not as the index says (the partial copy is left to look at)."""
    for file in files:
        path = folder / file.name
        get(file, path)
        if path.stat().st_size != file.size or sha256_file(path) != file.sha256:
            raise FarmError(
                f"{path} does not match the package's index; fetch it again, or `farm retry` "
                "the job if it stays so"
            )
    return len(files)


def fetch_package(store: Store, prefix: str, folder: Path) -> int:
    """The package at `prefix` in the store, into `folder` (direct mode); the number of files."""
    return fetch_files(stored_files(store, prefix), folder,
                       lambda file, path: store.get_file(prefix + file.name, path))  # fmt: skip

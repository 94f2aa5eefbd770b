"""The Blender add-on `farm_blender` (farm/addon/farm_blender/: runs inside Blender and imports
nothing of the farm) and the zip Blender installs it from, which `farm addon --path` builds.

The zip is made the same, byte for byte, from the same source and the same `farm`: entries in
order, each with one fixed date and mode, so a zip already built is kept until the source changes.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from io import BytesIO
from pathlib import Path

ADDON = "farm_blender"
SOURCE = Path(__file__).resolve().parent / ADDON
BUILT = "built.json"
"""The file the zip adds beside the source: the `farm` command that built it and its version."""
ZIP_NAME = f"{ADDON}.zip"
_WHEN = (1980, 1, 1, 0, 0, 0)
"""The earliest date a zip can hold: every entry gets it, so the bytes depend on content only."""


def source_files() -> list[Path]:
    """The add-on's files, in order (no caches, no hidden files)."""
    return sorted(
        path
        for path in SOURCE.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and not path.name.startswith(".")
        and path.suffix != ".pyc"
    )


def addon_zip(*, farm_command: str, farm_version: str) -> bytes:
    """The zip's bytes: farm_blender/ with its source and built.json."""
    entries = {
        f"{ADDON}/{path.relative_to(SOURCE).as_posix()}": path.read_bytes()
        for path in source_files()
    }
    built = {"farm": farm_command, "farm_version": farm_version}
    entries[f"{ADDON}/{BUILT}"] = (json.dumps(built, indent=2, sort_keys=True) + "\n").encode()
    out = BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_WHEN)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[name], compresslevel=9)
    return out.getvalue()


def default_zip_path(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/farm/farm_blender.zip (~/.cache/farm/ without it): rebuilt at will, so a
    cache."""
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "farm" / ZIP_NAME


def write_zip(dest: Path, *, farm_command: str, farm_version: str) -> Path:
    """Build the zip into `dest` unless the file there already has these bytes; a reader never
    sees half a zip (written beside it, then renamed)."""
    data = addon_zip(farm_command=farm_command, farm_version=farm_version)
    if dest.is_file() and dest.read_bytes() == data:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return dest

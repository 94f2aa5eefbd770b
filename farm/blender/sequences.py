"""The files one usage of a scene stands for: a file, every frame of a sequence, every tile of a
UDIM, or a simulation cache's folder (farm.blender.assets checks each before it goes)."""

from __future__ import annotations

import os
import re
import string
from pathlib import Path

from blender_asset_tracer import trace

_NUMBERED = re.compile(r"(<UDIM>|<UVTILE>|#+|\*)")
_FREE = {"<UDIM>": r"1\d{3}", "<UVTILE>": r"u\d+_v\d+", "*": r"[^/]*"}
"""What each marker in a sequence's file name stands for: a UDIM tile (1001-1999), a UV tile,
any frame number (`#`, `###`), and a cache's free part (`name_*.bphys`)."""
_CACHE_FOLDERS = frozenset(
    {"FluidDomainSettings", "FluidsimSettings", "OceanModifierData", "PointCache",
     "NodesModifierBake", "NodesModifierData"}
)  # fmt: skip
"""Blocks whose usage names a folder Blender reads as a tree (a simulation's cache or bake)."""


def _sequence_name(name: str) -> re.Pattern[str] | None:
    """The file names of a sequence that `name` stands for, with only its frame or tile digits
    free; None for a name with no digits to vary (one file)."""
    parts = _NUMBERED.split(name)
    if len(parts) == 1:  # the first frame's own name: its last run of digits is the frame
        stem, dot, suffix = name.rpartition(".") if "." in name else (name, "", "")
        head = stem.rstrip(string.digits)
        if head == stem:
            return None
        return re.compile(re.escape(head) + r"\d+" + re.escape(dot + suffix))
    return re.compile(
        "".join(
            _FREE.get(part, r"\d+") if i % 2 else re.escape(part) for i, part in enumerate(parts)
        )
    )


def usage_files(usage: trace.result.BlockUsage) -> list[Path]:
    """The files one usage stands for (every tile of a UDIM, every frame of a sequence); [] when
    none is there. A sequence is the names in its own folder that differ from its pattern only in
    the frame or tile digits: never a folder, never a walk (a UDIM aimed at a folder named it
    whole). A cache folder is its own tree."""
    path = Path(usage.abspath)
    if not usage.is_sequence:
        return [path] if path.is_file() else []
    if path.is_dir():
        if usage.block.dna_type_name not in _CACHE_FOLDERS:
            return []
        return sorted(Path(top, name) for top, _, names in os.walk(path) for name in names)
    pattern = _sequence_name(path.name)
    if pattern is None:
        return [path] if path.is_file() else []
    try:
        with os.scandir(path.parent) as entries:
            return sorted(
                Path(entry.path)
                for entry in entries
                if pattern.fullmatch(entry.name) and entry.is_file()
            )
    except OSError:  # no such folder, or a pattern in the folder's part: nothing there
        return []

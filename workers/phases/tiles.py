"""A tiled still's merge: the tiles (farm.core.tiles) made into one image in the scene's own
format by farm/blender/tilemerge.py, a Blender child as renders are. A tile that does not have
its region's size, or tiles that leave a pixel uncovered, fail the merge by name."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from farm.adapters.proc import run
from farm.blender import command as blender
from farm.core.errors import PermanentError
from farm.core.tiles import Rect, merge_plan

log = logging.getLogger(__name__)

MERGE_MEMORY_BYTES = 8 << 30
"""An 8K RGBA float canvas is 0.5 GB; Blender holds it and one tile at a time."""


def merge_tiles(
    *,
    blender_bin: str,
    work: Path,
    out: Path,
    width: int,
    height: int,
    tiles: list[tuple[Path, Rect]],
    file_format: dict[str, str],
) -> Path:
    """Write the merged still at `out`; raises PermanentError with Blender's words if it cannot."""
    plan = merge_plan(
        out=str(out),
        width=width,
        height=height,
        tiles=[(str(path), rect) for path, rect in tiles],
        file_format=file_format,
    )
    plan_path = work / "merge.json"
    plan_path.write_text(json.dumps(plan))
    argv = blender.merge_argv(blender=blender_bin, plan_path=plan_path)
    result = run(argv, memory_limit_bytes=MERGE_MEMORY_BYTES, tail_lines=40)
    if not result.ok or not out.is_file():
        said = [line for line in result.tail if line.startswith("FARM-ERROR")] or result.tail[-5:]
        raise PermanentError(f"the tiles could not be merged: {' '.join(said)}")
    log.info("merged %d tiles into %s in %.1f s", len(tiles), out.name, result.duration_s)
    return out

"""A tiled still (`--tiles`, farm.core.tiles): each tile's chunk passes its segment phase with
nothing to encode, and the still's stitch merges the tiles into one image in the scene's own
format by farm/blender/tilemerge.py, a Blender child in the box renders run in. A tile that does
not have its region's size, or tiles that leave a pixel uncovered, fail the merge by name."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from farm.adapters.proc import run
from farm.adapters.sandbox import Box, wrap
from farm.blender import command as blender
from farm.core import keys
from farm.core.errors import FramesMissing, ObjectMissing, PermanentError
from farm.core.spec import JobSpec
from farm.core.tiles import (
    PASSES_EXT,
    TILE_PASSES,
    Rect,
    denoised,
    merge_plan,
    passes_key,
    still_format,
    tile_rects,
)
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt, Outcome
from workers.host.box import render_box
from workers.phases import versions
from workers.phases.stitch import deliver, stitch_workspace

log = logging.getLogger(__name__)

MERGE_MEMORY_BYTES = 8 << 30
"""An 8K RGBA float canvas is 0.5 GB; Blender holds it and one tile at a time."""


def tile_done(attempt: ChunkAttempt) -> Outcome:
    """A tile's segment phase: nothing to encode (the still is merged once, by its stitch); the
    tile must be recorded, which a record is only once its file is in the store."""
    missing = [slot for slot in attempt.frames if slot not in attempt.records]
    if missing:
        raise FramesMissing(f"tile {missing[0]} has no record in the ledger; rendering it again")
    return Outcome(summary={"tiles": len(attempt.frames)})


def stitch_still(
    ctx: WorkerContext, job_id: str, job: dict[str, str], spec: JobSpec
) -> dict[str, object]:
    """A tiled still's stitch: every tile's file (the scene's format, as its record's writer
    stored it) fetched and merged into `jobs/<id>/output.<ext>`; the job done with it."""
    started = time.monotonic()
    ext, file_format = still_format(spec)
    view = spec.scene.view if denoised(spec) and spec.scene else None
    tile_ext = ".exr" if view is not None else ext  # a denoised still's tiles: passes, in EXR
    width, height = spec.resolution.width, spec.resolution.height
    records = ctx.ledger.frame_records(job_id)
    output_passes = passes_key(keys.output_key(job_id, ext.lstrip(".")))
    kept = versions.keep_previous(ctx, job_id, job, ext.lstrip("."))  # a fix's still before it
    if kept is not None and ctx.store.head(output_passes) is not None:
        ctx.store.copy(output_passes, passes_key(kept))  # its passes go with it
        ctx.store.delete(output_passes)
    with stitch_workspace(ctx, job_id) as work:
        tiles, passes = [], []
        for rect in tile_rects(spec.tiles, width, height):
            record = records.get(rect.index)
            if record is None:
                raise PermanentError(f"tile {rect.index} has no record; `farm retry {job_id}`")
            name = blender.frame_file(work, rect.index, tile_ext.lstrip(".")).name
            local = work / name
            try:
                ctx.store.get_file(keys.master_key(job_id, rect.index, name, record.writer), local)
            except ObjectMissing as exc:
                raise PermanentError(
                    f"tile {rect.index} ({name}) is not in the store; render the tiles again: "
                    f"`farm retry {job_id} --frames {spec.tile_frame}` (the still's frame)"
                ) from exc
            tiles.append((local, rect))
            if view is None:  # a denoised still's tiles are full frames of its passes already
                passes.append(fetch_passes(ctx, job_id, spec, rect.index, record.writer, work))
        fetched_s = time.monotonic() - started
        home = work / "home"
        home.mkdir()
        # The box shows Blender this folder alone (tree=False: not the job's folder above it).
        box = render_box(ctx.settings, workspace=home, out_dir=work, scene=work, tree=False)
        out = merge_tiles(
            blender_bin=ctx.settings.blender,
            work=work,
            out=work / f"output{ext}",
            width=width,
            height=height,
            tiles=tiles,
            file_format=file_format,
            box=box,
            view=view,
            passes_out=work / f"output.{PASSES_EXT}",
            passes=passes if view is None else None,
        )
        deliver_passes(ctx, output_passes, work / f"output.{PASSES_EXT}")
        output_key = deliver(ctx, job_id, out, started, fetch_join_s=round(fetched_s, 3),
                             stitch_join="tile merge")  # fmt: skip
    return {"job_id": job_id, "output": output_key, "tiles": len(tiles)}


def fetch_passes(
    ctx: WorkerContext, job_id: str, spec: JobSpec, slot: int, writer: str | None, work: Path
) -> Path:
    """Tile `slot`'s passes file (the render script's, among its File Output files) fetched into
    the stitch's folder; PermanentError saying how to render it again where it is missing."""
    local = work / f"tile_{slot:06d}.{PASSES_EXT}"
    try:
        ctx.store.get_file(keys.file_output_key(job_id, slot, TILE_PASSES, writer), local)
    except ObjectMissing as exc:
        raise PermanentError(
            f"tile {slot} has no passes file ({TILE_PASSES}) in the store, so the still's "
            f"passes cannot be merged; render its tiles again: `farm retry {job_id} --frames "
            f"{spec.tile_frame}`"
        ) from exc
    return local


def deliver_passes(ctx: WorkerContext, key: str, path: Path) -> None:
    """The still's merged passes, beside where its image goes (stored before the image, which
    marks the job done). One there already is an earlier stitch's of these very tiles (one that
    ended before the job was marked done), or one a fix left: this merge's replaces it."""
    if not path.is_file() or path.is_symlink():
        raise PermanentError(f"the tile merge wrote no passes file ({path.name})")
    if not ctx.store.put_file_once(key, path):
        ctx.store.put_file(key, path)


def merge_tiles(
    *,
    blender_bin: str,
    work: Path,
    out: Path,
    width: int,
    height: int,
    tiles: list[tuple[Path, Rect]],
    file_format: dict[str, str],
    box: Box | None = None,
    view: dict[str, object] | None = None,
    passes_out: Path | None = None,
    passes: list[Path] | None = None,
) -> Path:
    """Write the merged still at `out`; raises PermanentError with Blender's words if it cannot.
    `box`: the sandbox it runs in (workers.host.box.render_box over `work`), as a render does:
    the tiles were written by the scene's Blender and are read as untrusted files. `view`:
    the scene's colour management, for a still denoised once after the merge (the tiles are
    then full frames of the denoiser's passes: farm.core.tiles.merge_plan). `passes_out`: the
    still's passes merged there too, from `passes` (each tile's file; None: the tiles)."""
    plan = merge_plan(
        out=str(out),
        width=width,
        height=height,
        tiles=[(str(path), rect) for path, rect in tiles],
        file_format=file_format,
        view=view,
        passes_out=str(passes_out or ""),
        passes=None if passes is None else [str(p) for p in passes],
    )
    plan_path = work / "merge.json"
    plan_path.write_text(json.dumps(plan))
    argv = blender.merge_argv(blender=blender_bin, plan_path=plan_path)
    if box is not None:
        argv = wrap(argv, box)
    result = run(argv, memory_limit_bytes=MERGE_MEMORY_BYTES, tail_lines=40)
    if not result.ok or not out.is_file() or out.is_symlink():
        said = [line for line in result.tail if line.startswith("FARM-ERROR")] or result.tail[-5:]
        raise PermanentError(f"the tiles could not be merged: {' '.join(said)}")
    log.info("merged %d tiles into %s in %.1f s", len(tiles), out.name, result.duration_s)
    return out

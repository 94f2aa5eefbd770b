"""The render phase: a chunk's frames rendered by Blender, each uploaded as it is saved.

Frames already in the store and verified (size and checksum in the ledger) are not rendered again.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.adapters.proc import Result, run
from farm.adapters.sandbox import wrap
from farm.blender import command as blender
from farm.core.errors import PermanentError
from farm.core.pipeline import PHASES, Phase
from farm.core.spec import JobSpec
from farm.core.tiles import tile_job
from workers.attempt.context import WorkerContext
from workers.attempt.lease import LeaseKeeper
from workers.attempt.lifecycle import ChunkAttempt, Outcome
from workers.host import spot
from workers.host.box import render_box
from workers.host.serving import Ready
from workers.host.warm import Start, WarmPool
from workers.phases import autochunk
from workers.phases.frames import (
    FrameUploader,
    OutputCaps,
    frames_to_render,
    kept,
    write_permit,
)
from workers.phases.scene_tree import build_tree, tree_remap
from workers.phases.source import fetch_source

READY_FOLDERS = ("blender", "frames", "tree")
"""A job's folders a Blender's box binds (home, output, scene tree): a ready Blender's too."""

log = logging.getLogger(__name__)


def render_frames(attempt: ChunkAttempt) -> Outcome:
    """The render phase: the chunk's frames not yet in the store, each uploaded as it is saved.
    Raises PermanentError/TransientError/ChunkInterrupted/LeaseLost."""
    ctx, job_id, spec = attempt.ctx, attempt.job_id, attempt.spec
    started = time.monotonic()
    todo = frames_to_render(ctx, job_id, attempt.frames, attempt.records)
    # A ready Blender is adopted before the tree is laid out in its folders, and only by a chunk
    # that renders: one with every frame stored would end it unused.
    if ctx.warm is not None and spec.assets_key and todo:
        script = blender.script_argv(
            blender=ctx.settings.blender, job_path=None, trusted=blender.trusts(spec)
        )
        folders = {name: ctx.job_dir(job_id) / name for name in READY_FOLDERS}
        if ctx.warm.adopt(job_id, folders, script):
            try:
                return _render_frames(attempt, started, todo)
            finally:
                ctx.warm.release(job_id)  # unless its chunk ran on it
    return _render_frames(attempt, started, todo)


def _render_frames(attempt: ChunkAttempt, started: float, todo: list[int]) -> Outcome:
    ctx, job, job_id, index = attempt.ctx, attempt.job, attempt.job_id, attempt.index
    spec, frames = attempt.spec, attempt.frames
    scene = build_tree(ctx, job) if spec.assets_key else fetch_source(ctx, job["source_key"])
    fetched_s = time.monotonic() - started
    uploader = FrameUploader(
        ctx.store, ctx.ledger, job_id, index, attempt.claim, attempt.token,
        caps=OutputCaps.from_settings(ctx.settings),
        job_output_bytes=int(job.get("file_output_bytes", 0)), reused=len(frames) - len(todo),
        kept_until=lambda: attempt.keeper.split_last,
    )  # fmt: skip
    saved_s: list[float] = []
    timing: dict[str, float] = {}
    if todo:
        try:
            progress = _run_blender(ctx, attempt, spec, scene, todo, uploader)
        finally:
            if str(PHASES[Phase.SEGMENT].queue) not in ctx.queues:
                # Nothing here will encode them, and the store has each recorded frame: a
                # render-only host keeps no frames (workers.janitor).
                for frame in uploader.done:
                    for path in blender.local_files(ctx.job_dir(job_id) / "frames", frame):
                        path.unlink(missing_ok=True)
        saved_s, timing = progress.saved_s, progress.timing()
    frames, todo = kept(frames, attempt.keeper.split_last), kept(todo, attempt.keeper.split_last)
    if job.get("plan_pending") == "1":
        autochunk.plan_rest(ctx, job_id, spec, saved_s, index)
    return Outcome(
        fields={
            **timing,
            "render_s": round(time.monotonic() - started, 3),
            "fetch_s": round(fetched_s, 3),
            "upload_s": round(uploader.upload_s, 3),
            "frames_rendered": len(frames),
            "frames_reused": len(frames) - len(todo),
            "rendered_by": ctx.name,  # whose speed frame_s is (farm.core.chunking.worker_factors)
        },
        summary={"rendered": len(todo), "reused": len(frames) - len(todo)},
    )


@dataclass(slots=True)
class _Progress:
    """What the render script has told us so far: the frame it is on and how long frames take.
    Only its own lines (this run's nonce) count; Blender's `Fra:` lines feed the live frame."""

    nonce: str = ""
    out_dir: Path = Path()
    todo: list[int] = field(default_factory=list)
    frame: int | None = None
    saved: set[int] = field(default_factory=set)
    frame_times_s: list[float] = field(default_factory=list)
    launched: float = field(default_factory=time.monotonic)
    saved_s: list[float] = field(default_factory=list)
    """Seconds from launch to each accepted frame: what auto chunk sizing measures."""
    read_s: float | None = None
    """Launch to Blender ready to open the scene (its own start-up)."""
    first_frame_s: float | None = None
    """Launch to the first frame started (start-up, scene load and the overrides)."""
    masters: dict[int, tuple[Path, ...]] = field(default_factory=dict)
    """Each frame's files in the scene's output format (PNG, EXR); the preview is uploaded."""
    rejected: list[str] = field(default_factory=list)
    start: Start = Start.NEW
    """Which Blender rendered: one started for the chunk, a ready one, or the job's warm one
    that already had the scene open (workers.host.warm)."""

    def on_line(self, line: str, uploader: FrameUploader) -> None:
        ours = blender.script_line(line, self.nonce) if self.nonce else None
        if ours is not None:
            self._on_script(ours, uploader)
            return
        progress = blender.frame_progress(line)
        if progress:
            self.frame = progress[0]

    def _on_script(self, line: blender.ScriptLine, uploader: FrameUploader) -> None:
        now = time.monotonic() - self.launched
        if line.kind == "LOADED":
            load_s = line.body.get("load_s")
            self.read_s = now - (float(load_s) if isinstance(load_s, int | float) else 0.0)
        elif line.kind == "START":
            frame = line.body.get("frame")
            self.frame = frame if isinstance(frame, int) else self.frame
            if isinstance(frame, int):
                uploader.starting(frame, self.frame_time_s())
            if self.first_frame_s is None:
                self.first_frame_s = now
        elif line.kind == "FRAME":
            try:
                rendered = blender.accept_frame(
                    line, out_dir=self.out_dir, frames=self.todo, nonce=self.nonce
                )
            except blender.FrameRejected as exc:
                log.warning("ignored a frame line of the render script: %s", exc)
                self.rejected.append(str(exc))
                return
            self.saved_s.append(now)
            self.saved.add(rendered.frame)
            self.frame_times_s.append(rendered.render_s)
            self.masters[rendered.frame] = rendered.files
            uploader.add(
                rendered.frame, rendered.preview, rendered.files, rendered.thumbnail,
                outputs=rendered.outputs, outputs_dir=rendered.outputs_dir,
            )  # fmt: skip

    def failed_frame(self, todo: list[int]) -> int | None:
        """The script renders the list in order: the first unsaved frame is where it stopped."""
        return next((f for f in todo if f not in self.saved), self.frame)

    def frame_time_s(self) -> float:
        return sum(self.frame_times_s) / len(self.frame_times_s) if self.frame_times_s else 0.0

    def timing(self) -> dict[str, float]:
        """Ledger fields for the benchmarks and `farm status`: where Blender's time went."""
        fields: dict[str, float] = {}
        if self.saved_s:
            m = autochunk.measure(self.saved_s)
            fields.update(blender_startup_s=round(m.startup_s, 3), frame_s=round(m.frame_s, 3))
        if self.read_s is not None:
            fields["blender_launch_s"] = round(self.read_s, 3)
        if self.read_s is not None and self.first_frame_s is not None:
            fields["scene_load_s"] = round(self.first_frame_s - self.read_s, 3)
        fields["blender_warm"] = int(self.start is Start.WARM)
        fields["blender_ready"] = int(self.start is Start.READY)
        return fields


def _run_blender(
    ctx: WorkerContext,
    attempt: ChunkAttempt,
    spec: JobSpec,
    scene: Path,
    todo: list[int],
    uploader: FrameUploader,
) -> _Progress:
    """Render `todo` under the attempt's lease; raise what the outcome means for the chunk."""
    keeper = attempt.keeper
    out_dir = ctx.job_dir(attempt.job_id) / "frames"
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = blender.settings_from_spec(
        spec,
        device=ctx.caps.cycles_device,
        threads=ctx.threads,
        # A 10-bit video needs more than 8 bits from the display-referred image it is made of.
        preview_depth="16" if spec.codec.ten_bit else "8",
    )
    nonce = secrets.token_hex(16)
    # A warm Blender (workers.host.warm) lives across this job's chunks: its home, job files and
    # permits are the job's on this worker, not one attempt's.
    # The box writes its home: the attempt's log, beside it in the workspace, stays out of reach.
    home = ctx.job_dir(attempt.job_id) / "blender" if ctx.warm else attempt.workspace / "home"
    home.mkdir(parents=True, exist_ok=True)
    job_path, permit = home / f"job-{nonce}.json", home / f"permit-{nonce}.json"
    job = blender.job_file(
        scene=scene,
        out_dir=out_dir,
        frames=todo,
        settings=settings,
        nonce=nonce,
        remap=tree_remap(ctx, attempt.job_id),
        permit=permit,
        source=attempt.job.get("source_key", ""),
    )
    if spec.tiles:  # the chunk's frames are tile slots of one still
        job["tiles"] = tile_job(spec)
    if ctx.warm is None:  # a warm Blender's pool writes it, with the paths its box shows
        job_path.write_text(json.dumps(job))
    argv = blender.script_argv(
        blender=ctx.settings.blender,
        job_path=None if ctx.warm else job_path,
        trusted=settings.trusted,
    )
    progress = _Progress(nonce=nonce, out_dir=out_dir, todo=list(todo))
    runner: Callable[..., Result] = run
    if ctx.warm is not None:
        runner = _on_warm(ctx.warm, job, job_path, nonce, attempt.job_id, progress)

    def failed_at() -> str:
        frame = progress.failed_frame(todo)
        return f" on frame {frame}" if frame is not None else ""

    keeper.should_stop = _spot_check(ctx, todo, keeper, uploader, progress)
    keeper.on_split = lambda last: write_permit(permit, last)
    if keeper.split_last is not None:  # split before Blender started
        write_permit(permit, keeper.split_last)
    uploader.starting(todo[0], 0.0)  # a new attempt: not the frame an earlier one was on
    uploader.start()
    try:
        attempt.run_child(
            argv,
            what="Blender",
            on_line=lambda line: progress.on_line(line, uploader),
            memory_limit_bytes=memory_limit(ctx, settings.device),
            failed_at=failed_at,
            box=render_box(
                ctx.settings,
                workspace=home,
                out_dir=out_dir,
                scene=scene,
                tree=bool(spec.assets_key),
            ),
            runner=runner,
        )
    finally:
        uploader.finish()
        keeper.should_stop = None
        keeper.on_split = None
    uploader.raise_errors()
    missing = sorted(set(kept(todo, keeper.split_last)) - set(uploader.done))
    if missing:
        rejected = (
            f" (lines rejected: {'; '.join(progress.rejected[:3])})" if progress.rejected else ""
        )
        raise PermanentError(
            f"Blender reported success but frames {missing} were not saved{rejected}"
        )
    return progress


def _on_warm(
    pool: WarmPool, job: dict[str, Any], job_path: Path, nonce: str, label: str, progress: _Progress
) -> Callable[..., Result]:
    """A runner that hands the chunk to the job's warm Blender instead of starting one."""

    def on_warm(boxed: list[str], **kw: Any) -> Result:
        result, progress.start = pool.run(boxed, job, job_path, nonce, label=label, **kw)
        return result

    return on_warm


def _spot_check(
    ctx: WorkerContext,
    todo: list[int],
    keeper: LeaseKeeper,
    uploader: FrameUploader,
    progress: _Progress,
) -> Callable[[], str]:
    """The lease keeper's stop test while draining: why the frames left cannot finish before
    the drain's deadline, or "" while they can (or there is no deadline)."""

    def spot_check() -> str:
        deadline = ctx.drain.deadline
        if deadline is None:
            return ""
        remaining = len(kept(todo, keeper.split_last)) - len(uploader.done)
        if spot.can_finish(
            remaining_frames=remaining,
            frame_time_s=progress.frame_time_s(),
            deadline=deadline,
            now=time.time(),
        ):
            return ""
        return f"spot interruption: {remaining} frames cannot finish before the deadline"

    return spot_check


def memory_limit(ctx: WorkerContext, device: str) -> int:
    """A memory cap protects the host from a runaway scene; CUDA maps huge address ranges, so the
    cap only applies to CPU renders."""
    return ctx.settings.render_memory_limit_mb * 1024 * 1024 if device == "CPU" else 0


def ready_blender(ctx: WorkerContext) -> Ready:
    """A ready Blender (workers.host.warm): the serve-mode script a chunk here would start, boxed
    over empty folders of its own under `<scratch>/ready`, at the depth of a job's folder."""
    root = ctx.scratch / "ready" / secrets.token_hex(8)
    root.mkdir(parents=True)
    folders = {name: root / name for name in READY_FOLDERS}
    script = blender.script_argv(blender=ctx.settings.blender, job_path=None)
    cap = memory_limit(ctx, ctx.caps.cycles_device)
    try:
        box = render_box(
            ctx.settings,
            workspace=folders["blender"],
            out_dir=folders["frames"],
            scene=folders["tree"] / "scene.blend",
            tree=True,
        )
    except BaseException:  # no box, no Blender: nor its folders, tried again after every task
        shutil.rmtree(root, ignore_errors=True)
        raise
    if box is None:  # unboxed it sees the job's folders where they are: nothing to move
        return Ready(script, script, cap, root, folders={})
    for folder in folders.values():
        folder.mkdir(exist_ok=True)  # render_box made the home (its tmp)
    return Ready(script, wrap(script, box), cap, root, folders)

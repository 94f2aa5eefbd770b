"""The render phase: a chunk's frames rendered by Blender, each uploaded as it is saved.

Frames already in the store and verified (size and checksum in the ledger) are not rendered again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm import keys
from farm.errors import FarmError, PermanentError, StoreRefused, TransientError
from farm.ledger import Ledger
from farm.pipeline import PHASES, Phase
from farm.proc import Result, run
from farm.sandbox import wrap
from farm.spec import JobSpec
from farm.store import Store
from workers import autochunk, blender, spot, thumbnail
from workers.assets import build_tree, tree_remap
from workers.attempt import ChunkAttempt, Outcome
from workers.box import open_boxed, render_box
from workers.context import WorkerContext
from workers.source import fetch_source
from workers.warm import Ready, Start

READY_FOLDERS = ("blender", "frames", "tree")
"""A job's folders a Blender's box binds (home, output, scene tree): a ready Blender's too."""

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FrameUploader:
    """Uploads frames in the background as Blender saves them, so rendering never waits on S3."""

    store: Store
    ledger: Ledger
    job_id: str
    chunk: int
    done: list[int] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    upload_s: float = 0.0
    kept_until: Callable[[], int | None] = lambda: None
    """The chunk's last frame since a split (LeaseKeeper.split_last), None before one: a frame
    after it is the split's new chunk's, never stored or recorded by this one."""
    _queue: queue.Queue[tuple[int, Path, tuple[Path, ...], Path | None] | None] = field(
        default_factory=queue.Queue
    )
    _thread: threading.Thread | None = None
    _started: tuple[int, float] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="frame-upload")
        self._thread.start()

    def add(
        self, frame: int, path: Path, masters: tuple[Path, ...] = (), thumb: Path | None = None
    ) -> None:
        """`path`: the display-referred image the video is made of; `masters`: the frame in the
        scene's own format (EXR, 16-bit PNG), kept for `farm fetch --frames`; `thumb`: its
        thumbnail for the job page, uploaded once the frame is recorded."""
        self._queue.put((frame, path, masters, thumb))

    def starting(self, frame: int, frame_s: float) -> None:
        """Record the frame Blender starts and its mean frame time so far: a split of this chunk
        (farm.split) leaves that frame and the next few, by time, to this attempt."""
        started = (frame, round(frame_s, 3))
        if started == self._started:  # the attempt's first frame, told again by Blender
            return
        try:
            self.ledger.set_chunk_fields(
                self.job_id, self.chunk, frame_on=frame, frame_s_live=started[1],
                frame_on_at=round(time.time(), 3),
            )  # fmt: skip
            self._started = started
        except FarmError as exc:  # only a split waits on it; the next frame records again
            log.warning("could not record frame %d as started: %s", frame, exc)

    def raise_errors(self) -> None:
        """Store or Redis hiccups hand the chunk back (no attempt spent); anything else fails it."""
        if not self.errors:
            return
        text = "; ".join(str(e) for e in self.errors[:5])
        if all(isinstance(e, TransientError) for e in self.errors):
            raise TransientError(f"{len(self.errors)} frame uploads failed: {text}")
        refused = [e for e in self.errors if isinstance(e, StoreRefused)]
        if refused:  # the store said no (403, no bucket, full): another try would hear the same
            raise StoreRefused(f"{len(self.errors)} frame uploads failed: {refused[0]}")
        raise PermanentError(f"{len(self.errors)} frame uploads failed: {text}")

    def finish(self) -> None:
        self._queue.put(None)
        if self._thread:
            self._thread.join()

    def _split_off(self, frame: int) -> bool:
        """Whether `frame` is the split's new chunk's now: it renders and records it."""
        last = self.kept_until()
        if last is None or frame <= last:
            return False
        log.info("frame %d is another chunk's since a split at %d; not recorded", frame, last)
        return True

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            frame, path, masters, thumb = item
            if self._split_off(frame):  # begun before the split was heard
                continue
            started = time.monotonic()
            try:
                for master in masters:  # before the record: a recorded frame has its masters
                    with open_boxed(master) as fh:
                        self.store.put_open(keys.master_key(self.job_id, master.name), fh)
                with open_boxed(path) as fh:  # what is recorded is what is stored
                    size = os.fstat(fh.fileno()).st_size
                    digest = hashlib.file_digest(fh, "sha256").hexdigest()
                    self.store.put_open(keys.frame_key(self.job_id, frame), fh, intermediate=True)
                if self._split_off(frame):  # split while it was uploading
                    continue
                # The record, the chunk's progress and (once an attempt; the job keeps the
                # earliest) the job's first-frame time: one round trip.
                first = not self.done
                self.ledger.record_frame(
                    self.job_id, frame, size, digest, chunk=self.chunk, first=first,
                    frames_rendered=len(self.done) + 1,
                )  # fmt: skip
                self.done.append(frame)
                # Every frame's thumbnail is uploaded; the first one's time is the job's too.
                uploaded = thumb is not None and thumbnail.upload(
                    self.store, self.job_id, frame, thumb
                )
                if uploaded and first:  # the job keeps the earliest
                    when = f"{time.time():.3f}"
                    self.ledger.job_field_once(self.job_id, "first_thumbnail_at", when)
            except Exception as exc:  # reported after Blender ends
                log.exception("upload of frame %d failed", frame)
                self.errors.append(exc)
            self.upload_s += time.monotonic() - started


def frames_to_render(
    ctx: WorkerContext,
    job_id: str,
    frames: list[int],
    records: dict[int, tuple[int, str]],
) -> list[int]:
    """Skip frames whose verified record exists and whose object is in the store at that size.
    `records`: the frames' records (ChunkAttempt.records: the claim brought them back)."""
    todo = []
    for frame in frames:
        record = records.get(frame)
        if record and ctx.store.size(keys.frame_key(job_id, frame)) == record[0]:
            continue
        todo.append(frame)
    return todo


def render_frames(attempt: ChunkAttempt) -> Outcome:
    """The render phase: the chunk's frames not yet in the store, each uploaded as it is saved.
    Raises PermanentError/TransientError/ChunkInterrupted/LeaseLost."""
    ctx, job_id, spec = attempt.ctx, attempt.job_id, attempt.spec
    started = time.monotonic()
    if ctx.warm is not None and spec.assets_key:  # before the tree is laid out in its folders
        script = blender.script_argv(
            blender=ctx.settings.blender, job_path=None, trusted=blender.trusts(spec)
        )
        folders = {name: ctx.job_dir(job_id) / name for name in READY_FOLDERS}
        if ctx.warm.adopt(job_id, folders, script):
            try:
                return _render_frames(attempt, started)
            finally:
                ctx.warm.release(job_id)  # unless its chunk ran on it
    return _render_frames(attempt, started)


def _render_frames(attempt: ChunkAttempt, started: float) -> Outcome:
    ctx, job, job_id, index = attempt.ctx, attempt.job, attempt.job_id, attempt.index
    spec, frames = attempt.spec, attempt.frames
    scene = build_tree(ctx, job) if spec.assets_key else fetch_source(ctx, job["source_key"])
    fetched_s = time.monotonic() - started
    todo = frames_to_render(ctx, job_id, frames, attempt.records)
    uploader = FrameUploader(
        ctx.store, ctx.ledger, job_id, index, kept_until=lambda: attempt.keeper.split_last
    )
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
            "rendered_by": ctx.name,  # whose speed frame_s is (farm.chunking.worker_factors)
        },
        summary={"rendered": len(todo), "reused": len(frames) - len(todo)},
    )


def kept(frames: list[int], split_last: int | None) -> list[int]:
    """The frames still this chunk's after a split at `split_last` (None: not split)."""
    return frames if split_last is None else [f for f in frames if f <= split_last]


def write_permit(path: Path, last: int) -> None:
    """Tell the render script to stop after frame `last` (it reads the file before each frame);
    written whole, then renamed, so the script never reads half of it."""
    partial = path.with_name(path.name + ".partial")
    # The folder is the box's: a link planted at the name must not make this write elsewhere.
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"last": last}))
    os.replace(partial, path)


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
    that already had the scene open (workers.warm)."""

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
                rendered = blender.accept_frame(line, out_dir=self.out_dir, frames=self.todo)
            except blender.FrameRejected as exc:
                log.warning("ignored a frame line of the render script: %s", exc)
                self.rejected.append(str(exc))
                return
            self.saved_s.append(now)
            self.saved.add(rendered.frame)
            self.frame_times_s.append(rendered.render_s)
            self.masters[rendered.frame] = rendered.files
            uploader.add(rendered.frame, rendered.preview, rendered.files, rendered.thumbnail)

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
    # A warm Blender (workers.warm) lives across this job's chunks: its home, job files and
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
    )
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
        pool = ctx.warm

        def on_warm(boxed: list[str], **kw: Any) -> Result:
            result, progress.start = pool.run(
                boxed, job, job_path, nonce, label=attempt.job_id, **kw
            )
            return result

        runner = on_warm

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

    def failed_at() -> str:
        frame = progress.failed_frame(todo)
        return f" on frame {frame}" if frame is not None else ""

    keeper.should_stop = spot_check
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


def memory_limit(ctx: WorkerContext, device: str) -> int:
    """A memory cap protects the host from a runaway scene; CUDA maps huge address ranges, so the
    cap only applies to CPU renders."""
    return ctx.settings.render_memory_limit_mb * 1024 * 1024 if device == "CPU" else 0


def ready_blender(ctx: WorkerContext) -> Ready:
    """A ready Blender (workers.warm): the serve-mode script a chunk here would start, boxed
    over empty folders of its own under `<scratch>/ready`, at the depth of a job's folder."""
    root = ctx.scratch / "ready" / secrets.token_hex(8)
    root.mkdir(parents=True)
    folders = {name: root / name for name in READY_FOLDERS}
    script = blender.script_argv(blender=ctx.settings.blender, job_path=None)
    cap = memory_limit(ctx, ctx.caps.cycles_device)
    box = render_box(
        ctx.settings,
        workspace=folders["blender"],
        out_dir=folders["frames"],
        scene=folders["tree"] / "scene.blend",
        tree=True,
    )
    if box is None:  # unboxed it sees the job's folders where they are: nothing to move
        return Ready(script, script, cap, root, folders={})
    for folder in folders.values():
        folder.mkdir(exist_ok=True)  # render_box made the home (its tmp)
    return Ready(script, wrap(script, box), cap, root, folders)

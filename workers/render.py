"""Render one chunk: claim it, render its frames with Blender, upload each frame as it is saved.

Frames already in the store and verified (size and checksum in the ledger) are not rendered again.
"""

from __future__ import annotations

import json
import logging
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from farm import keys
from farm.errors import ChunkInterrupted, LeaseLost, PermanentError, TransientError
from farm.ledger import Ledger
from farm.proc import Running, run
from farm.spec import JobSpec
from farm.state import ChunkState
from farm.store import Store, sha256_file
from workers import attempt, autochunk, blender, spot
from workers.context import WorkerContext
from workers.lease import LeaseKeeper

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
    _queue: queue.Queue[tuple[int, Path] | None] = field(default_factory=queue.Queue)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="frame-upload")
        self._thread.start()

    def add(self, frame: int, path: Path) -> None:
        self._queue.put((frame, path))

    def raise_errors(self) -> None:
        """Store or Redis hiccups hand the chunk back (no attempt spent); anything else fails it."""
        if not self.errors:
            return
        text = "; ".join(str(e) for e in self.errors[:5])
        if all(isinstance(e, TransientError) for e in self.errors):
            raise TransientError(f"{len(self.errors)} frame uploads failed: {text}")
        raise PermanentError(f"{len(self.errors)} frame uploads failed: {text}")

    def finish(self) -> None:
        self._queue.put(None)
        if self._thread:
            self._thread.join()

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            frame, path = item
            started = time.monotonic()
            try:
                size = path.stat().st_size
                digest = sha256_file(path)
                self.store.put_file(keys.frame_key(self.job_id, frame), path, intermediate=True)
                self.ledger.record_frame(self.job_id, frame, size, digest)
                self.done.append(frame)
                self.ledger.set_chunk_fields(
                    self.job_id, self.chunk, frames_rendered=len(self.done)
                )
            except Exception as exc:  # reported after Blender ends
                log.exception("upload of frame %d failed", frame)
                self.errors.append(exc)
            self.upload_s += time.monotonic() - started


def fetch_scene(ctx: WorkerContext, scene_key: str) -> Path:
    """Scenes are content-addressed, so a cached copy with the right size is the right scene."""
    local = ctx.scene_cache() / Path(scene_key).name
    size = ctx.store.size(scene_key)
    if size is None:
        raise PermanentError(
            f"the scene {scene_key} is missing from the store; submit the job again"
        )
    if not local.exists() or local.stat().st_size != size:
        ctx.store.get_file(scene_key, local)
    return local


def frames_to_render(ctx: WorkerContext, job_id: str, frames: list[int]) -> list[int]:
    """Skip frames whose verified record exists and whose object is in the store at that size."""
    records = ctx.ledger.frame_records(job_id)
    todo = []
    for frame in frames:
        record = records.get(frame)
        if record and ctx.store.size(keys.frame_key(job_id, frame)) == record[0]:
            continue
        todo.append(frame)
    return todo


def render_chunk(ctx: WorkerContext, job_id: str, index: int) -> dict[str, object]:
    """Returns a small summary; raises PermanentError/TransientError/ChunkInterrupted/LeaseLost."""
    job = ctx.ledger.job(job_id)
    if not job:
        return {"skipped": "unknown job"}
    claim = attempt.claim(
        ctx, job_id, index, ChunkState.RENDERING, phase="render",
        only_from=frozenset({ChunkState.QUEUED, ChunkState.INTERRUPTED}),
    )  # fmt: skip
    if not claim.moved:
        log.info(
            "chunk %s/%d not claimed (%s, was %s)", job_id, index, claim.status, claim.previous
        )
        return {"skipped": f"chunk is {claim.previous}"}
    started = time.monotonic()
    # The lease is held from the claim to the last write, not only while Blender runs: a large
    # scene download or a slow store must not let the reconciler hand the chunk to another worker.
    keeper = LeaseKeeper(
        ctx.ledger,
        job_id=job_id,
        chunk=index,
        token=claim.token,
        lease_s=ctx.settings.lease_s,
        renew_s=ctx.settings.lease_renew_s,
        running=Running(),
    )
    with keeper:
        spec = JobSpec.from_json(json.loads(job["spec"]))
        frames = json.loads(ctx.ledger.chunk(job_id, index)["frames"])
        scene = fetch_scene(ctx, job["scene_key"])
        fetched_s = time.monotonic() - started
        todo = frames_to_render(ctx, job_id, frames)
        uploader = FrameUploader(ctx.store, ctx.ledger, job_id, index)
        saved_s: list[float] = []
        timing: dict[str, float] = {}
        if todo:
            progress = _run_blender(ctx, keeper, spec, scene, todo, uploader)
            saved_s, timing = progress.saved_s, progress.timing()
        elapsed = time.monotonic() - started
        if timing:
            ctx.ledger.set_chunk_fields(job_id, index, **timing)
        if job.get("plan_pending") == "1":
            autochunk.plan_rest(ctx, job_id, spec, saved_s, index)
    if keeper.lost:
        raise LeaseLost(f"chunk {index}: lease {keeper.lost} before the render was recorded")
    move = ctx.ledger.move_chunk(
        job_id,
        index,
        ChunkState.RENDERED,
        token=claim.token,
        render_s=round(elapsed, 3),
        fetch_s=round(fetched_s, 3),
        upload_s=round(uploader.upload_s, 3),
        frames_rendered=len(frames),
        frames_reused=len(frames) - len(todo),
    )
    if move.status not in ("ok", "same"):  # 'same': a retried call already recorded it
        raise LeaseLost(f"chunk {index}: could not record the render ({move.status})")
    ctx.dispatch.encode(job_id, index)
    return {
        "job_id": job_id,
        "chunk": index,
        "rendered": len(todo),
        "reused": len(frames) - len(todo),
    }


@dataclass(slots=True)
class _Progress:
    """What Blender's log has told us so far: the frame it is on and how long frames take."""

    frame: int | None = None
    saved: set[int] = field(default_factory=set)
    frame_times_s: list[float] = field(default_factory=list)
    launched: float = field(default_factory=time.monotonic)
    saved_s: list[float] = field(default_factory=list)
    """Seconds from launch to each `Saved:` line: what auto chunk sizing measures."""
    read_s: float | None = None
    """Launch to `Read blend:` (Blender's own start-up)."""
    first_frame_s: float | None = None
    """Launch to the first `Fra:` line (start-up, scene load and the setup script)."""

    def on_line(self, line: str, uploader: FrameUploader) -> None:
        saved = blender.saved_frame(line)
        if saved:
            self.saved_s.append(time.monotonic() - self.launched)
            self.saved.add(saved[0])
            uploader.add(*saved)
            return
        if self.read_s is None and line.startswith("Read blend:"):
            self.read_s = time.monotonic() - self.launched
        progress = blender.frame_progress(line)
        if progress:
            if self.first_frame_s is None:
                self.first_frame_s = time.monotonic() - self.launched
            self.frame = progress[0]
            return
        took = blender.frame_time_s(line)
        if took is not None:
            self.frame_times_s.append(took)

    def failed_frame(self, todo: list[int]) -> int | None:
        """Blender renders the list in order: the first unsaved frame is where it stopped."""
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
        return fields


def _run_blender(
    ctx: WorkerContext,
    keeper: LeaseKeeper,
    spec: JobSpec,
    scene: Path,
    todo: list[int],
    uploader: FrameUploader,
) -> _Progress:
    """Render `todo` under the keeper's lease; raise what the outcome means for the chunk."""
    job_id, index = keeper.job_id, keeper.chunk
    out_dir = ctx.job_dir(job_id) / "frames"
    out_dir.mkdir(parents=True, exist_ok=True)
    attempt_no = _attempt(keeper.token)
    log_path = ctx.job_dir(job_id) / f"render-{index:05d}-{attempt_no}.log"
    log_key = keys.log_key(job_id, index, attempt_no, "render")
    settings = blender.RenderSettings(
        width=spec.resolution.width,
        height=spec.resolution.height,
        samples=spec.samples,
        device=ctx.caps.cycles_device,
        threads=ctx.threads,
    )
    argv = blender.render_argv(
        blender=ctx.settings.blender, scene=scene, out_dir=out_dir, frames=todo, settings=settings
    )
    progress = _Progress()

    def spot_check() -> str:
        deadline = ctx.drain.deadline
        if deadline is None:
            return ""
        remaining = len(todo) - len(uploader.done)
        if spot.can_finish(
            remaining_frames=remaining,
            frame_time_s=progress.frame_time_s(),
            deadline=deadline,
            now=time.time(),
        ):
            return ""
        return f"spot interruption: {remaining} frames cannot finish before the deadline"

    keeper.should_stop = spot_check
    keeper.upload_log = lambda: ctx.store.put_file(log_key, log_path)
    # A memory cap protects the host from a runaway scene; CUDA maps huge address ranges, so the
    # cap only applies to CPU renders.
    limit_mb = ctx.settings.render_memory_limit_mb if settings.device == "CPU" else 0
    uploader.start()
    try:
        result = run(
            argv,
            on_line=lambda line: progress.on_line(line, uploader),
            log_path=log_path,
            handle=keeper.running,
            memory_limit_bytes=limit_mb * 1024 * 1024,
        )
    finally:
        uploader.finish()
        keeper.should_stop = keeper.upload_log = None
    ctx.store.put_file(log_key, log_path)
    if keeper.lost:
        raise LeaseLost(f"chunk {index}: lease {keeper.lost} while rendering")
    if keeper.stopped_for:
        raise ChunkInterrupted(f"chunk {index}: {keeper.stopped_for}")
    stopped = result.returncode in (-signal.SIGTERM, -signal.SIGKILL, -signal.SIGINT)
    if stopped and (ctx.drain.active.is_set() or result.stopped):
        # Stopped because the worker is going away, not a crash of the scene.
        raise ChunkInterrupted(f"chunk {index}: Blender was stopped (signal {-result.returncode})")
    if not result.ok:
        # A SIGKILL nobody here sent is the kernel's OOM killer: a failure of the scene, with
        # a budget, never an interruption that could loop forever.
        how = (
            f"crashed ({signal.Signals(-result.returncode).name})"
            if result.returncode < 0
            else f"exited with code {result.returncode}"
        )
        frame = progress.failed_frame(todo)
        where = f" on frame {frame}" if frame is not None else ""
        tail = "\n".join(result.tail[-25:])
        raise PermanentError(f"Blender {how}{where}:\n{tail}")
    uploader.raise_errors()
    missing = sorted(set(todo) - set(uploader.done))
    if missing:
        raise PermanentError(f"Blender reported success but frames {missing} were not saved")
    return progress


def _attempt(token: str) -> int:
    return int(token.split(":", 1)[0])

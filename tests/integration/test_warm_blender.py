"""Warm Blenders (workers/host/warm.py, serving.py): the render script in serve mode, run for real with the bpy 4.5
wheel, keeps a job's scene open between its chunks, renders the frames a fresh Blender renders,
and is ended rather than reused for anything else."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from farm.adapters.proc import Result, Running, run
from farm.adapters.sandbox import wrap
from farm.adapters.settings import Settings
from farm.blender import command as blender
from workers.attempt.context import WorkerContext
from workers.host.box import render_box
from workers.host.gpu import Capabilities
from workers.host.serving import WarmBlender
from workers.host.warm import Start, WarmPool
from workers.phases import render


class Chunk:
    """One chunk's job file, as workers/phases/render.py writes it, and what the script said of it."""

    def __init__(self, scene: Path, tmp: Path, frames: list[int], samples: int = 4) -> None:
        self.out_dir = tmp / "out"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.nonce = secrets.token_hex(16)
        self.frames = frames
        settings = blender.RenderSettings(samples=samples)
        self.job = blender.job_file(
            scene=scene, out_dir=self.out_dir, frames=frames, settings=settings, nonce=self.nonce,
            permit=tmp / f"permit-{self.nonce}.json",
        )  # fmt: skip
        self.path = tmp / f"job-{self.nonce}.json"
        self.path.write_text(json.dumps(self.job))
        self.loaded: dict[str, object] = {}
        self.saved: list[int] = []

    def on_line(self, line: str) -> None:
        parsed = blender.script_line(line, self.nonce)
        if parsed is not None and parsed.kind == "LOADED":
            self.loaded = dict(parsed.body)
        if parsed is not None and parsed.kind == "FRAME":
            rendered = blender.accept_frame(
                parsed, out_dir=self.out_dir, frames=self.frames, nonce=self.nonce
            )
            self.saved.append(rendered.frame)


def pixels(png: Path) -> bytes:
    """The image's pixels as ffmpeg decodes them (the PNG's text chunks hold times)."""
    done = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(png), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    )  # fmt: skip
    assert len(done.stdout) > 0
    return done.stdout


def fresh_pixels(scenes: Path, tmp: Path, frame: int) -> bytes:
    """The frame's preview from a fresh Blender, one chunk to a process, unboxed."""
    fresh_dir = tmp / f"fresh-{frame}"
    fresh_dir.mkdir()
    fresh = Chunk(scenes / "cycles.blend", fresh_dir, [frame])
    argv = blender.script_argv(blender=blender.WHEEL, job_path=fresh.path)
    assert run(argv, on_line=fresh.on_line).ok
    return pixels(fresh.out_dir / f"preview_{frame:06d}.png")


ARGV = blender.script_argv(blender=blender.WHEEL, job_path=None)


def serve(
    pool: WarmPool,
    chunk: Chunk,
    tmp: Path,
    handle: Running | None = None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[Result, Start]:
    return pool.run(
        ARGV, chunk.job, chunk.path, chunk.nonce, on_line=on_line or chunk.on_line,
        log_path=tmp / "blender.log", handle=handle or Running(),
    )  # fmt: skip


@pytest.fixture
def pool() -> Iterator[WarmPool]:
    found = WarmPool(idle_s=30)
    yield found
    found.close()


def warmed(pool: WarmPool, scenes: Path, tmp: Path) -> WarmBlender:
    """The Blender the pool keeps after one clean chunk (frame 1)."""
    assert serve(pool, Chunk(scenes / "cycles.blend", tmp, [1]), tmp)[0].ok
    (kept,) = [b for b, _ in pool._idle]
    return kept


def test_later_chunks_of_a_scene_reuse_its_blender_and_match_a_fresh_one(
    pool: WarmPool, scenes: Path, tmp_path: Path
) -> None:
    first = Chunk(scenes / "cycles.blend", tmp_path, [1, 2])
    result, start = serve(pool, first, tmp_path)
    assert result.ok and start is Start.NEW, "\n".join(result.tail)
    assert first.saved == [1, 2] and float(first.loaded["load_s"]) > 0  # type: ignore[arg-type]
    assert pool.idle() == 1

    second = Chunk(scenes / "cycles.blend", tmp_path, [3])
    result, start = serve(pool, second, tmp_path)
    assert result.ok and start is Start.WARM, "\n".join(result.tail)
    assert second.saved == [3]
    assert second.loaded["warm"] is True and second.loaded["load_s"] == 0.0
    assert second.loaded["width"] == first.loaded["width"]
    assert pool.started == 1

    # The same frame from a fresh Blender, one chunk to a process: the same pixels.
    assert pixels(second.out_dir / "preview_000003.png") == fresh_pixels(scenes, tmp_path, 3)


def test_another_scene_or_setting_gets_a_new_blender(
    pool: WarmPool, scenes: Path, tmp_path: Path
) -> None:
    old = warmed(pool, scenes, tmp_path)
    other = Chunk(scenes / "cycles.blend", tmp_path, [2], samples=2)  # other samples
    result, start = serve(pool, other, tmp_path)
    assert result.ok and start is Start.NEW and pool.started == 2
    assert old.popen.wait(timeout=10) is not None  # the first one was ended, not kept
    assert other.saved == [2]


def test_the_script_refuses_a_job_file_of_another_scene(
    pool: WarmPool, scenes: Path, tmp_path: Path
) -> None:
    """The worker never sends one (the key differs), but the script checks it too."""
    warm = warmed(pool, scenes, tmp_path)
    forged = Chunk(scenes / "cycles.blend", tmp_path, [2], samples=2)
    result = warm.run_chunk(
        forged.path, forged.nonce, on_line=forged.on_line, log_path=None, handle=Running()
    )
    assert result.returncode == 3 and not forged.saved
    assert any("another scene or other settings" in line for line in result.tail)


def test_a_stopped_chunk_ends_its_blender_and_idle_ones_expire(
    pool: WarmPool, scenes: Path, tmp_path: Path
) -> None:
    pool.idle_s = 0.5
    handle = Running()
    chunk = Chunk(scenes / "cycles.blend", tmp_path, [1, 2, 3, 4], samples=64)

    def stop_at_first_frame(line: str) -> None:
        chunk.on_line(line)
        if chunk.saved:
            handle.stop()  # a lost lease or a cancel, mid-chunk

    result, _ = serve(pool, chunk, tmp_path, handle, on_line=stop_at_first_frame)
    assert result.stopped and not result.ok and pool.idle() == 0

    chunk = Chunk(scenes / "cycles.blend", tmp_path, [5])
    assert serve(pool, chunk, tmp_path)[0].ok and pool.idle() == 1
    (kept,) = [b for b, _ in pool._idle]
    deadline = time.monotonic() + 10
    while kept.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kept.alive() and pool.idle() == 0


def test_a_kept_blender_that_ended_unseen_costs_the_chunk_nothing(
    pool: WarmPool, scenes: Path, tmp_path: Path
) -> None:
    kept = warmed(pool, scenes, tmp_path)
    os.killpg(kept.popen.pid, signal.SIGKILL)  # gone between its last chunk and this one
    kept.popen.wait(timeout=10)
    kept.alive = lambda: True  # type: ignore[method-assign]  # as if it died just after
    chunk = Chunk(scenes / "cycles.blend", tmp_path, [2])
    result, start = serve(pool, chunk, tmp_path)
    assert result.ok and start is Start.NEW and chunk.saved == [2] and pool.started == 2


def test_the_idle_blender_of_an_ended_job_is_ended_when_its_folder_goes(
    pool: WarmPool, scenes: Path, tmp_path: Path
) -> None:
    """workers.janitor ends it before removing the job's folder, where its home is."""
    chunk = Chunk(scenes / "cycles.blend", tmp_path, [1])
    result, _ = pool.run(
        ARGV, chunk.job, chunk.path, chunk.nonce, on_line=chunk.on_line, log_path=None,
        handle=Running(), label="j1",
    )  # fmt: skip
    assert result.ok and pool.idle_labels() == {"j1"}
    (kept,) = [b for b, _ in pool._idle]
    assert pool.end("j2") == 0 and pool.idle() == 1  # another job's: kept
    assert pool.end("j1") == 1
    assert kept.popen.wait(timeout=10) is not None and pool.idle() == 0


def worker(tmp: Path, **settings: object) -> WorkerContext:
    """What workers.phases.render.ready_blender reads of a worker: its settings, scratch and Cycles."""
    return WorkerContext(
        settings=Settings(**settings),  # type: ignore[arg-type]
        ledger=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        dispatch=None,  # type: ignore[arg-type]
        caps=Capabilities(),
        name="w1",
        scratch=tmp / "scratch",
    )


def ready_pool(ctx: WorkerContext) -> WarmPool:
    found = WarmPool(idle_s=30)
    found.keep_ready(lambda: render.ready_blender(ctx), quiet=lambda: True)
    return found


def started_in_background(pool: WarmPool) -> WarmBlender | None:
    """The ready Blender the pool's own thread starts, as after a task ends."""
    pool.prestart_soon(0.1)
    deadline = time.monotonic() + 30
    while pool._ready is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return pool._ready


def job_folders(ctx: WorkerContext, job_id: str) -> dict[str, Path]:
    return {name: ctx.job_dir(job_id) / name for name in render.READY_FOLDERS}


class BoxedChunk(Chunk):
    """A chunk of a job laid out as workers/phases/render.py lays it out (scene tree, home, frames),
    its job file written by the pool, and the boxed command line a fresh Blender of it runs."""

    def __init__(self, ctx: WorkerContext, job_id: str, scene: Path, frames: list[int]) -> None:
        jobdir = ctx.job_dir(job_id)
        tree, home = jobdir / "tree", jobdir / "blender"
        for folder in (tree, home):
            folder.mkdir(parents=True, exist_ok=True)
        placed = tree / "scene.blend"
        if not placed.exists():
            shutil.copyfile(scene, placed)
        super().__init__(placed, home, frames)
        self.out_dir.rmdir()
        self.out_dir = jobdir / "frames"
        self.out_dir.mkdir(exist_ok=True)
        self.job["out_dir"] = str(self.out_dir)
        self.path.unlink()  # the pool writes it, with the paths its Blender sees
        box = render_box(ctx.settings, workspace=home, out_dir=self.out_dir, scene=placed,
                         tree=True)  # fmt: skip
        assert box is not None
        self.argv = wrap(ARGV, box)

    def run(self, pool: WarmPool, job_id: str, memory_limit_bytes: int = 0) -> tuple[Result, Start]:
        return pool.run(
            self.argv, self.job, self.path, self.nonce, on_line=self.on_line, log_path=None,
            handle=Running(), memory_limit_bytes=memory_limit_bytes, label=job_id,
        )  # fmt: skip


def test_a_ready_blender_renders_the_first_chunk_of_a_job_in_the_jobs_own_folders(
    scenes: Path, tmp_path: Path
) -> None:
    """Started ahead over folders of its own, adopted by a job (the folders move to the job's),
    it renders that job's first chunk as a fresh Blender would, and stays the job's warm one."""
    ctx = worker(tmp_path)
    pool = ready_pool(ctx)
    try:
        assert pool.prestart() and not pool.prestart()  # one at a time
        (root,) = (ctx.scratch / "ready").iterdir()
        assert pool.adopt("j1", job_folders(ctx, "j1"), ARGV)
        assert not root.exists()  # its folders are the job's now
        first = BoxedChunk(ctx, "j1", scenes / "cycles.blend", [1, 2])
        result, start = first.run(pool, "j1")
        assert result.ok and start is Start.READY, "\n".join(result.tail)
        assert first.saved == [1, 2] and pool.started == 0 and pool.prestarted == 1
        assert float(first.loaded["load_s"]) > 0  # type: ignore[arg-type]  # it loaded the scene
        # The job file it read named the folders as its box shows them.
        assert json.loads(first.path.read_text())["out_dir"].startswith(str(root))

        second = BoxedChunk(ctx, "j1", scenes / "cycles.blend", [3])
        result, start = second.run(pool, "j1")
        assert result.ok and start is Start.WARM and second.saved == [3]
        assert pool.started == 0

        assert pixels(first.out_dir / "preview_000001.png") == fresh_pixels(scenes, tmp_path, 1)
    finally:
        pool.close()


def test_a_ready_blender_that_does_not_fit_the_chunk_is_ended_for_a_fresh_one(
    scenes: Path, tmp_path: Path
) -> None:
    ctx = worker(tmp_path)
    pool = ready_pool(ctx)
    try:
        assert pool.prestart()
        ready = pool._ready
        assert ready is not None and pool.adopt("j1", job_folders(ctx, "j1"), ARGV)
        chunk = BoxedChunk(ctx, "j1", scenes / "cycles.blend", [1])
        result, start = chunk.run(pool, "j1", memory_limit_bytes=8 << 30)  # another cap
        assert result.ok and start is Start.NEW and pool.started == 1 and chunk.saved == [1]
        assert ready.popen.wait(timeout=10) is not None
    finally:
        pool.close()


def test_no_ready_blender_for_a_job_with_folders_here_or_a_busy_worker(tmp_path: Path) -> None:
    ctx = worker(tmp_path)
    busy = [True]
    pool = WarmPool(idle_s=30)
    pool.keep_ready(lambda: render.ready_blender(ctx), quiet=lambda: not busy[0])
    try:
        assert not pool.prestart()  # a chunk renders here: its cores are taken
        busy[0] = False
        assert pool.prestart()
        ready = pool._ready
        assert ready is not None and ready.ready is not None
        folders = job_folders(ctx, "j1")
        folders["tree"].mkdir(parents=True)  # an earlier chunk of the job laid out its tree
        assert not pool.adopt("j1", folders, ARGV)
        assert pool._ready is ready and ready.alive()  # kept for another job
        root = ready.ready.root
        pool.close()
        assert ready.popen.wait(timeout=10) is not None and not root.exists()
        assert not pool.prestart()  # a closed pool (a draining worker) starts none
    finally:
        pool.close()


def test_a_ready_blender_goes_only_to_a_chunk_that_runs_its_command_and_is_released_unused(
    tmp_path: Path,
) -> None:
    """A trusted job's Blender binary runs without --disable-autoexec: a ready one (started
    with it) is not adopted, its folders stay its own. One adopted by a chunk that then runs no
    Blender (its frames were stored already) is ended."""
    ctx = worker(tmp_path)
    pool = ready_pool(ctx)
    try:
        assert pool.prestart()
        ready = pool._ready
        assert ready is not None and ready.ready is not None
        assert not pool.adopt("j1", job_folders(ctx, "j1"), [*ARGV, "--trusted"])
        assert pool._ready is ready and ready.ready.root.is_dir()
        assert pool.adopt("j1", job_folders(ctx, "j1"), ARGV)
        pool.release("j1")
        assert ready.popen.wait(timeout=10) is not None
        assert ctx.job_dir("j1").joinpath("tree").is_dir()  # the job's folders, as a fresh one's
        assert pool.prestart()  # the next one
    finally:
        pool.close()


def test_a_drain_leaves_the_adopted_blender_to_render_the_chunk_in_hand(
    scenes: Path, tmp_path: Path
) -> None:
    """A drain (spot notice, SIGTERM) ends idle and ready Blenders; the one the chunk in hand
    adopted, started on the pool's own thread, renders that chunk to the end (the thread that
    started it lives on: a child dies with the thread that spawned it)."""
    ctx = worker(tmp_path)
    pool = ready_pool(ctx)
    try:
        ready = started_in_background(pool)
        assert ready is not None and pool.adopt("j1", job_folders(ctx, "j1"), ARGV)
        pool.close()
        time.sleep(1.0)
        assert ready.alive()
        chunk = BoxedChunk(ctx, "j1", scenes / "cycles.blend", [1])
        result, start = chunk.run(pool, "j1")
        assert result.ok and start is Start.READY and chunk.saved == [1]
        assert ready.popen.wait(timeout=10) is not None  # not kept: the worker is draining
    finally:
        pool.close()


def test_unboxed_a_ready_blender_reads_the_jobs_folders_where_they_are(
    scenes: Path, tmp_path: Path
) -> None:
    """FARM_SANDBOX=off: nothing is bound, so nothing moves and the paths are the job's."""
    ctx = worker(tmp_path, sandbox="off")
    pool = ready_pool(ctx)
    try:
        assert pool.prestart() and pool.adopt("j1", job_folders(ctx, "j1"), ARGV)
        chunk = Chunk(scenes / "cycles.blend", ctx.job_dir("j1"), [1])
        result, start = pool.run(
            ARGV, chunk.job, chunk.path, chunk.nonce, on_line=chunk.on_line, log_path=None,
            handle=Running(), label="j1",
        )  # fmt: skip
        assert result.ok and start is Start.READY and chunk.saved == [1]
        assert not (ctx.scratch / "ready").exists() or not any((ctx.scratch / "ready").iterdir())
    finally:
        pool.close()


def test_a_ready_blender_started_in_the_background_lives_on(tmp_path: Path) -> None:
    """After a task ends the pool starts one from its own long-lived thread: a child started
    from a short-lived thread would be killed as that thread ends (PR_SET_PDEATHSIG)."""
    ctx = worker(tmp_path)
    pool = ready_pool(ctx)
    try:
        ready = started_in_background(pool)
        assert ready is not None and ready.wait_serving(30)
        time.sleep(1.0)  # the starter thread has long returned from starting it
        assert ready.alive() and pool.prestarted == 1
    finally:
        pool.close()

"""Warm Blenders (workers/warm.py): the render script in serve mode, run for real with the bpy 4.5
wheel, keeps a job's scene open between its chunks, renders the frames a fresh Blender renders,
and is ended rather than reused for anything else."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from farm.proc import Result, Running, run
from workers import blender
from workers.warm import WarmBlender, WarmPool


class Chunk:
    """One chunk's job file, as workers/render.py writes it, and what the script said of it."""

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
            rendered = blender.accept_frame(parsed, out_dir=self.out_dir, frames=self.frames)
            self.saved.append(rendered.frame)


def pixels(png: Path) -> bytes:
    """The image's pixels as ffmpeg decodes them (the PNG's text chunks hold times)."""
    done = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(png), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    )  # fmt: skip
    assert len(done.stdout) > 0
    return done.stdout


ARGV = blender.script_argv(blender=blender.WHEEL, job_path=None)


def serve(
    pool: WarmPool,
    chunk: Chunk,
    tmp: Path,
    handle: Running | None = None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[Result, bool]:
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
    result, warm = serve(pool, first, tmp_path)
    assert result.ok and not warm, "\n".join(result.tail)
    assert first.saved == [1, 2] and float(first.loaded["load_s"]) > 0  # type: ignore[arg-type]
    assert pool.idle() == 1

    second = Chunk(scenes / "cycles.blend", tmp_path, [3])
    result, warm = serve(pool, second, tmp_path)
    assert result.ok and warm, "\n".join(result.tail)
    assert second.saved == [3]
    assert second.loaded["warm"] is True and second.loaded["load_s"] == 0.0
    assert second.loaded["width"] == first.loaded["width"]
    assert pool.started == 1

    # The same frame from a fresh Blender, one chunk to a process: the same pixels.
    fresh_dir = tmp_path / "fresh"
    fresh_dir.mkdir()
    fresh = Chunk(scenes / "cycles.blend", fresh_dir, [3])
    argv = blender.script_argv(blender=blender.WHEEL, job_path=fresh.path)
    assert run(argv, on_line=fresh.on_line).ok
    warm_rgb = pixels(second.out_dir / "preview_000003.png")
    assert warm_rgb == pixels(fresh.out_dir / "preview_000003.png")


def test_another_scene_or_setting_gets_a_new_blender(
    pool: WarmPool, scenes: Path, tmp_path: Path
) -> None:
    old = warmed(pool, scenes, tmp_path)
    other = Chunk(scenes / "cycles.blend", tmp_path, [2], samples=2)  # other samples
    result, warm = serve(pool, other, tmp_path)
    assert result.ok and not warm and pool.started == 2
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
    result, warm = serve(pool, chunk, tmp_path)
    assert result.ok and not warm and chunk.saved == [2] and pool.started == 2


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

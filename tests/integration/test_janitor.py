"""A worker's disk sweep against a real Redis: the folders of ended jobs go, those of running
jobs and of work in hand stay, and the scene cache keeps to its cap without touching what a job
on the worker uses or a download in progress."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

from farm.adapters.settings import Settings
from farm.core.state import JobState
from farm.ledger import Ledger
from tests.integration.conftest import make_job
from workers import janitor
from workers.attempt.context import JobsHere, WorkerContext
from workers.host.gpu import Capabilities


def _ctx(ledger: Ledger, scratch: Path, **settings: object) -> WorkerContext:
    return WorkerContext(
        settings=Settings(**settings),  # type: ignore[arg-type]
        ledger=ledger,
        store=None,  # type: ignore[arg-type]
        dispatch=None,  # type: ignore[arg-type]
        caps=Capabilities(),
        name="w1",
        scratch=scratch,
    )


class FakeWarm:
    """The WarmPool call the sweep makes."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    def end(self, label: str) -> int:
        self.ended.append(label)
        return 1


def _folder(ctx: WorkerContext, job_id: str) -> Path:
    folder = ctx.job_dir(job_id)
    (folder / "tree").mkdir()
    (folder / "tree" / "scene.blend").write_bytes(b"BLENDER")
    (folder / "frames").mkdir()
    (folder / "frames" / "frame_000001.exr").write_bytes(b"x" * 1000)
    return folder


def test_ended_and_vanished_jobs_lose_their_folders_running_ones_keep_them(
    ledger: Ledger, tmp_path: Path
) -> None:
    ctx = _ctx(ledger, tmp_path)
    for job_id in ("running", "cancelled", "failed"):
        make_job(ledger, job_id)
    ledger.move_job("cancelled", JobState.CANCELLED)
    ledger.move_job("failed", JobState.FAILED)
    folders = {j: _folder(ctx, j) for j in ("running", "cancelled", "failed", "gone")}

    warm = FakeWarm()
    swept = janitor.sweep(dataclasses.replace(ctx, warm=warm))  # type: ignore[arg-type]

    assert sorted(swept.jobs) == ["cancelled", "failed", "gone"]
    assert sorted(warm.ended) == ["cancelled", "failed", "gone"]  # their idle Blenders first
    assert folders["running"].is_dir()
    assert not folders["cancelled"].exists() and not folders["gone"].exists()
    assert janitor.sweep(ctx).jobs == []  # nothing left to do


def test_a_job_with_work_in_hand_keeps_its_folder_until_the_sweep_after(
    ledger: Ledger, tmp_path: Path
) -> None:
    ctx = _ctx(ledger, tmp_path)
    make_job(ledger, "j1")
    ledger.move_job("j1", JobState.CANCELLED)
    folder = _folder(ctx, "j1")
    with ctx.jobs_here.using("j1"):  # an attempt still ending after the cancel
        assert janitor.sweep(ctx).jobs == []
        assert folder.is_dir()
    assert janitor.sweep(ctx).jobs == ["j1"]


def test_work_of_a_job_waits_for_a_sweep_of_its_folder_in_progress() -> None:
    here = JobsHere()
    order: list[str] = []
    working, finish = threading.Event(), threading.Event()

    def work() -> None:  # a retried job's attempt arriving during the sweep
        with here.using("j1"):
            order.append("work")
            working.set()
            finish.wait(5)

    with here.sweeping("j1") as free:
        assert free
        worker = threading.Thread(target=work)
        worker.start()
        assert not working.wait(0.3)  # it never builds into a folder being removed
        order.append("swept")
    assert working.wait(5)
    with here.sweeping("j1") as free:
        assert not free  # and no sweep takes the folder while it runs
    assert here.running() == frozenset({"j1"})
    finish.set()
    worker.join(5)
    assert here.running() == frozenset()
    assert order == ["swept", "work"]


def test_the_worker_hears_when_its_last_work_ends() -> None:
    """Then, and only then, it starts a ready Blender (workers.host.warm): after a chunk, an encode in
    the lane or a stitch alike, whichever ends last."""
    here = JobsHere()
    quiet: list[frozenset[str]] = []
    here.on_quiet = lambda: quiet.append(here.running())
    with here.using("j1"):
        with here.using("j2"):
            pass
        with here.using("j1"):
            pass
        assert quiet == []
    assert quiet == [frozenset()]


def test_the_scene_cache_keeps_to_its_cap_sparing_jobs_here_and_downloads(
    ledger: Ledger, tmp_path: Path
) -> None:
    ctx = _ctx(ledger, tmp_path, asset_cache_mb=1, disk_sweep_s=60)
    cache = ctx.scene_cache()
    make_job(ledger, "j1")  # source_key "k": its scene is cache/k
    _folder(ctx, "j1")
    megabyte = b"s" * (600 * 1024)
    now = time.time()
    for age_h, name in enumerate(["recent", "k", "old-1", "old-2"]):
        path = cache / name
        path.write_bytes(megabyte)
        stamp = now - 3600 * age_h * 10 if name != "recent" else now
        os.utime(path, (stamp, stamp))
    partial = cache / "new.blend.part.Ab12Cd"  # boto3's own temporary name under ours
    partial.write_bytes(megabyte)
    os.utime(partial, (now - 86400, now - 86400))

    swept = janitor.sweep(ctx)

    assert sorted(swept.scenes) == ["old-1", "old-2"]  # 2.4 MB over a 1 MB cap, oldest first
    assert sorted(p.name for p in cache.iterdir()) == ["k", "new.blend.part.Ab12Cd", "recent"]

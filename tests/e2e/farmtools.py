"""What resilience tests do to a farm: start and kill workers, submit, wait, read the ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, LocalFarm

SMALL = ["--resolution", "320x180", "--fps", "24"]


def spawn_worker(
    farm: LocalFarm, name: str, queues: str = "auto", **env: str
) -> subprocess.Popen[bytes]:
    """A worker as `farm worker` runs it, in its own process group (so kill -9 takes Blender too)."""
    log = (farm.data / "logs" / f"{name.split('@')[0]}.log").open("ab")
    worker = subprocess.Popen(
        [sys.executable, "-m", "workers", "--queues", queues, "--name", name, "--threads", "1"],
        env={**farm.role_env("worker"), **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=ROOT,
    )
    farm.extra_workers.append(worker)
    return worker


def kill_group(worker: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(worker.pid, sig)
    except ProcessLookupError:
        return
    if sig == signal.SIGKILL:
        worker.wait(10)


def submit(farm: LocalFarm, scene: Path, *args: str) -> str:
    out = farm.farm("submit", str(scene), *SMALL, *args, "--json", check=True)
    job_id: str = json.loads(out.stdout)["id"]
    return job_id


ENCODE_SMALL = ("--resolution", "320x180", "--preset", "ultrafast", "--segment-frames", "12")
"""A test master's encode: small, fast, several segments of 12 frames."""


def encode_small(farm: LocalFarm, master: Path, out: Path, *args: str) -> dict[str, Any]:
    """`farm submit MASTER` (ENCODE_SMALL, then `args`) waited for, done, and fetched to `out`:
    its --json summary, with submit's stderr under "stderr"."""
    result = farm.farm("submit", str(master), *ENCODE_SMALL, *args, "--wait", "--json")
    assert result.returncode == 0, f"{result.stderr}\n{farm.logs()}"
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["state"] == "done", summary["error"]
    farm.farm("fetch", summary["id"], str(out), check=True)
    summary["stderr"] = result.stderr
    return summary


def status(farm: LocalFarm, job_id: str) -> dict[str, Any]:
    from farm.core.report import job_summary

    ledger = farm.ledger()
    return job_summary(ledger.job(job_id), ledger.chunks(job_id))


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, farm: LocalFarm | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(
        f"timed out after {timeout_s} s waiting for {what}\n{farm.logs() if farm else ''}"
    )


def wait_frames(farm: LocalFarm, job_id: str, frames: int, chunk: int = 0) -> None:
    """Until `chunk` has `frames` frames rendered and uploaded."""
    wait_for(
        f"{frames} frames rendered",
        lambda: status(farm, job_id)["chunks"][chunk]["frames_rendered"] >= frames,
        120,
        farm,
    )


def wait_final(farm: LocalFarm, job_id: str, timeout_s: float) -> dict[str, Any]:
    box: dict[str, Any] = {}

    def final() -> bool:
        box.update(status(farm, job_id))
        return box["state"] in ("done", "failed", "cancelled")

    wait_for(f"job {job_id} to end", final, timeout_s, farm)
    return box


def frame_count(farm: LocalFarm, job_id: str, dest: Path) -> int:
    from tests.conftest import ffprobe

    path = dest / f"{job_id}.mp4"
    farm.store().get_file(f"jobs/{job_id}/output.mp4", path)
    return int(ffprobe(path)["streams"][0]["nb_read_frames"])


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (Blender and ffmpeg carry the job id)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if text in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(cmdline.strip())
    return found

"""The container farm beside the process farm: `farm up --containers` (docker-compose.yml through
podman-compose) and `farm up`, each with 2 workers as it starts them, on the same render job,
in turns (process, containers, process, ...), each turn's ratio against the mean of the process
runs either side of it. Also: `podman stop` of a worker mid-chunk to the chunk handed back (the
ledger's `chunk-interrupted` event), and `make image` once everything is cached.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, LocalFarm, Row
from farm.adapters import engine as engines
from farm.control import containers

DEMO = ROOT / "scenes/demo.blend"


def _env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env.update(FARM_CONFIG=str(base / "config.json"), FARM_SHUTDOWN_GRACE_S="0")
    return env


def _job(farm: LocalFarm, frames: int) -> float:
    """Seconds from `farm submit` to the stitched video, as the user waits for it."""
    started = time.monotonic()
    out = farm.farm(
        "submit", str(DEMO), "--frames", f"1-{frames}", "--chunk-size", "4",
        "--resolution", "320x180", "--samples", "8", "--wait", "--json",
    )  # fmt: skip
    took = time.monotonic() - started
    state = json.loads(out.stdout)["state"]
    if state != "done":
        raise RuntimeError(f"bench job ended {state}")
    return took


def _handback_s(farm: LocalFarm) -> float:
    """`podman stop` of a worker with a chunk in hand to that chunk's `chunk-interrupted`."""
    out = farm.farm(
        "submit", str(DEMO), "--frames", "1-8", "--chunk-size", "8", "--resolution", "320x180",
        "--samples", "64", "--json",
    )  # fmt: skip
    job_id = json.loads(out.stdout)["id"]
    ledger = farm.ledger()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        chunk = ledger.chunks(job_id)[0]
        if chunk.get("state") == "rendering" and int(chunk.get("frames_rendered", 0) or 0) >= 1:
            break
        time.sleep(0.1)
    boxed = containers.ContainerFarm.load(farm.data)
    engine = engines.find(boxed.engine)
    name = next(
        n for n in containers.containers_of(boxed, engine, service="worker", every=False)
        if f"farm@{engine.inspect(n)['Config']['Hostname']}" == chunk["worker"]  # type: ignore[index]
    )  # fmt: skip
    stopped = time.time()
    engine.check("stop", "--time", "150", name, timeout_s=300)
    while time.monotonic() < deadline:
        events = [e for e in ledger.events(job_id) if e["event"] == "chunk-interrupted"]
        if events:
            farm.farm("cancel", job_id)
            engine.check("start", name)
            return float(events[0]["t"]) - stopped
        time.sleep(0.05)
    raise RuntimeError("the stopped worker's chunk was never handed back")


def run(quick: bool, rounds: int = 2) -> tuple[dict[str, Any], list[Row]]:
    frames = 8 if quick else 24
    rounds = 1 if quick else rounds
    started = time.monotonic()
    build = subprocess.run(
        [sys.executable, "-m", "farm", "image"],
        capture_output=True, text=True, check=True, timeout=3600, cwd=ROOT,
    )  # fmt: skip
    image_s = time.monotonic() - started
    sizes = {
        line.split()[0]: line.split()[1] for line in build.stdout.splitlines() if ":dev" in line
    }
    procs = LocalFarm(base=Path(tempfile.mkdtemp(prefix="farm-bench-")), workers=2)
    procs.env = _env(procs.base)
    boxed = LocalFarm(base=Path(tempfile.mkdtemp(prefix="farm-bench-c-")), workers=2)
    boxed.env = _env(boxed.base)
    try:
        procs.farm("up", "--data", str(procs.data), "--workers", "2")
        boxed.farm("up", "--containers", "--data", str(boxed.data), "--workers", "2")
        _job(procs, 4)  # each farm's Blenders warm, its scene cached
        _job(boxed, 4)
        process_s = [_job(procs, frames)]
        container_s: list[float] = []
        for _ in range(rounds):
            container_s.append(_job(boxed, frames))
            process_s.append(_job(procs, frames))
        ratios = [c / ((process_s[i] + process_s[i + 1]) / 2) for i, c in enumerate(container_s)]
        handback = _handback_s(boxed)
    finally:
        procs.close()
        containers.down(boxed.data, volumes=True)
    ratio = statistics.median(ratios)
    results = {
        "frames": frames,
        "process_s": [round(s, 2) for s in process_s],
        "container_s": [round(s, 2) for s in container_s],
        "ratios": [round(r, 3) for r in ratios],
        "ratio_median": round(ratio, 3),
        "stop_to_handback_s": round(handback, 2),
        "image_build_cached_s": round(image_s, 1),
        "image_sizes_mb": sizes,
    }
    rows = [
        Row(
            bench="containers",
            case=f"{frames} frames 320x180, 2 workers",
            farm=f"{statistics.median(container_s):.1f} s (containers)",
            baseline=f"{statistics.median(process_s):.1f} s (processes)",
            ratio=round(ratio, 3),
            note=f"podman stop to chunk handed back {handback:.1f} s; make image cached {image_s:.0f} s",
        )
    ]
    return results, rows

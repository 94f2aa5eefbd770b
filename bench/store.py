"""Store: upload and download throughput of frame- and segment-sized files through the farm's
Store (boto3 against the local SeaweedFS), one at a time and concurrently, against local copies.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import LocalFarm, Row
from farm.adapters.store import Store

CONCURRENCY = 8


def _rate(paths: list[Path], fn: Callable[[int, Path], None], threads: int) -> float:
    """MiB/s moving every file in `paths` with `threads` workers."""
    total = sum(p.stat().st_size for p in paths)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(fn, range(len(paths)), paths))
    return total / 2**20 / (time.monotonic() - started)


def _copy(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)


def measure(store: Store, kind: str, files: list[Path], work: Path) -> list[dict[str, Any]]:
    down = work / f"down-{kind}"
    local = work / f"copy-{kind}"
    down.mkdir()
    local.mkdir()
    run_id = time.time_ns()

    def key(i: int) -> str:
        return f"bench/{run_id}/{kind}/{i:05d}"

    out = []
    for threads in (1, CONCURRENCY):
        up = _rate(files, lambda i, p: store.put_file(key(i), p), threads)
        get = _rate(files, lambda i, p: store.get_file(key(i), down / p.name), threads)
        cp = _rate(files, lambda i, p: _copy(p, local / p.name), threads)
        out.append(
            {
                "kind": kind,
                "files": len(files),
                "file_mib": round(files[0].stat().st_size / 2**20, 2),
                "threads": threads,
                "upload_mib_s": round(up, 1),
                "download_mib_s": round(get, 1),
                "local_copy_mib_s": round(cp, 1),
            }
        )
    for i in range(len(files)):
        store.delete(key(i))
    return out


def run(farm: LocalFarm, quick: bool) -> tuple[dict[str, Any], list[Row]]:
    sizes = {"frame": (8, 256 * 1024), "segment": (2, 2 * 2**20)}
    if not quick:
        # A 1080p PNG frame is a few MiB; a 4K chunk segment tens of MiB.
        sizes = {"frame": (64, 4 * 2**20), "segment": (8, 32 * 2**20)}
    store = farm.store()
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="farm-bench-store-") as tmp:
        work = Path(tmp)
        for kind, (count, size) in sizes.items():
            src = work / f"src-{kind}"
            src.mkdir()
            files = []
            for i in range(count):
                path = src / f"{i:05d}.bin"
                path.write_bytes(os.urandom(size))
                files.append(path)
            cases += measure(store, kind, files, work)
    rows = [
        Row(
            bench="store",
            case=f"{c['files']} {c['kind']}s of {c['file_mib']} MiB, {c['threads']} thread(s)",
            farm=f"up {c['upload_mib_s']:.0f} / down {c['download_mib_s']:.0f} MiB/s",
            baseline=f"local copy {c['local_copy_mib_s']:.0f} MiB/s",
            ratio=c["local_copy_mib_s"] / min(c["upload_mib_s"], c["download_mib_s"]),
            note="ratio: local copy / slower of up and down",
        )
        for c in cases
    ]
    return {"cases": cases}, rows

"""The ledger alone, driven as 1,000 workers would drive it: each chunk claimed, its lease renewed,
rendered, claimed again for its segment, done, and the completion gate tried; on one Redis.

Baseline: the same client processes doing the same number of round trips with PING, so the ratio
says how many round trips a chunk transition costs (1.0 would be one trip per transition).
"""

from __future__ import annotations

import multiprocessing
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row
from farm.ledger import Ledger
from farm.pipeline import PHASES, Phase
from farm.plan import plan_chunks
from farm.spec import build_render_spec

RENDER, SEGMENT = PHASES[Phase.RENDER], PHASES[Phase.SEGMENT]
TRANSITIONS_PER_CHUNK = 5
"""Claim, renew, rendered, claim (segment), done: what each chunk asks of the ledger."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _drive(url: str, jobs: list[str], chunks: int, workers: int, offset: int) -> float:
    """One client process: every chunk of `jobs`, as `workers` different workers in turn."""
    ledger = Ledger.from_url(url)
    started = time.perf_counter()
    n = 0
    for job_id in jobs:
        for index in range(chunks):
            worker = f"w{offset + n % workers}"
            n += 1
            claim = ledger.move_chunk(job_id, index, RENDER.running, mode="claim",
                                      only_from=RENDER.claim_from, lease_s=30, worker=worker)  # fmt: skip
            ledger.renew(job_id, index, claim.token, 30)
            ledger.move_chunk(job_id, index, RENDER.done, token=claim.token)
            claim = ledger.move_chunk(job_id, index, SEGMENT.running, mode="claim",
                                      only_from=SEGMENT.claim_from, lease_s=30, worker=worker)  # fmt: skip
            ledger.move_chunk(job_id, index, SEGMENT.done, token=claim.token)
            ledger.try_start_stitch(job_id)
    return time.perf_counter() - started


def _ping(url: str, count: int) -> float:
    ledger = Ledger.from_url(url)
    started = time.perf_counter()
    for _ in range(count):
        ledger.ping()
    return time.perf_counter() - started


def run(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    clients = 4
    jobs, chunks, workers = (8, 50, 1000) if quick else (40, 250, 1000)
    work = Path(tempfile.mkdtemp(prefix="farm-bench-ledger-"))
    port = _free_port()
    server = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port",
         str(port), "--save", "", "--appendonly", "no", "--dir", str(work)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        ledger = Ledger.from_url(url)
        for _ in range(100):
            try:
                ledger.ping()
                break
            except Exception:
                time.sleep(0.05)
        spec = build_render_spec(
            source_name="bench.blend", frames=f"1-{chunks}", chunk_size=1, resolution="64x64",
            fps=24, samples=1, codec="h264",
        )  # fmt: skip
        ids = [f"j-bench-{i:04d}" for i in range(jobs)]
        for job_id in ids:
            ledger.create_job(job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 1),
                              source_key="bench")  # fmt: skip
        slices = [ids[i::clients] for i in range(clients)]
        per = workers // clients
        with multiprocessing.Pool(clients) as pool:
            started = time.perf_counter()
            pool.starmap(_drive, [(url, s, chunks, per, i * per) for i, s in enumerate(slices)])
            wall = time.perf_counter() - started
            trips = jobs * chunks * (TRANSITIONS_PER_CHUNK + 1) // clients
            started = time.perf_counter()
            pool.starmap(_ping, [(url, trips)] * clients)
            ping_wall = time.perf_counter() - started
        done = sum(int(ledger.job(j)["chunks_done"]) for j in ids)
        assert done == jobs * chunks, f"{done} of {jobs * chunks} chunks done"
        transitions = jobs * chunks * TRANSITIONS_PER_CHUNK
        per_s = transitions / wall
        pings_per_s = trips * clients / ping_wall
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "clients": clients,
        "simulated_workers": workers,
        "chunks": jobs * chunks,
        "transitions": transitions,
        "transitions_per_s": round(per_s, 1),
        "chunks_per_s": round(jobs * chunks / wall, 1),
        "ping_round_trips_per_s": round(pings_per_s, 1),
    }
    row = Row(
        bench="ledger",
        case=f"{jobs * chunks} chunks, {workers} workers, {clients} clients",
        farm=f"{per_s:.0f} transitions/s ({jobs * chunks / wall:.0f} chunks/s)",
        baseline=f"{pings_per_s:.0f} PING/s",
        ratio=round(pings_per_s / per_s, 2),
        note="round trips per transition (events and the gate included)",
    )
    return result, [row]

"""Dispatch: trivial chunks per second, queued to done, through the farm's ledger and store, beside
bare Celery tasks that do nothing on the same broker and the same workers.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from celery import Celery

from bench.common import LocalFarm, Row
from bench.tasks import BENCH_NOOP, BENCH_RENDER, TINY_PNG
from farm import keys
from farm.dispatch import Queue, make_app
from farm.plan import plan_chunks
from farm.spec import build_render_spec
from farm.state import ChunkState


def _job(farm: LocalFarm, job_id: str, chunks: int) -> None:
    spec = build_render_spec(
        source_name="bench.blend",
        frames=f"1-{chunks}",
        chunk_size=1,
        resolution="16x16",
        fps=24,
        samples=1,
        codec="h264",
    )
    farm.ledger().create_job(
        job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 1), source_key="bench"
    )


def _wait_done(farm: LocalFarm, job_id: str, total: int, poll_s: float, timeout_s: float) -> None:
    ledger = farm.ledger()
    deadline = time.monotonic() + timeout_s
    while int(ledger.job(job_id).get("chunks_done", 0)) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench job {job_id} did not finish in {timeout_s:.0f} s")
        time.sleep(poll_s)


def farm_throughput(farm: LocalFarm, app: Celery, chunks: int) -> float:
    job_id = f"bench-dispatch-{time.time_ns()}"
    _job(farm, job_id, chunks)
    started = time.monotonic()
    for i in range(chunks):
        app.send_task(BENCH_RENDER, kwargs={"job_id": job_id, "chunk": i}, queue=str(Queue.RENDER))
    _wait_done(farm, job_id, chunks, 0.005, 600)
    return chunks / (time.monotonic() - started)


def farm_latency(farm: LocalFarm, app: Celery, samples: int) -> list[float]:
    """One chunk in flight at a time: send, then watch the ledger until it is done."""
    job_id = f"bench-latency-{time.time_ns()}"
    _job(farm, job_id, samples)
    out = []
    for i in range(samples):
        started = time.monotonic()
        app.send_task(BENCH_RENDER, kwargs={"job_id": job_id, "chunk": i}, queue=str(Queue.RENDER))
        _wait_done(farm, job_id, i + 1, 0.0005, 60)
        out.append(time.monotonic() - started)
    return out


QUEUED = frozenset({ChunkState.QUEUED, ChunkState.INTERRUPTED})
RENDERED = frozenset({ChunkState.RENDERED})


def inprocess_ms(farm: LocalFarm, samples: int) -> dict[str, float]:
    """The ledger and store calls of one trivial chunk made here, without Celery: median ms."""
    job_id = f"bench-inprocess-{time.time_ns()}"
    _job(farm, job_id, samples)
    ledger, store = farm.ledger(), farm.store()
    ledger_s: list[float] = []
    store_s: list[float] = []
    for i in range(samples):
        a = time.perf_counter()
        claim = ledger.move_chunk(
            job_id, i, ChunkState.RENDERING, mode="claim", lease_s=30, only_from=QUEUED
        )
        b = time.perf_counter()
        store.put_bytes(keys.frame_key(job_id, i + 1), TINY_PNG)
        c = time.perf_counter()
        ledger.record_frame(job_id, i + 1, len(TINY_PNG), "0" * 64)
        ledger.move_chunk(job_id, i, ChunkState.RENDERED, token=claim.token)
        claim = ledger.move_chunk(
            job_id, i, ChunkState.ENCODING, mode="claim", lease_s=30, only_from=RENDERED
        )
        d = time.perf_counter()
        store.put_bytes(keys.segment_key(job_id, i), TINY_PNG)
        store.put_json(keys.manifest_key(job_id, i), {"chunk": i})
        e = time.perf_counter()
        ledger.move_chunk(job_id, i, ChunkState.DONE, token=claim.token)
        ledger.try_start_stitch(job_id)
        f = time.perf_counter()
        ledger_s.append((b - a) + (d - c) + (f - e))
        store_s.append((c - b) + (e - d))
    return {
        "ledger_ms": round(statistics.median(ledger_s) * 1000, 2),
        "store_ms": round(statistics.median(store_s) * 1000, 2),
    }


def bare_throughput(app: Celery, tasks: int) -> float:
    started = time.monotonic()
    results = [app.send_task(BENCH_NOOP, queue=str(Queue.RENDER)) for _ in range(tasks)]
    for r in results:
        r.get(timeout=600)
    return tasks / (time.monotonic() - started)


def bare_latency(app: Celery, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        started = time.monotonic()
        app.send_task(BENCH_NOOP, queue=str(Queue.RENDER)).get(timeout=60)
        out.append(time.monotonic() - started)
    return out


def run(farm: LocalFarm, quick: bool) -> tuple[dict[str, Any], list[Row]]:
    chunks, samples = (20, 10) if quick else (500, 100)
    app = make_app(farm.settings(), name="bench")
    bare_latency(app, 3)  # warm the connections on both sides
    farm_lat = farm_latency(farm, app, samples)
    bare_lat = bare_latency(app, samples)
    farm_rate = farm_throughput(farm, app, chunks)
    bare_rate = bare_throughput(app, chunks)
    calls = inprocess_ms(farm, samples)
    result = {
        "workers": farm.workers,
        "chunks": chunks,
        "farm_chunks_per_s": round(farm_rate, 1),
        "bare_tasks_per_s": round(bare_rate, 1),
        "farm_chunk_latency_ms_median": round(statistics.median(farm_lat) * 1000, 1),
        "bare_task_latency_ms_median": round(statistics.median(bare_lat) * 1000, 1),
        "farm_added_ms_per_chunk": round(
            (statistics.median(farm_lat) - statistics.median(bare_lat)) * 1000, 1
        ),
        "inprocess_ledger_ms_per_chunk": calls["ledger_ms"],
        "inprocess_store_ms_per_chunk": calls["store_ms"],
    }
    rows = [
        Row(
            bench="dispatch",
            case=f"{chunks} trivial chunks, {farm.workers} workers",
            farm=f"{farm_rate:.0f} chunks/s",
            baseline=f"{bare_rate:.0f} bare tasks/s",
            ratio=bare_rate / farm_rate,
            note="ratio: bare/farm; a chunk is two tasks (render, encode)",
        ),
        Row(
            bench="dispatch",
            case="latency, one chunk in flight",
            farm=f"{result['farm_chunk_latency_ms_median']} ms",
            baseline=f"{result['bare_task_latency_ms_median']} ms",
            ratio=statistics.median(farm_lat) / statistics.median(bare_lat),
            note=f"farm adds {result['farm_added_ms_per_chunk']} ms per chunk: a second "
            f"Celery hop (encode) plus, measured in-process, {calls['ledger_ms']} ms of ledger "
            f"scripts and {calls['store_ms']} ms of S3 writes (frame, segment, manifest)",
        ),
    ]
    return result, rows

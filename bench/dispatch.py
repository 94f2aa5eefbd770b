"""Dispatch: trivial chunks per second, queued to done, through the worker's own phase runner, the
farm's ledger and store (bench/tasks.py), beside bare Celery tasks that do nothing on the same
broker and the same workers.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import Celery

from bench import cpumeter
from bench.common import LocalFarm, Row
from bench.tasks import BENCH_NOOP, BENCH_RENDER, WORKS, bench_context
from farm.core.pipeline import PHASES, Phase
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.dispatch import Dispatcher, Queue, make_app
from workers.attempt.context import WorkerContext
from workers.attempt.policy import run_chunk_phase
from workers.host.gpu import Capabilities


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


class _Timed:
    """Forwards every call to `inner` and adds up the seconds spent in it (any thread)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - started

        return timed


def inprocess_ms(farm: LocalFarm, app: Celery, samples: int) -> dict[str, float]:
    """One trivial chunk at a time through the worker's phase runner, here, without Celery:
    median ms of the whole chunk and of its time in Ledger and Store calls."""
    job_id = f"bench-inprocess-{time.time_ns()}"
    _job(farm, job_id, samples)
    ledger, store = _Timed(farm.ledger()), _Timed(farm.store())
    with tempfile.TemporaryDirectory(prefix="farm-bench-inprocess-") as scratch:
        ctx = WorkerContext(
            settings=farm.settings(), ledger=ledger, store=store, dispatch=Dispatcher(app),
            caps=Capabilities(), name="bench-inprocess", scratch=Path(scratch),
            queues=(str(Queue.RENDER), str(Queue.ENCODE), str(Queue.STITCH)),
        )  # fmt: skip
        ctx = bench_context(ctx)
        render = PHASES[Phase.RENDER]
        chunk_s, ledger_s, store_s = [], [], []
        for i in range(samples):
            ledger.seconds = store.seconds = 0.0
            started = time.perf_counter()
            result = run_chunk_phase(ctx, job_id, i, render, WORKS)
            chunk_s.append(time.perf_counter() - started)
            assert result.get("done"), result
            ledger_s.append(ledger.seconds)
            store_s.append(store.seconds)
    return {"chunk_ms": _ms(chunk_s), "ledger_ms": _ms(ledger_s), "store_ms": _ms(store_s)}


def _ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000, 2)


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


def cpu_ms_each(
    farm: LocalFarm, count: int, run: Callable[[], float]
) -> tuple[float, dict[str, float]]:
    """`run()`'s result, and the CPU milliseconds each part of the machine spent per one of its
    `count` chunks or tasks: the workers, the store, the broker, Flower, the reconciler, the job
    pages, the bench, and the rest of the machine ('other')."""
    roots = farm.pids()
    before = cpumeter.sample(roots)
    result = run()
    used = cpumeter.spent(before, cpumeter.sample(roots))
    parts = {"workers": sum(s for n, s in used.items() if n.startswith("worker"))}
    names = {"s3": "store", "redis": "broker", cpumeter.SELF: "bench"}
    parts |= {names.get(n, n): s for n, s in used.items() if not n.startswith("worker")}
    return result, {name: round(s * 1000 / count, 2) for name, s in parts.items()}


def _cpu_text(parts: dict[str, float]) -> str:
    return (
        f"{sum(parts.values()):.1f} ms CPU ("
        + ", ".join(f"{name} {ms:.1f}" for name, ms in parts.items())
        + ")"
    )


def run(farm: LocalFarm, quick: bool) -> tuple[dict[str, Any], list[Row]]:
    chunks, samples = (20, 10) if quick else (500, 100)
    app = make_app(farm.settings(), name="bench")
    bare_latency(app, 3)  # warm the connections on both sides
    farm_lat = farm_latency(farm, app, samples)
    bare_lat = bare_latency(app, samples)
    farm_rate, farm_cpu = cpu_ms_each(farm, chunks, lambda: farm_throughput(farm, app, chunks))
    bare_rate, bare_cpu = cpu_ms_each(farm, chunks, lambda: bare_throughput(app, chunks))
    calls = inprocess_ms(farm, app, samples)
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
        "inprocess_chunk_ms": calls["chunk_ms"],
        "inprocess_ledger_ms_per_chunk": calls["ledger_ms"],
        "inprocess_store_ms_per_chunk": calls["store_ms"],
        "cpu_ms_per_chunk": farm_cpu,
        "cpu_ms_per_bare_task": bare_cpu,
    }
    rows = [
        Row(
            bench="dispatch",
            case=f"{chunks} trivial chunks, {farm.workers} workers",
            farm=f"{farm_rate:.0f} chunks/s",
            baseline=f"{bare_rate:.0f} bare tasks/s",
            ratio=bare_rate / farm_rate,
            note="ratio: bare/farm; a chunk is one task (render, then its segment in the same "
            f"task on a worker that encodes); a chunk took {_cpu_text(farm_cpu)}, a bare task "
            f"{_cpu_text(bare_cpu)}; half of bare's rate on these cores leaves a chunk "
            f"{2 * sum(bare_cpu.values()):.1f} ms of CPU in all",
        ),
        Row(
            bench="dispatch",
            case="latency, one chunk in flight",
            farm=f"{result['farm_chunk_latency_ms_median']} ms",
            baseline=f"{result['bare_task_latency_ms_median']} ms",
            ratio=statistics.median(farm_lat) / statistics.median(bare_lat),
            note=f"farm adds {result['farm_added_ms_per_chunk']} ms per chunk; measured "
            f"in-process, a chunk takes {calls['chunk_ms']} ms: {calls['ledger_ms']} ms of "
            f"ledger calls, {calls['store_ms']} ms of S3 writes (frame, segment, manifest)",
        ),
    ]
    return result, rows

"""Prometheus metrics from the ledger (the record), not from Celery (the transport).

`LedgerCollector` takes a census (farm.control.census) on every scrape and turns it into metric
families; `farm web` serves them at /metrics behind the farm's basic auth. KEDA and Grafana read
`farm_backlog_per_worker`, the same number the CloudWatch publisher puts.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from farm.control.census import Census, take
from farm.core.errors import FarmError
from farm.ledger.ports import CensusLedger

log = logging.getLogger(__name__)

DURATION_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
FRAME_BUCKETS_S = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SSIM_BUCKETS = (0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999)
PSNR_BUCKETS_DB = (25.0, 30.0, 35.0, 38.0, 40.0, 42.0, 45.0, 50.0, 60.0)
VMAF_BUCKETS = (50.0, 70.0, 80.0, 85.0, 90.0, 93.0, 95.0, 97.0, 99.0)

METRIC_NAMES = (
    "farm_up",
    "farm_chunks",
    "farm_jobs",
    "farm_workers",
    "farm_queue_backlog_chunks",
    "farm_backlog_per_worker",
    "farm_chunk_attempts_total",
    "farm_chunk_failures_total",
    "farm_chunk_interruptions_total",
    "farm_chunk_lost_leases_total",
    "farm_store_bytes_written_total",
    "farm_store_bytes_read_total",
    "farm_gpu_seconds_total",
    "farm_wasted_gpu_seconds_total",
    "farm_cost_usd_total",
    "farm_wasted_cost_usd_total",
    "farm_chunk_duration_seconds",
    "farm_frame_time_seconds",
    "farm_segment_ssim",
    "farm_segment_psnr_db",
    "farm_segment_vmaf",
)
"""Every family the exporter serves (as named in PromQL; counters carry their _total)."""


def _histogram(
    name: str,
    doc: str,
    label: str,
    samples: Iterable[tuple[str, float, int]],
    buckets: tuple[float, ...],
) -> HistogramMetricFamily:
    """`samples`: (label value, observed value, how many times it was observed)."""
    family = HistogramMetricFamily(name, doc, labels=[label])
    grouped: dict[str, list[tuple[float, int]]] = {}
    for key, value, count in samples:
        grouped.setdefault(key, []).append((value, count))
    for key, observed in sorted(grouped.items()):
        observed.sort()
        values = [value for value, _ in observed]
        below = list(itertools.accumulate([count for _, count in observed], initial=0))
        cumulative = [(str(b), float(below[bisect.bisect_right(values, b)])) for b in buckets]
        cumulative.append(("+Inf", float(below[-1])))
        family.add_metric([key], cumulative, sum_value=sum(v * n for v, n in observed))
    return family


def families(census: Census) -> Iterator[Metric]:
    """The census as Prometheus metric families (pure)."""
    chunks = GaugeMetricFamily(
        "farm_chunks", "Chunks by the queue they wait for or run in, and state.",
        labels=["queue", "state"],
    )  # fmt: skip
    for (queue, state), count in sorted(census.chunks.items()):
        chunks.add_metric([queue, state], count)
    yield chunks
    jobs = GaugeMetricFamily("farm_jobs", "Jobs by state.", labels=["state"])
    for state, count in sorted(census.jobs.items()):
        jobs.add_metric([state], count)
    yield jobs
    workers = GaugeMetricFamily(
        "farm_workers", "Live workers (heartbeat in the last minute) by queue and capability.",
        labels=["queue", "device", "nvenc", "draining"],
    )  # fmt: skip
    for labels, count in sorted(census.workers.items()):
        workers.add_metric(list(labels), count)
    yield workers
    backlog = GaugeMetricFamily(
        "farm_queue_backlog_chunks", "Chunks queued or running per queue.", labels=["queue", "kind"]
    )
    for queue in sorted(census.backlog()):
        backlog.add_metric([queue, "queued"], census.waiting[queue])
        backlog.add_metric([queue, "running"], census.running[queue])
    yield backlog
    per_worker = GaugeMetricFamily(
        "farm_backlog_per_worker",
        "(Queued + running chunks) / serving workers per queue; the queued count with no worker. "
        "What the autoscalers track.",
        labels=["queue"],
    )
    for queue, value in sorted(census.backlog_per_worker().items()):
        per_worker.add_metric([queue], value)
    yield per_worker
    for name, key, doc in (
        ("farm_chunk_attempts", "attempts", "Chunk attempts (tries) started."),
        ("farm_chunk_failures", "failures", "Chunk attempts that failed (budget spent)."),
        ("farm_chunk_interruptions", "interruptions", "Chunks handed back by a leaving worker."),
        ("farm_chunk_lost_leases", "lost_leases", "Chunks whose worker stopped renewing."),
    ):
        yield CounterMetricFamily(name, doc, value=census.counts[key])
    written = CounterMetricFamily(
        "farm_store_bytes_written", "Bytes workers wrote to the object store.", labels=["what"]
    )
    for what in ("frames", "segments", "output"):
        written.add_metric([what], census.store_bytes[what])
    yield written
    read = CounterMetricFamily(
        "farm_store_bytes_read", "Bytes workers read back from the object store.", labels=["what"]
    )
    read.add_metric(["frames"], census.store_bytes_read["frames"])
    yield read
    gpu = CounterMetricFamily(
        "farm_gpu_seconds", "GPU-seconds paid for by chunk attempts (farm.core.cost's meter).",
        labels=["instance_type", "lifecycle"],
    )  # fmt: skip
    for (instance_type, lifecycle), seconds in sorted(census.gpu_s_by_instance.items()):
        gpu.add_metric([instance_type, lifecycle], seconds)
    yield gpu
    for name, key, doc in (
        (
            "farm_wasted_gpu_seconds",
            "wasted_gpu_seconds",
            "GPU-seconds of attempts that kept nothing.",
        ),
        ("farm_cost_usd", "cost_usd", "Dollars spent by chunk attempts, useful or not."),
        ("farm_wasted_cost_usd", "wasted_cost_usd", "Dollars of attempts that kept nothing."),
    ):
        yield CounterMetricFamily(name, doc, value=census.work[key])
    yield _histogram(
        "farm_chunk_duration_seconds", "Wall time of finished chunk phases.", "phase",
        ((phase, s, 1) for phase, s in census.durations_s), DURATION_BUCKETS_S,
    )  # fmt: skip
    yield _histogram(
        "farm_frame_time_seconds", "Blender's time per frame (each chunk's mean, per frame).",
        "engine", (("blender", s, n) for s, n in census.frame_times_s), FRAME_BUCKETS_S,
    )  # fmt: skip
    for metric, doc, buckets in (
        ("ssim", "SSIM of each transcoded segment against its master (1 is identical).",
         SSIM_BUCKETS),
        ("psnr_db", "PSNR in dB of each transcoded segment against its master.", PSNR_BUCKETS_DB),
        ("vmaf", "VMAF (0..100, vmaf_v0.6.1) of each transcoded segment scored for it.",
         VMAF_BUCKETS),
    ):  # fmt: skip
        yield _histogram(
            f"farm_segment_{metric}", doc, "encoder",
            ((encoder, v, 1) for name, encoder, v in census.scores if name == metric), buckets,
        )  # fmt: skip


class LedgerCollector(Collector):
    """Reads the ledger on each scrape; an unreachable Redis gives farm_up 0, not a 500."""

    def __init__(self, census: Callable[[], Census]) -> None:
        self._census = census

    @classmethod
    def for_ledger(cls, ledger: CensusLedger) -> LedgerCollector:
        return cls(lambda: take(ledger))

    def collect(self) -> Iterator[Metric]:
        try:
            census = self._census()
        except FarmError as exc:
            log.warning("scrape could not read the ledger: %s", exc)
            yield GaugeMetricFamily("farm_up", "1 when the ledger answered this scrape.", value=0)
            return
        yield GaugeMetricFamily("farm_up", "1 when the ledger answered this scrape.", value=1)
        yield from families(census)


def registry_for(ledger: CensusLedger) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector.for_ledger(ledger))
    return registry


def scrape(registry: CollectorRegistry) -> bytes:
    """The text exposition format, as /metrics serves it."""
    return generate_latest(registry)

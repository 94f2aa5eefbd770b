"""The farm counted from the ledger: chunks per queue and state, jobs, workers, work done.

One source of numbers for everything that watches the farm: the Prometheus exporter
(farm.web.exporter) and the CloudWatch publisher (`farm metrics publish`) both take a census, so
the autoscalers on AWS and on Kubernetes see the same backlog. Reading is `take`; the rest is pure.
Chunks are counted from the ledger under their phase's queue whatever their project, so the
projects' own queues (farm.core.queues) are in every backlog without reading the broker.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from farm.adapters.metrics import backlog_per_worker
from farm.core import cost
from farm.core.pipeline import PHASES, STITCH, kind_of, running_in, waiting_for
from farm.core.state import JobState
from farm.ledger.ports import CensusLedger

NO_QUEUE = "none"
"""The queue label of a chunk that waits for no phase (done, failed, cancelled)."""

DURATION_FIELDS: dict[str, str] = {"render_s": "render", "encode_s": "encode"}
"""Chunk hash fields holding a phase's wall time, and the phase label they get."""

SCORES = ("ssim", "psnr_db", "vmaf")
"""A scored segment's chunk fields (farm.media.quality.Score.fields); vmaf where it was asked."""
WORK_NAMES = ("gpu_seconds", "wasted_gpu_seconds", "cost_usd", "wasted_cost_usd")
"""What each job's metered cost (farm.core.cost.JobCost, which the ledger's scripts record per
attempt) adds up to; `add_cost` is the hook that maps one onto the other."""


@dataclass(slots=True, kw_only=True)
class Census:
    chunks: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(queue, state) -> chunks, over every job the ledger keeps."""
    jobs: Counter[str] = field(default_factory=Counter)
    """Job state -> jobs."""
    workers: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    """(queue, cycles device, nvenc, draining) -> live workers."""
    waiting: Counter[str] = field(default_factory=Counter)
    """Queue -> chunks of unfinished jobs waiting for that queue's phase (stitching jobs count
    on the stitch queue)."""
    running: Counter[str] = field(default_factory=Counter)
    """Queue -> chunks a worker holds under a lease in that queue's phase."""
    serving: Counter[str] = field(default_factory=Counter)
    """Queue -> live workers taking new work from it (draining ones excluded)."""
    counts: Counter[str] = field(default_factory=Counter)
    """attempts, failures, interruptions, lost_leases (summed over chunks)."""
    work: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WORK_NAMES, 0.0))
    """WORK_NAMES summed over jobs."""
    gpu_s_by_instance: dict[tuple[str, str], float] = field(default_factory=dict)
    """(instance type, lifecycle) -> GPU-seconds."""
    store_bytes: Counter[str] = field(default_factory=Counter)
    """What was written to the store: frames, segments, output."""
    store_bytes_read: Counter[str] = field(default_factory=Counter)
    """What workers read back from it: frames (encodes on another host than the render)."""
    durations_s: list[tuple[str, float]] = field(default_factory=list)
    """(phase, seconds) of every chunk phase that finished."""
    frame_times_s: list[tuple[float, int]] = field(default_factory=list)
    """(mean frame time, frames) of each rendered chunk: its frames count with its mean, one
    entry a chunk (a 100,000-frame job is a thousand entries a scrape, not 100,000)."""
    scores: list[tuple[str, str, float]] = field(default_factory=list)
    """("ssim", "psnr_db" or "vmaf", encoder, value) of each transcoded segment scored
    (farm.media.quality)."""

    def backlog(self) -> Counter[str]:
        """Queued plus running chunks per queue: what the workers on it have to do. Running
        chunks count so that scale-in never targets a busy worker."""
        total: Counter[str] = Counter({str(q.queue): 0 for q in (*PHASES.values(), STITCH)})
        total.update(self.waiting)
        total.update(self.running)
        return total

    def backlog_per_worker(self) -> dict[str, float]:
        return backlog_per_worker(self.backlog(), self.serving)


def _f(value: str | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0


def add_chunk(census: Census, kind_job: dict[str, str], chunk: dict[str, str]) -> None:
    """Count one chunk of a job (pure)."""
    kind = kind_of(kind_job)
    state = chunk.get("state", "")
    active = kind_job.get("state") in (JobState.QUEUED, JobState.RUNNING)
    waits, runs = waiting_for(kind, state), running_in(kind, state)
    queue = NO_QUEUE
    if runs is not None:
        queue = str(runs.queue)
        census.running[queue] += 1
    elif waits is not None:
        queue = str(waits.queue)
        if active:
            census.waiting[queue] += 1
    census.chunks[(queue, state)] += 1
    census.counts["attempts"] += int(_f(chunk.get("attempt")))
    for name in ("failures", "interruptions", "lost_leases"):
        census.counts[name] += int(_f(chunk.get(name)))
    for name, phase in DURATION_FIELDS.items():
        if seconds := _f(chunk.get(name)):
            census.durations_s.append((phase, seconds))
    frame_s, rendered = _f(chunk.get("frame_s")), int(_f(chunk.get("frames_rendered")))
    if frame_s > 0:
        census.frame_times_s.append((frame_s, max(rendered, 1)))
    encoder = chunk.get("encoder", "")
    census.scores += [(m, encoder, _f(chunk[m])) for m in SCORES if chunk.get(m)]
    census.store_bytes["segments"] += int(_f(chunk.get("segment_bytes")))
    census.store_bytes_read["frames"] += int(_f(chunk.get("frames_fetched_bytes")))


def add_cost(census: Census, spent: cost.JobCost) -> None:
    """Count one job's metered GPU time and money (pure)."""
    census.work["gpu_seconds"] += spent.gpu_s
    census.work["wasted_gpu_seconds"] += spent.wasted_gpu_s
    census.work["cost_usd"] += spent.spent
    census.work["wasted_cost_usd"] += spent.wasted
    for where, seconds in spent.by_instance.items():
        instance_type, _, lifecycle = where.partition(" ")
        key = (instance_type, lifecycle)
        census.gpu_s_by_instance[key] = census.gpu_s_by_instance.get(key, 0.0) + seconds


def add_workers(census: Census, workers: dict[str, dict[str, Any]]) -> None:
    """Count live workers from their heartbeats (pure)."""
    for info in workers.values():
        draining = "true" if info.get("draining") else "false"
        device = str(info.get("cycles_device") or "CPU")
        nvenc = "true" if info.get("nvenc") else "false"
        for queue in info.get("queues", []):
            census.workers[(str(queue), device, nvenc, draining)] += 1
            if draining == "false":
                census.serving[str(queue)] += 1


def take(ledger: CensusLedger, limit: int = 1000) -> Census:
    """Read the ledger once: the newest `limit` jobs (as many as the reconciler watches), their
    chunks and metered cost, and the live workers. Totals (attempts, bytes, GPU-seconds) are
    over those jobs: a job falling out of the window, or `farm retry` clearing a chunk's
    counters, reads to Prometheus as a counter reset."""
    census = Census()
    for job, chunks, cost_hash in ledger.job_records(limit):
        if not job:
            continue
        census.jobs[job.get("state", "")] += 1
        if job.get("state") == JobState.STITCHING:
            census.waiting[str(STITCH.queue)] += 1
        for chunk in chunks:
            if chunk:
                add_chunk(census, job, chunk)
        census.store_bytes["frames"] += int(_f(job.get("frame_bytes")))
        census.store_bytes["output"] += int(_f(job.get("output_size")))
        add_cost(census, cost.job_cost(cost_hash))
    add_workers(census, ledger.workers())
    return census

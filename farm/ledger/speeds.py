"""Each worker's speed beside its peers', as the ledger's render chunks tell it (`rendered_by`,
`frame_s`), and the pool of render workers a job is sized for: what `--chunk-size auto` sizes
with instead of assuming equal workers. A reader of the ledger through its view, not part of
it: the control plane and the workers both import it."""

from __future__ import annotations

from collections.abc import Iterable

from farm.adapters.settings import Settings
from farm.core.chunking import Pool, worker_factors
from farm.ledger.ports import SizingLedger

HISTORY_JOBS = 5
"""Recent jobs whose chunks tell each worker's speed (every chunk of each is read: keep it few)."""


def frame_times(ledger: SizingLedger, jobs: int = HISTORY_JOBS) -> list[dict[str, float]]:
    """Per recent job, each worker's mean frame time there, from its render chunks' records."""
    found = []
    for _job, chunks, _cost in ledger.job_records(jobs):
        per: dict[str, list[float]] = {}
        for chunk in chunks:
            worker = chunk.get("rendered_by") or ""
            try:
                frame_s = float(chunk.get("frame_s") or 0)
            except ValueError:
                continue
            if worker and frame_s > 0:
                per.setdefault(worker, []).append(frame_s)
        found.append({w: sum(t) / len(t) for w, t in per.items()})
    return found


def factors_for(ledger: SizingLedger, workers: Iterable[str]) -> tuple[float, ...]:
    """The frame-time factors of these workers (1.0 for one never measured beside others);
    empty when no worker was ever measured, so sizing assumes equal workers as before."""
    known = worker_factors(frame_times(ledger))
    return tuple(known.get(w, 1.0) for w in workers) if known else ()


def render_pool(settings: Settings, ledger: SizingLedger) -> Pool:
    """The render workers a job would run on now, as the sizing rule sees them: the one pool a
    job's chunks are sized for at submit, in an estimate and after an auto-sized job's probe, so
    the three agree."""
    render_workers = [n for n, w in ledger.workers().items() if "render" in w.get("queues", [])]
    return Pool(
        workers=max(len(render_workers), 1),
        interruption_per_h=settings.spot_interruption_per_h,
        detect_s=settings.recovery_bound_s,
        frame_factors=factors_for(ledger, render_workers),
        splits=True,  # idle workers split running chunks (farm.core.split, workers.phases.splitter)
    )

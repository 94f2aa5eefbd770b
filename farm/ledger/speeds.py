"""Each worker's speed beside its peers', as the ledger's render chunks tell it (`rendered_by`,
`frame_s`): what `--chunk-size auto` sizes with instead of assuming equal workers."""

from __future__ import annotations

from collections.abc import Iterable

from farm.core.chunking import worker_factors
from farm.ledger import Ledger

HISTORY_JOBS = 5
"""Recent jobs whose chunks tell each worker's speed (every chunk of each is read: keep it few)."""


def frame_times(ledger: Ledger, jobs: int = HISTORY_JOBS) -> list[dict[str, float]]:
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


def factors_for(ledger: Ledger, workers: Iterable[str]) -> tuple[float, ...]:
    """The frame-time factors of these workers (1.0 for one never measured beside others);
    empty when no worker was ever measured, so sizing assumes equal workers as before."""
    known = worker_factors(frame_times(ledger))
    return tuple(known.get(w, 1.0) for w in workers) if known else ()

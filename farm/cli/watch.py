"""`farm watch`: a live view of the farm's jobs, or of one job's chunks, workers, progress, ETA and
cost, redrawn by rich's Live until interrupted; and the summaries `farm status` and `jobs` print.
"""

from __future__ import annotations

import time
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from farm.control.status import job_status
from farm.core.cost import money
from farm.core.pipeline import running_states
from farm.core.report import (
    Printable,
    eta_s,
    progress_line,
    status_table,
    terminal_clock,
)
from farm.ledger import Ledger


def summarize(ledger: Ledger, job_id: str, with_chunks: bool = True) -> dict[str, Any]:
    """A job's summary with its priority, pause reason and cost (spent, wasted, to finish), as
    the API shows it too (farm.control.status)."""
    return job_status(ledger, job_id, with_chunks=with_chunks)


def workers_table(
    workers: dict[str, dict[str, Any]], chunks: list[dict[str, Any]] | None = None
) -> Table:
    """The live workers; with a job's `chunks`, what each does of that job ("rendering chunk 3")
    or that it does nothing of it; without, only whether it is up or draining."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left")
    for name in ("worker", "queues", "state", "seen"):
        table.add_column(name)
    doing: dict[str, list[str]] = {}
    held = running_states()
    for chunk in chunks or []:
        if chunk["state"] in held and chunk["worker"]:
            doing.setdefault(chunk["worker"], []).append(f"{chunk['state']} chunk {chunk['index']}")
    now = time.time()
    for name, info in sorted(workers.items()):
        if info.get("draining"):
            state = "draining"
        elif chunks is None:
            state = "up"
        else:
            state = ", ".join(doing.get(name, [])) or "none of this job"
        table.add_row(
            name,
            ",".join(info.get("queues", [])),
            state,
            f"{now - float(info.get('seen', now)):.0f}s ago",
        )
    return table


def job_view(summary: dict[str, Any], workers: dict[str, dict[str, Any]]) -> Group:
    """One job: its progress line, status and cost, its chunks, then the workers."""
    return Group(
        f"{progress_line(summary)}  priority {summary['priority']}",
        status_table(summary),
        "",
        workers_table(workers, summary["chunks"]),
    )


def _eta(summary: dict[str, Any]) -> str:
    left = eta_s(summary) if summary["state"] == "running" else None
    return "" if left is None else terminal_clock(left)


def farm_view(rows: list[dict[str, Any]], workers: dict[str, dict[str, Any]]) -> Group:
    """Every recent job with its progress, ETA and cost, then the workers."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name in ("job", "state", "pri", "chunks", "frames", "eta", "cost", "wasted", "source"):
        table.add_column(name, justify="right" if name in ("pri", "cost", "wasted") else "left")
    for row in rows:
        c = row["cost"]
        table.add_row(row["id"], row["state"], str(row["priority"]),
                      f"{row['chunks_done']}/{row['chunks_total']}",
                      f"{row['frames_rendered']}/{row['frames_total']}", _eta(row),
                      money(c["spent"]), money(c["wasted"]),
                      row["spec"].get("source_name", ""))  # fmt: skip
    return Group(
        f"farm: {len(rows)} jobs, {len(workers)} workers  (Ctrl-C to stop watching)",
        table,
        "",
        workers_table(workers),
    )


def view(ledger: Ledger, job_id: str | None, limit: int = 20) -> Printable:
    """What `farm watch` draws, its text as report.printable writes it (a scene's names and
    errors reach the terminal straight from here)."""
    workers = ledger.workers()
    if job_id:
        return Printable(job_view(summarize(ledger, job_id), workers))
    rows = [summarize(ledger, j, with_chunks=False) for j in ledger.job_ids(limit)]
    return Printable(farm_view(rows, workers))


def watch(
    ledger: Ledger,
    job_id: str | None,
    *,
    interval_s: float = 1.0,
    console: Console | None = None,
    limit: int = 20,
) -> None:
    """Redraw until interrupted (Ctrl-C)."""
    console = console or Console(markup=False)  # text from the scene is never markup
    with Live(view(ledger, job_id, limit), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval_s)
                live.update(view(ledger, job_id, limit), refresh=True)
        except KeyboardInterrupt:
            return

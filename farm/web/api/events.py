"""GET /api/v1/jobs/{id}/events: a job followed as server-sent events.

The body is an iterator of polls, each one quick read of the ledger: the bytes to send, or b""
when nothing changed. farm.web.server's streaming path paces the polls (about once a second, in
its thread pool) and writes each answer as it comes, which tornado's WSGIContainer, buffering the
whole body, cannot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from farm.control.status import StatusLedger, job_status
from farm.core.state import ENDED

KEEPALIVE_S = 15.0
"""A comment line this often while nothing changes: proxies keep the connection, and a client
that went away is noticed when the write fails."""


def event(name: str, data: dict[str, Any]) -> bytes:
    """One event in the text/event-stream format (the JSON is one line: no newline splits it)."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _step(summary: dict[str, Any]) -> str:
    """What an event is sent for: the job's state, its progress, its chunks' states and the rest
    a person would see change, never its clock (elapsed time changes at every poll)."""
    chunks = [
        (c["state"], c["frames_rendered"], c["attempt"], c["worker"], c["error"])
        for c in summary.get("chunks", [])
    ]
    seen = {k: summary.get(k) for k in ("state", "chunks_done", "chunks_total", "frames_rendered",
                                        "output", "error", "priority", "paused_reason")}  # fmt: skip
    return json.dumps([seen, chunks], sort_keys=True)


def job_events(
    ledger: StatusLedger,
    job_id: str,
    *,
    keepalive_s: float = KEEPALIVE_S,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[bytes]:
    """`event: status` with the job's summary at once and at each change, a keepalive comment
    when nothing was sent for `keepalive_s`, and `event: end` with the last summary when the job
    ends (or is gone from the ledger), which ends the stream."""
    last, sent_at = "", clock()
    while True:
        job = ledger.job(job_id)
        if not job:
            yield event("end", {"id": job_id, "state": "", "error": "the ledger no longer has it"})
            return
        summary = job_status(ledger, job_id, job)
        if summary["state"] in ENDED:
            yield event("end", summary)
            return
        step = _step(summary)
        if step != last:
            last, sent_at = step, clock()
            yield event("status", summary)
        elif clock() - sent_at >= keepalive_s:
            sent_at = clock()
            yield b": keepalive\n\n"
        else:
            yield b""

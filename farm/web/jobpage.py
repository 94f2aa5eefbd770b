"""The job pages as HTML (pure): the list of jobs and one job's frames, chunks and video.

The markup is in templates/ (Jinja2, every value escaped); here is what the pages compute.
Plain HTML and one stylesheet, no JavaScript framework; the only script is an attribute on each
thumbnail that records whether it loaded (data-loaded), which the browser test reads, and the
pages' Content-Security-Policy allows exactly that script.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from farm.core.cost import money as cost_money
from farm.core.report import chunk_score_text, elapsed_text, eta_s, vmaf_text
from farm.media.streamnotes import status_lines

Cost = tuple[float, float]
"""(spent, expected total) in dollars (farm.core.cost.Spend)."""
INLINE_HANDLERS = ("this.dataset.loaded=this.naturalWidth", "this.dataset.loaded='error'")
"""The pages' only script, as written in templates/job.html: each thumbnail's onload and onerror."""


def content_security_policy(media_origin: str = "") -> str:
    """The pages' CSP: nothing loads but the farm's own thumbnails and the video (redirected to
    the store, at `media_origin`); styles inline (the one stylesheet and the bars' widths,
    numbers only); no script but INLINE_HANDLERS, by hash, and the farm's own player files
    (/static: hls.js, which fetches a ladder's package from this origin into a blob: source);
    no frame may hold a page."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(h.encode()).digest()).decode() + "'"
        for h in INLINE_HANDLERS
    )
    return "; ".join([
        "default-src 'none'", "img-src 'self'", f"media-src 'self' blob: {media_origin}".strip(),
        "style-src 'unsafe-inline'", f"script-src 'self' 'unsafe-hashes' {hashes}",
        "connect-src 'self'",
        "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'",
    ])  # fmt: skip


def login_policy() -> str:
    """The login page's CSP: its one form posts to this server, and nothing else loads."""
    return "; ".join([
        "default-src 'none'", "style-src 'unsafe-inline'", "form-action 'self'",
        "frame-ancestors 'none'", "base-uri 'none'",
    ])  # fmt: skip


def clock(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60:d}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def money(cost: Cost | None) -> str:
    if cost is None:
        return ""
    spent, total = cost  # as `farm status` writes them: a local farm spends fractions of a cent
    return cost_money(spent) + (f" of ~{cost_money(total)}" if total > spent + 0.00005 else "")


def _share(summary: dict[str, Any]) -> str:
    """The progress bar's width in percent."""
    total = max(int(summary["frames_total"]), 1)
    share = 100 if summary["state"] == "done" else 100 * summary["frames_rendered"] / total
    return f"{share:.0f}"


def _utc(t: float, fmt: str = "%Y-%m-%dT%H:%M:%SZ") -> str:
    return time.strftime(fmt, time.gmtime(t))


def _log_label(name: str) -> str:
    """`00003-render-attempt2-claim5.log` -> `render 2`: the chunk is the row already."""
    match = re.match(r"^\d+-(\w+)-attempt(\d+)(?:-claim\d+)?\.log$", name)
    return f"{match.group(1)} {match.group(2)}" if match else name


_PAGES = Environment(
    loader=PackageLoader("farm.web", "templates"),
    autoescape=True,  # every template is HTML: a job's name, error or log name is text
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_PAGES.filters.update(
    clock=clock,
    money=money,
    dollars=cost_money,
    share=_share,
    utc=_utc,
    log_label=_log_label,
    eta=eta_s,
    elapsed=lambda summary: elapsed_text(summary, clock),
)


def jobs_page(rows: list[tuple[dict[str, Any], Cost | None]]) -> str:
    """`rows`: each job's summary (farm.core.report.job_summary) and its cost, when metered."""
    with_cost = any(cost is not None for _, cost in rows)
    return _PAGES.get_template("jobs.html").render(rows=rows, with_cost=with_cost)


def _lane(
    started: float | None, finished: float | None, start: float, span: float
) -> dict[str, float] | None:
    """Where a chunk's bar sits on the job's timeline, in percent of the whole."""
    if not started or span <= 0:
        return None
    left = 100 * (started - start) / span
    return {"left": left, "width": max(100 * ((finished or start + span) - started) / span, 0.5)}


def job_page(
    summary: dict[str, Any],
    *,
    chunk_times: dict[int, tuple[float | None, float | None]],
    thumbs: list[int],
    logs: dict[int, list[str]],
    cost: Cost | None,
    now: float | None = None,
    files: bool = True,
    preview: list[int] | None = None,
) -> str:
    """One job: its preview frames (`--preview`) and latest frames as thumbnails, a per-chunk
    timeline and the video when done. `preview`: the preview frames that have a thumbnail.
    `chunk_times`: (started, finished) per chunk; `thumbs`: frame numbers that have one;
    `logs`: each chunk's attempt log names; `files`: whether the video and the logs are linked
    (a user logged in sees those of their own jobs, or all as a wrangler)."""
    now = now or time.time()
    starts = [t[0] for t in chunk_times.values() if t[0]]
    start = min(starts) if starts else now
    ends = [t[1] or now for t in chunk_times.values() if t[0]]
    span = (max(ends) - start) if ends else 0.0
    chunks = []
    for c in summary["chunks"]:
        started, finished = chunk_times.get(c["index"], (None, None))
        chunks.append({
            "index": c["index"], "frames": c["frames"], "state": c["state"],
            "worker": c["worker"], "attempt": c["attempt"], "started": started,
            "finished": finished, "lane": _lane(started, finished, start, span),
            "duration": clock(finished - started) if started and finished else "",
            "logs": logs.get(c["index"], []) if files else [],
            "error": c["error"].splitlines()[0][:300] if c["error"] else "",
            "score": chunk_score_text(c),
            "vmaf": vmaf_text(c),
        })  # fmt: skip
    page = _PAGES.get_template("job.html")
    # A transcode's streams and what the job does with each, as `farm status` lists them.
    streams = [line.removeprefix("streams ") for line in status_lines(summary["spec"])]
    return page.render(s=summary, cost=cost, thumbs=thumbs, chunks=chunks, files=files,
                       preview=preview or [], streams=streams)  # fmt: skip


def not_found(what: str) -> str:
    return _PAGES.get_template("not_found.html").render(what=what)


def login_page(error: str = "") -> str:
    """The form that takes an API token (`farm user add` prints one) for a session."""
    return _PAGES.get_template("login.html").render(error=error)

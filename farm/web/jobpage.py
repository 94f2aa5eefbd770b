"""The job pages as HTML (pure): the list of jobs and one job's frames, chunks and video.

Plain HTML and one stylesheet, no JavaScript framework; the only script is an attribute on each
thumbnail that records whether it loaded (data-loaded), which the browser test reads.
"""

from __future__ import annotations

import re
import time
from html import escape
from typing import Any
from urllib.parse import quote

from farm.core.cost import money as cost_money
from farm.core.report import elapsed_text, eta_s

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse}td,th{padding:.25em .7em;white-space:nowrap;text-align:left;border-bottom:1px solid #ddd}
.state{font-weight:600}.done{color:#176f2c}.failed,.cancelled{color:#b3261e}
.running,.rendering,.encoding,.transcoding,.stitching{color:#0b57d0}
.bar{background:#e3e3e3;width:12em;height:.8em;display:inline-block}
.bar span{background:#0b57d0;height:100%;display:block}
.thumbs{display:flex;flex-wrap:wrap;gap:.5em}.thumbs figure{margin:0;font-size:.8em}
.thumbs img{display:block;max-width:200px;border:1px solid #ccc}
.lane{position:relative;background:#eee;width:16em;height:.9em}
.lane span{position:absolute;top:0;height:100%;background:#7aa7f0}
.error{color:#b3261e;max-width:40em;white-space:pre-wrap;font-size:.85em}
td .error{white-space:normal}
"""


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}'
        f"</title><style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def clock(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60:d}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _when(t: float | None) -> str:
    """The time of day in UTC (marked Z), its date and all in the element for a job that runs
    over midnight or for days."""
    if not t:
        return ""
    at = time.gmtime(t)
    full = time.strftime("%Y-%m-%dT%H:%M:%SZ", at)
    return f'<time datetime="{full}" title="{full}">{time.strftime("%H:%M:%SZ", at)}</time>'


Cost = tuple[float, float]
"""(spent, expected total) in dollars (farm.core.cost.Spend)."""


def money(cost: Cost | None) -> str:
    if cost is None:
        return ""
    spent, total = cost  # as `farm status` writes them: a local farm spends fractions of a cent
    return cost_money(spent) + (f" of ~{cost_money(total)}" if total > spent + 0.00005 else "")


def _progress(summary: dict[str, Any]) -> str:
    total = max(int(summary["frames_total"]), 1)
    share = 100 if summary["state"] == "done" else 100 * summary["frames_rendered"] / total
    return (
        f'<span class="bar" title="{share:.0f}%"><span style="width:{share:.0f}%"></span></span> '
        f"{summary['frames_rendered']}/{summary['frames_total']} frames, "
        f"{summary['chunks_done']}/{summary['chunks_total']} chunks"
    )


def jobs_page(rows: list[tuple[dict[str, Any], Cost | None]]) -> str:
    """`rows`: each job's summary (farm.core.report.job_summary) and its cost, when metered."""
    with_cost = any(cost is not None for _, cost in rows)
    head = "<tr><th>job</th><th>kind</th><th>state</th><th>progress</th><th>elapsed</th>"
    head += "<th>ETA</th>" + ("<th>cost</th>" if with_cost else "") + "<th>source</th></tr>"
    lines = []
    for s, cost in rows:
        state = escape(s["state"])
        eta = clock(eta_s(s)) if s["state"] in ("queued", "running") else ""
        cells = [
            f'<a href="/jobs/{quote(s["id"])}">{escape(s["id"])}</a>',
            escape(s["kind"]),
            f'<span class="state {state}">{state}</span>',
            _progress(s),
            elapsed_text(s, clock),
            eta,
        ]
        if with_cost:
            cells.append(money(cost))
        cells.append(escape(str(s["spec"].get("source_name", ""))))
        row = "".join(f"<td>{c}</td>" for c in cells)
        lines.append(
            f'<tr class="job" data-job="{escape(s["id"])}" data-state="{state}">{row}</tr>'
        )
    table = f'<table id="jobs">{head}{"".join(lines)}</table>' if lines else "<p>No jobs yet.</p>"
    return _page("farm: jobs", f"<h1>Jobs</h1>{table}")


def _log_label(name: str) -> str:
    """`00003-render-attempt2.log` -> `render 2`: the chunk is the row already."""
    match = re.match(r"^\d+-(\w+)-attempt(\d+)\.log$", name)
    return f"{match.group(1)} {match.group(2)}" if match else name


def _timeline(chunk: dict[str, Any], start: float, span: float) -> str:
    started, finished = chunk.get("started"), chunk.get("finished")
    if not started or span <= 0:
        return '<div class="lane"></div>'
    left = 100 * (started - start) / span
    width = max(100 * ((finished or start + span) - started) / span, 0.5)
    return f'<div class="lane"><span style="left:{left:.1f}%;width:{width:.1f}%"></span></div>'


def job_page(
    summary: dict[str, Any],
    *,
    chunk_times: dict[int, tuple[float | None, float | None]],
    thumbs: list[int],
    logs: dict[int, list[str]],
    cost: Cost | None,
    now: float | None = None,
) -> str:
    """One job: its latest frames as thumbnails, a per-chunk timeline and the video when done.
    `chunk_times`: (started, finished) per chunk; `thumbs`: frame numbers that have one;
    `logs`: each chunk's attempt log names."""
    now = now or time.time()
    job_id = quote(summary["id"])
    state = escape(summary["state"])
    facts = [
        f'state <span class="state {state}" id="job-state">{state}</span>',
        _progress(summary),
        f"elapsed {elapsed_text(summary, clock)}",
    ]
    if summary["state"] in ("queued", "running"):
        facts.append(f"ETA {clock(eta_s(summary)) or '?'}")
    if cost is not None:
        facts.append(f"cost {money(cost)}")
    body = [f'<p><a href="/">all jobs</a></p><h1>Job {escape(summary["id"])}</h1>']
    body.append("<p>" + " · ".join(facts) + "</p>")
    if summary["error"]:
        body.append(f'<p class="error">{escape(summary["error"])}</p>')
    if summary["state"] == "done" and summary["output"]:
        body.append(
            f'<h2>Video</h2><video id="video" controls preload="metadata" width="480" '
            f'src="/jobs/{job_id}/video.mp4"></video>'
        )
    body.append("<h2>Latest frames</h2>")
    if thumbs:
        figures = "".join(
            f'<figure><img class="thumb" alt="frame {f}" src="/jobs/{job_id}/thumbs/{f}.jpg" '
            'onload="this.dataset.loaded=this.naturalWidth" onerror="this.dataset.loaded=\'error\'">'
            f"<figcaption>frame {f}</figcaption></figure>"
            for f in thumbs
        )
        body.append(f'<div class="thumbs">{figures}</div>')
    else:
        body.append("<p>No frames yet.</p>")
    starts = [t[0] for t in chunk_times.values() if t[0]]
    start = min(starts) if starts else now
    ends = [t[1] or now for t in chunk_times.values() if t[0]]
    span = (max(ends) - start) if ends else 0.0
    head = (
        "<tr><th>chunk</th><th>frames</th><th>state</th><th>worker</th><th>attempts</th>"
        "<th>started</th><th>finished</th><th>time</th><th>timeline</th><th>logs</th>"
        "<th>error</th></tr>"
    )
    rows = []
    for c in summary["chunks"]:
        started, finished = chunk_times.get(c["index"], (None, None))
        cstate = escape(c["state"])
        links = " ".join(
            f'<a href="/jobs/{job_id}/logs/{quote(name)}" title="{escape(name)}">'
            f"{escape(_log_label(name))}</a>"
            for name in logs.get(c["index"], [])
        )
        error = escape(c["error"].splitlines()[0][:300]) if c["error"] else ""
        duration = clock(finished - started) if started and finished else ""
        cells = [
            str(c["index"]), escape(c["frames"]), f'<span class="state {cstate}">{cstate}</span>',
            escape(c["worker"]), str(c["attempt"]), _when(started), _when(finished), duration,
            _timeline({"started": started, "finished": finished}, start, span), links,
            f'<span class="error">{error}</span>',
        ]  # fmt: skip
        row = "".join(f"<td>{cell}</td>" for cell in cells)
        rows.append(f'<tr class="chunk" data-chunk="{c["index"]}" data-state="{cstate}">{row}</tr>')
    body.append(f'<h2>Chunks</h2><table id="chunks">{head}{"".join(rows)}</table>')
    return _page(f"farm: job {summary['id']}", "".join(body))


def not_found(what: str) -> str:
    return _page("farm: not found", f'<p><a href="/">all jobs</a></p><h1>{escape(what)}</h1>')

"""What `farm watch` and `farm status` draw (pure: summaries in, text out)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

from rich.console import Console

from farm.cli.watch import farm_view, job_view
from farm.core import cost
from farm.core.report import Printable, job_summary, to_text


def _summary(state: str = "running") -> dict[str, Any]:
    now = time.time()
    job = {"id": "j-1", "kind": "render", "state": state, "chunks_total": "2", "chunks_done": "1",
           "frames_total": "4", "created": str(now - 60), "spec": json.dumps({"source_name": "s.blend"})}  # fmt: skip
    chunks = [
        {"index": "0", "state": "done", "frames": "[1, 2]", "frames_rendered": "2", "worker": "w1"},
        {"index": "1", "state": "rendering", "frames": "[3, 4]", "worker": "w1"},
    ]
    summary = job_summary(job, chunks, now=now)
    spend = cost.spend_of(job, cost.job_cost({"cost": "0.5", "wasted_cost": "0.1",
                                              "attempts": "3", "wasted_attempts": "1"}), 2)  # fmt: skip
    summary.update(priority=70, paused_reason="", cost=spend.to_json())
    return summary


def test_the_job_view_shows_progress_chunks_cost_and_workers() -> None:
    text = to_text(job_view(_summary(), {"w1": {"queues": ["render"], "seen": time.time()}}))
    assert "job j-1" in text and "priority 70" in text
    assert "$0.5000 spent, $0.1000 wasted (1/3 attempts)" in text
    assert "$0.5000 and " in text  # two frames of four at $0.25 each still to pay
    chunk_lines = [line for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert any("done" in line for line in chunk_lines)
    assert any("rendering" in line for line in chunk_lines)
    assert "w1" in text and "render" in text
    worker_line = next(line for line in text.splitlines() if line.startswith("w1 "))
    assert "rendering chunk 1" in worker_line  # what the worker does, not a constant "ready"


def test_the_farm_view_lists_jobs_with_eta_and_cost() -> None:
    row = _summary()
    text = to_text(farm_view([row], {}))
    line = next(x for x in text.splitlines() if x.startswith("j-1"))
    assert "running" in line and "70" in line and "$0.5000" in line and "s.blend" in line
    assert "01:00" in line  # half the frames in a minute: a minute to go
    slow = {**row, "active_s": 7200, "elapsed_s": 7200}
    slow_line = next(x for x in to_text(farm_view([slow], {})).splitlines() if x.startswith("j-1"))
    assert "2h00m" in slow_line  # as `farm status` writes it, not "120:00"


def test_scene_names_and_errors_are_shown_as_written_never_as_markup() -> None:
    """Found by a review: rich read "[/b]" in a scene's name as a closing tag, and `farm jobs`,
    `status` and `watch` stopped with a MarkupError (and "[red]" vanished from a name)."""
    row = _summary()
    row["spec"] = {"source_name": "shot[/b]010.blend"}
    row["error"] = "Blender: cannot read [red]//tex/a.png[/red]"
    text = to_text(farm_view([row], {}), width=200)
    assert "shot[/b]010.blend" in text
    text = to_text(job_view(row, {}), width=200)
    assert "cannot read [red]//tex/a.png[/red]" in text


def test_an_ended_job_has_no_time_or_money_to_go() -> None:
    """Found by a review: a cancelled job half done still said "to go $0.0000 and 01:00
    expected", and watch an ETA."""
    text = to_text(job_view(_summary("cancelled"), {}))
    assert "to go" not in text and "$0.5000 spent" in text
    line = next(x for x in to_text(farm_view([_summary("failed")], {})).splitlines() if "j-1" in x)
    assert "01:00" not in line


def test_escape_sequences_from_a_scene_never_reach_the_terminal() -> None:
    """Found by a review: object names and paths in a .blend reach `farm status`, `jobs`,
    `watch` and `logs` through Blender's errors; an escape sequence in one (OSC 52 sets the
    reader's clipboard, CSI 2J clears the screen) was printed as it was."""
    row = _summary("failed")
    chunk = {"index": "0", "state": "failed", "frames": "[1, 2]", "worker": "w1",
             "error": "missing //tex/\x1b]52;c;ZXZpbA==\x07a.png"}  # fmt: skip
    job = {"id": "j-1", "kind": "render", "state": "failed", "chunks_total": "1",
           "error": "chunk 0 failed: \x1b[2J", "spec": json.dumps({"source_name": "s\x1b[31m.blend"})}  # fmt: skip
    row = {**job_summary(job, [chunk]), "priority": 50, "paused_reason": "", "cost": row["cost"]}
    for text in (to_text(job_view(row, {}), width=200), to_text(farm_view([row], {}), width=200)):
        assert "\x1b" not in text and "\x07" not in text
    text = to_text(job_view(row, {}), width=200)
    assert "chunk 0 failed: \\x1b[2J" in text and "missing //tex/\\x1b]52;c;ZXZpbA==" in text
    assert "s\\x1b[31m.blend" in to_text(farm_view([row], {}), width=200)
    # farm watch draws straight to the terminal, not through to_text.
    live = io.StringIO()
    Console(file=live, width=200, color_system=None, markup=False).print(
        Printable(job_view(row, {}))
    )
    assert "\x1b" not in live.getvalue() and "chunk 0 failed: \\x1b[2J" in live.getvalue()
    assert row["error"] == "chunk 0 failed: \x1b[2J"  # the data (status --json) as it is

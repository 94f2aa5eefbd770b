"""`submit --estimate`'s probe job against a real Redis: its timings come from every chunk it ended
with (an idle worker may split its one chunk), and a wait that is interrupted cancels it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from farm.adapters.settings import Settings
from farm.control import estimate
from farm.core.state import JobState
from farm.ledger import Ledger
from tests.integration.conftest import make_job


def _chunk(frames: list[int], **fields: float) -> dict[str, str]:
    return {"frames": json.dumps(frames), **{k: str(v) for k, v in fields.items()}}


def test_a_split_probe_is_timed_from_both_parts_not_its_first_over_every_frame() -> None:
    """Seen on a 2-worker farm: the probe's chunk of frames 1, 60, 119 split after frame 60; read
    as chunk 0 over three frames, its start-up came out 0 s and the next job was cut into
    one-frame chunks."""
    first = _chunk([1, 60], gpu_s=75.3, blender_startup_s=1.0, fetch_s=0.1, render_s=74.0,
                   frame_s=36.0)  # fmt: skip
    rest = _chunk([119], gpu_s=36.2, blender_startup_s=1.0, fetch_s=0.1, render_s=35.0,
                  frame_s=34.0)  # fmt: skip
    m = estimate.measured([first, rest], "probe")
    assert m.startup_s == pytest.approx((2.4 + 2.2) / 2)
    assert m.frame_s == pytest.approx((36.45 * 2 + 34.0) / 3)
    assert estimate.probe_measurement(first, 3, "probe").startup_s == 0.0  # the old reading


def test_an_interrupted_wait_cancels_the_probe_job(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []

    def submit(*_: Any, **__: Any) -> SimpleNamespace:
        make_job(ledger, "probe-1", frames="1-3", chunk_size=3)
        return SimpleNamespace(job_id="probe-1")

    def ctrl_c(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("farm.control.intake.submit", submit)
    monkeypatch.setattr(estimate.time, "sleep", ctrl_c)
    spec = make_job(ledger, "the-job", frames="1-240")
    with pytest.raises(KeyboardInterrupt):
        estimate.probe(Settings(), ledger, spec, Path("s.blend"), None, timeout_s=1800,
                       say=said.append)  # fmt: skip
    assert ledger.job("probe-1")["state"] == JobState.CANCELLED  # not left running, billed
    assert said == [
        "probe job probe-1: 3 frames at the job's settings (cancelled if not done in 30 min; "
        "Ctrl-C cancels it)"
    ]

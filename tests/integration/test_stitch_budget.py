"""The stitch's failure policy against a real Redis: transient errors are retried a bounded number
of times, then the job fails with the reason; a store refusal fails it at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from farm.adapters.settings import Settings
from farm.core import keys
from farm.core.errors import StoreError, StoreRefused
from farm.core.pipeline import STITCH
from farm.core.plan import plan_chunks
from farm.core.spec import JobKind, build_render_spec
from farm.ledger import Ledger
from tests.integration.test_attempt import FakeDispatch, FakeStore
from workers import tasks
from workers.attempt.context import WorkerContext
from workers.host.gpu import Capabilities


class FakeApp:
    """Celery's `app.task` decorator, keeping each task by name."""

    def __init__(self) -> None:
        self.tasks: dict[str, Callable[..., Any]] = {}

    def task(self, *, name: str, **_: object) -> Callable[[Callable[..., Any]], Any]:
        def keep(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.tasks[name] = fn
            return fn

        return keep


@pytest.fixture
def stitch(ledger: Ledger, tmp_path: Path) -> tuple[Callable[[str], dict[str, Any]], WorkerContext]:
    spec = build_render_spec(
        source_name="s.blend", frames="1-2", chunk_size=2, resolution="32x32",
        fps=24, samples=1, codec="h264",
    )  # fmt: skip
    ledger.create_job(job_id="j1", spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")
    ledger.r.hset(keys.r_job("j1"), "state", "stitching")
    ctx = WorkerContext(
        settings=Settings(),
        ledger=ledger,
        store=FakeStore(),  # type: ignore[arg-type]
        dispatch=FakeDispatch(),  # type: ignore[arg-type]
        caps=Capabilities(),
        name="w1",
        scratch=tmp_path,
    )
    app = FakeApp()
    tasks.register(app, lambda: ctx)  # type: ignore[arg-type]
    return app.tasks[STITCH.task], ctx


def failing_stitch(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def stitcher(*_: object) -> dict[str, Any]:
        raise exc

    monkeypatch.setitem(tasks.STITCHERS, JobKind.RENDER, stitcher)


def test_a_stitch_that_keeps_failing_transiently_fails_the_job_with_the_reason(
    stitch: tuple[Callable[[str], dict[str, Any]], WorkerContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, ctx = stitch
    failing_stitch(monkeypatch, StoreError("the object store refused to upload x: SlowDown"))
    for _ in range(tasks.MAX_STITCH_TRANSIENT):
        assert "retrying" in run("j1")
    assert ctx.ledger.job("j1")["state"] == "stitching"
    assert "failed" in run("j1")
    job = ctx.ledger.job("j1")
    assert job["state"] == "failed" and "SlowDown" in job["error"]
    assert len(ctx.dispatch.sent) == tasks.MAX_STITCH_TRANSIENT  # type: ignore[attr-defined]


def test_a_stitch_refused_by_the_store_fails_the_job_at_once(
    stitch: tuple[Callable[[str], dict[str, Any]], WorkerContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, ctx = stitch
    failing_stitch(monkeypatch, StoreRefused("the object store refused to upload x: AccessDenied"))
    assert "failed" in run("j1")
    job = ctx.ledger.job("j1")
    assert job["state"] == "failed" and "AccessDenied" in job["error"]
    assert ctx.dispatch.sent == []  # type: ignore[attr-defined]

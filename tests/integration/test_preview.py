"""Preview frames first, then a hold (farm.control.preview), on a real Redis (and SeaweedFS where
the store is the record): the preview chunks go at the top priority; a job with `--hold` is held
once they are done, with nothing else planned or sent; `farm resume` plans and sends the rest,
every frame once; a ledger rebuilt from the store keeps a held job held and a released one not."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control import hold, preview
from farm.control.rebuild import rebuild
from farm.control.reconcile import Reconciler
from farm.core import keys, queues
from farm.core.chunking import Pool
from farm.core.errors import FarmError
from farm.core.preview import initial_plan, preview_frames
from farm.core.spec import JobSpec, build_render_spec
from farm.core.state import ChunkState, JobState
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from tests.integration.test_rebuild import _done_chunk


def _spec(hold: bool = True) -> JobSpec:
    spec = build_render_spec(source_name="shot.blend", frames="1-8", chunk_size=2,
                             resolution="64x36", fps=24, samples=1, codec="h264")  # fmt: skip
    return replace(spec, preview=3, hold=hold)


def _submit(ledger: Ledger, dispatch: Dispatcher, job_id: str, spec: JobSpec) -> None:
    shown = preview_frames(spec.frames, spec.preview)
    chunks, plan = initial_plan(spec.frames, spec.chunk_size, shown, hold=spec.hold,
                                pool=Pool(workers=2), measured=None)  # fmt: skip
    ledger.create_job(job_id=job_id, spec=spec, chunks=chunks, source_key="k", plan=plan)
    preview.send_chunks(dispatch, ledger.job(job_id), ((c.index, c.frames) for c in chunks))


def _finish(ledger: Ledger, job_id: str, index: int) -> None:
    """A chunk rendered and encoded, as an attempt's moves leave it (its metered time and cost
    written as chunk_move.lua writes them)."""
    ledger.move_job(job_id, JobState.RUNNING)
    ledger.r.hset(keys.r_chunk(job_id, index), mapping={
        "state": str(ChunkState.DONE), "gpu_s": "3.0", "cost": "0.003", "render_s": "2.5",
        "blender_startup_s": "1.0", "frame_s": "1.5",
    })  # fmt: skip
    ledger.r.hincrby(keys.r_job(job_id), "chunks_done", 1)


def _frames(ledger: Ledger, job_id: str) -> list[int]:
    return sorted(f for c in ledger.chunks(job_id) for f in json.loads(c["frames"]))


def _top(ledger: Ledger) -> int:
    """Messages at kombu's most urgent step of the render queue (farm priority 100)."""
    return int(ledger.r.llen(queues.priority_lists("render")[0]))


@pytest.fixture
def dispatch(redis_url: str) -> Dispatcher:
    return Dispatcher(make_app(Settings(redis_url=redis_url)))


def test_a_held_job_stops_after_its_preview_and_resumes_to_every_frame_once(
    ledger: Ledger, dispatch: Dispatcher
) -> None:
    # GIVEN --preview 3 --hold over 1-8 WHEN submitted THEN the three preview chunks alone are
    # recorded and sent, at the top priority
    _submit(ledger, dispatch, "shot", _spec())
    assert [json.loads(c["frames"]) for c in ledger.chunks("shot")] == [[1], [5], [8]]
    assert (_top(ledger), ledger.queue_length("render")) == (3, 3)
    reconciler = Reconciler(ledger, dispatch, max_lost_leases=6)
    _finish(ledger, "shot", 0)
    _finish(ledger, "shot", 1)
    assert reconciler.run_once().held == []  # frame 8 still renders
    _finish(ledger, "shot", 2)
    # WHEN the preview is done THEN the job is held, its gate shut, nothing more sent, and the
    # rest estimated from the preview's timings
    assert not ledger.try_start_stitch("shot")
    assert reconciler.run_once().held == ["shot"]
    job = ledger.job("shot")
    assert job["state"] == JobState.HELD
    rest = json.loads(job["rest_estimate"])
    assert (rest["frames"], rest["chunks"], rest["chunk_size"]) == (5, 3, 2)
    assert rest["cost"] == pytest.approx(rest["gpu_s"] * 0.001)
    assert ledger.queue_length("render") == 3
    assert reconciler.run_once().held == []  # once
    # WHEN it is resumed THEN the rest is planned once, between the preview frames, and sent
    assert hold.release(ledger, None, dispatch, "shot") == 3
    assert ledger.job("shot")["state"] == JobState.RUNNING
    assert [json.loads(c["frames"]) for c in ledger.chunks("shot")][3:] == [[2, 3], [4], [6, 7]]
    assert _frames(ledger, "shot") == list(range(1, 9))
    assert ledger.queue_length("render") == 6
    with pytest.raises(FarmError, match="only held jobs are released"):
        hold.release(ledger, None, dispatch, "shot")
    assert reconciler.run_once().held == []  # released: never held again


def test_without_hold_the_rest_is_planned_and_sent_after_the_preview(
    ledger: Ledger, dispatch: Dispatcher
) -> None:
    _submit(ledger, dispatch, "shot2", _spec(hold=False))
    assert [json.loads(c["frames"]) for c in ledger.chunks("shot2")] == [
        [1], [5], [8], [2, 3], [4], [6, 7]
    ]  # fmt: skip
    assert (_top(ledger), ledger.queue_length("render")) == (3, 6)


def test_a_held_job_can_be_cancelled(ledger: Ledger, dispatch: Dispatcher) -> None:
    _submit(ledger, dispatch, "shot3", _spec())
    for index in range(3):
        _finish(ledger, "shot3", index)
    Reconciler(ledger, dispatch, max_lost_leases=6).run_once()
    ledger.cancel_job("shot3")
    assert ledger.job("shot3")["state"] == JobState.CANCELLED


def _stored(store: Store, job_id: str, spec: JobSpec) -> None:
    shown = preview_frames(spec.frames, spec.preview)
    chunks, plan = initial_plan(spec.frames, spec.chunk_size, shown, hold=spec.hold,
                                pool=Pool(workers=2), measured=None)  # fmt: skip
    store.put_json(keys.spec_key(job_id), {
        "id": job_id, "spec": spec.to_json(), "source_key": "k", "source_sha256": "0" * 64,
        "chunks": [list(c.frames) for c in chunks], "submitted": 1.0, "control": plan,
    })  # fmt: skip


def test_a_rebuilt_ledger_keeps_a_held_job_held_and_a_released_one_released(
    ledger: Ledger, store: Store, dispatch: Dispatcher
) -> None:
    """Redis lost everything while a job stood held: the store has its spec (with the hold) and
    its preview chunks' manifests. Rebuilt, it is held again, nothing sent; released, the release
    is kept in the store, and a ledger rebuilt after that never holds it again."""
    job_id = "j-preview-held"
    _stored(store, job_id, _spec())
    for chunk, frame in enumerate((1, 5, 8)):
        _done_chunk(store, job_id, chunk, 1, [frame])
    ledger.r.flushdb()
    rebuild(ledger, store, dispatch)
    job = ledger.job(job_id)
    assert (job["state"], job["hold"], job["plan_pending"]) == (JobState.HELD, "1", "1")
    assert _frames(ledger, job_id) == [1, 5, 8]
    assert ledger.queue_length("render") == 0
    assert not ledger.try_start_stitch(job_id)
    assert hold.release(ledger, store, dispatch, job_id) == 3
    assert _frames(ledger, job_id) == list(range(1, 9))
    ledger.r.flushdb()
    rebuild(ledger, store, dispatch)
    job = ledger.job(job_id)
    assert job["state"] == JobState.RUNNING and job.get("plan_pending", "") != "1"
    assert _frames(ledger, job_id) == list(range(1, 9))
    assert ledger.queue_length("render") == 3  # the rest, sent again; the preview is done


def test_a_rebuilt_job_whose_preview_had_not_finished_renders_it_then_holds(
    ledger: Ledger, store: Store, dispatch: Dispatcher
) -> None:
    job_id = "j-preview-half"
    for key in store.keys("jobs/"):  # this job alone in the store
        store.delete(key)
    _stored(store, job_id, _spec())
    _done_chunk(store, job_id, 0, 1, [1])
    ledger.r.flushdb()
    rebuild(ledger, store, dispatch)
    job = ledger.job(job_id)
    assert job["state"] == JobState.RUNNING and job["plan_pending"] == "1"
    assert _frames(ledger, job_id) == [1, 5, 8]  # the preview alone: the rest waits for resume
    assert ledger.queue_length("render") == 2


class _Sent:
    """A dispatcher that records what it sends."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send(self, phase: object, job_id: str, chunk: int, countdown_s: float = 0) -> str:
        self.sent.append(chunk)
        return ""


def test_an_auto_sized_preview_plans_the_rest_from_its_first_frame_unless_it_holds(
    ledger: Ledger, dispatch: Dispatcher, redis_url: str
) -> None:
    """`--chunk-size auto` with no earlier timing of the scene: the first preview frame to render
    sizes the rest (workers.phases.autochunk), which never spans a preview frame; a job that holds
    plans nothing until it is released."""
    from types import SimpleNamespace

    from workers.phases import autochunk

    spec = replace(_spec(hold=False), chunk_size=0)
    ctx = SimpleNamespace(ledger=ledger, dispatch=_Sent(), settings=Settings(redis_url=redis_url))
    _submit(ledger, dispatch, "auto", spec)
    assert ledger.job("auto")["plan_pending"] == "1"
    assert autochunk.plan_rest(ctx, "auto", spec, [1.2], 0)  # type: ignore[arg-type]
    assert _frames(ledger, "auto") == list(range(1, 9))
    assert ctx.dispatch.sent == list(range(3, int(ledger.job("auto")["chunks_total"])))
    for chunk in ledger.chunks("auto")[3:]:
        frames = json.loads(chunk["frames"])
        assert not {1, 5, 8} & set(frames) and frames == list(range(frames[0], frames[-1] + 1))
    held = replace(spec, hold=True)
    _submit(ledger, dispatch, "auto-held", held)
    assert not autochunk.plan_rest(ctx, "auto-held", held, [1.2], 0)  # type: ignore[arg-type]
    assert _frames(ledger, "auto-held") == [1, 5, 8]

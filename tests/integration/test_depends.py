"""Jobs that wait for others, on a real Redis (and SeaweedFS where the store is the record): the
reconciler's step releases a waiting job once its parents are done and cancels it, naming the
parent, when one fails; a ledger rebuilt from the store keeps the parents."""

from __future__ import annotations

from dataclasses import replace

import pytest

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control.depends import chain, check_parents, settle
from farm.control.rebuild import rebuild, record_control
from farm.control.reconcile import Reconciler
from farm.core import keys
from farm.core.errors import SpecError
from farm.core.plan import plan_chunks
from farm.core.spec import JobKind, JobSpec, build_render_spec
from farm.core.state import ChunkState, JobState
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from tests.integration.conftest import make_job


def _dispatch(redis_url: str) -> Dispatcher:
    return Dispatcher(make_app(Settings(redis_url=redis_url)))


def _spec(after: tuple[str, ...], after_any: bool = False) -> JobSpec:
    spec = build_render_spec(source_name="comp.blend", frames="1-4", chunk_size=2,
                             resolution="320x180", fps=24, samples=4, codec="h264")  # fmt: skip
    return replace(spec, after=after, after_any=after_any)


def _child(ledger: Ledger, job_id: str, *parents: str, after_any: bool = False) -> JobSpec:
    spec = _spec(parents, after_any)
    ledger.create_job(job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")
    return spec


def _end(ledger: Ledger, job_id: str, state: JobState, error: str = "") -> None:
    """Walk a job to its end through the moves the farm makes."""
    if state is JobState.CANCELLED:
        ledger.cancel_job(job_id)
        return
    ledger.move_job(job_id, JobState.RUNNING)
    if state is JobState.FAILED:
        assert ledger.move_job(job_id, JobState.FAILED, error=error).moved
        return
    ledger.move_job(job_id, JobState.STITCHING)
    assert ledger.move_job(job_id, JobState.DONE).moved


def test_a_child_waits_with_nothing_sent_and_runs_once_its_parents_are_done(
    ledger: Ledger, redis_url: str
) -> None:
    make_job(ledger, "render-a")
    make_job(ledger, "render-b")
    _child(ledger, "comp", "render-a", "render-b")
    assert ledger.job("comp")["state"] == JobState.WAITING
    assert ledger.children("render-a") == ["comp"]
    dispatch = _dispatch(redis_url)
    _end(ledger, "render-a", JobState.DONE)
    assert settle(ledger, None, dispatch).released == []  # render-b still runs
    assert ledger.job("comp")["state"] == JobState.WAITING
    assert ledger.queue_length("render") == 0  # nothing of it went to the workers
    _end(ledger, "render-b", JobState.DONE)
    assert Reconciler(ledger, dispatch, max_lost_leases=6).run_once().released == ["comp"]
    assert ledger.job("comp")["state"] == JobState.QUEUED
    assert ledger.queue_length("render") == 2  # its two chunks, sent
    assert Reconciler(ledger, dispatch, max_lost_leases=6).run_once().released == []  # once


def test_a_failed_parent_cancels_the_chain_each_naming_why(ledger: Ledger, redis_url: str) -> None:
    make_job(ledger, "render")
    _child(ledger, "comp", "render")
    _child(ledger, "deliver", "comp")
    _end(ledger, "render", JobState.FAILED, "chunk 0 failed 3 times: Blender crashed")
    dispatch = _dispatch(redis_url)
    found = settle(ledger, None, dispatch)  # oldest first: the whole chain in one pass
    assert found.cancelled == {
        "comp": "parent job render failed: chunk 0 failed 3 times: Blender crashed",
        "deliver": "parent job comp was cancelled: parent job render failed: chunk 0 failed 3 "
        "times: Blender crashed",
    }
    comp = ledger.job("comp")
    assert comp["state"] == JobState.CANCELLED and comp["error"] == found.cancelled["comp"]
    assert ledger.job("deliver")["error"] == found.cancelled["deliver"]
    assert {c["state"] for c in ledger.chunks("comp")} == {ChunkState.CANCELLED}
    assert ledger.queue_length("render") == 0


def test_after_any_runs_once_the_parent_ends_however_it_ends(
    ledger: Ledger, redis_url: str
) -> None:
    make_job(ledger, "render")
    _child(ledger, "cleanup", "render", after_any=True)
    ledger.cancel_job("render")
    assert settle(ledger, None, _dispatch(redis_url)).released == ["cleanup"]
    assert ledger.job("cleanup")["state"] == JobState.QUEUED


def test_a_held_child_is_not_released_until_resumed_and_then_waits_again(
    ledger: Ledger, redis_url: str
) -> None:
    make_job(ledger, "render")
    _child(ledger, "comp", "render")
    assert ledger.pause_job("comp", "paused by a user").moved
    _end(ledger, "render", JobState.DONE)
    dispatch = _dispatch(redis_url)
    assert settle(ledger, None, dispatch).released == []  # held: a person looks first
    assert ledger.job("comp")["state"] == JobState.PAUSED
    move = ledger.resume_job("comp")
    assert move.moved and move.target == JobState.WAITING
    assert settle(ledger, None, dispatch).released == ["comp"]
    # Released, a pause resumes it to running as any job.
    ledger.pause_job("comp", "paused by a user")
    assert ledger.resume_job("comp").target == JobState.RUNNING


def test_kinds_mix_a_transcode_waits_for_a_render(ledger: Ledger, redis_url: str) -> None:
    make_job(ledger, "render")
    spec = replace(_spec(("render",)), kind=JobKind.TRANSCODE)
    ledger.create_job(job_id="deliver", spec=spec, chunks=plan_chunks(spec.frames, 2),
                      source_key="master")  # fmt: skip
    _end(ledger, "render", JobState.DONE)
    assert settle(ledger, None, _dispatch(redis_url)).released == ["deliver"]
    # Its chunks go to its own first phase's queue: a transcode's, not a render's.
    assert (ledger.queue_length("encode"), ledger.queue_length("render")) == (2, 0)


def test_a_cancelled_waiting_child_retried_waits_for_its_parents_again(ledger: Ledger) -> None:
    make_job(ledger, "render")
    _child(ledger, "comp", "render")
    ledger.cancel_job("comp")
    ledger.reopen_job("comp", every_unfinished=True)
    assert ledger.job("comp")["state"] == JobState.WAITING


def test_an_unknown_parent_is_refused_with_its_id(ledger: Ledger) -> None:
    make_job(ledger, "render")
    with pytest.raises(SpecError, match="--after j-nope: no such job on this farm"):
        check_parents(ledger, None, "comp", _spec(("render", "j-nope")))
    check_parents(ledger, None, "comp", _spec(("render",)))


def test_a_chain_that_would_loop_is_refused(ledger: Ledger) -> None:
    """No job can gain parents after its submit, so a loop can only be asked for by naming, as a
    parent, a job that waits for the new one's id: refused all the same."""
    _child(ledger, "x", "new")
    with pytest.raises(SpecError, match="new waits for x waits for new"):
        check_parents(ledger, None, "new", _spec(("x",)))
    with pytest.raises(SpecError, match="cannot wait for itself"):
        check_parents(ledger, None, "new", _spec(("new",)))


def test_the_status_shows_a_waiting_jobs_parents_and_a_parents_children(ledger: Ledger) -> None:
    make_job(ledger, "render")
    _child(ledger, "comp", "render")
    assert chain(ledger, None, ledger.job("comp")) == {
        "after": [{"id": "render", "state": "queued"}], "after_mode": "done",
        "released": False, "children": [],
    }  # fmt: skip
    assert chain(ledger, None, ledger.job("render"))["children"] == [
        {"id": "comp", "state": "waiting"}
    ]


def test_a_ledger_rebuilt_from_the_store_keeps_the_child_waiting_and_then_releases_it(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    """The control plane was down, and Redis lost everything, while the parent finished: the
    store says the parent is done (its output) and the child waits; the first pass back releases
    the child."""
    parent, child = "j-dep-parent", "j-dep-child"
    spec = _spec((parent,))
    parent_spec = replace(spec, after=())
    for job_id, s in ((parent, parent_spec), (child, spec)):
        store.put_json(keys.spec_key(job_id), {
            "id": job_id, "spec": s.to_json(), "source_key": "k", "source_sha256": "0" * 64,
            "chunks": [[1, 2], [3, 4]], "submitted": 1.0, "control": {},
        })  # fmt: skip
    store.put_bytes(keys.output_key(parent, spec.codec.container), b"video")
    dispatch = _dispatch(redis_url)
    rebuilt = rebuild(ledger, store, dispatch)
    assert {f.job_id: f.outcome for f in rebuilt.jobs if f.job_id.startswith("j-dep")} == {
        parent: "done",
        child: "rebuilt",
    }
    job = ledger.job(child)
    assert (job["state"], job["after"]) == (JobState.WAITING, parent)
    assert ledger.children(parent) == [child]
    assert ledger.queue_length("render") == 0  # a waiting job's chunks are not sent
    assert settle(ledger, store, dispatch).released == [child]
    assert ledger.queue_length("render") == 2
    # The release is kept in the store: rebuilt again, the child is queued, not waiting.
    ledger.r.flushdb()
    rebuild(ledger, store, dispatch)
    assert ledger.job(child)["state"] == JobState.QUEUED


def test_a_parent_the_store_says_failed_cancels_the_child(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    parent = "j-dep-failed"
    store.put_json(keys.spec_key(parent), {"id": parent, "spec": _spec(()).to_json()})
    record_control(store, parent, state="failed", error="stitch failed: no space left")
    _child(ledger, "comp2", parent)
    found = settle(ledger, store, _dispatch(redis_url))
    assert found.cancelled == {"comp2": f"parent job {parent} failed: stitch failed: no space left"}
    assert store.get_json(keys.control_key("comp2"))["state"] == "cancelled"

"""Projects on a real Redis and a real SeaweedFS: their records in the store and the ledger, a
job's messages in its project's lanes (counted and found by the reconciler), the use of a quota
summed from metered attempts, and the reconciler pausing a project's jobs over it."""

from __future__ import annotations

import time

import pytest

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control.projects import ProjectExists, Projects, UnknownProject
from farm.control.reconcile import Pass, Reconciler
from farm.core import keys, queues
from farm.core.pipeline import Phase
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState, JobState
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger

METER = {"instance_type": "g5.xlarge", "lifecycle": "local", "price_per_s": "0.01"}


@pytest.fixture
def clean_store(store: Store) -> Store:
    for key in store.keys("projects/") + store.keys("jobs/"):
        store.delete(key)
    return store


def _job(ledger: Ledger, job_id: str, project: str = "", chunks: int = 4) -> None:
    spec = build_render_spec(
        source_name="s.blend", frames=f"1-{chunks}", chunk_size=1, resolution="320x180",
        fps=24, samples=4, codec="h264",
    )  # fmt: skip
    plan = {"project": project} if project else {}
    ledger.create_job(
        job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 1), source_key="k", plan=plan
    )


def _attempt(ledger: Ledger, job_id: str, index: int, seconds: float) -> None:
    """One metered render attempt of `seconds` at least (ledger.meter prices it)."""
    claim = ledger.move_chunk(job_id, index, ChunkState.RENDERING, mode="claim", lease_s=30)
    assert claim.moved, claim
    time.sleep(seconds)
    assert ledger.move_chunk(job_id, index, ChunkState.RENDERED, token=claim.token).moved


def test_a_project_is_kept_in_the_store_and_the_ledger_and_changed_there(
    ledger: Ledger, clean_store: Store
) -> None:
    projects = Projects(ledger, clean_store)
    added = projects.add("spring", weight=2, quota_gpu_hours=10)
    assert clean_store.get_json(keys.project_key("spring"))["weight"] == 2
    assert ledger.projects()["spring"] == added and ledger.project_lanes() == {"spring": 2}
    with pytest.raises(ProjectExists, match="`farm project set spring --weight W`"):
        projects.add("spring")
    lowered = projects.set("spring", weight=1, quota_gpu_hours=0, quota_dollars=5)
    # A weight lowered keeps its lanes: messages already in the second one are still served.
    assert (lowered.weight, lowered.lanes) == (1, 2)
    assert (lowered.quota_gpu_hours, lowered.quota_dollars) == (None, 5.0)
    assert clean_store.get_json(keys.project_key("spring"))["quota_dollars"] == 5.0
    with pytest.raises(UnknownProject, match="`farm project add autumn --weight 1`"):
        projects.set("autumn", weight=2)


def test_a_ledger_that_lost_its_projects_gets_them_back_from_the_store(
    ledger: Ledger, clean_store: Store
) -> None:
    Projects(ledger, clean_store).add("spring", weight=3, quota_dollars=2)
    Projects(ledger, clean_store).add("autumn")
    kept = ledger.projects()
    ledger.r.flushdb()  # Redis restarted empty
    assert ledger.projects() == {}
    assert sorted(Projects(ledger, clean_store).restore()) == ["autumn", "spring"]
    assert ledger.projects() == kept
    assert Projects(ledger, clean_store).restore() == []  # once


def test_a_jobs_messages_go_to_its_projects_lanes_and_are_counted_and_found(
    ledger: Ledger, clean_store: Store, redis_url: str
) -> None:
    """GIVEN project spring of weight 2 and a job of it, and a job of no project
    WHEN their chunks are sent (as dispatch reads each job's route from the ledger)
    THEN spring's are spread over its two lanes, the others stay on `render`, the render
    queue's length counts them all, and the reconciler finds every one (sends none again)."""
    Projects(ledger, clean_store).add("spring", weight=2)
    _job(ledger, "j-spring", "spring")
    _job(ledger, "j-plain")
    rec = Reconciler(ledger, Dispatcher(make_app(Settings(redis_url=redis_url))),
                     max_lost_leases=6, orphan_after_s=60)  # fmt: skip
    for index in range(4):
        rec.dispatch.send(Phase.RENDER, "j-spring", index)
        rec.dispatch.send(Phase.RENDER, "j-plain", index)
    rec.dispatch.stitch("j-spring")
    lanes = ["render.p.spring.0", "render.p.spring.1"]
    found = {q: queues.queued_work(ledger.broker_messages([q])) for q in [*lanes, "render"]}
    assert {w[2] for w in found["render.p.spring.0"]} == {0, 2}
    assert {w[2] for w in found["render.p.spring.1"]} == {1, 3}
    assert {(w[1], w[2]) for w in found["render"]} == {("j-plain", i) for i in range(4)}
    assert queues.queued_work(ledger.broker_messages(["stitch.p.spring.0"]))
    assert ledger.queue_length("render") == 8
    assert ledger.every_queue(["render"]) == ["render", *lanes]
    result = Pass()
    rec.resend_orphans(result, now=time.time() + 120)
    assert result.resent == []


def test_a_job_of_a_project_the_ledger_does_not_know_goes_to_the_phases_own_queue(
    ledger: Ledger, redis_url: str
) -> None:
    _job(ledger, "j-lost", "gone")  # its project's record lost, say
    dispatch = Dispatcher(make_app(Settings(redis_url=redis_url)))
    assert ledger.job_route("j-lost") == ("", 1)
    dispatch.send(Phase.RENDER, "j-lost", 0)
    assert ledger.queue_length("render") == 1


def test_a_projects_use_is_its_jobs_metered_attempts(ledger: Ledger, clean_store: Store) -> None:
    ledger.meter = METER
    projects = Projects(ledger, clean_store)
    projects.add("spring")
    projects.add("autumn")
    _job(ledger, "a1", "spring")
    _job(ledger, "a2", "spring")
    _job(ledger, "b1", "autumn")
    started = time.time()
    for job_id in ("a1", "a2"):
        _attempt(ledger, job_id, 0, 0.1)
    took = time.time() - started
    _attempt(ledger, "b1", 0, 0.05)
    use = projects.use("spring")
    assert 0.2 <= use.gpu_s <= took
    assert use.dollars == pytest.approx(use.gpu_s * 0.01)
    assert ledger.project_jobs("spring") == ["a1", "a2"]
    rows = {row["name"]: row for row in projects.report()}
    assert rows["spring"]["jobs"] == 2 and rows["spring"]["jobs_live"] == 2
    assert rows["spring"]["gpu_hours"] == pytest.approx(use.gpu_hours, abs=1e-6)
    # The last hour's worker time: spring's two attempts to autumn's one, about 2:1.
    shares = rows["spring"]["share_last_hour"], rows["autumn"]["share_last_hour"]
    assert shares[0] > shares[1] > 0 and sum(shares) == pytest.approx(1.0, abs=1e-3)


def test_the_reconciler_pauses_the_live_jobs_of_a_project_over_its_quota(
    ledger: Ledger, clean_store: Store, redis_url: str
) -> None:
    """GIVEN spring with a quota of 0.00001 GPU-hours (0.036 s) and autumn with none
    WHEN spring's job runs an attempt of 0.1 s and the reconciler holds quotas against use
    THEN spring's queued and running jobs pause, saying which project and quota, the pause is
    kept in the store, and autumn's job and a job of no project run on."""
    ledger.meter = METER
    projects = Projects(ledger, clean_store)
    projects.add("spring", quota_gpu_hours=0.00001)
    projects.add("autumn")
    for job_id, project in (("a1", "spring"), ("a2", "spring"), ("b1", "autumn"), ("c1", "")):
        _job(ledger, job_id, project)
    _attempt(ledger, "a1", 0, 0.1)
    rec = Reconciler(ledger, Dispatcher(make_app(Settings(redis_url=redis_url))),
                     max_lost_leases=6, store=clean_store)  # fmt: skip
    result = Pass()
    rec.enforce_quotas(result)
    assert sorted(result.paused) == ["a1", "a2"]
    for job_id in ("a1", "a2"):
        job = ledger.job(job_id)
        assert job["state"] == JobState.PAUSED
        assert "quota: project spring used" in job["paused_reason"]
        assert "of its 1e-05 GPU-hours" in job["paused_reason"]
        assert f"`farm resume {job_id}`" in job["paused_reason"]
        control = clean_store.get_json(keys.control_key(job_id))
        assert control["state"] == JobState.PAUSED and control["paused_reason"]
    assert ledger.job("b1")["state"] == JobState.QUEUED == ledger.job("c1")["state"]
    again = Pass()
    rec.enforce_quotas(again)
    assert again.paused == {}  # paused already: nothing more to do
    assert next(r for r in projects.report() if r["name"] == "spring")["over_quota"]


def test_a_rebuilt_job_counts_against_its_projects_quota_again(
    ledger: Ledger, clean_store: Store
) -> None:
    from farm.control.rebuild import rebuild

    Projects(ledger, clean_store).add("spring")
    spec = build_render_spec(
        source_name="s.blend", frames="1-4", chunk_size=2, resolution="320x180", fps=24,
        samples=4, codec="h264",
    )  # fmt: skip
    clean_store.put_json(
        keys.spec_key("j-r"),
        {"id": "j-r", "spec": spec.to_json(), "source_key": "k", "chunks": [[1, 2], [3, 4]],
         "submitted": time.time(), "control": {"project": "spring", "priority": "50"}},
    )  # fmt: skip
    ledger.r.flushdb()
    Projects(ledger, clean_store).restore()
    rebuild(ledger, clean_store, None)
    assert ledger.job("j-r")["project"] == "spring"
    assert ledger.project_jobs("spring") == ["j-r"]

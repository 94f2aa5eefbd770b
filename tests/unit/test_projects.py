"""Projects' queues (farm.core.queues), the spread of a job's chunks over a project's lanes, the
turns kombu's round robin gives them, names, weights and quotas (farm.control.projects)."""

from __future__ import annotations

from collections import Counter, deque

import pytest
from celery import Celery
from kombu.utils.scheduling import cycle_by_name

from farm.control.projects import (
    BadProject,
    UnknownProject,
    Use,
    check_name,
    check_quota,
    check_weight,
    quota_reason,
    require_project,
    use_of,
    worker_seconds,
)
from farm.core import queues
from farm.core.pipeline import RENDER_TASK, STITCH_TASK
from farm.dispatch import Dispatcher
from farm.ledger import Project


def test_a_projects_queue_names_its_phase_its_project_and_its_lane() -> None:
    name = queues.project_queue("render", "spring", 1)
    assert name == "render.p.spring.1"
    assert queues.phase_queue(name) == "render" and queues.project_of(name) == "spring"
    assert queues.phase_queue("render") == "render" and queues.project_of("render") == ""
    # A project named like a phase still reads back as the project.
    assert queues.project_of(queues.project_queue("encode", "render", 0)) == "render"


def test_a_job_of_no_project_stays_on_its_phases_own_queue() -> None:
    assert queues.route("render", "", 1, 5) == "render"
    assert queues.route("render", "spring", 1, 5) == "render.p.spring.0"
    assert queues.route("stitch", "spring", 3, -1) == "stitch.p.spring.0"  # a stitch: lane 0


def test_a_jobs_chunks_spread_evenly_over_its_projects_lanes() -> None:
    for weight in range(1, queues.MAX_WEIGHT + 1):
        lanes = Counter(queues.lane_of(chunk, weight) for chunk in range(weight * 10))
        assert lanes == dict.fromkeys(range(weight), 10)


def test_a_worker_consumes_each_projects_lanes_of_the_phases_it_serves_only() -> None:
    lanes = {"spring": 2, "autumn": 1}
    found = queues.consumed(["render", "stitch"], lanes)
    assert found == [
        "render", "stitch",
        "render.p.autumn.0", "render.p.spring.0", "render.p.spring.1",
        "stitch.p.autumn.0", "stitch.p.spring.0", "stitch.p.spring.1",
    ]  # fmt: skip
    assert not any(q.startswith("encode") for q in found)  # a host without NVENC
    assert queues.consumed(found, lanes) == found  # asked again, nothing twice
    assert queues.consumed(["render"], {}) == ["render"]


def _turns(waiting: dict[str, deque[str]], consumed: list[str], turns: int) -> Counter[str]:
    """Projects' turns as one worker's kombu Redis channel takes them: BRPOP over its queues in
    its round-robin cycle's order (one priority step), the first with a message wins and goes
    to the end of the cycle (kombu.transport.redis `_brpop_read`)."""
    cycle = cycle_by_name("round_robin")()
    cycle.update(consumed)
    taken: Counter[str] = Counter()
    for _ in range(turns):
        queue = next(q for q in cycle.consume(len(consumed)) if waiting.get(q))
        taken[waiting[queue].popleft()] += 1
        cycle.rotate(queue)
    return taken


def _submit(waiting: dict[str, deque[str]], project: str, weight: int, chunks: int) -> None:
    for chunk in range(chunks):
        queue = queues.route("render", project, weight, chunk)
        waiting.setdefault(queue, deque()).append(project or "none")


@pytest.mark.parametrize(("weight_a", "weight_b"), [(1, 1), (2, 1), (3, 1), (2, 3)])
def test_kombus_round_robin_gives_projects_turns_by_weight(weight_a: int, weight_b: int) -> None:
    """GIVEN project a's long job queued first, then b's, both with more work than the turns
    WHEN a worker consuming every lane takes turns
    THEN each project gets its weight's share of them."""
    waiting: dict[str, deque[str]] = {}
    _submit(waiting, "a", weight_a, 1000)
    _submit(waiting, "b", weight_b, 1000)
    consumed = queues.consumed(["render"], {"a": weight_a, "b": weight_b})
    turns = 60 * (weight_a + weight_b)
    taken = _turns(waiting, consumed, turns)
    assert taken == {"a": 60 * weight_a, "b": 60 * weight_b}


def test_jobs_of_no_project_take_turns_like_a_project_of_weight_one() -> None:
    waiting: dict[str, deque[str]] = {}
    _submit(waiting, "", 1, 500)
    _submit(waiting, "a", 2, 500)
    taken = _turns(waiting, queues.consumed(["render"], {"a": 2}), 300)
    assert taken == {"none": 100, "a": 200}


def test_a_project_alone_gets_every_turn() -> None:
    waiting: dict[str, deque[str]] = {}
    _submit(waiting, "a", 1, 50)
    taken = _turns(waiting, queues.consumed(["render"], {"a": 1, "b": 4}), 50)
    assert taken == {"a": 50}


def test_the_dispatcher_sends_a_jobs_tasks_to_its_projects_lanes() -> None:
    routes = {"j-a": ("spring", 2), "j-none": ("", 1)}
    dispatch = Dispatcher(Celery("test"), priority_of=lambda _: 50, route_of=routes.__getitem__)
    assert dispatch.queue_of(RENDER_TASK, "j-a", 0) == "render.p.spring.0"
    assert dispatch.queue_of(RENDER_TASK, "j-a", 3) == "render.p.spring.1"
    assert dispatch.queue_of(STITCH_TASK, "j-a", -1) == "stitch.p.spring.0"
    assert dispatch.queue_of(RENDER_TASK, "j-none", 3) == "render"


@pytest.mark.parametrize("name", ["spring", "a", "shot-010", "0" * 32, "x1-y2"])
def test_good_project_names(name: str) -> None:
    assert queues.check_project_name(name) is None
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "Spring", "-a", "a.b", "a_b", "a b", "a/b", "x" * 33, "émile", "a:b"]
)
def test_bad_project_names_are_refused_saying_what_a_name_is(name: str) -> None:
    with pytest.raises(BadProject, match="1 to 32 lowercase letters, digits or '-'"):
        check_name(name)


def test_weights_are_whole_numbers_from_1_to_8_and_a_quota_of_0_is_none() -> None:
    assert check_weight(1) == 1 and check_weight(queues.MAX_WEIGHT) == queues.MAX_WEIGHT
    for bad in (0, -1, queues.MAX_WEIGHT + 1):
        with pytest.raises(BadProject, match="two turns"):
            check_weight(bad)
    assert check_quota("dollars", None) is None and check_quota("dollars", 0) is None
    assert check_quota("GPU-hours", 2.5) == 2.5
    with pytest.raises(BadProject, match="0 removes the quota"):
        check_quota("dollars", -1)


def test_an_unknown_project_is_refused_with_the_command_that_creates_it() -> None:
    known = {"spring": Project(name="spring", weight=1, lanes=1)}
    assert require_project(known, "spring").name == "spring"
    with pytest.raises(UnknownProject, match="`farm project add autumn --weight 1`"):
        require_project(known, "autumn")


def test_a_project_record_reads_back_and_its_lanes_never_fall_below_its_weight() -> None:
    project = Project(name="s", weight=3, lanes=5, quota_gpu_hours=2.0, created=1.0)
    assert Project.from_json(project.to_json()) == project
    assert Project.from_json({"name": "s", "weight": 4}).lanes == 4
    assert Project.from_json({"name": "s", "weight": 4, "lanes": 2}).lanes == 4


def test_use_sums_the_jobs_metered_cost_and_the_running_spend() -> None:
    costs = [{"gpu_s": "1800", "cost": "0.5"}, {"gpu_s": "1800", "cost": "0.25"},
             {"run_per_s": "0.001", "run_base": "0.99"}]  # fmt: skip
    use = use_of(costs, now=1000.0)  # the running attempt: 1000 * 0.001 - 0.99 = $0.01
    assert use.gpu_hours == pytest.approx(1.0)
    assert use.dollars == pytest.approx(0.76)


def test_the_quota_reason_names_the_project_its_quota_and_what_to_do() -> None:
    hours = Project(name="spring", weight=1, lanes=1, quota_gpu_hours=1.0)
    assert quota_reason(hours, Use(gpu_s=3599), "j1") == ""
    said = quota_reason(hours, Use(gpu_s=3600), "j1")
    assert "project spring used 1.000 of its 1 GPU-hours" in said
    assert "`farm project set spring --quota-gpu-hours N`" in said and "`farm resume j1`" in said
    money = Project(name="spring", weight=1, lanes=1, quota_dollars=5.0)
    assert "of its $5.00" in quota_reason(money, Use(dollars=5.0), "j1")
    unlimited = Project(name="x", weight=1, lanes=1)
    assert quota_reason(unlimited, Use(gpu_s=1e9, dollars=1e9), "j") == ""


def test_worker_time_is_clipped_to_the_window() -> None:
    attempts = [{"t": 110.0, "s": 20.0}, {"t": 150.0, "s": 10.0}, {"t": 300.0, "s": 5.0}]
    # 100..110 of the first, all 10 of the second, none of the third
    assert worker_seconds(attempts, since=100.0, until=200.0) == pytest.approx(20.0)

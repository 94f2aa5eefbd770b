"""Job dependencies' rules (farm.core.depends): what a waiting job does given its parents, the
parents a user names, and the refusal of a chain that loops."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from farm.cli.main import cli
from farm.core.depends import (
    GONE,
    MAX_PARENTS,
    UNKNOWN,
    Parent,
    Verdict,
    check_no_cycle,
    decide,
    find_cycle,
    held,
    parse_parents,
)
from farm.core.errors import SpecError
from farm.core.pipeline import JOB_TRANSITIONS, job_sources_of
from farm.core.report import job_summary, status_table, to_text
from farm.core.spec import JobSpec, build_render_spec
from farm.core.state import JobState
from farm.web.api.answers import ApiError
from farm.web.api.validate import job_spec
from farm.web.jobpage import job_page


def _p(job_id: str, state: str, error: str = "") -> Parent:
    return Parent(job_id=job_id, state=state, error=error)


# ── what a waiting job does ───────────────────────────────────────────────────────────────────
def test_a_job_waits_while_a_parent_runs_and_is_released_once_every_parent_is_done() -> None:
    assert decide([_p("a", "done"), _p("b", "running")], after_any=False).verdict is Verdict.WAIT
    done = decide([_p("a", "done"), _p("b", "done")], after_any=False)
    assert done.verdict is Verdict.RELEASE and "a, b" in done.reason


def test_a_parent_that_failed_cancels_the_job_naming_the_parent_and_its_error() -> None:
    found = decide(
        [_p("a", "running"), _p("b", "failed", "chunk 3 failed 3 times")], after_any=False
    )
    assert found.verdict is Verdict.CANCEL
    assert found.reason == "parent job b failed: chunk 3 failed 3 times"


def test_a_parent_cancelled_or_gone_cancels_the_job_saying_so() -> None:
    cancelled = decide([_p("a", "cancelled", "cancelled by a user")], after_any=False)
    assert cancelled.reason == "parent job a was cancelled: cancelled by a user"
    gone = decide([_p("a", GONE)], after_any=False)
    assert gone.verdict is Verdict.CANCEL and "parent job a is gone" in gone.reason


def test_a_parent_the_ledger_has_not_rebuilt_yet_keeps_the_job_waiting() -> None:
    assert decide([_p("a", UNKNOWN)], after_any=False).verdict is Verdict.WAIT
    assert decide([_p("a", UNKNOWN)], after_any=True).verdict is Verdict.WAIT


def test_after_any_waits_for_every_parent_to_end_however_it_ends() -> None:
    running = [_p("a", "failed", "x"), _p("b", "running")]
    assert decide(running, after_any=True).verdict is Verdict.WAIT
    ended = decide([_p("a", "failed", "x"), _p("b", "cancelled"), _p("c", "done")], after_any=True)
    assert ended.verdict is Verdict.RELEASE
    assert ended.reason == "parents ended: a failed, b cancelled, c done"


def test_a_paused_parent_keeps_its_children_waiting() -> None:
    assert decide([_p("a", "paused")], after_any=False).verdict is Verdict.WAIT


# ── the state rules ───────────────────────────────────────────────────────────────────────────
def test_a_waiting_job_is_released_cancelled_or_held_and_never_runs_straight_away() -> None:
    assert JOB_TRANSITIONS[JobState.WAITING] == {
        JobState.QUEUED, JobState.CANCELLED, JobState.PAUSED,
    }  # fmt: skip
    assert job_sources_of(JobState.QUEUED) == {JobState.WAITING}  # only a release queues a job
    assert not JobState.WAITING.final


def test_only_a_job_with_parents_that_was_never_released_is_held() -> None:
    assert held({"after": "a,b"})
    assert not held({"after": "a,b", "released": "1765000000.0"})
    assert not held({"after": ""})


# ── the parents a user names ──────────────────────────────────────────────────────────────────
def test_parents_are_read_once_each_in_the_order_given() -> None:
    assert parse_parents(" j-1 ,j-2,j-1") == ("j-1", "j-2")


@pytest.mark.parametrize(
    ("text", "said"),
    [("a,,b", "name each job once"), ("a b", "'a b' is not a job id"), ("../x", "not a job id")],
)
def test_a_malformed_parent_list_is_refused_naming_what(text: str, said: str) -> None:
    with pytest.raises(SpecError, match=said):
        parse_parents(text)


def test_more_parents_than_a_chain_needs_are_refused() -> None:
    with pytest.raises(SpecError, match=f"{MAX_PARENTS} at most"):
        parse_parents(",".join(f"j{i}" for i in range(MAX_PARENTS + 1)))


def test_after_and_after_any_together_are_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["submit", "x.blend", "--after", "a", "--after-any", "b"])
    assert result.exit_code == 2 and "--after or --after-any, not both" in result.output


# ── cycles ────────────────────────────────────────────────────────────────────────────────────
def test_a_chain_back_to_the_job_is_found_and_refused_naming_it() -> None:
    graph = {"a": ["b"], "b": ["new"], "c": []}
    assert find_cycle("new", ["c", "a"], lambda j: graph.get(j, [])) == ["new", "a", "b", "new"]
    with pytest.raises(SpecError, match="new waits for a waits for b waits for new"):
        check_no_cycle("new", ["c", "a"], lambda j: graph.get(j, []))


def test_a_diamond_is_no_cycle() -> None:
    graph = {"a": ["root"], "b": ["root"], "root": []}
    check_no_cycle("new", ["a", "b"], lambda j: graph[j])


# ── the spec carries the parents, through the API too ─────────────────────────────────────────
def _spec(**more: Any) -> dict[str, Any]:
    spec = build_render_spec(source_name="shot.blend", frames="1-8", chunk_size=4,
                             resolution="320x180", fps=24, samples=8, codec="h264")  # fmt: skip
    return spec.to_json() | more


def test_the_parents_travel_in_the_spec_and_read_back() -> None:
    spec = job_spec(_spec(after=["j-1", "j-2"], after_any=True), max_chunks=100)
    assert (spec.after, spec.after_any) == (("j-1", "j-2"), True)
    assert JobSpec.from_json(spec.to_json()) == spec
    old = _spec()
    del old["after"], old["after_any"]  # a spec.json from before dependencies
    assert JobSpec.from_json(old).after == ()


@pytest.mark.parametrize(
    ("more", "said"),
    [
        ({"after": ["a,b"]}, "not a job id"),
        ({"after": ["a", "a"]}, "names a job twice"),
        ({"after": "a"}, "spec.after must be a list"),
        ({"after_any": True}, "after_any without after"),
    ],
)
def test_the_api_refuses_parents_the_cli_would_refuse(more: dict[str, Any], said: str) -> None:
    with pytest.raises(ApiError) as refused:
        job_spec(_spec(**more), max_chunks=100)
    assert refused.value.status == 400 and said in str(refused.value)


# ── what people see ───────────────────────────────────────────────────────────────────────────
def _summary(state: str, **chain: Any) -> dict[str, Any]:
    job = {"id": "comp", "kind": "render", "state": state, "frames_total": "4", "created": "1"}
    empty = {"after": [], "after_mode": "", "released": False, "children": []}
    return job_summary(job, []) | empty | chain


def test_the_status_text_says_what_a_job_waits_for_and_what_waits_for_it() -> None:
    waiting = _summary("waiting", after=[{"id": "a", "state": "running"}], after_mode="done")
    assert "waits   for a (running) to be done" in to_text(status_table(waiting))
    parent = _summary("running", children=[{"id": "c1", "state": "waiting"}])
    assert "then    c1 (waiting) waits for it" in to_text(status_table(parent))


def test_the_job_page_links_the_parents_and_the_children() -> None:
    summary = _summary("waiting", after=[{"id": "j-a", "state": "done"}], after_mode="any",
                       children=[{"id": "j-<c>", "state": "waiting"}])  # fmt: skip
    html = job_page(summary, chunk_times={}, thumbs=[], logs={}, cost=None)
    assert '<a href="/jobs/j-a">j-a</a>' in html and "to end, however they end" in html
    assert "j-&lt;c&gt;" in html and "<c>" not in html  # escaped, as every value


def test_the_time_a_job_waited_for_its_parents_is_not_counted_as_running() -> None:
    job = {"id": "c", "kind": "render", "state": "running", "frames_total": "4",
           "created": "1000", "released": "1600"}  # fmt: skip
    summary = job_summary(job, [], now=1700.0)
    assert (summary["elapsed_s"], summary["waited_s"], summary["active_s"]) == (700, 600, 100)
    waiting = job_summary(job | {"state": "waiting", "released": ""}, [], now=1300.0)
    assert (waiting["waited_s"], waiting["active_s"]) == (300, 0)

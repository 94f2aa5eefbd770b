"""The pipeline table: every job kind's path through its phases, and the moves it allows."""

from __future__ import annotations

import pytest

from farm.core.pipeline import (
    CHUNK_PHASES,
    CHUNK_TRANSITIONS,
    PHASES,
    STITCH,
    TASK_QUEUES,
    Phase,
    Queue,
    can_move,
    first_phase,
    kind_of,
    markdown_table,
    running_in,
    running_states,
    sources_of,
    waiting_for,
)
from farm.core.spec import JobKind
from farm.core.state import ChunkState, JobState
from farm.ledger.lua import source


def walk(kind: JobKind) -> list[ChunkState]:
    """GIVEN a fresh chunk WHEN every phase succeeds THEN the states it passes through."""
    state = ChunkState.QUEUED
    seen = [state]
    while (phase := waiting_for(kind, state)) is not None:
        assert can_move(state, phase.running), (state, phase.phase)
        assert can_move(phase.running, phase.done)
        seen += [phase.running, phase.done]
        state = phase.done
    return seen


def test_a_render_chunk_renders_then_makes_its_segment() -> None:
    assert walk(JobKind.RENDER) == [
        ChunkState.QUEUED,
        ChunkState.RENDERING,
        ChunkState.RENDERED,
        ChunkState.ENCODING,
        ChunkState.DONE,
    ]


def test_a_transcode_chunk_is_one_phase() -> None:
    assert walk(JobKind.TRANSCODE) == [
        ChunkState.QUEUED,
        ChunkState.TRANSCODING,
        ChunkState.DONE,
    ]


@pytest.mark.parametrize("kind", list(JobKind))
def test_each_phase_hands_on_to_the_next_in_order(kind: JobKind) -> None:
    phases = CHUNK_PHASES[kind]
    for phase, following in zip(phases, (*phases[1:], None), strict=True):
        assert PHASES[phase].next == following
        if following is not None:
            assert PHASES[phase].done in PHASES[following].claim_from


@pytest.mark.parametrize("phase", list(PHASES.values()), ids=lambda p: str(p.phase))
def test_every_way_out_of_a_running_phase_is_allowed(phase: object) -> None:
    from farm.core.pipeline import PhaseSpec

    assert isinstance(phase, PhaseSpec)
    for target in (
        phase.done,
        phase.on_failure,
        phase.on_lost,
        phase.on_interrupt,
        ChunkState.FAILED,
        ChunkState.CANCELLED,
    ):
        assert can_move(phase.running, target), (phase.phase, target)


@pytest.mark.parametrize("phase", list(PHASES.values()), ids=lambda p: str(p.phase))
def test_a_returned_chunk_waits_for_a_phase_of_its_kind(phase: object) -> None:
    """GIVEN a failure, lost lease or interruption THEN the chunk lands where some phase of
    its job's pipeline claims it again (nothing is stranded)."""
    from farm.core.pipeline import PhaseSpec

    assert isinstance(phase, PhaseSpec)
    kinds = [k for k, phases in CHUNK_PHASES.items() if phase.phase in phases]
    for kind in kinds:
        for state in (phase.on_failure, phase.on_lost, phase.on_interrupt):
            assert waiting_for(kind, state) is not None, (kind, phase.phase, state)


def test_segment_failures_keep_the_frames() -> None:
    segment = PHASES[Phase.SEGMENT]
    assert segment.on_failure == segment.on_lost == ChunkState.RENDERED


def test_done_is_terminal() -> None:
    assert CHUNK_TRANSITIONS[ChunkState.DONE] == frozenset()
    assert not any(can_move(ChunkState.DONE, s) for s in ChunkState)


def test_claims_come_only_from_waiting_states() -> None:
    assert sources_of(ChunkState.RENDERING) == {ChunkState.QUEUED, ChunkState.INTERRUPTED}
    assert sources_of(ChunkState.ENCODING) == {ChunkState.RENDERED}
    assert not can_move(ChunkState.FAILED, ChunkState.RENDERING)
    assert not can_move(ChunkState.CANCELLED, ChunkState.TRANSCODING)


def test_done_only_after_the_last_phase() -> None:
    assert sources_of(ChunkState.DONE) == {ChunkState.ENCODING, ChunkState.TRANSCODING}


def test_failed_and_cancelled_chunks_reopen_to_queued() -> None:
    assert can_move(ChunkState.FAILED, ChunkState.QUEUED)
    assert can_move(ChunkState.CANCELLED, ChunkState.QUEUED)


def test_every_state_has_a_row() -> None:
    assert set(CHUNK_TRANSITIONS) == set(ChunkState)


def test_phases_route_to_their_queues() -> None:
    assert TASK_QUEUES[PHASES[Phase.RENDER].task] is Queue.RENDER
    assert TASK_QUEUES[PHASES[Phase.SEGMENT].task] is Queue.ENCODE
    assert TASK_QUEUES[PHASES[Phase.TRANSCODE].task] is Queue.ENCODE
    assert TASK_QUEUES[STITCH.task] is Queue.STITCH


def test_running_states_lookup() -> None:
    assert running_states() == {
        ChunkState.RENDERING,
        ChunkState.ENCODING,
        ChunkState.TRANSCODING,
    }
    assert running_in(JobKind.RENDER, ChunkState.ENCODING) is PHASES[Phase.SEGMENT]
    assert running_in(JobKind.TRANSCODE, ChunkState.RENDERING) is None


def test_the_renewal_script_accepts_exactly_the_running_states() -> None:
    RENEW = source("renew")
    for state in running_states():
        assert f"['{state}']=true" in RENEW
    assert "['rendered']" not in RENEW


def test_first_phases_and_old_records() -> None:
    assert first_phase(JobKind.RENDER).phase is Phase.RENDER
    assert first_phase(JobKind.TRANSCODE).phase is Phase.TRANSCODE
    assert kind_of({"kind": "encode"}) is JobKind.TRANSCODE  # recorded before the rename
    assert kind_of({}) is JobKind.RENDER


def test_final_job_states() -> None:
    assert {s for s in JobState if s.final} == {JobState.DONE, JobState.FAILED, JobState.CANCELLED}


def test_backoff_grows_is_capped_and_jitters_within_half_a_step() -> None:
    from functools import partial

    from farm.core import backoff
    from workers.attempt.policy import RETRY_CAP_S

    backoff_s = partial(backoff.backoff_s, cap_s=RETRY_CAP_S)  # a chunk's retry, as the worker's

    assert [backoff_s(n, jitter=1.0) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]
    assert backoff_s(1, jitter=0.0) == 1.0
    assert backoff_s(20, jitter=0.999) < 120.0 and backoff_s(20, jitter=0.0) == 60.0


def test_the_architecture_page_shows_the_pipeline_as_declared() -> None:
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "design" / "architecture.md"
    shown = page.read_text().split("<!-- pipeline:begin -->\n", 1)[1]
    shown = shown.split("\n<!-- pipeline:end -->", 1)[0]
    assert shown == markdown_table(), "run `make docs` (docs/tables.py) to write the table"

"""Farm priorities as kombu's Redis priorities, and the paused state in the job transitions."""

from __future__ import annotations

from farm.core.pipeline import JOB_TRANSITIONS
from farm.core.state import JobState
from farm.dispatch import PRIORITY_STEPS, broker_priority


def test_higher_farm_priority_is_a_lower_kombu_priority() -> None:
    assert broker_priority(100) == 0
    assert broker_priority(50) == 5
    assert broker_priority(0) == 9
    levels = [broker_priority(p) for p in range(0, 101)]
    assert levels == sorted(levels, reverse=True)
    assert set(levels) == set(PRIORITY_STEPS)


def test_out_of_range_priorities_are_clamped() -> None:
    assert broker_priority(500) == 0 and broker_priority(-3) == 9


def test_queued_and_running_jobs_pause_and_paused_jobs_resume_or_cancel() -> None:
    assert JobState.PAUSED in JOB_TRANSITIONS[JobState.QUEUED]
    assert JobState.PAUSED in JOB_TRANSITIONS[JobState.RUNNING]
    assert JOB_TRANSITIONS[JobState.PAUSED] >= {JobState.RUNNING, JobState.CANCELLED}
    assert JobState.PAUSED not in JOB_TRANSITIONS[JobState.DONE]
    assert not JobState.PAUSED.final

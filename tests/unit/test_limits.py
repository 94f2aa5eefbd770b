"""The cap on chunks per job: pure, checked before anything is uploaded or recorded."""

from __future__ import annotations

import pytest

from farm.core.errors import SpecError
from farm.core.limits import check_chunks, check_planned


def test_a_million_one_frame_chunks_is_refused_with_why_and_what_to_do() -> None:
    with pytest.raises(SpecError) as caught:
        check_chunks(1_000_000, 1, 10_000)
    message = str(caught.value)
    assert "1000000 chunks" in message and "at most 10000" in message
    assert "Redis memory" in message and "--chunk-size 100" in message


def test_a_job_at_the_cap_is_accepted() -> None:
    check_chunks(10_000, 1, 10_000)
    check_chunks(1_000_000, 100, 10_000)
    check_chunks(1_000_000, 0, 10)  # auto: checked once planned
    check_planned(10, 10)


def test_an_auto_plan_over_the_cap_is_refused() -> None:
    with pytest.raises(SpecError, match="FARM_MAX_CHUNKS"):
        check_planned(10_001, 10_000)

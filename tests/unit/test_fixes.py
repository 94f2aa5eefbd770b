"""`farm retry --frames`: the frame list read against the job's range, and the segments a fix
makes again (farm.core.fixes)."""

import pytest

from farm.core.errors import SpecError
from farm.core.fixes import Fix, chunks_holding, frames_text, parse_frame_list, versions
from farm.core.plan import plan_chunks
from farm.core.spec import parse_frames


def test_ranges_and_single_frames_become_the_sorted_frames() -> None:
    assert parse_frame_list("12-14,40", parse_frames("1-48")) == (12, 13, 14, 40)


def test_duplicates_and_overlaps_count_once() -> None:
    assert parse_frame_list("5,3-6, 5,4", parse_frames("1-10")) == (3, 4, 5, 6)


def test_a_range_takes_only_the_frames_the_step_renders() -> None:
    assert parse_frame_list("1-7", parse_frames("1-20:3")) == (1, 4, 7)


def test_frames_outside_the_job_are_refused_by_name() -> None:
    with pytest.raises(SpecError) as caught:
        parse_frame_list("3,50,60-70", parse_frames("1-48"))
    assert "50, 60-70" in str(caught.value)
    assert "frames 1-48" in str(caught.value)


def test_a_frame_the_step_skips_is_refused() -> None:
    with pytest.raises(SpecError, match="--frames 2: not frames of the job"):
        parse_frame_list("2", parse_frames("1-20:3"))


@pytest.mark.parametrize("text", ["", "1,,2", "a", "3-", "1-2-3", "14-12"])
def test_malformed_lists_are_refused(text: str) -> None:
    with pytest.raises(SpecError):
        parse_frame_list(text, parse_frames("1-48"))


def test_frames_text_joins_runs() -> None:
    assert frames_text([40, 12, 13, 14, 13]) == "12-14,40"
    assert frames_text([7]) == "7"


def test_only_the_chunks_holding_fixed_frames_are_chosen() -> None:
    chunks = {c.index: c.frames for c in plan_chunks(parse_frames("1-12"), 4)}
    assert chunks_holding(chunks, [6, 5, 12]) == {1: (5, 6), 2: (12,)}


def test_a_split_chunks_frames_are_found_in_the_new_chunk() -> None:
    chunks = {0: (1, 2), 1: (5, 6, 7, 8), 2: (3, 4)}  # chunk 0 split: its rest is chunk 2
    assert chunks_holding(chunks, [4]) == {2: (4,)}


def test_a_frame_no_chunk_holds_is_an_error() -> None:
    with pytest.raises(ValueError, match="no chunk holds frames 9"):
        chunks_holding({0: (1, 2)}, [9])


def test_a_fix_survives_its_json_and_names_its_version() -> None:
    fix = Fix(frames=(3,), reason="flicker", by="ana", at=1.5, chunks=(0,), version=1,
              version_key="jobs/j/output.v1.mp4")  # fmt: skip
    assert Fix.from_json(fix.to_json()) == fix
    assert versions([fix, Fix(frames=(4,), reason="", by="", at=2.0, chunks=(1,))]) == {
        1: "jobs/j/output.v1.mp4"
    }


def test_status_lists_each_fix_its_version_and_the_flagged_frames_with_their_fix() -> None:
    import json

    from farm.core.report import job_summary, status_table, to_text

    fix = Fix(frames=(12, 13, 14, 40), reason="lamp flicker", by="ana", at=1.5e9,
              chunks=(1, 4), version=1, version_key="jobs/j1/output.v1.mp4")  # fmt: skip
    job = {"id": "j1", "kind": "render", "state": "running", "fixes": json.dumps([fix.to_json()])}
    chunks = [
        {"index": "0", "state": "done", "frames": "[1, 2]", "flagged": '{"2": "black"}'},
        {"index": "1", "state": "done", "frames": "[3, 4]", "flagged": '{"4": "NaN pixels (9 values)"}'},
    ]  # fmt: skip
    summary = job_summary(job, chunks)
    assert summary["flagged"] == {"2": "black", "4": "NaN pixels (9 values)"}
    text = to_text(status_table(summary), width=200)
    assert "fixed   frames 12-14,40 at " in text and "by ana: lamp flicker" in text
    assert "version 1 jobs/j1/output.v1.mp4 (before frames 12-14,40 were fixed" in text
    assert "flagged frames 2 (black), 4 (NaN pixels (9 values))" in text
    assert "fix them: farm retry j1 --frames 2,4" in text

"""Preview frames (farm.core.preview): the spread of N frames over a range, the plan that puts them
first with every frame once, the hold's fields, the rest's estimate and the status lines."""

from __future__ import annotations

import json

import pytest

from farm.core import notices
from farm.core.chunking import Measurement, Pool
from farm.core.errors import SpecError
from farm.core.preview import (
    check_preview,
    hold_pending,
    initial_plan,
    preview_frames,
    rest_chunks,
    rest_estimate,
)
from farm.core.report import preview_lines, preview_summary
from farm.core.spec import FrameRange, JobSpec, build_render_spec
from farm.web.api.answers import ApiError
from farm.web.api.validate import job_spec

POOL = Pool(workers=2, splits=True)
M = Measurement(startup_s=2.0, frame_s=1.0)


def every_frame_once(frames: FrameRange, chunks: tuple) -> bool:  # type: ignore[type-arg]
    planned = [f for c in chunks for f in c.frames]
    return sorted(planned) == list(frames.frames) and len(planned) == len(set(planned))


@pytest.mark.parametrize(
    ("frames", "count", "expected"),
    [
        (FrameRange(first=1, last=8), 1, (1,)),
        (FrameRange(first=1, last=8), 2, (1, 8)),
        (FrameRange(first=1, last=8), 3, (1, 5, 8)),
        (FrameRange(first=1, last=240), 5, (1, 61, 121, 180, 240)),
        (FrameRange(first=1, last=3), 3, (1, 2, 3)),
        (FrameRange(first=1, last=3), 10, (1, 2, 3)),
        (FrameRange(first=7, last=7), 3, (7,)),
        (FrameRange(first=1, last=9, step=2), 3, (1, 5, 9)),
        (FrameRange(first=0, last=10, step=5), 2, (0, 10)),
        (FrameRange(first=1, last=8), 0, ()),
    ],
)
def test_preview_frames_spread_first_last_and_between(
    frames: FrameRange, count: int, expected: tuple[int, ...]
) -> None:
    # GIVEN a range and N WHEN the preview frames are picked THEN first, last, evenly between
    assert preview_frames(frames, count) == expected


@pytest.mark.parametrize("length", range(1, 40))
@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 12])
def test_preview_frames_are_distinct_and_in_order(length: int, count: int) -> None:
    frames = FrameRange(first=3, last=3 + length - 1)
    shown = preview_frames(frames, count)
    assert len(shown) == min(count, length)
    assert list(shown) == sorted(set(shown))
    assert shown[0] == frames.first
    if count > 1:
        assert shown[-1] == frames.last


def test_rest_chunks_never_span_a_preview_frame() -> None:
    # GIVEN 1-20 with previews 1, 10, 20 WHEN the rest is cut in chunks of 4
    frames = FrameRange(first=1, last=20)
    rest = rest_chunks(frames, (1, 10, 20), 4, start=3)
    # THEN runs between the previews, numbered after them
    assert [c.frames for c in rest] == [
        (2, 3, 4, 5), (6, 7, 8, 9), (11, 12, 13, 14), (15, 16, 17, 18), (19,)
    ]  # fmt: skip
    assert [c.index for c in rest] == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("size", [0, 3])
@pytest.mark.parametrize("count", [1, 2, 3, 8, 50])
def test_plan_puts_preview_first_and_every_frame_once(size: int, count: int) -> None:
    # GIVEN a fixed size, or auto with a measurement WHEN a previewed job is planned
    frames = FrameRange(first=1, last=8)
    shown = preview_frames(frames, count)
    chunks, fields = initial_plan(frames, size, shown, hold=False, pool=POOL, measured=M)
    # THEN its first chunks are the preview frames, one each, then every other frame once
    assert [c.frames for c in chunks[: len(shown)]] == [(f,) for f in shown]
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert every_frame_once(frames, chunks)
    assert json.loads(fields["preview_frames"]) == list(shown)
    assert "plan_pending" not in fields


def test_plan_of_a_stepped_range() -> None:
    frames = FrameRange(first=1, last=19, step=2)
    shown = preview_frames(frames, 3)
    chunks, _ = initial_plan(frames, 2, shown, hold=False, pool=POOL, measured=None)
    assert shown == (1, 11, 19)  # the tenth of ten frames between: 4.5 rounds up
    assert every_frame_once(frames, chunks)
    assert [c.frames for c in chunks] == [(1,), (11,), (19,), (3, 5), (7, 9), (13, 15), (17,)]


def test_hold_plans_the_preview_alone_and_keeps_the_gate_shut() -> None:
    # GIVEN --preview 3 --hold WHEN planned THEN only the preview chunks, the rest pending
    frames = FrameRange(first=1, last=8)
    chunks, fields = initial_plan(frames, 2, (1, 5, 8), hold=True, pool=POOL, measured=M)
    assert [c.frames for c in chunks] == [(1,), (5,), (8,)]
    assert fields["hold"] == "1" and fields["plan_pending"] == "1"
    assert hold_pending(fields)
    assert not hold_pending({**fields, "hold_released": "1765000000.0"})


def test_auto_without_a_measurement_waits_for_the_first_preview_frame() -> None:
    frames = FrameRange(first=1, last=8)
    chunks, fields = initial_plan(frames, 0, (1, 8), hold=False, pool=POOL, measured=None)
    assert [c.frames for c in chunks] == [(1,), (8,)]
    assert fields["plan_pending"] == "1" and "hold" not in fields


def test_check_preview_refuses_a_hold_without_a_preview_and_too_many() -> None:
    check_preview(3, True)
    with pytest.raises(SpecError, match="--preview N"):
        check_preview(0, True)
    with pytest.raises(SpecError, match="1 to 100"):
        check_preview(101, False)


def test_rest_estimate_from_the_preview_timings() -> None:
    # GIVEN 1 s a frame, 2 s start-up, 2 workers, $0.001 a GPU-second, 45 frames left in 5s
    est = rest_estimate(M, frames_left=45, chunk_size=5, pool=POOL, paid_per_gpu_s=0.001)
    # THEN 9 chunks; GPU time is a start-up per worker plus a second a frame, priced so
    assert (est.chunks, est.chunk_size) == (9, 5)
    assert est.gpu_s == pytest.approx(2 * 2.0 + 45 * 1.0)
    assert est.cost == pytest.approx(est.gpu_s * 0.001)
    assert est.time_s > 45 * 1.0 / 2


def test_status_lines_of_a_held_job() -> None:
    job = {
        "id": "j-1", "state": "held", "hold": "1", "preview_frames": "[1, 5, 8]",
        "rest_estimate": json.dumps({"frames": 5, "chunks": 2, "chunk_size": 4, "time_s": 30.0,
                                     "gpu_s": 12.0, "cost": 0.01, "frame_s": 1.5,
                                     "startup_s": 1.0}),
    }  # fmt: skip
    chunks = [
        {"index": str(i), "state": "done", "frames": json.dumps([f])}
        for i, f in enumerate((1, 5, 8))
    ]
    summary = {"id": "j-1", "preview": preview_summary(job, chunks)}
    assert summary["preview"]["frames_done"] == [1, 5, 8]
    assert summary["preview"]["held"]
    text = "\n".join(preview_lines(summary))
    assert "preview frames 1, 5, 8 first: 3/3 done" in text
    assert "held: `farm resume j-1` renders the rest" in text
    assert "5 frames in 2 chunks" in text and "$0.0100" in text


def test_no_preview_no_lines() -> None:
    assert preview_summary({"id": "j"}, []) is None
    assert preview_lines({"id": "j", "preview": None}) == []


def _api_spec(**more: object) -> dict[str, object]:
    spec = build_render_spec(source_name="shot.blend", frames="1-8", chunk_size=2,
                             resolution="64x36", fps=24, samples=1, codec="h264")  # fmt: skip
    return spec.to_json() | more


def test_the_preview_and_hold_travel_in_the_apis_spec_and_read_back() -> None:
    # GIVEN a submit body's spec with preview and hold WHEN the API reads it THEN they stand
    spec = job_spec(_api_spec(preview=3, hold=True), max_chunks=100)
    assert (spec.preview, spec.hold) == (3, True)
    assert JobSpec.from_json(spec.to_json()) == spec
    old = _api_spec()
    del old["preview"], old["hold"]  # a spec.json from before previews
    assert (JobSpec.from_json(old).preview, JobSpec.from_json(old).hold) == (0, False)


@pytest.mark.parametrize(
    ("more", "said"),
    [({"hold": True}, "add --preview N"), ({"preview": 101}, "1 to 100"),
     ({"preview": -1}, "1 to 100")],
)  # fmt: skip
def test_the_api_refuses_a_hold_without_a_preview_or_a_preview_out_of_range(
    more: dict[str, object], said: str
) -> None:
    with pytest.raises(ApiError, match=said) as refused:
        job_spec(_api_spec(**more), max_chunks=100)
    assert refused.value.status == 400


def test_a_held_job_is_announced_to_its_webhooks_once_per_hold() -> None:
    assert notices.event_for("held", {}) == "job.held"
    assert notices.STAMP_FIELDS["held"] == "held"  # the move's time: one notice per hold

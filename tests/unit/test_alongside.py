"""The encode lane (workers.host.alongside): when it is on, one encode at a time, a render that ends
while the last encode runs waits for it, and an encode that raises is logged, not lost silently."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from farm.adapters.settings import Settings
from workers.host.alongside import Alongside, LaneRun, Paid, claim_fields, end_fields, wanted
from workers.host.gpu import Capabilities


@pytest.mark.parametrize(
    ("setting", "nvenc", "on"),
    [("auto", True, True), ("auto", False, False), ("on", False, True), ("off", True, False)],
)
def test_auto_turns_the_lane_on_only_where_the_encoder_is_nvenc(
    setting: str, nvenc: bool, on: bool
) -> None:
    settings = Settings(encode_alongside=setting)  # type: ignore[arg-type]
    assert wanted(settings, Capabilities(nvenc=nvenc)) is on


def test_one_encode_at_a_time_and_a_hand_waits_for_the_one_before() -> None:
    lane = Alongside()
    release = threading.Event()
    events: list[str] = []

    def first(run: LaneRun) -> None:
        events.append("first begins")
        release.wait(5)
        events.append("first ends")

    lane.hand("first", first)
    handed = threading.Event()

    def second_hand() -> None:
        lane.hand("second", lambda run: events.append("second runs"))
        handed.set()

    threading.Thread(target=second_hand).start()
    assert not handed.wait(0.3)  # the render that hands the second waits for the first
    release.set()
    assert handed.wait(5)
    lane.close()  # the second ends
    assert events == ["first begins", "first ends", "second runs"]


def test_an_encode_that_raises_is_logged_and_the_lane_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lane = Alongside()

    def broken(run: LaneRun) -> None:
        raise RuntimeError("a bug")

    ran: list[float] = []
    with caplog.at_level(logging.ERROR, logger="workers.host.alongside"):
        lane.hand("chunk j/3 encode", broken)
        lane.hand("next", lambda run: ran.append(time.monotonic()))  # waits for the broken one
    assert "chunk j/3 encode raised alongside" in caplog.text
    lane.close()
    assert len(ran) == 1


def test_a_closed_lane_refuses_so_the_render_task_runs_the_encode_itself() -> None:
    lane = Alongside()
    lane.close()
    ran: list[str] = []
    assert lane.hand("late", lambda run: ran.append("ran")) is False
    assert ran == []


def test_the_lanes_seconds_alone_are_those_with_no_paid_attempt_running() -> None:
    paid = Paid()
    paid._spans.extend([(100.0, 110.0), (111.0, 120.0)])  # two renders, one second apart
    assert paid.alone_s(105.0, 115.0) == 1.0  # beside both, but for the gap
    assert paid.alone_s(118.0, 130.0) == 10.0  # the last encode: 2 s beside, 10 alone
    assert paid.alone_s(90.0, 95.0) == 5.0
    paid._spans.extend([(104.0, 112.0), (121.0, 122.0)])  # threads of a --concurrency 2 worker
    assert paid.alone_s(100.0, 125.0) == 4.0  # [120, 121] and [122, 125]: the gap is covered


def test_paid_attempts_running_cover_the_lane_up_to_now_until_the_last_ends() -> None:
    paid = Paid()
    with paid.running():
        started = time.time()
        assert paid.alone_s(started, started + 3.0) == 0.0
        with paid.running():  # a second thread's render
            pass
        assert paid.alone_s(started, started + 3.0) == 0.0  # the first still runs
    ended = time.time()
    assert paid.alone_s(ended, ended + 2.0) == pytest.approx(2.0)


def test_only_an_attempt_in_the_lane_reports_its_seconds_alone_and_claims_at_no_price() -> None:
    assert end_fields(None) == {}  # a render task's attempt: no LaneRun
    lane = Alongside()
    seen: list[dict[str, object]] = []

    def encode(run: LaneRun) -> None:  # what the lane hands its run to (run_chunk_phase)
        time.sleep(0.05)
        seen.append({**end_fields(run), "in": isinstance(run, LaneRun)})

    lane.hand("encode", encode)
    lane.close()
    assert end_fields(None) == {}
    assert seen[0]["in"] is True
    assert float(seen[0]["alone_s"]) >= 0.05  # no render ran beside it
    assert claim_fields({"price_per_s": "0.0002", "instance_type": "g5.xlarge"}) == {
        "price_per_s": "0",
        "alone_per_s": "0.0002",
        "lane": "1",
    }

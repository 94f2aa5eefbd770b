"""The encode lane (workers.alongside): when it is on, one encode at a time, a render that ends
while the last encode runs waits for it, and an encode that raises is logged, not lost silently."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from farm.settings import Settings
from workers.alongside import Alongside, Renders, claim_fields, end_fields, wanted
from workers.gpu import Capabilities


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

    def first() -> None:
        events.append("first begins")
        release.wait(5)
        events.append("first ends")

    lane.hand("first", first)
    handed = threading.Event()

    def second_hand() -> None:
        lane.hand("second", lambda: events.append("second runs"))
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

    def broken() -> None:
        raise RuntimeError("a bug")

    ran: list[float] = []
    with caplog.at_level(logging.ERROR, logger="workers.alongside"):
        lane.hand("chunk j/3 encode", broken)
        lane.hand("next", lambda: ran.append(time.monotonic()))  # waits for the broken one
    assert "chunk j/3 encode raised alongside" in caplog.text
    lane.close()
    assert len(ran) == 1


def test_a_closed_lane_refuses_so_the_render_task_runs_the_encode_itself() -> None:
    lane = Alongside()
    lane.close()
    ran: list[str] = []
    assert lane.hand("late", lambda: ran.append("ran")) is False
    assert ran == []


def test_the_lanes_seconds_alone_are_those_with_no_render_running() -> None:
    renders = Renders()
    renders._spans.extend([(100.0, 110.0), (111.0, 120.0)])  # two renders, one second apart
    assert renders.alone_s(105.0, 115.0) == 1.0  # beside both, but for the gap
    assert renders.alone_s(118.0, 130.0) == 10.0  # the last encode: 2 s beside, 10 alone
    assert renders.alone_s(90.0, 95.0) == 5.0


def test_a_render_in_progress_covers_the_lane_up_to_now() -> None:
    renders = Renders()
    with renders.rendering():
        started = time.time()
        assert renders.alone_s(started, started + 3.0) == 0.0
    ended = time.time()
    assert 2.0 <= renders.alone_s(ended, ended + 2.0) <= 2.0 + 1e-6


def test_only_an_attempt_in_the_lane_reports_its_seconds_alone_and_claims_at_no_price() -> None:
    assert end_fields() == {}  # a render task's attempt
    lane = Alongside()
    seen: list[dict[str, str]] = []
    lane.hand("encode", lambda: (time.sleep(0.05), seen.append(end_fields())))
    lane.close()
    assert end_fields() == {}
    assert float(seen[0]["alone_s"]) >= 0.05  # no render ran beside it
    assert claim_fields({"price_per_s": "0.0002", "instance_type": "g5.xlarge"}) == {
        "price_per_s": "0",
        "alone_per_s": "0.0002",
    }

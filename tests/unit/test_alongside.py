"""The encode lane (workers.alongside): when it is on, one encode at a time, a render that ends
while the last encode runs waits for it, and an encode that raises is logged, not lost silently."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from farm.settings import Settings
from workers.alongside import Alongside, wanted
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

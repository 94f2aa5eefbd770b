"""No idle tail: the ledger's SPLIT script against a real Redis (atomic, once, token-guarded), and
the idle worker's choice (farm.core.split) over real ledger records."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest
from celery.signals import task_postrun, task_prerun

from farm.adapters.proc import Running
from farm.adapters.settings import Settings
from farm.core import keys
from farm.core.chunking import worker_factors
from farm.core.split import choose
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger, speeds
from tests.integration.conftest import make_job, wait_until
from workers.attempt.context import Drain
from workers.attempt.lease import LeaseKeeper
from workers.attempt.wake import Wakeups
from workers.phases import splitter


def _job(ledger: Ledger, job_id: str = "j1", frames: str = "1-24", chunk_size: int = 24) -> str:
    make_job(ledger, job_id, frames, chunk_size)
    claim = ledger.move_chunk(job_id, 0, ChunkState.RENDERING, mode="claim", lease_s=30, worker="w")
    return claim.token


def _frames(ledger: Ledger, index: int, job_id: str = "j1") -> list[int]:
    frames: list[int] = json.loads(ledger.chunk(job_id, index)["frames"])
    return frames


def test_a_split_moves_the_frames_after_n_to_a_new_queued_chunk(ledger: Ledger) -> None:
    token = _job(ledger)
    new = ledger.split_chunk("j1", 0, token=token, last_frame=12, chunks_total=1)
    assert new == 1
    assert _frames(ledger, 0) == list(range(1, 13)) and _frames(ledger, 1) == list(range(13, 25))
    assert ledger.chunk("j1", 1)["state"] == ChunkState.QUEUED
    assert ledger.chunk("j1", 0)["frame_count"] == "12"
    assert ledger.job("j1")["chunks_total"] == "2"
    assert ledger.renew("j1", 0, token, 30) == "split:12"


def test_only_one_of_many_racing_splitters_wins(ledger: Ledger) -> None:
    token = _job(ledger)
    with ThreadPoolExecutor(8) as pool:
        won = list(
            pool.map(
                lambda n: ledger.split_chunk("j1", 0, token=token, last_frame=n, chunks_total=1),
                range(6, 14),
            )
        )
    assert sum(1 for w in won if w is not None) == 1
    assert ledger.job("j1")["chunks_total"] == "2"
    assert sorted(_frames(ledger, 0) + _frames(ledger, 1)) == list(range(1, 25))


def test_no_split_under_another_attempt_or_after_rendering(ledger: Ledger) -> None:
    token = _job(ledger)
    assert ledger.split_chunk("j1", 0, token="1:9-stale", last_frame=12, chunks_total=1) is None
    ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token)
    assert ledger.split_chunk("j1", 0, token=token, last_frame=12, chunks_total=1) is None
    assert ledger.job("j1")["chunks_total"] == "1" and _frames(ledger, 0) == list(range(1, 25))


def test_no_split_before_the_frame_the_owner_is_on(ledger: Ledger) -> None:
    token = _job(ledger)
    ledger.set_chunk_fields("j1", 0, frame_on=12)
    assert ledger.split_chunk("j1", 0, token=token, last_frame=11, chunks_total=1) is None
    # At it: the owner stops after the frame it is on (it hears long before that frame ends).
    assert ledger.split_chunk("j1", 0, token=token, last_frame=12, chunks_total=1) == 1
    assert _frames(ledger, 1) == list(range(13, 25))


def test_no_split_leaving_fewer_than_two_frames(ledger: Ledger) -> None:
    token = _job(ledger)
    assert ledger.split_chunk("j1", 0, token=token, last_frame=23, chunks_total=1) is None
    assert ledger.split_chunk("j1", 0, token=token, last_frame=22, chunks_total=1) == 1


def test_no_split_while_the_plan_is_pending(ledger: Ledger) -> None:
    token = _job(ledger)
    ledger.r.hset(keys.r_job("j1"), "plan_pending", "1")  # an auto-sized job still probing
    assert ledger.split_chunk("j1", 0, token=token, last_frame=12, chunks_total=1) is None


def test_the_completion_gate_waits_for_the_new_chunk(ledger: Ledger) -> None:
    token = _job(ledger)
    ledger.split_chunk("j1", 0, token=token, last_frame=12, chunks_total=1)
    ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token)
    enc = ledger.move_chunk("j1", 0, ChunkState.ENCODING, mode="claim", lease_s=30)
    ledger.move_chunk("j1", 0, ChunkState.DONE, token=enc.token)
    assert not ledger.try_start_stitch("j1")
    for target in (ChunkState.RENDERING, ChunkState.RENDERED, ChunkState.ENCODING):
        claim = target is not ChunkState.RENDERED
        move = ledger.move_chunk(
            "j1", 1, target, mode="claim" if claim else "", lease_s=30 if claim else None,
            token="" if claim else ledger.chunk("j1", 1)["token"],
        )  # fmt: skip
        assert move.moved
    ledger.move_chunk("j1", 1, ChunkState.DONE, token=ledger.chunk("j1", 1)["token"])
    assert ledger.try_start_stitch("j1")
    assert ledger.job("j1")["state"] == JobState.STITCHING


def test_an_idle_worker_chooses_the_longest_rendering_chunk(ledger: Ledger) -> None:
    _job(ledger, "j1", frames="1-10", chunk_size=10)
    _job(ledger, "j2", frames="1-40", chunk_size=40)
    ledger.set_chunk_fields("j2", 0, frame_on=5, frame_s_live=10.0)
    records = [(ledger.job(j), ledger.chunks(j)) for j in ("j1", "j2")]
    plan = choose(records, lag_s=3.5)
    assert plan is not None and (plan.job_id, plan.index) == ("j2", 0)
    assert plan.last_frame == 5 + 18 and plan.moved == 17
    assert (
        ledger.split_chunk(
            "j2", 0, token=plan.token, last_frame=plan.last_frame, chunks_total=plan.chunks_total
        )
        == 1
    )
    again = choose([(ledger.job("j2"), ledger.chunks("j2"))], lag_s=3.5)
    assert again is None  # the new chunk waits for a worker: work to take, nothing to split


class _Dispatch:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, int]] = []

    def send(self, phase: object, job_id: str, index: int, countdown_s: float = 0) -> None:
        self.sent.append((str(phase), job_id, index))


def _ctx(ledger: Ledger) -> Any:
    return SimpleNamespace(
        ledger=ledger, dispatch=_Dispatch(), settings=Settings(lease_s=6), name="idle@test",
        warm=None, queues=("render", "stitch"),
    )  # fmt: skip


def test_an_idle_worker_splits_and_sends_the_new_chunk(ledger: Ledger) -> None:
    _job(ledger)
    ledger.set_chunk_fields("j1", 0, frame_on=3, frame_s_live=2.0)
    ctx = _ctx(ledger)
    plan = splitter.split_once(ctx)
    assert plan is not None and plan.last_frame == 3 + 11
    assert ctx.dispatch.sent == [("render", "j1", 1)]
    assert _frames(ledger, 1) == list(range(15, 25))
    assert splitter.split_once(ctx) is None  # chunk 1 waits for a worker: nothing more to split


def test_a_worker_looks_for_a_split_as_soon_as_its_last_task_ends(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not at its next periodic look, a minute away here: at the end of a job every second a
    freed worker waits is a second of the tail."""
    monkeypatch.setattr(splitter, "EVERY_S", 60.0)
    _job(ledger)
    ledger.set_chunk_fields("j1", 0, frame_on=3, frame_s_live=2.0)
    ctx = _ctx(ledger)
    ctx.drain = Drain()
    activity = splitter.Activity()
    activity.started()  # a task in hand: the worker is not idle yet
    splitter.start(ctx, activity)
    try:
        activity.ended()
        wait_until(lambda: ctx.dispatch.sent == [("render", "j1", 1)])
        assert _frames(ledger, 1) == list(range(15, 25))
    finally:
        ctx.drain.active.set()
        activity.freed.set()  # the loop sees the drain and ends
        task_prerun.disconnect(activity.started)
        task_postrun.disconnect(activity.ended)


def test_no_split_while_another_queue_the_worker_serves_has_work(ledger: Ledger) -> None:
    """A stitch waiting for this worker comes first: a split now would leave its new chunk
    waiting behind it."""
    _job(ledger)
    ledger.set_chunk_fields("j1", 0, frame_on=3, frame_s_live=2.0)
    ctx = _ctx(ledger)
    ledger.r.rpush("stitch", "a stitch message")
    assert splitter.split_once(ctx) is None and ctx.dispatch.sent == []
    ledger.r.delete("stitch")
    assert splitter.split_once(ctx) is not None


def test_recent_jobs_tell_each_workers_speed(ledger: Ledger) -> None:
    for job_id, times in (("a", {"fast": 1.0, "slow": 1.5, "mid": 1.2}), ("b", {"fast": 4.0})):
        _job(ledger, job_id, frames="1-30", chunk_size=10)
        for index, (worker, frame_s) in enumerate(times.items()):
            ledger.set_chunk_fields(job_id, index, rendered_by=worker, frame_s=frame_s)
    factors = worker_factors(speeds.frame_times(ledger))
    assert factors == pytest.approx({"fast": 1 / 1.2, "slow": 1.25, "mid": 1.0})


def test_a_split_wakes_its_owner_at_once(ledger: Ledger) -> None:
    token = _job(ledger)  # claimed by worker "w"
    sub = ledger.wakeups("w")
    try:
        assert ledger.split_chunk("j1", 0, token=token, last_frame=12, chunks_total=1) == 1
        message = None
        for _ in range(50):
            message = message or sub.get_message(timeout=0.1)
        assert message is not None and message["data"] == "j1 0"
    finally:
        sub.close()


def test_the_owners_keeper_hears_a_split_through_its_wakeups_not_its_renewal(
    ledger: Ledger,
) -> None:
    token = _job(ledger)
    wakeups = Wakeups(ledger, "w").start()
    keeper = LeaseKeeper(
        ledger, job_id="j1", chunk=0, token=token, lease_s=30, renew_s=2, running=Running(),
        wakeups=wakeups,
    )  # fmt: skip
    keeper.renew_s = 3600.0  # no renewal within the test: only a wake-up can bring the split
    told: list[int] = []
    keeper.on_split = told.append
    try:
        with keeper:
            wait_until(wakeups.subscribed.is_set)
            ledger.split_chunk("j1", 0, token=token, last_frame=12, chunks_total=1)
            wait_until(lambda: bool(told))
        assert told == [12] and keeper.split_last == 12 and not keeper.lost
    finally:
        wakeups.stop()


def test_an_owner_that_hears_at_once_is_left_a_one_frame_margin(ledger: Ledger) -> None:
    # 24 frames, the owner on frame 20 at 1 s a frame: 4 ahead. Heard at its next renewal (up to
    # 3.5 s), it must keep all 4 and nothing is split; woken at once, it keeps 2 and 2 move.
    _job(ledger)
    ledger.set_chunk_fields("j1", 0, frame_on=20, frame_s_live=1.0)
    ctx = _ctx(ledger)
    ledger.heartbeat("w", {"queues": ["render"], "wake": False})
    assert splitter.split_once(ctx) is None
    ledger.heartbeat("w", {"queues": ["render"], "wake": True})
    plan = splitter.split_once(ctx)
    assert plan is not None and plan.last_frame == 22 and plan.moved == 2
    assert ledger.worker_info(["w", "nobody"]).keys() == {"w"}


def test_a_woken_owner_with_most_of_its_frame_left_stops_after_it(ledger: Ledger) -> None:
    # On frame 23 of 24 at 1 s a frame, begun 0.2 s ago: it hears long before 23 ends, so 24
    # moves (done 1 s from now instead of 1.8).
    _job(ledger)
    ledger.set_chunk_fields(
        "j1", 0, frame_on=23, frame_s_live=1.0, frame_on_at=round(time.time() - 0.2, 3)
    )
    ledger.heartbeat("w", {"queues": ["render"], "wake": True})
    plan = splitter.split_once(_ctx(ledger))
    assert plan is not None and plan.last_frame == 23 and plan.moved == 1
    assert _frames(ledger, 0) == list(range(1, 24)) and _frames(ledger, 1) == [24]

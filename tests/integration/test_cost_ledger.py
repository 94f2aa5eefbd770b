"""Cost, budget, pause and priority against a real Redis: every attempt metered, a budget that
pauses, a paused job refusing claims, and kombu's Redis priorities ordering the messages."""

from __future__ import annotations

import time

import pytest

from farm.adapters.settings import Settings
from farm.core import cost
from farm.core.pipeline import Phase
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import ChunkState, JobState
from farm.dispatch import Dispatcher, broker_priority, make_app
from farm.ledger import Ledger
from workers.host import alongside

METER = {"instance_type": "g5.xlarge", "lifecycle": "local", "price_per_s": "0.01"}


def _job(ledger: Ledger, job_id: str = "j1", frames: str = "1-20", chunk_size: int = 10,
         **extra: str) -> None:  # fmt: skip
    spec = build_render_spec(
        source_name="s.blend", frames=frames, chunk_size=chunk_size, resolution="320x180",
        fps=24, samples=4, codec="h264",
    )  # fmt: skip
    ledger.create_job(
        job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, chunk_size), source_key="k",
        plan=dict(extra),
    )  # fmt: skip


def _claim(ledger: Ledger, index: int, target: ChunkState = ChunkState.RENDERING) -> str:
    claim = ledger.move_chunk("j1", index, target, mode="claim", lease_s=30, worker="w")
    assert claim.moved, claim
    return claim.token


def test_every_attempt_is_metered_at_its_claims_price(ledger: Ledger) -> None:
    ledger.meter = METER
    _job(ledger)
    started = time.time()
    token = _claim(ledger, 0)
    time.sleep(0.2)
    ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token)
    took = time.time() - started
    spent = cost.job_cost(ledger.cost_record("j1"))
    assert spent.attempts == 1 and spent.wasted_attempts == 0
    # The attempt's seconds: at least what it slept, at most what claim to end took here.
    assert 0.2 <= spent.gpu_s <= took
    assert spent.spent == pytest.approx(spent.gpu_s * 0.01)
    assert spent.by_instance == {"g5.xlarge local": spent.gpu_s}
    chunk = ledger.chunk("j1", 0)
    assert float(chunk["gpu_s"]) == spent.gpu_s and "claimed_at" not in chunk
    [record] = ledger.attempt_records("j1")
    assert record["chunk"] == 0 and record["phase"] == "rendering" and record["end"] == "rendered"


def test_an_encode_in_the_lane_pays_only_for_its_seconds_with_no_render_beside_it(
    ledger: Ledger,
) -> None:
    """workers.host.alongside: claimed at no price, the instance's price kept for its seconds alone;
    the ledger keeps no more of them than the attempt lasted, and a later claim outside the lane
    is metered at its own price alone."""
    ledger.meter = METER
    _job(ledger)
    lane = alongside.claim_fields(METER)
    for index, alone_s in ((0, "0.05"), (1, "999")):
        ledger.move_chunk("j1", index, ChunkState.RENDERING, mode="claim", lease_s=30)
        ledger.move_chunk(
            "j1", index, ChunkState.RENDERED, token=ledger.chunk("j1", index)["token"]
        )
        claim = ledger.move_chunk(
            "j1", index, ChunkState.ENCODING, mode="claim", lease_s=30, **lane
        )
        time.sleep(0.1)
        ledger.move_chunk("j1", index, ChunkState.DONE, token=claim.token, alone_s=alone_s)
    records = {(r["chunk"], r["phase"]): r for r in ledger.attempt_records("j1")}
    beside, last = records[(0, "encoding")], records[(1, "encoding")]
    assert beside["cost"] == pytest.approx(0.05 * 0.01)
    assert last["cost"] == pytest.approx(last["s"] * 0.01)  # alone all along, no more
    renders = sum(records[(i, "rendering")]["cost"] for i in (0, 1))
    assert cost.job_cost(ledger.cost_record("j1")).spent == pytest.approx(
        renders + beside["cost"] + last["cost"]
    )
    # The instance's GPU-seconds: the encode beside a render adds only its 0.05 s alone (found
    # by a review: its whole time was counted again, on top of the render's).
    render_s = sum(records[(i, "rendering")]["s"] for i in (0, 1))
    assert cost.job_cost(ledger.cost_record("j1")).gpu_s == pytest.approx(
        render_s + 0.05 + last["s"]
    )
    _job(ledger, "j2")
    token = ledger.move_chunk("j2", 0, ChunkState.RENDERING, mode="claim", lease_s=30).token
    assert ledger.chunk("j2", 0)["alone_per_s"] == "0"
    ledger.move_chunk("j2", 0, ChunkState.RENDERED, token=token, alone_s="5")
    [record] = ledger.attempt_records("j2")
    assert record["cost"] == pytest.approx(record["s"] * 0.01)


def test_every_move_that_ends_an_attempt_records_the_lanes_seconds_alone(
    ledger: Ledger,
) -> None:
    """The moves that end an attempt (done, failed) carry the lane's seconds alone
    (alongside.LaneRun's end fields); only the lane's claim prices them."""
    ledger.meter = METER
    alone = {"alone_s": "0.05"}
    _job(ledger)
    lane = alongside.claim_fields(METER)
    for index, end in ((0, "done"), (1, "fail")):
        token = _claim(ledger, index)
        ledger.move_chunk("j1", index, ChunkState.RENDERED, token=token, **alone)
        claim = ledger.move_chunk(
            "j1", index, ChunkState.ENCODING, mode="claim", lease_s=30, **lane
        )
        time.sleep(0.1)  # longer than its 0.05 s alone (the ledger keeps no more than it lasted)
        if end == "done":
            ledger.move_chunk("j1", index, ChunkState.DONE, token=claim.token, **alone)
        else:
            ledger.move_chunk("j1", index, ChunkState.RENDERED, token=claim.token, mode="fail",
                              max_failures=3, **alone)  # fmt: skip
    records = ledger.attempt_records("j1")
    encodes = [r for r in records if r["phase"] == "encoding"]
    assert [r["cost"] for r in encodes] == pytest.approx([0.05 * 0.01] * 2)
    renders = [r for r in records if r["phase"] == "rendering"]
    assert [r["cost"] for r in renders] == pytest.approx([r["s"] * 0.01 for r in renders])


def test_failed_interrupted_and_lost_attempts_are_wasted(ledger: Ledger) -> None:
    ledger.meter = METER
    _job(ledger)
    token = _claim(ledger, 0)
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, token=token, mode="fail", max_failures=3)
    token = _claim(ledger, 0)
    ledger.move_chunk("j1", 0, ChunkState.INTERRUPTED, token=token, mode="interrupt",
                      max_failures=6)  # fmt: skip
    _claim(ledger, 0)
    now = time.time()
    # The worker vanished: claimed 10 s ago, its lease ran out 4 s ago.
    ledger.r.hset("farm:chunk:j1:0", mapping={"claimed_at": now - 10, "lease_expires": now - 4})
    lost = ledger.move_chunk("j1", 0, ChunkState.QUEUED, mode="expire", max_failures=6,
                             only_from=frozenset({ChunkState.RENDERING}))  # fmt: skip
    assert lost.moved
    spent = cost.job_cost(ledger.cost_record("j1"))
    assert spent.attempts == 3 and spent.wasted_attempts == 3
    assert spent.wasted_gpu_s == spent.gpu_s
    assert ledger.attempt_records("j1")[-1]["s"] == pytest.approx(6.0, abs=0.1)


def test_a_claim_past_the_budget_pauses_the_job_and_is_refused(ledger: Ledger) -> None:
    ledger.meter = METER
    _job(ledger, max_cost="0.05")
    token = _claim(ledger, 0)
    ledger.r.hset("farm:chunk:j1:0", "claimed_at", time.time() - 4)  # a 4 s attempt: $0.04
    for frame in range(1, 11):
        ledger.record_frame("j1", frame, 1, "x")
    ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token)
    # spent $0.04 for 10 of 20 frames: $0.04 more expected, $0.08 > $0.05
    refused = ledger.move_chunk("j1", 1, ChunkState.RENDERING, mode="claim", lease_s=30)
    assert not refused.moved
    job = ledger.job("j1")
    assert job["state"] == JobState.PAUSED
    assert "would pass the budget of $0.0500" in job["paused_reason"]
    assert ledger.chunk("j1", 1)["state"] == ChunkState.QUEUED


def test_a_running_attempt_counts_what_it_has_spent_so_far(ledger: Ledger) -> None:
    """Found by a review: frames counted as each was stored, but money only when an attempt
    ended, so while chunks ran a frame seemed free: status said $0 spent, and the budget's pace
    (spent over frames) read low."""
    ledger.meter = {**METER, "price_per_s": "1.0"}
    _job(ledger, frames="1-40", max_cost="0.3")
    started = time.time()
    token = _claim(ledger, 0)
    for frame in range(1, 6):
        ledger.record_frame("j1", frame, 1, "x")
    time.sleep(0.15)
    spend = ledger.spend("j1")
    # At $1 a second, what is running costs the seconds since its claim.
    assert spend.cost.spent == 0 and 0.15 <= spend.running <= time.time() - started
    assert spend.spent == spend.running and spend.to_json()["running"] == round(spend.running, 6)
    # Until an attempt ends, the pace is the estimate's (none here): what the first attempts
    # spent is mostly start-up and frames under way (found by a review of the fix).
    assert spend.expected_rest == 0
    second_claimed = time.time()
    second = _claim(ledger, 1)
    ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token)  # metered now, and only once
    metered = ledger.spend("j1")
    assert metered.cost.spent == pytest.approx(metered.cost.gpu_s * 1.0)
    # What runs now is chunk 1's alone: chunk 0's share (0.15 s and more) left with its metering.
    assert 0 <= metered.running <= time.time() - second_claimed
    assert "accruing" not in ledger.chunk("j1", 0)
    # Spent (chunk 0's and chunk 1's so far) over 5 frames: 35 more pass the $0.30 budget.
    assert metered.expected_rest == pytest.approx(metered.spent / 5 * 35, rel=0.05)
    assert not ledger.move_chunk("j1", 2, ChunkState.RENDERING, mode="claim", lease_s=30).moved
    assert ledger.job("j1")["state"] == JobState.PAUSED
    ledger.move_chunk("j1", 1, ChunkState.RENDERED, token=second)
    ended = ledger.spend("j1")
    assert ended.running == 0 and ended.spent == ended.cost.spent


def test_a_running_share_left_by_an_older_script_is_taken_back_at_the_next_claim(
    ledger: Ledger,
) -> None:
    """An attempt ended by a script from before the running meter leaves its share in the sum
    (found by a review: it would have grown the job's spend for ever); the chunk's next claim
    takes it back."""
    ledger.meter = {**METER, "price_per_s": "1.0"}
    _job(ledger)
    token = _claim(ledger, 0)
    # What an older script's end does: the attempt metered, its claim time gone, its share not.
    ledger.r.hdel("farm:chunk:j1:0", "claimed_at")
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, token=token)
    assert ledger.spend("j1").cost.run_per_s == 1.0  # left behind
    _claim(ledger, 0)
    assert ledger.spend("j1").cost.run_per_s == 1.0  # the new claim's only


def test_resume_with_a_higher_budget_lets_claims_through(ledger: Ledger) -> None:
    _job(ledger, max_cost="0.01")
    ledger.r.hset("farm:cost:j1", "cost", "0.02")
    assert not ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim").moved
    assert ledger.resume_job("j1", max_cost=1.0).moved
    assert ledger.move_chunk("j1", 0, ChunkState.RENDERING, mode="claim").moved


def test_a_paused_job_refuses_claims_but_running_chunks_finish(ledger: Ledger) -> None:
    _job(ledger)
    token = _claim(ledger, 0)
    assert ledger.pause_job("j1", "paused by a user").moved
    assert ledger.renew("j1", 0, token, 30) == "ok"
    assert not ledger.move_chunk("j1", 1, ChunkState.RENDERING, mode="claim").moved
    assert ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token).moved
    assert ledger.resume_job("j1").moved
    assert ledger.job("j1")["state"] == JobState.RUNNING


def test_each_pause_adds_its_length_to_the_jobs_paused_time(ledger: Ledger) -> None:
    _job(ledger)
    slept = took = 0.0
    for seconds in (0.2, 0.3, 0.1):
        started = time.time()
        assert ledger.pause_job("j1", "paused by a user").moved
        time.sleep(seconds)
        # A job cancelled while paused counts that pause too.
        last = seconds == 0.1
        assert (
            ledger.move_job("j1", JobState.CANCELLED).moved
            if last
            else ledger.resume_job("j1").moved
        )
        slept, took = slept + seconds, took + time.time() - started
        assert slept <= float(ledger.job("j1")["paused_s"]) <= took
    time.sleep(0.1)
    assert ledger.resume_job("j1").moved  # `farm retry` reopens it: not a pause ending
    assert slept <= float(ledger.job("j1")["paused_s"]) <= took


def test_a_pause_counts_from_when_the_chunks_running_at_it_ended(ledger: Ledger) -> None:
    _job(ledger)
    token = _claim(ledger, 0)
    assert ledger.pause_job("j1", "paused by a user").moved
    time.sleep(0.3)  # chunk 0 renders on: the job is still making frames
    ended = time.time()
    assert ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token).moved
    time.sleep(0.2)
    assert ledger.resume_job("j1").moved
    assert 0.2 <= float(ledger.job("j1")["paused_s"]) <= time.time() - ended


def test_a_job_resumed_while_a_chunk_from_before_its_pause_still_runs_never_stood_still(
    ledger: Ledger,
) -> None:
    _job(ledger)
    _job(ledger, job_id="j10")  # its lease "j10:0" is not one of j1's
    assert ledger.move_chunk("j10", 0, ChunkState.RENDERING, mode="claim", lease_s=30).moved
    token = _claim(ledger, 0)
    assert ledger.pause_job("j1", "paused by a user").moved
    time.sleep(0.3)  # chunk 0 renders on all through the pause
    assert ledger.resume_job("j1").moved
    assert float(ledger.job("j1").get("paused_s", 0)) == 0
    assert ledger.move_chunk("j1", 0, ChunkState.RENDERED, token=token).moved
    # With the chunk done and j10's still running, the next pause counts in full: at least what
    # it slept, at most what pause to resume took here.
    started = time.time()
    assert ledger.pause_job("j1", "paused by a user").moved
    time.sleep(0.2)
    assert ledger.resume_job("j1").moved
    took = time.time() - started
    assert 0.2 <= float(ledger.job("j1")["paused_s"]) <= took
    # A lease past its expiry is a worker gone, not a chunk running: the pause counts.
    assert ledger.move_chunk("j1", 1, ChunkState.RENDERING, mode="claim", lease_s=0.05).moved
    started = time.time()
    assert ledger.pause_job("j1", "paused by a user").moved
    time.sleep(0.2)
    assert ledger.resume_job("j1").moved
    took += time.time() - started
    assert 0.2 + 0.2 <= float(ledger.job("j1")["paused_s"]) <= took


def test_a_job_that_fails_while_paused_ends_its_pause(ledger: Ledger) -> None:
    _job(ledger)
    token = _claim(ledger, 0)
    assert ledger.pause_job("j1", "paused by a user").moved
    started = time.time()
    time.sleep(0.2)
    # Its running chunk fails for the last time: the job fails, its pause ends. The chunk ran
    # until then, so the job never stood still.
    failed = ledger.move_chunk("j1", 0, ChunkState.FAILED, token=token, mode="fail",
                               max_failures=1, error="boom")  # fmt: skip
    assert failed.moved and ledger.job("j1")["state"] == JobState.FAILED
    assert float(ledger.job("j1")["paused_s"]) == 0
    # A lost lease found later: the worker vanished when its lease ran out, 0.1 s into the pause.
    _job(ledger, job_id="j2")
    lost = ledger.move_chunk("j2", 0, ChunkState.RENDERING, mode="claim", lease_s=0.1,
                             worker="w")  # fmt: skip
    assert ledger.pause_job("j2", "paused by a user").moved
    time.sleep(0.4)
    assert ledger.move_chunk("j2", 0, ChunkState.QUEUED, token=lost.token, mode="expire",
                             max_failures=1).moved  # fmt: skip
    assert ledger.job("j2")["state"] == JobState.FAILED
    assert 0.25 <= float(ledger.job("j2")["paused_s"]) <= time.time() - started


def test_priority_defaults_to_fifty(ledger: Ledger) -> None:
    _job(ledger)
    assert ledger.priority("j1") == 50
    ledger.set_priority("j1", 90)
    assert ledger.priority("j1") == 90


def test_the_broker_hands_out_a_high_priority_message_before_a_hundred_older_ones(
    ledger: Ledger, redis_url: str
) -> None:
    app = make_app(Settings(redis_url=redis_url))
    priorities = {"long": 50, "rush": 90}
    dispatch = Dispatcher(app, priority_of=priorities.__getitem__)
    for chunk in range(100):
        dispatch.send(Phase.RENDER, "long", chunk)
    dispatch.send(Phase.RENDER, "rush", 0)
    with app.connection_for_read() as conn:
        message = conn.default_channel.basic_get("render", no_ack=True)
        assert message is not None
        assert message.payload[1]["job_id"] == "rush"
        second = conn.default_channel.basic_get("render", no_ack=True)
        assert second is not None and second.payload[1] == {"job_id": "long", "chunk": 0}
    assert broker_priority(90) < broker_priority(50)


def test_farm_priority_resends_the_waiting_chunks_ahead_of_the_queue(
    ledger: Ledger, redis_url: str
) -> None:
    from farm.control.jobs import reprioritize

    settings = Settings(redis_url=redis_url)
    _job(ledger, "long", frames="1-40", chunk_size=1)
    _job(ledger, "late", frames="1-2", chunk_size=1)
    dispatch = Dispatcher(make_app(settings))
    for chunk in range(40):
        dispatch.send(Phase.RENDER, "long", chunk)
    for chunk in range(2):
        dispatch.send(Phase.RENDER, "late", chunk)
    assert reprioritize(settings, "late", 95) == 2
    with make_app(settings).connection_for_read() as conn:
        got = [conn.default_channel.basic_get("render", no_ack=True) for _ in range(2)]
    assert [m.payload[1] for m in got if m] == [
        {"job_id": "late", "chunk": 0},
        {"job_id": "late", "chunk": 1},
    ]

"""One round trip per ledger step, against a real Redis: a claim brings back what its attempt
reads next, every move records its own event, the last done move opens the completion gate, the
blocklist and the budget stop a claim inside the script, and a frame's record carries the chunk's
progress."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from farm.core.pipeline import PHASES, Phase
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger
from tests.integration.conftest import make_job

RENDER, SEGMENT = PHASES[Phase.RENDER], PHASES[Phase.SEGMENT]


class _Counting(redis.Connection):
    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _Counting.sends += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


@pytest.fixture
def counted(redis_url: str) -> Iterator[Ledger]:
    """A ledger whose round trips are counted (one packed send per command or pipeline)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True, connection_class=_Counting)
    client.flushdb()
    yield Ledger(client)


def trips(fn: Any) -> tuple[Any, int]:
    before = _Counting.sends
    result = fn()
    return result, _Counting.sends - before


_job = make_job


def _claim(ledger: Ledger, index: int, phase: Any = RENDER, **kwargs: Any) -> Any:
    return ledger.claim("j1", index, phase.running, only_from=phase.claim_from, lease_s=30,
                        worker="w1", **kwargs)  # fmt: skip


def test_a_claim_brings_back_the_job_the_frames_and_only_their_records(counted: Ledger) -> None:
    """GIVEN frames 3 and 15 recorded WHEN chunk 0 (frames 1-10) is claimed THEN one round trip
    moves it and returns the job as it is now, the chunk's frames and frame 3's record alone."""
    _job(counted)
    counted.record_frame("j1", 3, 9, "ab" * 32)
    counted.record_frame("j1", 15, 7, "cd" * 32)
    _claim(counted, 0)  # the first call loads the script
    counted.move_chunk("j1", 0, ChunkState.QUEUED, mode="handback")
    claim, n = trips(lambda: _claim(counted, 0))
    assert n == 1 and claim.move.moved
    assert claim.job["id"] == "j1" and claim.job["state"] == JobState.RUNNING
    assert claim.frames == list(range(1, 11))
    assert claim.records == {3: (9, "ab" * 32, None)}


def test_a_refused_claim_brings_back_nothing(ledger: Ledger) -> None:
    _job(ledger)
    _claim(ledger, 0)
    again = _claim(ledger, 0)
    assert again.move.status == "refused" and again.job == {} and again.frames == []
    assert _claim(ledger, 9).move.status == "missing"


def test_every_move_records_its_event_in_the_same_round_trip(counted: Ledger) -> None:
    _job(counted)
    claim = _claim(counted, 0)
    move, n = trips(lambda: counted.move_chunk("j1", 0, ChunkState.RENDERED,
                                               token=claim.move.token, render_s=1.5))  # fmt: skip
    assert n == 1 and move.moved
    events = counted.events("j1")
    assert [e["event"] for e in events] == ["submitted", "chunk-rendering", "chunk-rendered"]
    assert events[1]["worker"] == "w1" and events[2] == {
        "event": "chunk-rendered", "t": events[2]["t"], "chunk": 0, "render_s": 1.5
    }  # fmt: skip


def test_a_chunk_failed_by_the_script_records_where_it_went(ledger: Ledger) -> None:
    _job(ledger)
    claim = _claim(ledger, 0)
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, token=claim.move.token, mode="fail",
                      max_failures=1, error="boom")  # fmt: skip
    assert ledger.events("j1")[-1]["event"] == "chunk-failed"


def _done(ledger: Ledger, index: int, **kwargs: Any) -> Any:
    render = _claim(ledger, index)
    ledger.move_chunk("j1", index, ChunkState.RENDERED, token=render.move.token)
    encode = _claim(ledger, index, SEGMENT)
    return ledger.move_chunk("j1", index, ChunkState.DONE, token=encode.move.token, **kwargs)


def test_the_last_done_move_opens_the_gate_once(counted: Ledger) -> None:
    """GIVEN two chunks WHEN each is done with `gate` THEN only the last move wins the gate, in
    the same round trip, with its event; the winner's retried call (its reply lost on the way)
    still hears it won, so the stitch is sent; another token and the reconciler win nothing."""
    _job(counted)
    assert not _done(counted, 0, gate=True).gate
    render = _claim(counted, 1)
    counted.move_chunk("j1", 1, ChunkState.RENDERED, token=render.move.token)
    encode = _claim(counted, 1, SEGMENT)
    last, n = trips(lambda: counted.move_chunk("j1", 1, ChunkState.DONE,
                                               token=encode.move.token, gate=True))  # fmt: skip
    assert (n, last.moved, last.gate) == (1, True, True)
    assert counted.job("j1")["state"] == JobState.STITCHING
    again = counted.move_chunk("j1", 1, ChunkState.DONE, token=encode.move.token, gate=True)
    assert (again.status, again.gate) == ("same", True)
    other = counted.move_chunk("j1", 1, ChunkState.DONE, token="0:9-other", gate=True)
    assert (other.status, other.gate) == ("stale", False)
    assert not counted.try_start_stitch("j1")
    assert [e["event"] for e in counted.events("j1")].count("stitch-gate") == 1


def test_a_retried_done_move_still_opens_a_gate_nobody_opened(ledger: Ledger) -> None:
    """GIVEN the last chunk recorded done without the gate (a worker that died before it)
    WHEN the done move is retried with `gate` THEN it opens the gate."""
    _job(ledger, frames="1-10")
    first = _done(ledger, 0)
    assert first.moved and not first.gate
    token = ledger.chunk("j1", 0)["token"]
    again = ledger.move_chunk("j1", 0, ChunkState.DONE, token=token, gate=True)
    assert (again.status, again.gate) == ("same", True)
    assert ledger.job("j1")["state"] == JobState.STITCHING


def test_a_worker_on_the_blocklist_is_stopped_by_the_claim(ledger: Ledger) -> None:
    """GIVEN w1 failed the job twice WHEN it claims with block_after=2 THEN nothing moves and it
    hears its count; asked again without the check (no one else to take it), it claims."""
    _job(ledger)
    ledger.blame("j1", "w1")
    ledger.blame("j1", "w1")
    stopped = _claim(ledger, 0, block_after=2)
    assert (stopped.move.status, stopped.blocked) == ("blocked", 2)
    assert ledger.chunk("j1", 0)["state"] == ChunkState.QUEUED
    assert ledger.chunk("j1", 0)["attempt"] == "0"
    assert _claim(ledger, 0, block_after=3).move.moved


def test_a_claim_of_a_job_without_a_budget_reads_nothing_more(counted: Ledger) -> None:
    _job(counted)
    _claim(counted, 0)
    _, n = trips(lambda: _claim(counted, 1))
    assert n == 1


def test_a_claim_of_a_job_over_its_budget_pauses_it(ledger: Ledger) -> None:
    """GIVEN a job that spent more than its budget WHEN a chunk is claimed THEN the job pauses
    and the claim is refused (the script stops for the budget, the ledger prices it)."""
    _job(ledger)
    ledger.r.hset("farm:job:j1", "max_cost", "0.01")
    ledger.r.hset("farm:cost:j1", "cost", "0.02")
    refused = _claim(ledger, 0)
    assert refused.move.status == "refused"
    assert ledger.job("j1")["state"] == JobState.PAUSED
    assert ledger.chunk("j1", 0)["state"] == ChunkState.QUEUED


def test_a_frame_record_carries_the_chunk_progress_in_one_round_trip(counted: Ledger) -> None:
    _job(counted)
    _, n = trips(lambda: counted.record_frame("j1", 4, 10, "ef" * 32, chunk=0, frames_rendered=2))
    assert n == 1
    assert counted.frame_records("j1", [4, 5]) == {4: (10, "ef" * 32, None)}
    assert counted.chunk("j1", 0)["frames_rendered"] == "2"


def test_a_first_frame_record_stamps_the_job_once_in_the_same_round_trip(counted: Ledger) -> None:
    """GIVEN a job WHEN two attempts record their first frames THEN the job keeps the earlier
    time, each in the record's own round trip; a later frame of an attempt stamps nothing."""
    _job(counted)
    _, n = trips(lambda: counted.record_frame("j1", 1, 10, "ab" * 32, chunk=0, first=True))
    assert n == 1
    stamped = counted.job("j1")["first_frame_at"]
    counted.record_frame("j1", 3, 10, "cd" * 32, chunk=1, first=True)
    counted.record_frame("j1", 2, 10, "ef" * 32, chunk=0)
    assert counted.job("j1")["first_frame_at"] == stamped
    assert float(stamped) > 0


def test_a_worker_chunk_takes_six_round_trips(counted: Ledger) -> None:
    """A one-frame chunk through render and segment as a worker drives it (bench/ledger.py):
    claim, frame started, frame recorded, renewal, rendered with the segment's claim, done."""
    from bench.ledger import chunk_life

    _job(counted, frames="1-3", chunk_size=1)
    chunk_life(counted, "j1", 0, 1, "w1")  # loads the scripts
    _, n = trips(lambda: chunk_life(counted, "j1", 1, 2, "w1"))
    assert n == 6

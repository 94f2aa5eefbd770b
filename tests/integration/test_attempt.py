"""One chunk attempt and the failure policy, against a real Redis: what each outcome of a phase's
work does to the chunk, its budgets, its attempt count and the messages sent; the lease keeper;
the frame uploader. The store and the dispatcher are fakes that implement their interfaces."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from farm.adapters.proc import Running
from farm.adapters.settings import Settings
from farm.core import keys
from farm.core.errors import (
    ChunkInterrupted,
    FramesMissing,
    LeaseLost,
    ObjectMissing,
    PermanentError,
    StoreError,
    StoreRefused,
    TransientError,
    UnreachableError,
)
from farm.core.pipeline import PHASES, Phase, PhaseSpec
from farm.core.state import ChunkState, JobState
from farm.ledger import FrameRecord, Ledger
from tests.integration.conftest import make_job, wait_until
from workers.attempt.context import WorkerContext
from workers.attempt.lease import LeaseKeeper
from workers.attempt.lifecycle import ChunkAttempt, Outcome
from workers.attempt.policy import MAX_KEPT_OFF, run_chunk_phase
from workers.host.gpu import Capabilities
from workers.phases.frames import FrameUploader, write_permit
from workers.phases.segment import gather_frames

RENDER, SEGMENT = PHASES[Phase.RENDER], PHASES[Phase.SEGMENT]


class FakeStore:
    """The Store methods an attempt uses, over a dict; `fail_puts` makes uploads fail."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fail_puts: Exception | None = None

    def put_file(self, key: str, path: Path, *, intermediate: bool = False) -> None:
        if self.fail_puts:
            raise self.fail_puts
        self.objects[key] = path.read_bytes()

    def put_open(
        self, key: str, body: Any, *, intermediate: bool = False, metadata: Any = None
    ) -> None:
        if self.fail_puts:
            raise self.fail_puts
        body.seek(0)
        self.objects[key] = body.read()

    def put_json(self, key: str, value: Any) -> None:
        self.objects[key] = repr(value).encode()

    def put_bytes(self, key: str, data: bytes, content_type: str = "") -> None:
        if self.fail_puts:
            raise self.fail_puts
        self.objects[key] = data

    def size(self, key: str) -> int | None:
        return len(self.objects[key]) if key in self.objects else None

    def get_file(self, key: str, path: Path) -> None:
        if key not in self.objects:
            raise ObjectMissing(f"cannot download {key}: no such object")
        path.write_bytes(self.objects[key])


class FakeDispatch:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, int]] = []

    def send(self, phase: Phase, job_id: str, chunk: int, countdown_s: float = 0) -> str:
        self.sent.append((str(phase), job_id, chunk))
        return "id"

    def stitch(self, job_id: str, countdown_s: float = 0) -> str:
        self.sent.append(("stitch", job_id, -1))
        return "id"


@pytest.fixture
def ctx(ledger: Ledger, tmp_path: Path) -> WorkerContext:
    make_job(ledger)
    return WorkerContext(
        settings=Settings(lease_s=30, max_attempts=2),
        ledger=ledger,
        store=FakeStore(),  # type: ignore[arg-type]
        dispatch=FakeDispatch(),  # type: ignore[arg-type]
        caps=Capabilities(),
        name="w1",
        scratch=tmp_path,
    )


def sent(ctx: WorkerContext) -> list[tuple[str, str, int]]:
    sent_: list[tuple[str, str, int]] = ctx.dispatch.sent  # type: ignore[attr-defined]
    return sent_


def run(ctx: WorkerContext, index: int, phase: PhaseSpec, work: Any) -> dict[str, object]:
    """One phase of chunk `index` of job j1, with `work` as that phase's work."""
    return run_chunk_phase(ctx, "j1", index, phase, {phase.phase: work})


def take_back(ledger: Ledger) -> None:
    """What the reconciler does to a chunk whose lease it saw expire."""
    ledger.move_chunk("j1", 0, ChunkState.QUEUED, only_from=frozenset({ChunkState.RENDERING}))


def succeed(attempt: ChunkAttempt) -> Outcome:
    return Outcome(fields={"render_s": 1.0}, summary={"ok": True})


def raising(exc: Exception) -> Any:
    def work(attempt: ChunkAttempt) -> Outcome:
        raise exc

    return work


def test_a_clean_chunk_is_one_try_through_both_phases(ctx: WorkerContext) -> None:
    """GIVEN a render then a segment that both succeed THEN the chunk is done on try 1, the
    segment phase was sent after the render, and the stitch gate waits for chunk 1."""
    run(ctx, 0, RENDER, succeed)
    assert sent(ctx) == [("segment", "j1", 0)]
    manifest = Outcome(manifest={"chunk": 0})
    result = run(ctx, 0, SEGMENT, lambda a: manifest)
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["attempt"], result["chunk"]) == ("done", "1", 0)
    # The manifest goes under the claim's own name, which the done move records on the chunk.
    # (claim 2: the render phase's claim was the chunk's first)
    assert chunk["manifest"] == keys.manifest_key("j1", 0, keys.writer(0, 2))
    assert chunk["manifest"] in ctx.store.objects  # type: ignore[attr-defined]
    assert ("stitch", "j1", -1) not in sent(ctx)


def test_the_last_chunk_done_opens_the_stitch_gate_once(ctx: WorkerContext) -> None:
    for index in (0, 1):
        run(ctx, index, RENDER, succeed)
        run(ctx, index, SEGMENT, succeed)
    assert sent(ctx).count(("stitch", "j1", -1)) == 1
    assert ctx.ledger.job("j1")["state"] == JobState.STITCHING


def test_a_failure_spends_the_budget_and_retries_as_a_new_try(ctx: WorkerContext) -> None:
    run(ctx, 0, RENDER, raising(PermanentError("bad scene")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["failures"]) == ("queued", "1")
    assert sent(ctx) == [("render", "j1", 0)]
    run(ctx, 0, RENDER, succeed)
    assert ctx.ledger.chunk("j1", 0)["attempt"] == "2"


def test_the_last_failure_of_the_budget_fails_the_job_with_the_reason(ctx: WorkerContext) -> None:
    for _ in range(2):
        run(ctx, 0, RENDER, raising(PermanentError("Blender crashed")))
    job = ctx.ledger.job("j1")
    assert ctx.ledger.chunk("j1", 0)["state"] == "failed"
    assert job["state"] == "failed" and "Blender crashed" in job["error"]


def test_a_failed_segment_keeps_its_frames(ctx: WorkerContext) -> None:
    run(ctx, 0, RENDER, succeed)
    run(ctx, 0, SEGMENT, raising(PermanentError("ffmpeg exited 1")))
    assert ctx.ledger.chunk("j1", 0)["state"] == ChunkState.RENDERED
    assert sent(ctx)[-1] == ("segment", "j1", 0)


def test_frames_missing_at_encode_go_back_to_render(ctx: WorkerContext) -> None:
    run(ctx, 0, RENDER, succeed)
    run(ctx, 0, SEGMENT, raising(FramesMissing("frame 3 has no record")))
    assert ctx.ledger.chunk("j1", 0)["state"] == ChunkState.QUEUED
    assert sent(ctx)[-1] == ("render", "j1", 0)


def test_a_transient_error_hands_back_without_spending_a_failure(ctx: WorkerContext) -> None:
    run(ctx, 0, RENDER, raising(TransientError("S3 timed out")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["failures"], chunk["transients"]) == ("queued", "0", "1")
    assert sent(ctx) == [("render", "j1", 0)]


def test_an_interruption_requeues_at_once_and_counts_no_failure(ctx: WorkerContext) -> None:
    run(ctx, 0, RENDER, raising(ChunkInterrupted("spot notice")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["failures"], chunk["interruptions"]) == (
        "interrupted",
        "0",
        "1",
    )
    assert sent(ctx) == [("render", "j1", 0)]


def test_a_lost_lease_moves_nothing(ctx: WorkerContext) -> None:
    def lose(attempt: ChunkAttempt) -> Outcome:
        take_back(ctx.ledger)
        raise LeaseLost("lease lost while Blender ran")

    result = run(ctx, 0, RENDER, lose)
    assert "lost" in result and sent(ctx) == []
    assert ctx.ledger.chunk("j1", 0)["state"] == ChunkState.QUEUED


def test_a_draining_worker_sends_the_chunk_on_unclaimed(ctx: WorkerContext) -> None:
    ctx.drain.start("worker shutting down")
    result = run(ctx, 0, RENDER, succeed)
    assert "handed_back" in result and sent(ctx) == [("render", "j1", 0)]
    assert ctx.ledger.chunk("j1", 0)["attempt"] == "0"


def test_an_unexpected_exception_is_a_failure_with_a_budget(ctx: WorkerContext) -> None:
    run(ctx, 0, RENDER, raising(KeyError("width")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["failures"]) == ("queued", "1")
    assert "KeyError" in chunk["error"]


def _keeper(ledger: Ledger, token: str, running: Running) -> LeaseKeeper:
    return LeaseKeeper(
        ledger, job_id="j1", chunk=0, token=token, lease_s=3, renew_s=0.2, running=running
    )


def test_the_lease_keeper_renews_while_held(ctx: WorkerContext) -> None:
    claim = ctx.ledger.move_chunk("j1", 0, RENDER.running, mode="claim", lease_s=3)
    first = float(ctx.ledger.chunk("j1", 0)["lease_expires"])
    with _keeper(ctx.ledger, claim.token, Running()) as keeper:
        wait_until(lambda: float(ctx.ledger.chunk("j1", 0)["lease_expires"]) > first + 0.3)
    assert keeper.lost == ""


def test_the_lease_keeper_stops_the_work_when_another_attempt_owns_the_chunk(
    ctx: WorkerContext,
) -> None:
    claim = ctx.ledger.move_chunk("j1", 0, RENDER.running, mode="claim", lease_s=3)
    running = Running()
    with _keeper(ctx.ledger, claim.token, running) as keeper:
        take_back(ctx.ledger)
        ctx.ledger.move_chunk("j1", 0, RENDER.running, mode="claim", lease_s=3)
        wait_until(lambda: keeper.lost == "lost")
    assert running.stop_requested.is_set()


def test_the_lease_keeper_stops_the_work_of_a_cancelled_job(ctx: WorkerContext) -> None:
    claim = ctx.ledger.move_chunk("j1", 0, RENDER.running, mode="claim", lease_s=3)
    with _keeper(ctx.ledger, claim.token, Running()) as keeper:
        ctx.ledger.cancel_job("j1")
        wait_until(lambda: keeper.lost == "cancelled")


def test_the_frame_uploader_stores_and_records_each_frame(
    ctx: WorkerContext, tmp_path: Path
) -> None:
    uploader = FrameUploader(ctx.store, ctx.ledger, "j1", 0)
    uploader.start()
    for frame in (1, 2, 3):
        path = tmp_path / f"frame_{frame:06d}.png"
        path.write_bytes(b"png" * frame)
        uploader.add(frame, path)
    uploader.finish()
    uploader.raise_errors()
    assert sorted(uploader.done) == [1, 2, 3]
    assert ctx.ledger.frame_records("j1")[3][0] == 9
    assert ctx.ledger.chunk("j1", 0)["frames_rendered"] == "3"
    assert ctx.store.objects[keys.frame_key("j1", 2, "0-0")] == b"pngpng"  # type: ignore[attr-defined]


def test_a_retried_chunks_progress_counts_on_from_the_frames_kept(
    ctx: WorkerContext, tmp_path: Path
) -> None:
    """Found by a review: a chunk interrupted at 7 of 10 frames showed 1, 2, 3... again."""
    uploader = FrameUploader(ctx.store, ctx.ledger, "j1", 0, reused=7)
    uploader.start()
    path = tmp_path / "frame_000008.png"
    path.write_bytes(b"png")
    uploader.add(8, path)
    uploader.finish()
    uploader.raise_errors()
    assert ctx.ledger.chunk("j1", 0)["frames_rendered"] == "8"


def test_a_frame_swapped_for_a_link_to_a_host_file_is_never_stored(
    ctx: WorkerContext, tmp_path: Path
) -> None:
    """A trusted scene's script announces a frame, then swaps it (and its thumbnail) for links to
    the farm's config before the upload: the chunk fails and nothing of the config is stored."""
    secret = tmp_path / "config.json"
    secret.write_text('{"redis_password": "hunter2"}')
    out = tmp_path / "frames"
    out.mkdir()
    frame, thumb, fifo = out / "frame_000001.png", out / "thumb_000001.jpg", out / "frame_2.exr"
    frame.symlink_to(secret)
    thumb.symlink_to(secret)
    os.mkfifo(fifo)  # a reader that opened it would wait for a writer forever
    uploader = FrameUploader(ctx.store, ctx.ledger, "j1", 0)
    uploader.start()
    uploader.add(1, frame, thumb=thumb)
    uploader.add(2, out / "frame_000001.png", masters=(fifo,))
    uploader.finish()
    with pytest.raises(PermanentError, match=r"not a regular file|symbolic link"):
        uploader.raise_errors()
    stored = b"".join(ctx.store.objects.values())  # type: ignore[attr-defined]
    assert b"hunter2" not in stored and uploader.done == []
    assert ctx.ledger.frame_records("j1") == {}


def test_a_permit_write_never_follows_a_link_planted_in_the_box_home(tmp_path: Path) -> None:
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0")
    permit = tmp_path / "permit-n.json"
    (tmp_path / "permit-n.json.partial").symlink_to(target)
    write_permit(permit, 7)
    assert target.read_text() == "root:x:0:0"
    assert json.loads(permit.read_text()) == {"last": 7} and not permit.is_symlink()


def test_the_encode_links_the_rendered_frame_never_what_a_link_points_to(
    ctx: WorkerContext, tmp_path: Path
) -> None:
    """A preview swapped for a link to a host file with the very bytes the ledger recorded
    (the worst case) is fetched from the store instead, so the encode never reads a host file."""
    ctx.store.objects[keys.frame_key("j1", 1, "0-4")] = b"png"  # type: ignore[attr-defined]
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes(b"png")
    rendered = ctx.job_dir("j1") / "frames"
    rendered.mkdir(parents=True)
    (rendered / "preview_000001.png").symlink_to(elsewhere)
    seq = tmp_path / "seq"
    seq.mkdir()
    fetched: list[str] = []
    ctx.store.get_file = lambda key, path: (  # type: ignore[attr-defined,method-assign]
        fetched.append(key),
        path.write_bytes(ctx.store.objects[key]),  # type: ignore[attr-defined]
    )
    digest = hashlib.sha256(b"png").hexdigest()
    gather_frames(ctx, "j1", [1], seq, {1: FrameRecord(3, digest, "0-4")})
    assert fetched == [keys.frame_key("j1", 1, "0-4")]
    assert not (seq / "000000.png").is_symlink() and (seq / "000000.png").read_bytes() == b"png"


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (StoreError("503"), TransientError),
        (OSError("disk"), PermanentError),
        # A refusal fails the chunk on its first try (max_failures=1), not after three.
        (StoreRefused("AccessDenied"), StoreRefused),
    ],
)
def test_failed_uploads_are_reported_by_kind(
    ctx: WorkerContext, tmp_path: Path, error: Exception, raised: type[Exception]
) -> None:
    ctx.store.fail_puts = error  # type: ignore[attr-defined]
    uploader = FrameUploader(ctx.store, ctx.ledger, "j1", 0)
    uploader.start()
    path = tmp_path / "frame_000001.png"
    path.write_bytes(b"png")
    uploader.add(1, path)
    uploader.finish()
    with pytest.raises(raised):
        uploader.raise_errors()
    assert ctx.ledger.frame_records("j1") == {}


def test_a_thread_holds_only_its_own_claim(ctx: WorkerContext) -> None:
    tokens: dict[str, str] = {}

    def claim(name: str, index: int) -> None:
        def work(a: ChunkAttempt) -> Outcome:
            tokens[name] = a.token  # the claim this attempt holds, as its value
            return Outcome()

        run(ctx, index, RENDER, work)

    threads = [threading.Thread(target=claim, args=(f"t{i}", i)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tokens["t0"] != tokens["t1"]


def test_a_worker_that_can_encode_makes_the_segment_in_the_same_task(
    ctx: WorkerContext,
) -> None:
    """GIVEN a worker on the render and encode queues WHEN it renders a chunk THEN it makes the
    segment at once, in one task: nothing goes back through the broker but the stitch gate."""
    both = dataclasses.replace(ctx, queues=("render", "encode", "stitch"))
    works = {Phase.RENDER: succeed, Phase.SEGMENT: succeed}
    result = run_chunk_phase(both, "j1", 0, RENDER, works)
    chunk = ctx.ledger.chunk("j1", 0)
    assert (result["done"], chunk["state"], chunk["attempt"]) == (True, "done", "1")
    assert sent(ctx) == []
    run_chunk_phase(both, "j1", 1, RENDER, works)
    assert sent(ctx) == [("stitch", "j1", -1)]


def test_a_render_only_worker_sends_the_segment_on(ctx: WorkerContext) -> None:
    gpu_without_encoder = dataclasses.replace(ctx, queues=("render", "stitch"))
    run_chunk_phase(gpu_without_encoder, "j1", 0, RENDER, {Phase.RENDER: succeed})
    assert sent(ctx) == [("segment", "j1", 0)]
    assert ctx.ledger.chunk("j1", 0)["state"] == ChunkState.RENDERED


def test_a_worker_that_keeps_failing_a_job_leaves_its_chunks_to_a_healthy_one(
    ctx: WorkerContext,
) -> None:
    """GIVEN w1 failed job j1 twice and w2, healthy, serves the render queue WHEN w1 gets a
    render of j1 THEN it claims nothing and sends the chunk on for another worker."""
    for _ in range(2):
        ctx.ledger.blame("j1", "w1")
    ctx.ledger.heartbeat("w2", {"queues": ["render"]})
    result = run(ctx, 0, RENDER, succeed)
    assert "handed_back" in result and sent(ctx) == [("render", "j1", 0)]
    assert ctx.ledger.chunk("j1", 0)["attempt"] == "0"


def test_a_chunk_no_healthy_worker_takes_is_taken_by_a_blocklisted_one_in_the_end(
    ctx: WorkerContext,
) -> None:
    """GIVEN w1 failed job j1 twice and w2 alive by its heartbeat but taking nothing WHEN w1 has
    handed the chunk on MAX_KEPT_OFF times THEN the next time it runs it (the budget, not the
    blocklist, then ends a job that keeps failing): a stuck worker cannot stall the chunk."""
    for _ in range(2):
        ctx.ledger.blame("j1", "w1")
    ctx.ledger.heartbeat("w2", {"queues": ["render"]})
    for _ in range(MAX_KEPT_OFF):
        assert "handed_back" in run(ctx, 0, RENDER, succeed)
    assert len(sent(ctx)) == MAX_KEPT_OFF
    result = run(ctx, 0, RENDER, succeed)
    assert result.get("done") and ctx.ledger.chunk("j1", 0)["state"] == ChunkState.RENDERED
    assert sent(ctx)[MAX_KEPT_OFF:] == [("segment", "j1", 0)]  # rendered: its segment goes on


def test_a_blocklisted_worker_alone_still_takes_the_chunk(ctx: WorkerContext) -> None:
    """GIVEN w1 failed job j1 twice and no other worker is alive THEN it renders the chunk (the
    failure budget, not the blocklist, ends a job nobody can render)."""
    for _ in range(2):
        ctx.ledger.blame("j1", "w1")
    result = run(ctx, 0, RENDER, succeed)
    assert result.get("done") and ctx.ledger.chunk("j1", 0)["state"] == ChunkState.RENDERED


def test_the_segments_claim_rides_on_the_renders_done_move(
    ctx: WorkerContext, redis_url: str
) -> None:
    """GIVEN a worker that renders and encodes WHEN it runs a chunk THEN the ledger hears three
    round trips: the render's claim, its done move carrying the segment's claim, the done move;
    a worker that starts draining while it renders claims nothing ahead: the segment is sent on
    for another worker, as before."""
    import redis

    class Counting(redis.Connection):
        sends = 0

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            Counting.sends += 1
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    client = redis.Redis.from_url(redis_url, decode_responses=True, connection_class=Counting)
    both = dataclasses.replace(ctx, ledger=Ledger(client), queues=("render", "encode", "stitch"))
    works = {Phase.RENDER: succeed, Phase.SEGMENT: succeed}
    run_chunk_phase(both, "j1", 0, RENDER, works)  # loads the scripts
    before = Counting.sends
    assert run_chunk_phase(both, "j1", 1, RENDER, works)["done"] is True
    assert Counting.sends - before == 3
    assert [ctx.ledger.chunk("j1", i)["state"] for i in (0, 1)] == ["done", "done"]

    def drain_then_succeed(a: Any) -> Outcome:
        both.drain.start("spot interruption")
        return succeed(a)

    make_job(ctx.ledger, job_id="j2")
    result = run_chunk_phase(both, "j2", 0, RENDER, {**works, Phase.RENDER: drain_then_succeed})
    assert "handed_back" in result and ctx.ledger.chunk("j2", 0)["state"] == "rendered"
    assert [s for s in sent(ctx) if s[1] == "j2"] == [("segment", "j2", 0)]


def test_a_frame_gone_from_the_store_is_rendered_again_not_fetched_again(
    ctx: WorkerContext, tmp_path: Path
) -> None:
    """Found by a review: a recorded frame the lifecycle rule had expired was fetched again and
    again (a transient error each time) for about 40 minutes, then failed the job."""
    digest = hashlib.sha256(b"png").hexdigest()
    ctx.ledger.record_frame("j1", 1, 3, digest, chunk=0, first=True, frames_rendered=1)
    seq = tmp_path / "seq"
    seq.mkdir()
    with pytest.raises(FramesMissing, match="frame 1 is not in the store; rendering it again"):
        gather_frames(ctx, "j1", [1], seq, {1: FrameRecord(3, digest)})
    assert 1 not in ctx.ledger.frame_records("j1")  # the render makes it again


def test_a_phase_done_is_not_charged_the_outage_it_rode_out(ctx: WorkerContext) -> None:
    """Found by a review: transient hand-backs counted over the chunk's whole life, so an
    outage the render rode out left its encode a few hiccups from failing."""
    for _ in range(3):
        run(ctx, 0, RENDER, raising(TransientError("S3 timed out")))
    assert ctx.ledger.chunk("j1", 0)["transients"] == "3"
    run(ctx, 0, RENDER, succeed)
    assert ctx.ledger.chunk("j1", 0)["transients"] == "0"
    run(ctx, 0, SEGMENT, raising(TransientError("S3 timed out")))
    assert ctx.ledger.chunk("j1", 0)["transients"] == "1"


def test_a_thumbnail_that_cannot_be_recorded_fails_no_frame(
    ctx: WorkerContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*_: Any) -> None:
        raise StoreError("Redis went away")

    monkeypatch.setattr(ctx.ledger, "job_field_once", down)
    uploader = FrameUploader(ctx.store, ctx.ledger, "j1", 0)
    uploader.start()
    frame, thumb = tmp_path / "frame_000001.png", tmp_path / "thumb_000001.jpg"
    frame.write_bytes(b"png")
    thumb.write_bytes(b"jpg")
    uploader.add(1, frame, thumb=thumb)
    uploader.finish()
    uploader.raise_errors()  # nothing to raise: the frame is stored and recorded
    assert uploader.done == [1] and 1 in ctx.ledger.frame_records("j1")


@pytest.mark.parametrize(
    "error", [TransientError("S3 timed out"), PermanentError("Blender exited 1")]
)
def test_an_attempt_ending_after_a_cancel_leaves_the_chunk_cancelled(
    ctx: WorkerContext, error: Exception
) -> None:
    """Found by a review: a cancel keeps the chunk's token, and the hand-back's and the failure's
    targets accept a cancelled chunk, so an attempt failing as the job was cancelled put its
    chunk back in the queue, sent it again and (a failure) spent an attempt on it."""

    def cancelled_then(attempt: ChunkAttempt) -> Outcome:
        ctx.ledger.cancel_job("j1")
        raise error

    run(ctx, 0, RENDER, cancelled_then)
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["failures"]) == (ChunkState.CANCELLED, "0")
    assert sent(ctx) == []


def test_an_attempt_cut_off_from_the_ledger_writes_nothing_once_its_lease_may_be_gone(
    ctx: WorkerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: a worker that could not renew (Redis unreachable from it, a stall)
    went on to write its segment and manifest over those of the worker the reconciler gave the
    chunk to meanwhile; the stitch then failed the whole job on the mismatch."""
    short = dataclasses.replace(ctx, settings=Settings(lease_s=2, max_attempts=2))

    def unreachable(*_: Any) -> str:
        raise UnreachableError("Redis does not answer")

    def cut_off(attempt: ChunkAttempt) -> Outcome:
        monkeypatch.setattr(short.ledger, "renew", unreachable)
        time.sleep(1.8)  # past the lease less its margin (a sixth of 2 s)
        return Outcome(manifest={"chunk": 0}, fields={"render_s": 1.8})

    result = run(short, 0, RENDER, cut_off)
    assert "lost" in result and re.search(r"lease not renewed for \d+ s", str(result["lost"]))
    assert not any("/manifests/" in k for k in ctx.store.objects)  # type: ignore[attr-defined]
    assert ctx.ledger.chunk("j1", 0)["state"] == ChunkState.RENDERING  # the reconciler's now


def test_a_ready_blender_that_cannot_be_boxed_leaves_no_folders(
    ctx: WorkerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: its folders were made, then left, after every task while bwrap was
    missing."""
    from workers.host import box
    from workers.phases.render import ready_blender

    monkeypatch.setattr(box.shutil, "which", lambda name: None)
    with pytest.raises(PermanentError, match="bwrap is not installed"):
        ready_blender(ctx)
    assert list((ctx.scratch / "ready").iterdir()) == []


def test_a_lost_attempts_late_segment_lands_beside_the_newer_one_never_over_it(
    ctx: WorkerContext,
) -> None:
    """Found by a review: every attempt wrote the chunk's one segment key, so an attempt that
    passed its last lease check and uploaded late overwrote the segment of the attempt the
    chunk was handed to, and the stitch failed the job on the mismatch with its manifest."""
    run(ctx, 0, RENDER, succeed)

    def encode(attempt: ChunkAttempt, body: bytes) -> Outcome:
        segment = attempt.fresh_workspace() / "00000.mp4"
        segment.write_bytes(body)
        key = attempt.segment_key("mp4")
        ctx.store.put_file(key, segment, intermediate=True)
        return Outcome(fields={}, manifest={"segment": {"key": key, "sha": body.decode()}})

    def stalled(attempt: ChunkAttempt) -> Outcome:
        # The reconciler hands the chunk on, and the next attempt makes and records its segment
        # while this one is stalled just past its lease check.
        ctx.ledger.move_chunk("j1", 0, SEGMENT.on_lost, only_from=frozenset({SEGMENT.running}))
        run(ctx, 0, SEGMENT, lambda newer: encode(newer, b"newer"))
        return encode(attempt, b"late")

    assert "lost" in run(ctx, 0, SEGMENT, stalled)
    objects: dict[str, bytes] = ctx.store.objects  # type: ignore[attr-defined]
    segments = {k: v for k, v in objects.items() if "/segments/" in k}
    assert sorted(segments.values()) == [b"late", b"newer"]  # side by side
    # The late manifest lands beside the winner's too, and the chunk names the winner's, which
    # names the newer segment.
    manifests = [k for k in objects if "/manifests/" in k]
    assert len(manifests) == 2
    manifest = re.search(
        rb"'key': '([^']+)', 'sha': '([^']+)'", objects[ctx.ledger.chunk("j1", 0)["manifest"]]
    )
    assert manifest is not None and manifest[2] == b"newer"
    assert segments[manifest[1].decode()] == b"newer"


def test_output_a_handler_cannot_read_fails_the_chunk_and_is_counted(ctx: WorkerContext) -> None:
    """Found by a review: a handler that failed on the program's output stopped it, and the stop
    was taken for a drain's, so the chunk was handed back uncounted, to fail the same way on
    the next worker, for ever."""

    def unreadable(line: str) -> None:
        raise ValueError("no frame number")

    pid_file = ctx.scratch / "child.pid"

    def render(attempt: ChunkAttempt) -> Outcome:
        # The child sleeps for an hour: only a stop ends it within the wait below.
        script = f"echo $$ > {pid_file}; echo Fra:x; exec sleep 3600"
        attempt.run_child(["sh", "-c", script], what="Blender", on_line=unreadable)
        return succeed(attempt)

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run, ctx, 0, RENDER, render)
        try:
            result = running.result(timeout=120)
        except TimeoutError:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # end it, so the attempt returns
            raise AssertionError("the attempt waited its child out, not stopped") from None
    chunk = ctx.ledger.chunk("j1", 0)
    assert (chunk["state"], chunk["failures"], chunk.get("interruptions", "0")) == (
        "queued", "1", "0",
    )  # fmt: skip
    assert "reading its output failed (ValueError('no frame number') on 'Fra:x')" in chunk["error"]
    assert "failed" in result


def test_a_job_keeps_the_encoder_its_first_segment_was_made_with(ctx: WorkerContext) -> None:
    """Found by a review: on a fleet mixing NVENC hosts with hosts that encode in software, a
    job's segments came from both encoders, and the stitch could never join them: every frame
    rendered, the job failed, and no retry could mend it."""
    from farm.core.errors import NotHere
    from workers.phases.segment import job_encoder

    def job(job_id: str) -> dict[str, str]:
        make_job(ctx.ledger, job_id)
        return ctx.ledger.job(job_id)

    gpu = {"queues": ["render", "encode", "stitch"], "nvenc": True}
    cpu = {"queues": ["render", "encode", "stitch"], "nvenc": False}
    ctx.ledger.heartbeat("gpu@1", gpu)
    # An NVENC fleet: NVENC, kept by the job.
    assert job_encoder(ctx, job("nv"), "h264_nvenc", "h264") == "h264_nvenc"
    assert ctx.ledger.job("nv")["encoder"] == "h264_nvenc"
    # A host without NVENC joins: it hands that job's chunks back, uncounted (NotHere)...
    ctx.ledger.heartbeat("cpu@1", cpu)
    with pytest.raises(NotHere, match="segments are h264_nvenc: this worker has no NVENC"):
        job_encoder(ctx, ctx.ledger.job("nv"), "libx264", "h264")
    # ...and a new job on the mixed fleet is software on every host, NVENC ones too.
    assert job_encoder(ctx, job("mixed"), "h264_nvenc", "h264") == "libx264"
    assert job_encoder(ctx, ctx.ledger.job("mixed"), "h264_nvenc", "h264") == "libx264"
    # A transcode that asked for NVENC (--encoder nvenc) keeps it.
    assert job_encoder(ctx, job("asked"), "h264_nvenc", "h264", auto=False) == "h264_nvenc"
    # A job from before the encoder was recorded keeps its done chunks' one.
    old = job("old")
    ctx.ledger.set_chunk_fields("old", 0, encoder="h264_nvenc")
    assert job_encoder(ctx, old, "h264_nvenc", "h264") == "h264_nvenc"
    # With no NVENC host left, the NVENC job's chunk fails, saying so (it would bounce for ever).
    ctx.ledger.r.hdel(keys.r_workers(), "gpu@1")
    with pytest.raises(PermanentError, match="no worker with NVENC is left"):
        job_encoder(ctx, ctx.ledger.job("nv"), "libx264", "h264")


def test_a_chunk_handed_back_to_another_worker_is_counted_against_nothing(
    ctx: WorkerContext,
) -> None:
    from farm.core.errors import NotHere

    run(ctx, 0, RENDER, succeed)
    result = run(ctx, 0, SEGMENT, raising(NotHere("this worker has no NVENC")))
    chunk = ctx.ledger.chunk("j1", 0)
    assert "handed_back" in result
    assert (chunk["state"], chunk.get("transients", "0"), chunk["failures"]) == (
        SEGMENT.on_failure, "0", "0",
    )  # fmt: skip
    assert sent(ctx)[-1] == ("segment", "j1", 0)

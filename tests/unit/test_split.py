"""No idle tail, the pure parts: where a chunk splits, which one, and how its owner hears of it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from unittest import mock

from farm.adapters.proc import Running
from farm.blender.script import Renderer
from farm.core.split import MIN_REST, choose, margin_frames, split_point
from farm.ledger.base import Recorded
from workers.attempt.lease import LeaseKeeper
from workers.phases.frames import FrameUploader, kept, write_permit
from workers.phases.stitch import first_frame


def _job(job_id: str = "j", state: str = "running", **extra: str) -> dict[str, str]:
    return {"id": job_id, "kind": "render", "state": state, "chunks_total": "1", **extra}


def _chunk(index: int, frames: list[int], state: str = "rendering", **extra: str) -> dict[str, str]:
    return {"index": str(index), "state": state, "frames": json.dumps(frames), "token": f"1:1-{index}",
            **extra}  # fmt: skip


def test_the_margin_covers_the_frames_an_owner_starts_before_it_hears() -> None:
    assert margin_frames(frame_s=10.0, lag_s=3.5) == 1
    assert margin_frames(frame_s=0.5, lag_s=3.5) == 7
    assert margin_frames(frame_s=0.0, lag_s=3.5) == 4  # unknown: assumed one second a frame


def test_an_owner_that_hears_before_its_frame_ends_keeps_no_frame_after_it() -> None:
    # Woken owners hear within WAKE_LAG_S: 4 s left of a 10 s frame is plenty.
    assert margin_frames(frame_s=10.0, lag_s=0.25, left_s=4.0) == 0
    assert margin_frames(frame_s=10.0, lag_s=0.25, left_s=0.1) == 1  # it may start the next
    assert margin_frames(frame_s=10.0, lag_s=0.25, left_s=-2.0) == 1  # a slow frame: unknown end
    assert margin_frames(frame_s=0.5, lag_s=3.5, left_s=1.0) == 5  # 5 begin in the 2.5 s after
    assert margin_frames(frame_s=10.0, lag_s=3.5, left_s=None) == 1


def test_the_last_frame_after_the_current_one_moves_when_that_ends_sooner() -> None:
    frames = list(range(1, 11))
    # on 9 with 0.6 of it left: 10 moves (the chunk ends 1 frame from now, not 1.6)
    assert split_point(frames, 9, margin=0, on_left=0.6) == 9
    assert split_point(frames, 9, margin=1, on_left=0.6) is None  # an owner that may not hear
    # not before the owner has started a frame: all of it would move, for nothing
    assert split_point([1, 2], None, margin=0) == 1


def test_choose_reads_what_is_left_of_the_owners_frame() -> None:
    now = 1_000.0
    jobs = [(_job(), [_chunk(0, list(range(1, 11)), frame_on="9", frame_s_live="10",
                             frame_on_at=str(now - 4), worker="w1")])]  # fmt: skip
    plan = choose(jobs, lag_s=3.5, lag_of={"w1": 0.25}, now=now)
    assert plan is not None and (plan.last_frame, plan.moved) == (9, 1)
    # 0.1 s left of frame 9: the owner may start 10 before it hears; nothing worth moving
    jobs[0][1][0]["frame_on_at"] = str(now - 9.9)
    assert choose(jobs, lag_s=3.5, lag_of={"w1": 0.25}, now=now) is None


def test_a_splitter_holding_the_jobs_scene_open_prices_no_startup() -> None:
    done = _chunk(0, [1, 2, 3], state="rendered", frame_s="1", blender_startup_s="3")
    owner = _chunk(1, list(range(4, 10)), frame_on="6", frame_s_live="1")  # 7, 8, 9 ahead
    jobs = [(_job(chunks_total="2"), [done, owner])]
    assert choose(jobs, lag_s=0.25) is None  # a 3 s start-up to move any of 3 frames: no gain
    plan = choose(jobs, lag_s=0.25, warm_jobs={"j"})
    assert plan is not None and (plan.last_frame, plan.moved) == (8, 1)


def test_the_owner_keeps_half_of_what_is_ahead_and_the_rest_moves() -> None:
    assert split_point(list(range(1, 25)), None, margin=2) == 12
    assert split_point(list(range(1, 25)), 4, margin=2) == 4 + 10


def test_the_new_chunks_startup_leaves_more_frames_to_the_owner() -> None:
    assert split_point(list(range(1, 25)), None, margin=2, startup_frames=4) == 14


def test_a_chunk_too_short_for_its_margin_is_not_split() -> None:
    frames = list(range(1, 11))
    assert split_point(frames, 6, margin=2) == 8  # 9, 10 move
    assert split_point(frames, 8, margin=2) is None  # 9, 10 are the owner's margin
    assert split_point(frames, 2, margin=8) is None  # all 8 ahead are its margin
    assert MIN_REST == 1


def test_one_frame_moves_when_the_new_chunks_startup_is_shorter_than_a_frame() -> None:
    frames = list(range(1, 11))
    # the owner is on 8: it keeps 9, and 10 ends 1 + 2/3 frames from now instead of 2
    assert split_point(frames, 8, margin=1, startup_frames=2 / 3) == 9
    assert split_point(frames, 7, margin=1, startup_frames=2 / 3) == 9  # keeps 8, 9


def test_no_split_that_would_not_end_the_chunk_sooner() -> None:
    frames = list(range(1, 11))
    # 10 would start 1.5 frames from now and end after 9 would have: nothing gained
    assert split_point(frames, 8, margin=1, startup_frames=1.5) is None
    assert split_point(frames, 6, margin=1, startup_frames=3) is None  # 4 ahead, 3 to start


def test_a_chunk_with_no_frame_timed_yet_is_timed_as_its_jobs_chunks() -> None:
    done = _chunk(0, [1, 2, 3], state="rendered", frame_s="10", blender_startup_s="5")
    fresh = _chunk(1, [4, 5, 6, 7, 8, 9], frame_on="4")  # a split's new chunk, on its first frame
    plan = choose([(_job(chunks_total="2"), [done, fresh])], lag_s=3.5)
    # margin 1 (a 10 s frame, not UNKNOWN_FRAME_S's 1 s): it keeps 5, 6, 7 and 8, 9 move
    assert plan is not None and (plan.index, plan.last_frame, plan.moved) == (1, 7, 2)


def test_nothing_is_split_while_a_chunk_waits_for_a_worker() -> None:
    jobs = [(_job(), [_chunk(0, list(range(1, 40))), _chunk(1, [40, 41, 42], state="queued")])]
    assert choose(jobs, lag_s=3.5) is None


def test_the_longest_rest_of_the_running_render_jobs_is_split() -> None:
    jobs = [
        (_job("a"), [_chunk(0, list(range(1, 21)), frame_on="1", frame_s_live="9")]),
        (_job("b"), [_chunk(0, list(range(1, 41)), frame_on="30", frame_s_live="9"),
                     _chunk(1, list(range(41, 81)), frame_on="41", frame_s_live="9")]),
        (_job("c", state="paused"), [_chunk(0, list(range(1, 400)))]),
        (_job("d", kind="transcode"), [_chunk(0, list(range(1, 400)), state="transcoding")]),
        (_job("e", plan_pending="1"), [_chunk(0, list(range(1, 400)))]),
    ]  # fmt: skip
    plan = choose(jobs, lag_s=3.5)
    assert plan is not None and (plan.job_id, plan.index) == ("b", 1)
    assert (plan.last_frame, plan.moved, plan.token, plan.chunks_total) == (61, 19, "1:1-1", 1)


def test_kept_frames_after_a_split() -> None:
    assert kept([1, 2, 3, 4], None) == [1, 2, 3, 4]
    assert kept([1, 2, 3, 4], 2) == [1, 2]


def test_the_render_script_reads_the_permit_the_worker_writes(tmp_path: Path) -> None:
    permit = tmp_path / "permit.json"
    renderer = Renderer(
        bpy=None, job={"nonce": "n", "out_dir": str(tmp_path), "permit": str(permit)}
    )
    assert renderer.permitted_last() is None  # no split yet: every frame
    write_permit(permit, 12)
    assert renderer.permitted_last() == 12
    assert Renderer(bpy=None, job={"nonce": "n", "out_dir": "o"}).permitted_last() is None


class _Ledger:
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def renew(self, *_: Any) -> str:
        return self.answer


def test_the_lease_keeper_passes_a_split_on_and_keeps_the_lease() -> None:
    told: list[int] = []
    keeper = LeaseKeeper(
        _Ledger("split:12"),  # type: ignore[arg-type]
        job_id="j", chunk=0, token="t", lease_s=6, renew_s=0.1, running=Running(),
    )  # fmt: skip
    keeper.on_split = told.append
    with keeper:
        deadline = time.monotonic() + 5
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
    assert told[0] == 12 and keeper.split_last == 12 and not keeper.lost


def test_the_lease_keeper_outlives_a_failing_log_upload_and_stop_check() -> None:
    """Found by a review: a log upload before the child made its log raised FileNotFoundError,
    which ended the keeper's thread, and with it the renewals."""

    class Counting(_Ledger):
        renewals = 0

        def renew(self, *args: Any) -> str:
            self.renewals += 1
            return super().renew(*args)

    def missing_log() -> None:
        time.sleep(0.2)  # a store slow to answer holds up no renewal
        raise FileNotFoundError("render.log")

    def broken_check() -> str:
        raise RuntimeError("a bug")

    ledger = Counting("ok")
    keeper = LeaseKeeper(
        ledger,  # type: ignore[arg-type]
        job_id="j", chunk=0, token="t", lease_s=6, renew_s=0.05, running=Running(),
        should_stop=broken_check, upload_log=missing_log,
    )  # fmt: skip
    with (
        mock.patch("workers.attempt.lease.LOG_UPLOAD_EVERY_S", 0.0),
        mock.patch("workers.attempt.lease.TICK_S", 0.02),
        keeper,
    ):
        time.sleep(0.3)
        seen = ledger.renewals
        time.sleep(0.3)
        assert keeper._thread.is_alive()
    assert ledger.renewals > seen > 0 and not keeper.lost


def test_segments_join_in_first_frame_order_not_chunk_order() -> None:
    manifests = {
        0: {"frames": [{"frame": 1}, {"frame": 2}]},
        1: {"frames": [{"frame": 7}, {"frame": 8}]},
        2: {"frames": [{"frame": 3}, {"frame": 4}]},  # the rest of chunk 0, split off
        3: {"frames": {"first": 5, "end": 7}},  # a transcode cut
    }
    order = sorted(manifests, key=lambda i: first_frame(manifests[i], i))
    assert order == [0, 2, 3, 1]


class _Recorder:
    """Store and ledger in one, keeping what the uploader stored and recorded."""

    def __init__(self) -> None:
        self.stored: list[str] = []
        self.recorded: list[int] = []

    def put_open(
        self, key: str, body: object, intermediate: bool = False, metadata: object = None
    ) -> str:
        self.stored.append(key)
        return "etag"

    def record_frame(self, job_id: str, frame: int, *_: Any, **__: Any) -> Recorded:
        self.recorded.append(frame)
        return Recorded(recorded=True, job_output_bytes=0)

    def job_field_once(self, job_id: str, field: str, value: str) -> str:
        return value


def test_a_frame_begun_before_the_split_was_heard_is_left_to_the_new_chunk(
    tmp_path: Path,
) -> None:
    fake = _Recorder()
    uploader = FrameUploader(fake, fake, "j", 0, kept_until=lambda: 5)  # type: ignore[arg-type]
    uploader.start()
    for frame in (5, 6):
        path = tmp_path / f"preview_{frame:06d}.png"
        path.write_bytes(b"png")
        uploader.add(frame, path)
    uploader.finish()
    assert fake.recorded == [5] and uploader.done == [5] and len(fake.stored) == 1

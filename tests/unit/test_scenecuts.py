"""Segment boundaries moved onto scene cuts (farm.media.scenecuts): the pure planning and parsing."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise

import pytest

from farm.core.errors import SpecError
from farm.core.sources import MasterInfo
from farm.core.spec import FrameRange, JobSpec
from farm.media.master import Probed
from farm.media.scenecuts import (
    check_starts,
    cut_chunks,
    cut_plan,
    parse_cuts,
    place_segments,
    scan_argv,
    seek_for,
    seeks_at,
)
from farm.media.transcode_spec import build_transcode_spec
from farm.web.api.answers import ApiError
from farm.web.api.validate import job_spec


def _master(frames: int, cuts: tuple[int, ...] = (), starts: tuple[int, ...] = ()) -> MasterInfo:
    return MasterInfo(
        container="mov,mp4,m4a,3gp,3g2,mj2",
        codec="h264",
        width=320,
        height=180,
        frame_count=frames,
        avg_frame_rate="24/1",
        time_base="1/12288",
        start_pts=0,
        format_start_s=0.0,
        duration_s=frames / 24,
        vfr=False,
        scene_cuts=cuts,
        segment_starts=starts,
        segment_seek_pts=tuple(512 * s for s in starts),
        seek_pts=tuple(512 * s for s in range(0, frames, 48)),
    )


def test_with_no_cut_near_a_boundary_the_plan_is_uniform() -> None:
    # GIVEN cuts out of every boundary's reach: one more than half a segment from it, one that
    # would leave a last segment under a quarter long
    # WHEN the boundaries are placed THEN they stay every 48 frames
    assert place_segments(150, 48, (5, 146)) == (0, 48, 96, 144)
    assert place_segments(150, 48, ()) == (0, 48, 96, 144)


def test_a_cut_within_half_a_segment_takes_the_boundary() -> None:
    assert place_segments(150, 48, (37, 101)) == (0, 37, 101)


def test_of_two_cuts_in_reach_the_nearest_wins_and_a_tie_goes_to_the_earlier() -> None:
    assert place_segments(200, 48, (30, 52))[:2] == (0, 52)
    assert place_segments(200, 48, (44, 52))[:2] == (0, 44)


def test_a_moved_segment_is_never_longer_than_one_and_a_half_segments() -> None:
    # GIVEN a cut one frame past half a segment after the nominal boundary: out of reach
    assert place_segments(200, 48, (73,))[:2] == (0, 48)
    starts = place_segments(1000, 48, (72, 110, 190, 300, 301, 500, 620))
    lengths = [b - a for a, b in pairwise((*starts, 1000))]
    assert all(24 <= n <= 72 for n in lengths[:-1]), lengths


def test_a_cut_that_would_leave_a_sliver_at_the_end_is_not_taken() -> None:
    # GIVEN 100 frames and a cut 5 frames before the end, in reach of the boundary at 96
    # THEN the boundary stays (a 5-frame last segment is under a quarter of 48)
    assert place_segments(100, 48, (95,)) == (0, 48, 96)


def test_after_a_move_a_short_tail_joins_the_last_segment() -> None:
    # 0-36, 37-100, then 101+48 = 149 would leave one frame: it joins 101-149
    assert place_segments(150, 48, (37, 101)) == (0, 37, 101)
    starts = place_segments(150, 48, (40,))
    assert starts == (0, 40, 88, 136)  # the tail of 14 frames is a quarter or more: kept


def test_the_first_segment_starts_at_frame_0_whatever_the_cuts() -> None:
    assert parse_cuts("frame:0    pts:0\n", 150) == ()
    assert place_segments(150, 48, (1, 2))[0] == 0


def test_segments_hold_every_frame_once_in_order() -> None:
    chunks = cut_chunks(FrameRange(first=0, last=149), (0, 37, 101))
    assert [c.frames for c in chunks] == [
        tuple(range(37)),
        tuple(range(37, 101)),
        tuple(range(101, 150)),
    ]
    assert [c.index for c in chunks] == [0, 1, 2]


def test_the_plan_says_how_many_boundaries_moved() -> None:
    master = _master(150, cuts=(37, 101, 140), starts=(0, 37, 101))
    chunks, plan = cut_plan(FrameRange(first=0, last=149), 48, master)
    assert len(chunks) == 3
    assert plan["chunk_size"] == "48"
    assert "2 of 2 boundaries moved to scene cuts (3 found): frames 37, 101" in plan["chunk_plan"]


def test_scdet_lines_become_frame_numbers() -> None:
    text = (
        "frame:37   pts:18944   pts_time:1.54167\nlavfi.scd.time=1.54167\n"
        "frame:101  pts:51712   pts_time:4.20833\nlavfi.scd.time=4.20833\n"
        "frame:150  pts:76800   pts_time:6.25\n"
    )
    assert parse_cuts(text, 150) == (37, 101)


def test_the_scan_decodes_only_the_master_with_scdet() -> None:
    argv = scan_argv("ffmpeg", "file:m.mov")
    graph = argv[argv.index("-filter_complex") + 1]
    assert "scdet=threshold=10.0" in graph
    assert "metadata=file=-:key=lavfi.scd.time:mode=print" in graph
    assert "format_whitelist" in " ".join(argv)
    assert argv.count("-map") == 1  # the graph's output only: no audio, no second video


@pytest.mark.parametrize(
    ("starts", "said"),
    [
        ((5, 37), "begin at 0"),
        ((0, 101, 37), "increase"),
        ((0, 150), "past the master"),
        ((0, 37, 101, 130), "neither a recorded scene cut"),
        ((0, 120), "longer than"),
    ],
)
def test_a_clients_segment_starts_are_checked(starts: tuple[int, ...], said: str) -> None:
    master = _master(150, cuts=(37, 101, 120), starts=starts)
    with pytest.raises(SpecError, match=said):
        check_starts(master, 48)


def test_a_plan_the_planner_made_passes_the_check() -> None:
    cuts = (37, 101)
    master = _master(150, cuts=cuts, starts=place_segments(150, 48, cuts))
    check_starts(master, 48)
    check_starts(replace(master, segment_starts=()), 48)


def test_the_cuts_travel_in_the_spec_json() -> None:
    master = _master(150, cuts=(37, 101), starts=(0, 37, 101))
    assert MasterInfo.from_json(master.to_json()) == master


def test_a_moved_segment_seeks_by_its_own_start() -> None:
    # GIVEN segments from 0, 37 and 101 with their seek points recorded at submit
    master = _master(150, cuts=(37, 101), starts=(0, 37, 101))
    # THEN each seeks by its own; a chunk starting elsewhere decodes from the start
    assert [seek_for(master, f, 48) for f in (0, 37, 101)] == [0, 512 * 37, 512 * 101]
    assert seek_for(master, 48, 48) == master.start_pts
    # ... and without moved boundaries, by every 48 frames as before
    uniform = replace(master, segment_starts=(), segment_seek_pts=())
    assert [seek_for(uniform, f, 48) for f in (0, 48, 96, 37)] == [0, 512 * 48, 512 * 96, 0]


def test_seek_points_for_moved_starts_are_a_keyframe_ahead() -> None:
    # GIVEN keyframes every 30 frames (512 ticks a frame)
    probed = Probed(info=_master(150), keyframes_pts=tuple(512 * k for k in range(0, 150, 30)))
    # THEN a segment from 37 seeks to the keyframe before 30 (0), one from 101 to 60's
    assert seeks_at(probed, (0, 37, 101)) == (0, 0, 512 * 60)


def _transcode_spec(cuts: tuple[int, ...] | None) -> JobSpec:
    probed = Probed(info=_master(150), keyframes_pts=tuple(512 * k for k in range(0, 150, 30)))
    return build_transcode_spec(
        source_name="cuts.mov", probed=probed, resolution="320x180", codec="h264", quality=None,
        encoder="software", preset="ultrafast", segment_frames=48, cuts=cuts,
    )  # fmt: skip


def test_the_spec_records_the_cuts_and_the_api_takes_it_back() -> None:
    # GIVEN a spec built at submit from a master with cuts at 37 and 101
    spec = _transcode_spec((37, 101))
    assert spec.master is not None
    assert spec.master.segment_starts == (0, 37, 101)
    assert spec.master.segment_seek_pts == (0, 0, 512 * 60)
    # WHEN a client sends it to the API THEN the server reads the same plan
    assert job_spec(json.loads(json.dumps(spec.to_json())), max_chunks=100) == spec


def test_the_api_refuses_segment_starts_off_the_cuts() -> None:
    data = json.loads(json.dumps(_transcode_spec((37, 101)).to_json()))
    data["master"]["segment_starts"] = [0, 37, 90]
    with pytest.raises(ApiError, match="neither a recorded scene cut"):
        job_spec(data, max_chunks=100)


def test_without_a_scan_or_a_cut_in_reach_the_spec_has_no_segment_starts() -> None:
    for cuts in (None, (5,)):
        spec = _transcode_spec(cuts)
        assert spec.master is not None and spec.master.segment_starts == ()

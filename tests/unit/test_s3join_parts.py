"""The store's join, the pure parts: which part each segment takes in a job's early upload, and
which parts copied with their segments the stitch may keep (workers.phases.s3join)."""

from __future__ import annotations

from farm.media.mp4join import Joined
from workers.phases import s3join
from workers.phases.s3join import EarlyPart, Plan, early_parts, part_number

MIB5 = 5 << 20


def _plan(*pieces: tuple[str, int, int, str]) -> Plan:
    joined = Joined(frames=0, timescale=1, duration_ticks=0, frame_ticks=frozenset(), size_bytes=0)
    return Plan(header=b"", pieces=list(pieces), joined=joined)


def test_parts_rise_with_the_frames_and_fit_one_upload() -> None:
    assert part_number(1, 100) == 2 + 99  # frame 2 of 100
    assert part_number(99, 100) == 2 + 9898
    assert part_number(99_999, 100_000) <= s3join.MAX_PARTS
    numbers = [part_number(p, 9_998) for p in range(1, 9_998)]
    assert numbers == sorted(set(numbers))  # up to 9,998 frames every start has its own part


def test_the_stitch_keeps_the_parts_whose_segment_is_unchanged() -> None:
    plan = _plan(("s0", 40, MIB5, '"a"'), ("s1", 40, MIB5, '"b"'), ("s2", 40, 100, '"c"'))
    kept = EarlyPart(number=part_number(8, 24), etag='"p1"', source_etag='"b"', start=40,
                     length=MIB5)  # fmt: skip
    stale = EarlyPart(number=part_number(16, 24), etag='"p2"', source_etag='"old"', start=40,
                      length=100)  # fmt: skip
    found = early_parts(plan, positions=[0, 8, 16], fields=["", str(kept), str(stale)], total=24)
    assert found == ([1, part_number(8, 24), part_number(16, 24)], {kept.number: '"p1"'})


def test_segments_sharing_a_part_or_out_of_the_range_are_numbered_anew() -> None:
    plan = _plan(("s0", 0, MIB5, "a"), ("s1", 0, MIB5, "b"), ("s2", 0, 1, "c"))
    assert early_parts(plan, positions=[0, 5, 9], fields=["", "", ""], total=100_000) is None
    assert early_parts(plan, positions=[-1, 8, 16], fields=["", "", ""], total=24) is None


def test_an_early_part_field_reads_back() -> None:
    part = EarlyPart(number=7, etag='"e"', source_etag='"s"', start=1, length=2)
    assert EarlyPart.parse(str(part)) == part
    assert EarlyPart.parse("") is None and EarlyPart.parse("7 x") is None

"""`--check-frames` (farm.media.framecheck): signalstats' words read back, and what a frame's
planes say of it."""

from pathlib import Path

from farm.media.framecheck import BLACK, FLAT, flag, flagged, read_stats, stats_argv

STATS = """frame:0    pts:0       pts_time:0
lavfi.signalstats.YMIN=0
lavfi.signalstats.YAVG=0
lavfi.signalstats.YMAX=0
lavfi.signalstats.UMIN=128
lavfi.signalstats.UMAX=128
lavfi.signalstats.VMIN=128
lavfi.signalstats.VMAX=128
frame:1    pts:1       pts_time:0.04
lavfi.signalstats.YMIN=0
lavfi.signalstats.YMAX=255
lavfi.signalstats.UMIN=0
lavfi.signalstats.UMAX=255
lavfi.signalstats.VMIN=0
lavfi.signalstats.VMAX=255
frame:2    pts:2       pts_time:0.08
lavfi.signalstats.YMIN=91
lavfi.signalstats.YMAX=92
lavfi.signalstats.UMIN=162
lavfi.signalstats.UMAX=162
lavfi.signalstats.VMIN=98
lavfi.signalstats.VMAX=99
"""


def test_each_frames_planes_are_read() -> None:
    stats = read_stats(STATS)
    assert sorted(stats) == [0, 1, 2]
    assert stats[2] == {"YMIN": 91, "YMAX": 92, "UMIN": 162, "UMAX": 162, "VMIN": 98, "VMAX": 99}


def test_black_flat_and_a_picture() -> None:
    stats = read_stats(STATS)
    assert [flag(stats[n]) for n in range(3)] == [BLACK, "", FLAT]


def test_a_dark_frame_with_something_in_it_is_not_black() -> None:
    assert flag({"YMIN": 0, "YMAX": 40, "UMIN": 120, "UMAX": 135, "VMIN": 120, "VMAX": 130}) == ""


def test_flags_name_the_jobs_frames_and_the_ones_left_unchecked() -> None:
    assert flagged([10, 11, 12, 13], STATS) == ({10: BLACK, 12: FLAT}, [13])


def test_the_stats_path_is_escaped_for_the_filter_graph() -> None:
    argv = stats_argv(ffmpeg_bin="ffmpeg", pattern=Path("/w/seq/%06d.png"),
                      stats=Path("/w/a,b:c.txt"))  # fmt: skip
    graph = argv[argv.index("-vf") + 1]
    assert graph.endswith(r"metadata=mode=print:file=/w/a\,b\\:c.txt")
    assert argv[-3:] == ["-f", "null", "-"]

from fractions import Fraction
from pathlib import Path

import pytest

from farm.core.errors import SpecError
from farm.core.spec import (
    FrameRange,
    JobSpec,
    build_render_spec,
    check_scene_path,
    parse_frames,
    parse_resolution,
)


def test_frame_range_with_step_lists_every_step() -> None:
    assert parse_frames("1-10:3").frames == (1, 4, 7, 10)


def test_single_frame_is_a_one_frame_range() -> None:
    assert parse_frames("7") == FrameRange(first=7, last=7, step=1)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("10-1", "ends before it starts"),
        ("1-10:0", "step must be 1 or more"),
        ("a-b", "not understood"),
        ("-5-3", "below 0"),
        ("1-99999999", "at most"),
    ],
)
def test_impossible_frame_ranges_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_frames(text)


def test_resolution_must_be_even() -> None:
    with pytest.raises(SpecError, match=r"odd side.*322x180"):
        parse_resolution("321x180")


def test_resolution_is_capped_at_8k() -> None:
    with pytest.raises(SpecError, match="7680x4320"):
        parse_resolution("7682x4320")
    assert parse_resolution("7680x4320").width == 7680


def test_chunk_size_must_be_positive() -> None:
    with pytest.raises(SpecError, match="--chunk-size 0"):
        build_render_spec(
            source_name="a.blend",
            frames="1-4",
            chunk_size=0,
            resolution="320x180",
            fps=24,
            samples=8,
            codec="h264",
        )


def test_unknown_codec_lists_the_choices() -> None:
    with pytest.raises(SpecError, match="h264, hevc"):
        build_render_spec(
            source_name="a.blend",
            frames="1-4",
            chunk_size=2,
            resolution="320x180",
            fps=24,
            samples=8,
            codec="vp9",
        )


def test_spec_round_trips_through_json() -> None:
    spec = build_render_spec(
        source_name="a.blend",
        frames="1-9:2",
        chunk_size=2,
        resolution="320x180",
        fps=23.976,
        samples=8,
        codec="hevc",
    )
    assert JobSpec.from_json(spec.to_json()) == spec


def test_missing_scene_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        check_scene_path(tmp_path / "nope.blend")


def test_non_blend_scene_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(SpecError, match=r"not a \.blend"):
        check_scene_path(path)


def test_blend_without_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fake.blend"
    path.write_bytes(b"not blender at all")
    with pytest.raises(SpecError, match="does not look like a Blender file"):
        check_scene_path(path)


@pytest.mark.parametrize(
    ("fps", "rate"),
    [(23.976, Fraction(24000, 1001)), (29.97, Fraction(30000, 1001)), (59.94, Fraction(60000, 1001)),
     (25.0, Fraction(25)), (12.5, Fraction(25, 2))],
)  # fmt: skip
def test_fps_given_as_ntsc_decimals_is_the_exact_ntsc_rate(fps: float, rate: Fraction) -> None:
    """Found by a review: `--fps 23.976` was 2997/125, which the video's encoder snapped and
    `farm status` did not."""
    spec = build_render_spec(
        source_name="a.blend", frames="1-4", chunk_size=2, resolution="64x36", fps=fps,
        samples=1, codec="h264",
    )  # fmt: skip
    assert spec.rate == rate


@pytest.mark.parametrize("text", ["2000000-2000010", "1048570-1048575", "99999999999999999999"])
def test_a_frame_past_blenders_last_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="goes past frame 1048574, Blender's last"):
        parse_frames(text)
    assert parse_frames("1048570-1048574").count == 5
    assert parse_frames("1048560-1048578:10").frames == (1048560, 1048570)  # in range, both

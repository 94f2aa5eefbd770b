"""The names `farm fetch --frames` gives frames: the scene's Output path by Blender's rules,
placed inside the frames folder whatever the path says (farm.core.naming)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import PurePosixPath

import pytest

from farm.core import keys
from farm.core.naming import NamingError, OutputPattern, frame_path, placed, scene_named
from farm.core.sources import SceneInfo
from farm.core.spec import Codec, FrameRange, JobKind, JobSpec, Resolution


def _named(path: str, frame: int, ext: str = ".exr", use_extension: bool = True) -> str:
    pattern = OutputPattern(path=path, use_extension=use_extension)
    return placed(frame_path(pattern, frame, ext)).as_posix()


@pytest.mark.parametrize(
    ("path", "frame", "ext", "expected"),
    [
        ("//render/shot010_####", 19, ".exr", "render/shot010_0019.exr"),
        ("//render/shot010_####", 12345, ".exr", "render/shot010_12345.exr"),  # wider: all digits
        ("//render/shot010_####", -5, ".exr", "render/shot010_-0005.exr"),
        ("//x_#", -5, ".png", "x_-5.png"),
        ("//render/x", 19, ".png", "render/x0019.png"),  # no `#`: four digits appended
        ("/tmp/", 1, ".png", "0001.png"),  # Blender's default: absolute, an empty file name
        ("//a#b/c", 3, ".png", "a#b/c0003.png"),  # a `#` in a folder is no frame number
        ("//a/b##c###d", 19, ".png", "a/b##c019d.png"),  # the last run of `#` is the frame
        ("//beauty_####.png", 19, ".exr", "beauty_0019.exr"),  # another format's: replaced
        ("//beauty_####.png", 19, ".png", "beauty_0019.png"),
        ("//beauty_##.jpeg", 19, ".jpg", "beauty_19.jpeg"),  # JPEG's other extension kept
        ("//beauty_##.TIFF", 19, ".tif", "beauty_19.TIFF"),  # and any case of it
        ("//beauty.png", 19, ".exr", "beauty.png0019.exr"),  # digits first: no extension left
        ("//beauty_##.v2", 19, ".exr", "beauty_19.v2.exr"),  # not an image extension: kept
        ("//a\\b_##", 19, ".png", "a/b_19.png"),  # a backslash is a folder, as Blender reads it
        ("rel/x_###", 19, ".png", "rel/x_019.png"),
    ],
)
def test_the_frame_is_named_by_blenders_rules(
    path: str, frame: int, ext: str, expected: str
) -> None:
    assert _named(path, frame, ext) == expected


def test_without_file_extensions_no_extension_is_added() -> None:
    assert _named("//render/shot010_####", 19, use_extension=False) == "render/shot010_0019"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("//../../../etc/passwd_####", "etc/passwd_0001.exr"),  # never above the frames folder
        ("//render/../../x_####", "x_0001.exr"),
        ("//..", "..0001.exr"),  # `..` with digits appended is a plain name
        ("//render/..", "render/..0001.exr"),
        ("//./a/./b_##", "a/b_01.exr"),
        ("///abs/x_##", "abs/x_01.exr"),  # `//` then `/`: still the .blend's folder
        ("/mnt/renders/shot010/beauty_####", "beauty_0001.exr"),  # absolute: the name alone
        ("/../../root/x_##", "x_01.exr"),
        ("C:\\renders\\shot010\\beauty_####", "beauty_0001.exr"),  # a Windows drive
        ("c:/x_##", "x_01.exr"),
        ("", "0001.exr"),  # empty: Blender's four digits
        ("//", "0001.exr"),
        ("//sh\x1b[2J\x00ot_##", "sh_[2J_ot_01.exr"),  # control characters never reach a terminal
        ("//a//b_##", "a/b_01.exr"),
    ],
)
def test_hostile_and_odd_paths_stay_inside_the_frames_folder(path: str, expected: str) -> None:
    assert _named(path, 1) == expected


def test_a_name_longer_than_a_filesystem_takes_is_refused() -> None:
    with pytest.raises(NamingError, match="longer than 255 bytes"):
        _named("//" + "é" * 200 + "_####", 1)


def test_placed_refuses_a_path_that_names_no_file() -> None:
    for name in ("", "//", "/", "//../..", "C:/"):
        with pytest.raises(NamingError):
            placed(name)


# ── the job's files ───────────────────────────────────────────────────────────────────────────
JOB = "j1"


def _files(*frames: int, ext: str = ".exr") -> list[tuple[str, PurePosixPath]]:
    found = [
        (
            keys.master_key(JOB, f, f"frame_{f:06d}{ext}", "0-1"),
            PurePosixPath(f"frame_{f:06d}{ext}"),
        )
        for f in frames
    ]
    depth = keys.file_output_key(JOB, frames[0], "Depth/Image0001.exr", "0-1")
    return [*found, (depth, PurePosixPath("file_output/Depth/Image0001.exr"))]


def test_masters_follow_the_scene_and_file_output_files_stay_as_the_nodes_name_them() -> None:
    named = scene_named(JOB, OutputPattern(path="//render/shot010_####"), _files(19, 20))
    assert named.note is None
    assert [p.as_posix() for _, p in named.files] == [
        "render/shot010_0019.exr", "render/shot010_0020.exr", "file_output/Depth/Image0001.exr",
    ]  # fmt: skip
    assert [k for k, _ in named.files] == [k for k, _ in _files(19, 20)]  # the same objects


def test_masters_stored_before_frame_folders_follow_the_scene_too() -> None:
    old = [(f"{keys.masters_prefix(JOB)}frame_000007.png", PurePosixPath("frame_000007.png"))]
    named = scene_named(JOB, OutputPattern(path="//f_###"), old)
    assert [p.as_posix() for _, p in named.files] == ["f_007.png"]


def test_a_job_from_before_the_pattern_was_recorded_keeps_the_farms_names_and_says_so() -> None:
    named = scene_named(JOB, None, _files(19))
    assert named.files == _files(19)
    assert named.note == (
        "frames named as the farm stores them (frame_000019.exr): job j1 was submitted before "
        "the farm recorded the scene's output path"
    )


def test_a_pattern_that_puts_a_frame_over_a_file_output_file_falls_back_saying_why() -> None:
    # GIVEN an Output path aimed where a File Output node's file comes back
    pattern = OutputPattern(path="//file_output/Depth/Image####")
    # THEN nothing is written over: the farm's names, and the place named
    named = scene_named(JOB, pattern, _files(1))
    assert named.files == _files(1)
    assert named.note is not None and "puts two files at file_output/Depth/Image0001.exr" in (
        named.note
    )


def test_a_frame_where_another_needs_a_folder_falls_back() -> None:
    pattern = OutputPattern(path="//file_output_####")  # frame 1 -> `file_output_0001.exr`: fine
    assert scene_named(JOB, pattern, _files(1)).note is None
    pattern = OutputPattern(path="//file_output", use_extension=False)  # `file_output0001`
    assert scene_named(JOB, pattern, _files(1)).note is None
    files = [*_files(1), (keys.file_output_key(JOB, 1, "render/0001.exr/x.png", "0-1"),
                          PurePosixPath("render/0001.exr/x.png"))]  # fmt: skip
    named = scene_named(JOB, OutputPattern(path="//render/"), files)
    assert named.note is not None and "puts two files at render/0001.exr" in named.note


def test_names_that_differ_only_in_case_count_as_one_place() -> None:
    files = [*_files(1), (keys.file_output_key(JOB, 1, "A_0001.EXR", "0-1"),
                          PurePosixPath("A_0001.EXR"))]  # fmt: skip
    named = scene_named(JOB, OutputPattern(path="//a_####"), files)
    assert named.note is not None and "puts two files at" in named.note


def test_an_unusable_pattern_falls_back_naming_it() -> None:
    named = scene_named(JOB, OutputPattern(path="//" + "x" * 300), _files(1))
    assert named.files == _files(1)
    assert named.note is not None and "gives no usable file name" in named.note


def test_a_job_without_masters_is_left_as_it_is() -> None:
    legacy = [(keys.frame_key(JOB, 1, None), PurePosixPath("000001.png"))]
    assert scene_named(JOB, None, legacy).files == legacy
    assert scene_named(JOB, None, legacy).note is None


# ── the pattern recorded with the job ─────────────────────────────────────────────────────────
def _spec(scene: SceneInfo | None) -> str:
    spec = JobSpec(
        kind=JobKind.RENDER, source_name="s.blend", frames=FrameRange(first=1, last=2), chunk_size=1,
        resolution=Resolution(width=64, height=36), fps=24.0, samples=1, codec=Codec.H264, scene=scene,
    )  # fmt: skip
    return json.dumps(spec.to_json())


def _scene(**more: object) -> SceneInfo:
    base = dict(
        scene="Scene", blender_version="4.5", frame_start=1, frame_end=2, frame_step=1, fps=24,
        fps_base=1.0, resolution_x=64, resolution_y=36, resolution_percentage=100, camera="C",
        engine="CYCLES", samples=1, denoising=False, view_layers=("ViewLayer",),
        file_format="OPEN_EXR", color_depth="16", color_mode="RGB",
    )  # fmt: skip
    return SceneInfo(**{**base, **more})  # type: ignore[arg-type]


def test_the_pattern_travels_in_the_job_spec() -> None:
    recorded = _spec(_scene(output_path="//r/s_##", file_extension=False))
    assert OutputPattern.of_spec(recorded) == OutputPattern(path="//r/s_##", use_extension=False)


def test_a_spec_from_before_the_pattern_was_recorded_has_none() -> None:
    old = json.loads(_spec(_scene()))
    del old["scene"]["output_path"], old["scene"]["file_extension"]
    assert OutputPattern.of_spec(json.dumps(old)) is None
    assert OutputPattern.of_spec(_spec(None)) is None
    assert OutputPattern.of_spec(None) is None


# ── Blender's own word ────────────────────────────────────────────────────────────────────────
CASES = [
    ("//render/shot010_####", "OPEN_EXR", True), ("//render/x", "PNG", True),
    ("//a#b/c", "PNG", True), ("//a/b##c###d", "JPEG", True), ("//beauty_####.png", "OPEN_EXR", True),
    ("//beauty_##.jpeg", "JPEG", True), ("//beauty.png", "TIFF", True), ("//x_##.tiff", "TIFF", True),
    ("//x_##.foo", "PNG", True), ("//x_###", "PNG", False), ("//x_#", "OPEN_EXR", True),
]  # fmt: skip
FRAMES = (1, 19, 12345, -5)

ASK_BLENDER = """
import json, sys
import bpy
render = bpy.context.scene.render
found = []
for path, fmt, ext in json.loads(sys.argv[1]):
    render.filepath, render.image_settings.file_format, render.use_file_extension = path, fmt, ext
    found.append([render.file_extension] + [render.frame_path(frame=f) for f in json.loads(sys.argv[2])])
print("NAMES" + json.dumps(found))
"""


def test_names_match_what_blender_itself_writes() -> None:
    """The cases above as the farm's Blender (the bpy wheel) names them: scene.render.frame_path
    of an unsaved file, `//` left out."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", ASK_BLENDER, json.dumps(CASES), json.dumps(FRAMES)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("NAMES"))
    for (path, _, use_ext), (ext, *names) in zip(CASES, json.loads(line[5:]), strict=True):
        pattern = OutputPattern(path=path, use_extension=use_ext)
        ours = [placed(frame_path(pattern, f, ext)).as_posix() for f in FRAMES]
        assert ours == names, path


def test_file_output_files_alike_among_themselves_are_not_the_patterns_doing() -> None:
    files = [*_files(1), (keys.file_output_key(JOB, 1, "depth/image0001.exr", "0-1"),
                          PurePosixPath("file_output/depth/image0001.exr"))]  # fmt: skip
    named = scene_named(JOB, OutputPattern(path="//render/shot_####"), files)
    assert named.note is None
    assert named.files[0][1] == PurePosixPath("render/shot_0001.exr")


def test_two_masters_of_one_frame_given_one_name_fall_back() -> None:
    left, right = (keys.master_key(JOB, 1, f"frame_000001{v}.exr", "0-1") for v in ("_L", "_R"))
    files = [
        (left, PurePosixPath("frame_000001_L.exr")),
        (right, PurePosixPath("frame_000001_R.exr")),
    ]
    named = scene_named(JOB, OutputPattern(path="//s_####"), files)
    assert named.files == files
    assert named.note is not None and "puts two files at s_0001.exr" in named.note

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from farm.blender.command import (
    MAX_OUTPUTS,
    SCRIPT,
    WHEEL,
    FrameRejected,
    RenderSettings,
    ScriptLine,
    accept_frame,
    frame_progress,
    frame_time_s,
    job_file,
    parse_caps,
    preview_file,
    probe_argv,
    script_argv,
    script_line,
    settings_from_spec,
)

NONCE = "0123456789abcdef0123456789abcdef"


def test_wheel_argv_runs_the_script_under_this_python_isolated() -> None:
    argv = script_argv(blender=WHEEL, job_path=Path("/w/job.json"), python="/venv/bin/python")
    assert argv == ["/venv/bin/python", "-I", str(SCRIPT), "--job", "/w/job.json"]


def test_binary_argv_disables_autoexec_and_fails_on_script_errors() -> None:
    argv = script_argv(blender="/opt/blender/blender", job_path=Path("/w/job.json"))
    assert argv == [
        "/opt/blender/blender",
        "--background",
        "--factory-startup",
        "--disable-autoexec",
        "--python-exit-code",
        "3",
        "--python",
        str(SCRIPT),
        "--",
        "--job",
        "/w/job.json",
    ]


def test_a_warm_blender_reads_its_job_files_from_stdin_both_ways() -> None:
    assert script_argv(blender=WHEEL, job_path=None, python="py") == [
        "py", "-I", str(SCRIPT), "--serve",
    ]  # fmt: skip
    argv = script_argv(blender="/opt/blender/blender", job_path=None)
    assert argv[-2:] == ["--", "--serve"] and "--job" not in argv


def test_trusted_binary_argv_leaves_autoexec_to_the_script() -> None:
    argv = script_argv(blender="blender", job_path=Path("j.json"), trusted=True)
    assert "--disable-autoexec" not in argv


def test_probe_argv_both_ways() -> None:
    assert probe_argv(blender=WHEEL, python="py") == ["py", "-I", str(SCRIPT), "--probe"]
    assert probe_argv(blender="blender")[-2:] == ["--", "--probe"]


def test_job_file_without_overrides_leaves_the_scene_alone() -> None:
    job = job_file(
        scene=Path("/s/shot.blend"),
        out_dir=Path("/o"),
        frames=[1, 3, 5],
        settings=RenderSettings(),
        nonce=NONCE,
    )
    assert job == {
        "scene": "/s/shot.blend",
        "source": "",
        "out_dir": "/o",
        "frames": [1, 3, 5],
        "nonce": NONCE,
        "trusted": False,
        "overrides": {},
        "scene_engine": None,
        "device": "CPU",
        "threads": 0,
        "preview_depth": "8",
        "allow_missing": [],
        "remap": {},
    }


def test_a_warm_blender_never_renders_a_scene_replaced_since() -> None:
    """`farm retry --scene` keeps the job's tree paths: the scene's stored key tells them apart."""
    from farm.blender.script import same_scene
    from workers.host.warm import warm_key

    def job(source: str, frames: list[int]) -> dict[str, object]:
        return job_file(scene=Path("/t/scene.blend"), out_dir=Path("/o"), frames=frames,
                        settings=RenderSettings(), nonce=NONCE, source=source)  # fmt: skip

    first, next_chunk, fixed = job("scenes/a", [1, 2]), job("scenes/a", [3]), job("scenes/b", [3])
    assert same_scene(first, next_chunk) and not same_scene(first, fixed)
    assert warm_key(["b"], first, memory_limit_bytes=0) != warm_key(
        ["b"], fixed, memory_limit_bytes=0
    )


def test_job_file_carries_each_override_given() -> None:
    settings = RenderSettings(
        width=640, height=360, samples=12, engine="BLENDER_EEVEE", camera="Cam.002"
    )
    job = job_file(scene=Path("s"), out_dir=Path("o"), frames=[1], settings=settings, nonce=NONCE)
    assert job["overrides"] == {
        "resolution": [640, 360],
        "samples": 12,
        "engine": "BLENDER_EEVEE",
        "camera": "Cam.002",
    }


@dataclass
class _Res:
    width: int
    height: int


@dataclass
class _Scene:
    engine: str = "BLENDER_EEVEE"
    render_size: tuple[int, int] = (320, 240)


@dataclass
class _Spec:
    resolution: _Res = field(default_factory=lambda: _Res(320, 240))
    samples: int = 4
    engine: str | None = None
    camera: str | None = None
    overrides: tuple[str, ...] = ()
    scene: _Scene | None = field(default_factory=_Scene)
    missing_assets: tuple[str, ...] = ()


def test_settings_from_spec_apply_only_the_flags_given() -> None:
    settings = settings_from_spec(_Spec(overrides=("frames", "samples")), device="CPU", threads=2)
    assert settings == RenderSettings(samples=4, scene_engine="BLENDER_EEVEE", threads=2)


def test_files_the_user_allowed_to_be_missing_are_passed_by_their_stored_path() -> None:
    spec = _Spec(missing_assets=("//tex/gone.png (image 'gone'; looked for /s/tex/gone.png)",))
    settings = settings_from_spec(spec, device="CPU", threads=0)
    assert settings.allow_missing == ("//tex/gone.png",)


def test_a_missing_file_allowed_by_a_name_with_parentheses_allows_only_itself() -> None:
    """Found by a review: `//tex/wood (1).png` was cut at its first " (", so allowing it
    allowed every `//tex/wood…` to be missing, to render magenta."""
    spec = _Spec(missing_assets=(
        "//tex/wood (1).png (image 'wood (1).png'; looked for /s/tex/wood (1).png)",
        '//tex/it\'s.png (image "it\'s"; looked for /s/tex/it\'s.png)',
    ))  # fmt: skip
    settings = settings_from_spec(spec, device="CPU", threads=0)
    assert settings.allow_missing == ("//tex/wood (1).png", "//tex/it's.png")


def test_settings_from_spec_round_an_odd_scene_size_for_the_video() -> None:
    spec = _Spec(resolution=_Res(320, 240), scene=_Scene(render_size=(321, 241)))
    settings = settings_from_spec(spec, device="CPU", threads=0)
    assert (settings.width, settings.height) == (320, 240)


def test_settings_from_an_old_spec_without_a_scene_keep_its_values() -> None:
    spec = _Spec(scene=None)
    settings = settings_from_spec(spec, device="OPTIX", threads=0)
    assert (settings.width, settings.height, settings.samples) == (320, 240, 4)
    assert settings.device == "OPTIX"


def test_script_line_needs_this_runs_nonce_and_a_whole_body() -> None:
    line = f'FARM-FRAME {NONCE} {{"frame": 3, "files": ["frame_000003.exr"]}}'
    frame = ScriptLine(kind="FRAME", body={"frame": 3, "files": ["frame_000003.exr"]})
    assert script_line(line, NONCE) == frame
    assert script_line(line, "f" * 32) is None
    assert script_line(f"FARM-FRAME {NONCE} not json", NONCE) is None
    assert script_line(line + " and more", NONCE) is None


def test_a_frame_line_behind_part_of_a_line_of_blenders_is_still_read() -> None:
    """Found by a review: Blender's C output is buffered apart from Python's, and a part of a
    line of its own written just before the frame's line hid it; the chunk then failed with
    "frames were not saved"."""
    line = f'FARM-FRAME {NONCE} {{"frame": 3, "files": ["frame_000003.exr"]}}'
    assert script_line("Fra:1 Mem:12.00M | Synchronizing object | Cu" + line, NONCE) == (
        ScriptLine(kind="FRAME", body={"frame": 3, "files": ["frame_000003.exr"]})
    )


def _frame_line(frame: int, files: list[str], preview: str) -> ScriptLine:
    return ScriptLine(
        kind="FRAME", body={"frame": frame, "files": files, "preview": preview, "render_s": 1.5}
    )


def test_a_frame_of_the_chunk_in_its_folder_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "frame_000012.exr").write_bytes(b"x")
    (tmp_path / "preview_000012.png").write_bytes(b"x")
    frame = accept_frame(
        _frame_line(12, ["frame_000012.exr"], "preview_000012.png"),
        out_dir=tmp_path,
        nonce=NONCE,
        frames=[11, 12],
    )
    assert frame.frame == 12
    assert frame.files == (tmp_path / "frame_000012.exr",)
    assert frame.preview == preview_file(tmp_path, 12)
    assert frame.render_s == 1.5


@pytest.mark.parametrize(
    ("frame", "files", "preview"),
    [
        (13, ["frame_000013.png"], "preview_000013.png"),  # not this chunk's frame
        (12, ["/etc/passwd"], "preview_000012.png"),
        (12, ["../frame_000012.png"], "preview_000012.png"),
        (12, ["frame_000011.png"], "preview_000012.png"),  # another frame's file
        (12, ["frame_000012.png"], "../preview_000012.png"),
        (12, ["link_000012.png"], "preview_000012.png"),
        (12, [], "preview_000012.png"),
    ],
)
def test_anything_else_is_rejected(
    tmp_path: Path, frame: int, files: list[str], preview: str
) -> None:
    for name in ("frame_000011.png", "frame_000012.png", "preview_000012.png"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(FrameRejected):
        accept_frame(
            _frame_line(frame, files, preview), out_dir=tmp_path, nonce=NONCE, frames=[11, 12]
        )


@pytest.mark.parametrize(
    ("thumb", "accepted"),
    [
        ("thumb_000012.jpg", True),
        (None, True),  # the script could not make one: the frame still counts
        ("thumb_000011.jpg", False),  # another frame's
        ("../thumb_000012.jpg", False),
        ("/etc/passwd", False),
        ("thumb_000012.png", False),
    ],
)
def test_a_frames_thumbnail_must_be_its_own_jpeg_in_the_folder(
    tmp_path: Path, thumb: str | None, accepted: bool
) -> None:
    for name in ("frame_000012.png", "preview_000012.png", "thumb_000011.jpg",
                 "thumb_000012.jpg", "thumb_000012.png"):  # fmt: skip
        (tmp_path / name).write_bytes(b"x")
    line = _frame_line(12, ["frame_000012.png"], "preview_000012.png")
    line.body["thumbnail"] = thumb  # type: ignore[index]
    if not accepted:
        with pytest.raises(FrameRejected):
            accept_frame(line, out_dir=tmp_path, nonce=NONCE, frames=[11, 12])
        return
    frame = accept_frame(line, out_dir=tmp_path, nonce=NONCE, frames=[11, 12])
    assert frame.thumbnail == (tmp_path / thumb if thumb else None)


def test_a_symlink_named_like_a_frame_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "frame_000012.png").symlink_to("/etc/passwd")
    (tmp_path / "preview_000012.png").write_bytes(b"x")
    with pytest.raises(FrameRejected):
        accept_frame(
            _frame_line(12, ["frame_000012.png"], "preview_000012.png"),
            out_dir=tmp_path,
            nonce=NONCE,
            frames=[12],
        )


def test_caps_line_is_read_from_the_probe_output() -> None:
    out = 'noise\nFARM-CAPS {"version": "4.5.4", "engines": ["CYCLES"]}\n'
    assert parse_caps(out) == {"version": "4.5.4", "engines": ["CYCLES"]}
    assert parse_caps("nothing") is None


def test_progress_line_gives_frame_and_samples() -> None:
    line = "Fra:30 Mem:13.64M (Peak 16.28M) | Time:00:00.06 | Remaining:00:00.44 | Scene, ViewLayer | Sample 1/8"
    assert frame_progress(line) == (30, 1, 8)
    assert frame_progress("Fra:30 Mem:11.53M | Scene, ViewLayer | Initializing") == (30, 0, 0)


def test_eevee_progress_line_gives_samples() -> None:
    line = "Fra:1 Mem:39.20M (Peak 39.24M) | Time:00:43.75 | Rendering 25 / 64 samples"
    assert frame_progress(line) == (1, 25, 64)


def test_frame_time_line() -> None:
    assert frame_time_s(" Time: 00:00.64 (Saving: 00:00.17)") == 0.64
    assert frame_time_s(" Time: 01:02.50 (Saving: 00:00.00)") == 62.5


def _with_outputs(tmp_path: Path, outputs: list[object]) -> ScriptLine:
    for name in ("frame_000012.png", "preview_000012.png"):
        (tmp_path / name).write_bytes(b"x")
    line = _frame_line(12, ["frame_000012.png"], "preview_000012.png")
    line.body["outputs"] = outputs  # type: ignore[index]
    return line


def test_a_frames_file_output_files_are_accepted_from_its_own_folder(tmp_path: Path) -> None:
    folder = tmp_path / f"outputs_{NONCE}_000012"
    (folder / "Depth").mkdir(parents=True)
    (folder / "Depth" / "Image0012.exr").write_bytes(b"x")
    (folder / "Passes0012.exr").write_bytes(b"x")  # a node's multilayer EXR
    line = _with_outputs(tmp_path, ["Depth/Image0012.exr", "Passes0012.exr"])
    frame = accept_frame(line, out_dir=tmp_path, nonce=NONCE, frames=[12])
    assert frame.outputs == ("Depth/Image0012.exr", "Passes0012.exr")
    assert frame.outputs_dir == folder


def test_a_frame_line_without_outputs_has_none(tmp_path: Path) -> None:
    """A render script from before File Output files were kept."""
    for name in ("frame_000012.png", "preview_000012.png"):
        (tmp_path / name).write_bytes(b"x")
    frame = accept_frame(
        _frame_line(12, ["frame_000012.png"], "preview_000012.png"),
        out_dir=tmp_path,
        nonce=NONCE,
        frames=[12],
    )
    assert frame.outputs == ()


@pytest.mark.parametrize(
    "outputs",
    [
        ["../frame_000012.png"],
        ["/etc/passwd"],
        ["Depth/../../x.exr"],
        ["a/b/c.exr"],  # deeper than a node's folder
        [".hidden0012.exr"],
        ["Gone0012.exr"],  # not there
        ["Depth"],  # a folder, not a file
        ["Link/Image0012.exr"],  # through a linked folder
        ["Linked0012.exr"],
        [7],
        "Image0012.exr",
    ],
)
def test_file_outputs_that_are_not_the_frames_own_files_are_rejected(
    tmp_path: Path, outputs: list[object]
) -> None:
    folder = tmp_path / f"outputs_{NONCE}_000012"
    (folder / "Depth").mkdir(parents=True)
    (folder / "Depth" / "Image0012.exr").write_bytes(b"x")
    (folder / "Link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "Image0012.exr").write_bytes(b"x")
    (folder / "Linked0012.exr").symlink_to("/etc/passwd")
    with pytest.raises(FrameRejected):
        accept_frame(_with_outputs(tmp_path, outputs), out_dir=tmp_path, nonce=NONCE, frames=[12])


def test_a_flood_of_file_outputs_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(FrameRejected):
        accept_frame(
            _with_outputs(tmp_path, [f"x{i}.png" for i in range(MAX_OUTPUTS + 1)]),
            out_dir=tmp_path,
            nonce=NONCE,
            frames=[12],
        )

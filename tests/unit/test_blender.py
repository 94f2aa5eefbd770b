from pathlib import Path

from workers.blender import (
    RenderSettings,
    frame_progress,
    frame_time_s,
    render_argv,
    saved_frame,
    setup_script,
)


def test_argv_disables_autoexec_before_the_scene_loads() -> None:
    argv = render_argv(
        blender="blender",
        scene=Path("/s/shot.blend"),
        out_dir=Path("/o"),
        frames=[1, 3, 5],
        settings=RenderSettings(width=320, height=180, samples=8),
    )
    assert argv[:6] == [
        "blender",
        "--background",
        "--disable-autoexec",
        "--python-exit-code",
        "3",
        "/s/shot.blend",
    ]
    assert argv[-2:] == ["--render-frame", "1,3,5"]
    assert argv[argv.index("--render-output") + 1] == "/o/frame_######"
    assert "--threads" not in argv


def test_threads_are_passed_when_set() -> None:
    argv = render_argv(
        blender="b",
        scene=Path("s.blend"),
        out_dir=Path("o"),
        frames=[1],
        settings=RenderSettings(width=2, height=2, samples=1, threads=1),
    )
    assert argv[argv.index("--threads") + 1] == "1"


def test_setup_script_sets_size_samples_and_cpu() -> None:
    script = setup_script(RenderSettings(width=640, height=360, samples=12))
    assert "resolution_x = 640" in script and "resolution_y = 360" in script
    assert "samples = 12" in script
    assert "scene.cycles.device = 'CPU'" in script


def test_setup_script_selects_optix_devices() -> None:
    script = setup_script(RenderSettings(width=2, height=2, samples=1, device="OPTIX"))
    assert "compute_device_type = 'OPTIX'" in script
    assert "scene.cycles.device = 'GPU'" in script
    compile(script, "setup", "exec")


def test_saved_line_gives_frame_and_path() -> None:
    assert saved_frame("Saved: '/tmp/x/frame_000012.png'") == (12, Path("/tmp/x/frame_000012.png"))
    assert saved_frame("Fra:1 Mem:10M | Sample 1/8") is None


def test_progress_line_gives_frame_and_samples() -> None:
    line = "Fra:30 Mem:13.64M (Peak 16.28M) | Time:00:00.06 | Remaining:00:00.44 | Scene, ViewLayer | Sample 1/8"
    assert frame_progress(line) == (30, 1, 8)
    assert frame_progress("Fra:30 Mem:11.53M | Scene, ViewLayer | Initializing") == (30, 0, 0)


def test_frame_time_line() -> None:
    assert frame_time_s(" Time: 00:00.64 (Saving: 00:00.17)") == 0.64
    assert frame_time_s(" Time: 01:02.50 (Saving: 00:00.00)") == 62.5

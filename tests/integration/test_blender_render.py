"""The render script (farm/blender/script.py) run for real with the bpy 4.5 wheel on tiny scenes,
exactly as a worker runs it: job file and argv from farm.blender.command, the child from farm.adapters.proc."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from farm.adapters.proc import Result, run
from farm.blender import command as blender
from workers.host import gpu

ROOT = Path(__file__).resolve().parents[2]
SAVED_BY_5_0 = Path(__file__).with_name("blends")
MEMORY_LIMIT = 4096 * 1024 * 1024
"""The cap the e2e farm gives CPU renders (FARM_RENDER_MEMORY_LIMIT_MB=4096)."""


@dataclass
class Run:
    result: Result
    out_dir: Path
    frames: list[blender.RenderedFrame] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    loaded: dict[str, object] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def render(
    scene: Path,
    tmp: Path,
    frames: list[int],
    settings: blender.RenderSettings | None = None,
    binary: str = blender.WHEEL,
    remap: dict[str, str] | None = None,
) -> Run:
    out_dir = tmp / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    nonce = secrets.token_hex(16)
    job = blender.job_file(
        scene=scene,
        out_dir=out_dir,
        frames=frames,
        settings=settings or blender.RenderSettings(),
        nonce=nonce,
        remap=remap,
    )
    job_path = tmp / "job.json"
    job_path.write_text(json.dumps(job))
    argv = blender.script_argv(blender=binary, job_path=job_path, trusted=bool(job["trusted"]))
    found = Run(result=Result(argv=argv, returncode=-1, tail=[], duration_s=0), out_dir=out_dir)

    def on_line(line: str) -> None:
        found.lines.append(line)
        parsed = blender.script_line(line, nonce)
        if parsed is None:
            return
        if parsed.kind == "LOADED":
            found.loaded = dict(parsed.body)
        if parsed.kind == "FRAME":
            try:
                found.frames.append(
                    blender.accept_frame(parsed, out_dir=out_dir, frames=frames, nonce=nonce)
                )
            except blender.FrameRejected as exc:
                found.rejected.append(str(exc))

    found.result = run(argv, on_line=on_line, memory_limit_bytes=MEMORY_LIMIT, tail_lines=200)
    return found


def png_header(path: Path) -> tuple[int, int, int, int]:
    """(width, height, bit depth, colour type) from a PNG's IHDR."""
    data = path.read_bytes()[:29]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return (
        int.from_bytes(data[16:20], "big"),
        int.from_bytes(data[20:24], "big"),
        data[24],
        data[25],
    )


def test_cycles_scene_renders_each_frame_with_a_preview(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "cycles.blend", tmp_path, [1, 2])
    assert done.result.ok, "\n".join(done.result.tail)
    assert [f.frame for f in done.frames] == [1, 2]
    assert [f.files for f in done.frames] == [
        (done.out_dir / "frame_000001.png",),
        (done.out_dir / "frame_000002.png",),
    ]
    assert png_header(done.frames[0].preview)[:3] == (32, 32, 8)
    assert done.loaded["blender"] == "4.5.4 LTS"
    assert any(blender.frame_progress(line) == (1, 2, 2) for line in done.lines)


def _mean_rgb(path: Path, size: str) -> list[float]:
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-vf", f"scale={size}", "-f", "rawvideo",
         "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    return [sum(raw[c::3]) / (len(raw) / 3) for c in range(3)]


def test_each_frame_gets_a_thumbnail_of_its_preview(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "cycles.blend", tmp_path, [1], blender.RenderSettings(width=640,
                  height=360, samples=2))  # fmt: skip
    assert done.result.ok, "\n".join(done.result.tail)
    thumb = done.frames[0].thumbnail
    assert thumb == done.out_dir / "thumb_000001.jpg"
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name,width,height", "-of",
         "csv=p=0", str(thumb)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert probe == "mjpeg,320,180"
    # Made from the frame's own file read back (its preview, linked): the frame is untouched.
    assert done.frames[0].preview.samefile(done.frames[0].files[0])
    assert png_header(done.frames[0].files[0]) == (640, 360, 8, 6)
    # The preview's display-referred colours, not transformed a second time.
    want, got = _mean_rgb(done.frames[0].preview, "320:180"), _mean_rgb(thumb, "320:180")
    assert all(abs(a - b) < 3 for a, b in zip(want, got, strict=True)), (want, got)


def test_only_named_overrides_change_the_scene(scenes: Path, tmp_path: Path) -> None:
    done = render(
        scenes / "cycles.blend",
        tmp_path,
        [2],
        blender.RenderSettings(width=48, height=16, samples=1),
    )
    assert done.result.ok, "\n".join(done.result.tail)
    assert png_header(done.frames[0].files[0])[:2] == (48, 16)
    assert any(blender.frame_progress(line) == (2, 1, 1) for line in done.lines)


def test_denoised_scene_renders_with_oidn(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "denoise.blend", tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    assert [f.frame for f in done.frames] == [1]


def test_multilayer_exr_frames_keep_passes_and_get_a_png_preview(
    scenes: Path, tmp_path: Path
) -> None:
    done = render(scenes / "exr.blend", tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    (frame,) = done.frames
    exr = frame.files[0]
    assert exr.name == "frame_000001.exr"
    head = exr.read_bytes()[:20000]
    assert head[:4] == b"\x76\x2f\x31\x01"  # OpenEXR magic
    assert b"ViewLayer.Normal.X" in head and b"ViewLayer.Depth.Z" in head
    assert png_header(frame.preview)[:4] == (32, 32, 8, 2)  # 8-bit RGB, display-referred


def test_png16_rgba_is_kept_as_the_scene_asks(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "png16.blend", tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    assert png_header(done.frames[0].files[0])[2:] == (16, 6)  # 16-bit RGBA
    assert png_header(done.frames[0].preview)[2:] == (8, 2)
    assert not done.frames[0].preview.samefile(done.frames[0].files[0])


def _rgb(path: Path) -> bytes:
    return subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip


def test_a_frame_saved_as_the_preview_would_be_is_its_preview_not_saved_twice(
    scenes: Path, tmp_path: Path
) -> None:
    # Blender's default output: 8-bit PNG, RGBA, the film opaque: the frame's file is the
    # preview (one link, not a second pass through the view transform).
    done = render(scenes / "cycles.blend", tmp_path / "linked", [1])
    assert done.result.ok, "\n".join(done.result.tail)
    (frame,) = done.frames
    assert frame.preview.samefile(frame.files[0])
    assert png_header(frame.preview)[2:] == (8, 6)
    assert frame.thumbnail is not None and frame.thumbnail.stat().st_size > 0
    # The video sees what a preview saved apart would show: Blender's own RGB save of the same
    # render, pixel for pixel (what this link saves it from doing).
    apart = tmp_path / "apart.png"
    saved = subprocess.run(
        [sys.executable, "-I", "-c", SAVE_APART, str(scenes / "cycles.blend"), str(apart)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert saved.returncode == 0, saved.stdout[-2000:] + saved.stderr[-2000:]
    assert png_header(apart)[2:] == (8, 2)
    assert _rgb(frame.preview) == _rgb(apart)


def test_a_frame_rendered_again_in_the_same_folder_is_saved_anew_and_linked_again(
    scenes: Path, tmp_path: Path
) -> None:
    """A retry on the same worker meets the last attempt's linked pair: the frame is not
    written through the old link (its preview saved over it would leave the master RGB)."""
    first = render(scenes / "cycles.blend", tmp_path, [1])
    assert first.result.ok, "\n".join(first.result.tail)
    assert first.frames[0].preview.samefile(first.frames[0].files[0])
    again = render(scenes / "cycles.blend", tmp_path, [1])
    assert again.result.ok, "\n".join(again.result.tail)
    (frame,) = again.frames
    assert frame.preview.samefile(frame.files[0])
    assert png_header(frame.files[0])[2:] == (8, 6)  # the scene's RGBA, as it asks
    assert "saved apart" not in "\n".join(again.lines)
    # Written under the run's own names, then renamed into place: none is left behind.
    assert not list(again.out_dir.glob(".*"))


def test_a_frame_whose_alpha_is_not_1_gets_a_preview_of_its_own(
    scenes: Path, tmp_path: Path
) -> None:
    """An opaque film, but a holdout cube (alpha 0 there): read back from the saved frame, so
    the video is made from Blender's RGB save, as for a transparent film."""
    done = render(scenes / "holdout.blend", tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    (frame,) = done.frames
    assert not frame.preview.samefile(frame.files[0])
    assert png_header(frame.files[0])[2:] == (8, 6)
    assert png_header(frame.preview)[2:] == (8, 2)


SAVE_APART = """
import sys, bpy
bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
scene = bpy.context.scene
scene.frame_set(1)
bpy.ops.render.render(write_still=False)
scene.render.image_settings.color_mode = "RGB"
bpy.data.images["Render Result"].save_render(sys.argv[2], scene=scene)
"""


def test_eevee_scene_renders_headless(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "eevee.blend", tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    assert done.loaded["engine"] == "BLENDER_EEVEE_NEXT"
    assert png_header(done.frames[0].preview)[:2] == (32, 32)


def test_eevee_engine_name_of_other_releases_is_mapped(scenes: Path, tmp_path: Path) -> None:
    done = render(
        scenes / "workbench.blend",
        tmp_path,
        [1],
        blender.RenderSettings(engine="BLENDER_EEVEE", samples=1),
    )
    assert done.result.ok, "\n".join(done.result.tail)
    assert done.loaded["engine"] == "BLENDER_EEVEE_NEXT"


def test_a_scene_saved_by_blender_5_0_renders(tmp_path: Path) -> None:
    done = render(SAVED_BY_5_0 / "cycles-5.0.blend", tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    assert png_header(done.frames[0].files[0])[:2] == (32, 32)


def test_a_5_0_eevee_scene_renders_with_its_engine_name_mapped(tmp_path: Path) -> None:
    settings = blender.RenderSettings(scene_engine="BLENDER_EEVEE")  # as the file names it
    done = render(SAVED_BY_5_0 / "eevee-5.0.blend", tmp_path, [1], settings)
    assert done.result.ok, "\n".join(done.result.tail)
    assert done.loaded["engine"] == "BLENDER_EEVEE_NEXT"
    assert [f.frame for f in done.frames] == [1]


def test_workbench_scene_renders(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "workbench.blend", tmp_path, [1, 2])
    assert done.result.ok, "\n".join(done.result.tail)
    assert done.loaded["engine"] == "BLENDER_WORKBENCH"
    assert [f.frame for f in done.frames] == [1, 2]


def test_scene_scripts_do_not_run_and_names_cannot_pass_as_frames(
    scenes: Path, tmp_path: Path
) -> None:
    scene = tmp_path / "hostile.blend"
    shutil.copy(scenes / "hostile.blend", scene)
    done = render(scene, tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    assert not (tmp_path / "autoexec-ran").exists()
    assert not (tmp_path / "driver-ran").exists()
    assert [f.files for f in done.frames] == [(done.out_dir / "frame_000001.png",)]
    # The scene's object named like Blender's own save line is printed, and accepted as nothing.
    assert len(done.frames) == 1 and not done.rejected


def test_trusted_scene_runs_its_scripts_but_forged_lines_are_ignored(
    scenes: Path, tmp_path: Path
) -> None:
    scene = tmp_path / "hostile.blend"
    shutil.copy(scenes / "hostile.blend", scene)
    done = render(scene, tmp_path, [1], blender.RenderSettings(trusted=True))
    assert done.result.ok, "\n".join(done.result.tail)
    assert (tmp_path / "autoexec-ran").exists()
    assert (tmp_path / "driver-ran").exists()  # so the test above proves drivers stayed off
    assert any(line.startswith("FARM-FRAME 0123456789abcdef") for line in done.lines)
    assert [f.frame for f in done.frames] == [1]
    assert done.rejected == []


def test_missing_texture_fails_the_chunk_naming_the_file(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "missing.blend", tmp_path, [1])
    assert done.result.returncode == 3
    assert done.frames == []
    assert any("FARM-ERROR" in line and "//tex/gone.png" in line for line in done.result.tail)


def test_missing_linked_library_fails_the_chunk_naming_it(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "libmissing.blend", tmp_path, [1])
    assert done.result.returncode == 3
    assert done.frames == []
    assert any(
        "FARM-ERROR" in line and "//lib_gone/prop.blend (linked library)" in line
        for line in done.result.tail
    ), done.result.tail


def test_a_texture_allowed_missing_at_submit_does_not_fail_the_chunk(
    scenes: Path, tmp_path: Path
) -> None:
    settings = blender.RenderSettings(allow_missing=("//tex/gone.png",))
    done = render(scenes / "missing.blend", tmp_path, [1], settings)
    assert done.result.ok, "\n".join(done.result.tail)
    assert [f.frame for f in done.frames] == [1]


def test_file_output_nodes_write_only_into_the_chunk_folder(scenes: Path, tmp_path: Path) -> None:
    done = render(scenes / "fileoutput.blend", tmp_path, [1])
    assert done.result.ok, "\n".join(done.result.tail)
    assert not (scenes / "outside").exists()
    assert not list(scenes.parent.glob("escape_*"))
    written = [p for p in done.out_dir.rglob("*") if p.is_file()]
    assert any(p.parent.parent.name.startswith("outputs_") for p in written)
    assert all(done.out_dir in p.parents for p in written)


def test_each_frames_file_output_files_are_announced_with_it(scenes: Path, tmp_path: Path) -> None:
    """GIVEN a scene whose File Output node writes the render as PNGs WHEN two frames render
    THEN each frame's line names the node's file for that frame, in the frame's own folder."""
    done = render(scenes / "fileoutput.blend", tmp_path, [1, 2])
    assert done.result.ok, "\n".join(done.result.tail)
    for rendered in done.frames:
        assert len(rendered.outputs) == 1, rendered.outputs
        name = rendered.outputs[0]
        assert name.startswith("File_Output/") and f"{rendered.frame:04d}" in name, name
        folder = rendered.outputs_dir
        assert folder.parent == done.out_dir and folder.name.endswith(f"_{rendered.frame:06d}")
        assert (rendered.outputs_dir / name).read_bytes()[:4] == b"\x89PNG"
    assert len({r.outputs_dir for r in done.frames}) == 2  # each frame wrote into its own


def test_same_script_runs_inside_a_blender_binary(tmp_path: Path) -> None:
    # Debian's blender 3.4 (make setup installs it for fixtures); the image runs 4.5.4 the same way.
    done = render(
        ROOT / "scenes" / "demo.blend",
        tmp_path,
        [1],
        blender.RenderSettings(width=32, height=18, samples=1),
        binary="blender",
    )
    assert done.result.ok, "\n".join(done.result.tail)
    assert png_header(done.frames[0].files[0])[:2] == (32, 18)


def test_the_probe_reports_the_wheels_blender_and_what_it_can_do() -> None:
    info = gpu.probe_blender(blender.WHEEL)
    assert info.error == ""
    assert info.version == "4.5.4"
    assert info.file_version >= (4, 5, 85)  # opens files saved by Blender 5.0
    assert {"CYCLES", "BLENDER_EEVEE_NEXT", "BLENDER_WORKBENCH"} <= set(info.engines)
    assert "CPU" in info.devices
    assert "OPENIMAGEDENOISE" in info.denoisers


def test_a_blender_without_oidn_fails_a_denoised_scene_saying_so(tmp_path: Path) -> None:
    scene = tmp_path / "denoise-3.4.blend"
    make = (
        "import bpy; s = bpy.context.scene; s.render.engine = 'CYCLES'; "
        "s.cycles.use_denoising = True; "
        f"bpy.ops.wm.save_as_mainfile(filepath={str(scene)!r})"
    )
    built = subprocess.run(
        ["blender", "--background", "--factory-startup", "--python-expr", make],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert scene.exists(), built.stdout[-2000:]
    done = render(scene, tmp_path, [1], blender.RenderSettings(width=16, height=16), "blender")
    assert done.result.returncode == 3
    assert any("built without it" in line for line in done.result.tail), done.result.tail


def test_a_path_that_would_not_resolve_is_remapped_into_the_tree(
    scenes: Path, tmp_path: Path
) -> None:
    """GIVEN a scene whose texture path does not resolve on this worker WHEN the asset manifest
    maps it to its copy in the job's tree THEN the scene renders with that file."""
    found = tmp_path / "tree" / "_abs" / "gone.png"
    found.parent.mkdir(parents=True)
    shutil.copyfile(Path(__file__).parents[2] / "scenes" / "tex" / "checker.png", found)
    done = render(scenes / "missing.blend", tmp_path, [1], remap={"//tex/gone.png": str(found)})
    assert done.result.ok, "\n".join(done.result.tail)
    assert [f.frame for f in done.frames] == [1]

"""What `farm submit` says of the paths inside linked libraries (farm.blender.assets): only those
Blender on the farm will not find are named, each with words true to its case. Fixture scenes:
tests/unit/blends/build_deps.py (shot.blend links lib/outer.blend, which links lib/inner.blend)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from blender_asset_tracer import blendfile

from farm.blender.assets import Sources, require_complete, trace_scene, unremapped_warning
from farm.blender.command import stored_path
from farm.core.errors import SpecError

DEPS = Path(__file__).parent / "blends" / "deps"


def _set_path(blend: Path, code: bytes, id_name: bytes, new: str) -> None:
    """Point one block of `blend` (an image, a library) elsewhere, as an artist's file might."""
    bfile = blendfile.BlendFile(blend, "r+b")
    try:
        for block in bfile.find_blocks_from_code(code):
            if block.id_name == code + id_name:
                block[b"name"] = new.encode()
    finally:
        bfile.close()


def _project(tmp_path: Path) -> Path:
    tree = tmp_path / "shot"
    shutil.copytree(DEPS, tree)
    return tree


def test_libraries_outside_the_scene_folder_with_relative_paths_raise_no_warning(
    tmp_path: Path,
) -> None:
    # GIVEN the libraries (and the texture outer.blend uses) moved out of the scene's folder,
    # the scene linking outer.blend by its absolute path; outer.blend links `//inner.blend`
    tree = _project(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.move(tree / "lib", shared / "lib")
    shutil.copytree(tree / "tex", shared / "tex")
    _set_path(tree / "shot.blend", b"LI", b"outer.blend", str(shared / "lib" / "outer.blend"))
    # WHEN it is traced
    manifest = trace_scene(tree / "shot.blend", Sources(allowed=(shared.resolve(),))).manifest
    # THEN the scene's own path is remapped, and the libraries' relative paths, which keep
    # their places to each other under _abs/ on the farm, are no warning
    assert list(manifest.remap) == [str(shared / "lib" / "outer.blend")]
    assert "_abs/" + str(shared / "lib" / "inner.png").lstrip("/") in [
        a.path for a in manifest.assets
    ]
    assert manifest.unremapped == ()


def test_an_absolute_path_in_a_linked_library_is_named_as_absolute(tmp_path: Path) -> None:
    tree = _project(tmp_path)
    absolute = str(tree / "lib" / "inner.png")
    _set_path(tree / "lib" / "inner.blend", b"IM", b"inner", absolute)
    manifest = trace_scene(tree / "shot.blend").manifest
    assert manifest.unremapped == (f"{absolute} (in inner.blend)",)
    said = unremapped_warning(manifest.unremapped[0])
    assert said.startswith(f"absolute path inside a linked library: {absolute} (in inner.blend)")
    assert "would not find the file" in said and "Make Paths Relative" in said
    # THEN submit refuses the scene, naming the path and what to do, unless told to go on
    # without it; then the worker's check lets that one path be missing, and no other
    with pytest.raises(SpecError) as refused:
        require_complete(manifest, allow_missing=False)
    assert f"{absolute} (in inner.blend)" in str(refused.value)
    assert "Make Paths Relative" in str(refused.value) and "--allow-missing" in str(refused.value)
    require_complete(manifest, allow_missing=True)
    assert stored_path(manifest.unremapped[0]) == absolute


@pytest.mark.parametrize(
    ("entry", "stored"),
    [
        ("//../tex/a.png (in lib.blend)", "//../tex/a.png"),
        ("/srv/tex/b (1).png (in lib (2).blend)", "/srv/tex/b (1).png"),
        ("//tex/wood (1).png (image 'wood'; looked for /p/tex/wood (1).png)", "//tex/wood (1).png"),
        ("//plain.png", "//plain.png"),
    ],
)
def test_the_path_a_job_may_render_without_is_the_path_as_stored(entry: str, stored: str) -> None:
    assert stored_path(entry) == stored


def test_a_relative_path_from_a_library_in_the_scene_folder_to_outside_it_is_named(
    tmp_path: Path,
) -> None:
    # GIVEN lib/inner.blend (in the scene's folder) using a texture beside the scene's folder
    tree = _project(tmp_path)
    shutil.copyfile(DEPS / "lib" / "inner.png", tmp_path / "beside.png")
    _set_path(tree / "lib" / "inner.blend", b"IM", b"inner", "//../../beside.png")
    manifest = trace_scene(tree / "shot.blend", Sources(allowed=(tmp_path.resolve(),))).manifest
    # THEN it is named as relative, never as absolute, with what to do
    assert manifest.unremapped == ("//../../beside.png (in inner.blend)",)
    said = unremapped_warning(manifest.unremapped[0])
    assert said.startswith("relative path inside a linked library that the farm cannot follow")
    assert "absolute" not in said
    assert "both inside the scene's folder or both outside it" in said


def test_relative_paths_inside_the_scene_folder_raise_no_warning() -> None:
    # outer.blend's `//../tex/checker.png` and `//inner.blend`, inner.blend's `//inner.png`
    assert trace_scene(DEPS / "shot.blend").manifest.unremapped == ()

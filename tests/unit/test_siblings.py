"""`farm submit --each`: one scene's spec made into siblings (farm.core.siblings), the names
their videos are fetched under, and the render script's layer and camera (farm.blender)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from farm.blender.command import settings_from_spec
from farm.blender.script import ChunkFailed, only_layer
from farm.core.errors import SpecError
from farm.core.siblings import (
    MAX_SIBLINGS,
    check_sibling,
    expand,
    new_group_id,
    parse_each,
    video_stem,
)
from farm.core.sources import SceneInfo
from farm.core.spec import Each, JobSpec, build_render_spec, provenance

GROUP = "g-20261206-101500-3fa9c1"


def _scene(**changes: object) -> SceneInfo:
    scene = SceneInfo(
        scene="Scene", blender_version="4.5", frame_start=1, frame_end=2, frame_step=1, fps=24,
        fps_base=1.0, resolution_x=64, resolution_y=36, resolution_percentage=100,
        camera="Wide", engine="CYCLES", samples=1, denoising=False,
        view_layers=("Both", "BlueOnly"), file_format="PNG", color_depth="8", color_mode="RGB",
        cameras=("CamA", "CamB", "Wide"),
    )  # fmt: skip
    return replace(scene, **changes)  # type: ignore[arg-type]


def _spec(scene: SceneInfo | None = None, **flags: object) -> JobSpec:
    args: dict[str, object] = {"frames": None, "resolution": None, "fps": None, "samples": None}
    return build_render_spec(
        source_name="shot.blend", chunk_size="auto", codec="h264",
        scene=scene or _scene(), **(args | flags),  # type: ignore[arg-type]
    )  # fmt: skip


def test_each_view_layer_makes_a_job_per_layer_the_scene_renders_in_one_group() -> None:
    found = expand(_spec(), Each.VIEW_LAYER, group_id=GROUP)
    assert [s.view_layer for s in found.specs] == ["Both", "BlueOnly"]
    assert {s.group.id for s in found.specs if s.group} == {GROUP}
    assert [s.group.member for s in found.specs if s.group] == ["Both", "BlueOnly"]
    assert all(s.camera is None and "camera" not in s.overrides for s in found.specs)
    assert found.notes == ()


def test_each_camera_makes_a_job_per_camera_each_rendering_through_it() -> None:
    found = expand(_spec(samples=4), Each.CAMERA, group_id=GROUP)
    assert [s.camera for s in found.specs] == ["CamA", "CamB", "Wide"]
    assert all(s.overrides == ("samples", "camera") for s in found.specs)
    assert provenance(found.specs[1])["camera"] == {"value": "CamB", "from": "flag"}


def test_cameras_named_make_a_job_each_in_the_order_given() -> None:
    by, names = parse_each(None, "CamB, CamA")
    found = expand(_spec(), by or Each.CAMERA, names, group_id=GROUP)
    assert (by, [s.camera for s in found.specs]) == (Each.CAMERA, ["CamB", "CamA"])


def test_a_camera_the_scene_lacks_is_refused_naming_those_it_has() -> None:
    with pytest.raises(SpecError, match=r"no camera 'CamZ'; it has CamA, CamB, Wide"):
        expand(_spec(), Each.CAMERA, ("CamA", "CamZ"), group_id=GROUP)


def test_a_scene_without_cameras_is_refused_with_what_to_do() -> None:
    with pytest.raises(SpecError, match="holds no camera object; add cameras"):
        expand(_spec(_scene(cameras=())), Each.CAMERA, group_id=GROUP)


def test_a_scene_with_one_layer_makes_one_job_and_says_so() -> None:
    found = expand(_spec(_scene(view_layers=("ViewLayer",))), Each.VIEW_LAYER, group_id=GROUP)
    assert len(found.specs) == 1 and found.group is None and found.specs[0].group is None
    assert "one view layer to render (ViewLayer): one job" in found.notes[0]


def test_a_scene_that_renders_no_layer_is_refused() -> None:
    with pytest.raises(SpecError, match="renders no view layer; tick Use for Rendering"):
        expand(_spec(_scene(view_layers=())), Each.VIEW_LAYER, group_id=GROUP)


def test_markers_that_switch_cameras_are_overridden_with_each_camera_and_said() -> None:
    scene = _scene(marker_cameras=("CamB", "CamA"))
    found = expand(_spec(scene), Each.CAMERA, group_id=GROUP)
    assert any("markers switch cameras (CamB, CamA)" in note and "overridden" in note
               for note in found.notes)  # fmt: skip
    assert expand(_spec(scene), Each.VIEW_LAYER, group_id=GROUP).notes == ()


@pytest.mark.parametrize(
    ("each", "cameras", "words"),
    [
        ("layer", None, "--each 'layer': write --each view-layer"),
        ("view-layer", "CamA", "--cameras with --each view-layer"),
        (None, "CamA,,CamB", "name cameras, comma-separated"),
        (None, "CamA,CamA", "names CamA twice"),
    ],
)
def test_flags_that_cannot_be_read_are_refused_saying_what_to_write(
    each: str | None, cameras: str | None, words: str
) -> None:
    with pytest.raises(SpecError, match=words):
        parse_each(each, cameras)


def test_each_camera_beside_camera_is_refused() -> None:
    with pytest.raises(SpecError, match="--camera CamA with --each camera"):
        expand(_spec(camera="CamA"), Each.CAMERA, group_id=GROUP)


def test_more_siblings_than_one_submit_makes_are_refused() -> None:
    many = tuple(f"L{i}" for i in range(MAX_SIBLINGS + 1))
    with pytest.raises(SpecError, match=f"more than the {MAX_SIBLINGS} jobs"):
        expand(_spec(_scene(view_layers=many)), Each.VIEW_LAYER, group_id=GROUP)


def test_siblings_videos_are_named_after_the_scene_and_member_distinct_on_any_disk() -> None:
    scene = _scene(cameras=("Cam/1", "cam 1", "Cam 1"))
    found = expand(_spec(scene), Each.CAMERA, group_id=GROUP)
    stems = [video_stem("j-1", s.to_json()) for s in found.specs]
    assert stems == ["shot.Cam_1", "shot.cam_1_2", "shot.Cam_1_3"]
    assert video_stem("j-1", _spec().to_json()) == "j-1"  # a job alone keeps its id


def test_a_sibling_round_trips_through_json_and_the_apis_checks() -> None:
    spec = expand(_spec(), Each.VIEW_LAYER, group_id=new_group_id()).specs[1]
    again = JobSpec.from_json(spec.to_json())
    assert again == spec
    check_sibling(again)
    with pytest.raises(SpecError, match="view_layer 'Nope': the scene renders no such layer"):
        check_sibling(replace(again, view_layer="Nope"))
    with pytest.raises(SpecError, match=r"group\.id"):
        check_sibling(replace(again, group=replace(again.group, id="farm:jobs")))  # type: ignore[arg-type]


def test_the_worker_is_told_the_layer_and_to_hold_the_camera() -> None:
    layer = expand(_spec(), Each.VIEW_LAYER, group_id=GROUP).specs[1]
    camera = expand(_spec(), Each.CAMERA, group_id=GROUP).specs[0]
    over = settings_from_spec(layer, device="CPU", threads=0).overrides()
    assert over["view_layer"] == "BlueOnly" and "camera" not in over
    over = settings_from_spec(camera, device="CPU", threads=0).overrides()
    assert (over["camera"], over["fixed_camera"]) == ("CamA", True)
    # --camera alone holds too: a flag overrides the scene, markers that bind cameras included
    alone = settings_from_spec(_spec(camera="CamA"), device="CPU", threads=0).overrides()
    assert (alone["camera"], alone["fixed_camera"]) == ("CamA", True)
    # no flag: the scene's own camera, and its markers switch it as the artist set them
    plain = settings_from_spec(_spec(), device="CPU", threads=0).overrides()
    assert "camera" not in plain and "fixed_camera" not in plain


def test_the_render_script_renders_the_one_layer_and_refuses_one_it_lacks() -> None:
    layers = [SimpleNamespace(name="Both", use=True), SimpleNamespace(name="BlueOnly", use=True)]
    scene = SimpleNamespace(view_layers=layers)
    only_layer(scene, "BlueOnly")
    assert [layer.use for layer in layers] == [False, True]
    with pytest.raises(ChunkFailed, match="no view layer named 'Nope' \\(it has Both, BlueOnly\\)"):
        only_layer(scene, "Nope")


def test_status_and_the_job_list_show_the_group_and_the_siblings() -> None:
    from farm.core.report import group_lines, jobs_table, to_text

    spec = expand(_spec(), Each.CAMERA, group_id=GROUP).specs[0].to_json()
    summary = {
        "group": spec["group"],
        "siblings": [{"id": "j-2", "member": "CamB", "state": "running"}],
    }
    assert group_lines(summary) == [
        f"group   {GROUP}: one job per camera, this one CamA",
        "siblings j-2 (CamB, running)",
    ]
    row = {"id": "j-1", "kind": "render", "state": "queued", "chunks_done": 0,
           "chunks_total": 1, "frames_total": 2, "spec": spec, "group": spec["group"]}  # fmt: skip
    text = to_text(jobs_table([row]), width=200)
    assert "group" in text and "3fa9c1" in text and "shot.blend (CamA)" in text


def test_the_job_page_links_to_the_siblings_and_the_list_names_what_each_renders() -> None:
    from farm.core.report import job_summary
    from farm.web.jobpage import job_page, jobs_page

    spec = expand(_spec(), Each.VIEW_LAYER, group_id=GROUP).specs[1].to_json()
    record = {"id": "j-2", "kind": "render", "state": "running", "spec": json.dumps(spec)}
    summary = job_summary(record, []) | {
        "siblings": [{"id": "j-1", "member": "Both", "state": "done"}]
    }
    page = job_page(summary, chunk_times={}, thumbs=[], logs={}, cost=None, now=1.0)
    assert f"group {GROUP}: one job per view-layer" in page
    assert '<strong class="member">BlueOnly</strong>' in page
    assert '<a class="sibling" href="/jobs/j-1" title="j-1">Both</a>' in page
    listed = jobs_page([(summary, None)])
    assert "shot.blend · BlueOnly" in listed and GROUP in listed


def test_each_on_a_transcode_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from farm.cli.main import cli

    master = tmp_path / "master.mov"
    master.write_bytes(b"")
    result = CliRunner().invoke(cli, ["submit", str(master), "--each", "camera"])
    assert result.exit_code == 2
    assert "--each is for render jobs; master.mov is a transcode job" in result.output

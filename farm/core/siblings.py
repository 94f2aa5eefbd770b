"""`farm submit --each`: one scene's spec made into sibling specs, one per view layer or camera,
grouped by an id they share; what a sibling's video is called when fetched. Pure: the scene as
read at submit (farm.core.sources.SceneInfo) decides what there is to split."""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, replace

from farm.core.errors import SpecError
from farm.core.spec import RENDER_SETTINGS, Each, Group, JobKind, JobSpec

_PLAIN = re.compile(r"[^\w.-]+")
MAX_SIBLINGS = 64
"""Jobs one `--each` may make: a scene's layers or cameras, not a flood of jobs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Expansion:
    """The specs to submit (one, without a group, where there is one layer or camera) and the
    notes to print before submitting them."""

    specs: tuple[JobSpec, ...]
    notes: tuple[str, ...] = ()

    @property
    def group(self) -> Group | None:
        return self.specs[0].group if len(self.specs) > 1 else None


def new_group_id() -> str:
    """Sortable by submit time like a job id: g-20261206-101500-3fa9c1."""
    return time.strftime("g-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


def parse_each(each: str | None, cameras: str | None) -> tuple[Each | None, tuple[str, ...]]:
    """`--each WHAT` and `--cameras A,B` as what to split by and the cameras named (none: every
    camera); SpecError for an unknown word, an empty or repeated name, or both flags at odds."""
    names: tuple[str, ...] = ()
    if cameras is not None:
        names = tuple(name.strip() for name in cameras.split(","))
        if not all(names):
            raise SpecError(f"--cameras {cameras!r}: name cameras, comma-separated (--cameras A,B)")
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise SpecError(f"--cameras names {', '.join(twice)} twice: name each camera once")
    if each is None:
        return (Each.CAMERA, names) if names else (None, ())
    word = each.strip().lower()
    try:
        found = Each(word)
    except ValueError:
        raise SpecError(
            f"--each {each!r}: write --each view-layer (a job per view layer the scene renders) "
            "or --each camera (a job per camera; --cameras A,B for some of them)"
        ) from None
    if names and found is not Each.CAMERA:
        raise SpecError(
            f"--cameras with --each {found}: --cameras makes a job per camera named; leave out "
            "one of them"
        )
    return found, names


def expand(spec: JobSpec, each: Each, cameras: tuple[str, ...] = (), *, group_id: str) -> Expansion:
    """`spec` as one job per view layer the scene renders, or per camera (`cameras`, or every
    camera the file holds), each in group `group_id`; SpecError where the scene has none, names
    a camera it lacks, or the flags clash."""
    scene = spec.scene
    if spec.kind is not JobKind.RENDER or scene is None:
        raise SpecError(f"--each {each} splits a .blend scene; {spec.source_name} is not one")
    if each is Each.VIEW_LAYER:
        members, what = scene.view_layers, "view layer"
        if not members:
            raise SpecError(
                "--each view-layer: the scene renders no view layer; tick Use for Rendering on "
                "the ones to render (View Layer properties) and submit again"
            )
    else:
        if "camera" in spec.overrides:
            raise SpecError(
                f"--camera {spec.camera} with --each camera: --each renders each camera in "
                "turn; leave out --camera, or name cameras with --cameras A,B"
            )
        what = "camera"
        if not scene.cameras:
            raise SpecError(
                "--each camera: the scene holds no camera object; add cameras in Blender, or "
                "leave out --each camera"
            )
        if unknown := [name for name in cameras if name not in scene.cameras]:
            raise SpecError(
                f"--cameras: the scene has no camera {', '.join(map(repr, unknown))}; it has "
                f"{', '.join(scene.cameras)}"
            )
        members = cameras or scene.cameras
    if len(members) > MAX_SIBLINGS:
        raise SpecError(
            f"--each {each}: the scene has {len(members)} {what}s, more than the {MAX_SIBLINGS} "
            "jobs one submit makes; name some with --cameras, or untick layers"
        )
    notes = _notes(spec, each, members)
    if len(members) == 1:
        return Expansion(specs=(_one(spec, each, members[0], group=None),), notes=notes)
    labels = _labels(members)
    specs = tuple(
        _one(spec, each, member, group=Group(id=group_id, each=each, member=member, label=label))
        for member, label in zip(members, labels, strict=True)
    )
    return Expansion(specs=specs, notes=notes)


def _one(spec: JobSpec, each: Each, member: str, *, group: Group | None) -> JobSpec:
    if each is Each.VIEW_LAYER:
        return replace(spec, view_layer=member, group=group)
    named = set(spec.overrides) | {"camera"}
    overrides = tuple(name for name in RENDER_SETTINGS if name in named)
    return replace(spec, camera=member, overrides=overrides, group=group)


def _notes(spec: JobSpec, each: Each, members: tuple[str, ...]) -> tuple[str, ...]:
    scene = spec.scene
    notes = []
    what = "view layer" if each is Each.VIEW_LAYER else "camera"
    if len(members) == 1:
        notes.append(
            f"note: --each {each}: the scene has one {what} to render ({members[0]}): one job, "
            "as without --each"
        )
    if each is Each.CAMERA and scene is not None and scene.marker_cameras:
        notes.append(
            "note: the timeline's markers switch cameras "
            f"({', '.join(scene.marker_cameras)}); with --each camera every job renders "
            "through its own camera on every frame, the markers' switches overridden (submit "
            "without --each to render the cut the markers make)"
        )
    return tuple(notes)


def _labels(members: tuple[str, ...]) -> tuple[str, ...]:
    """Each member as a plain file name, distinct even on a disk that ignores case (`Cam` and
    `cam` become `Cam` and `cam_2`)."""
    taken: set[str] = set()
    labels = []
    for member in members:
        base = _PLAIN.sub("_", member).strip("._")[:100] or "member"
        label, n = base, 1
        while label.casefold() in taken:
            n += 1
            label = f"{base}_{n}"
        taken.add(label.casefold())
        labels.append(label)
    return tuple(labels)


def video_stem(job_id: str, spec: object) -> str:
    """The name, less its extension, `farm fetch JOB FOLDER/` gives a job's video (`spec`: its
    spec, as JSON text or parsed): a sibling's is its scene's name and its layer or camera
    (`shot.CamB`), so a group fetched into one folder keeps each; any other job's is its id."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec or "{}")
        except ValueError:
            spec = {}
    data = spec if isinstance(spec, dict) else {}
    group, source = data.get("group"), str(data.get("source_name") or "")
    if not isinstance(group, dict) or not group.get("label") or not source:
        return job_id
    stem = _PLAIN.sub("_", source.rsplit(".", 1)[0]).strip("._") or "scene"
    label = _PLAIN.sub("_", str(group["label"])).strip("._") or "member"
    return f"{stem}.{label}"


_GROUP_ID = re.compile(r"g-\d{8}-\d{6}-[0-9a-f]{6}")


def check_sibling(spec: JobSpec) -> None:
    """A spec sent whole (the API's submit) as `expand` makes them: its view layer one the scene
    renders, its group's id as new_group_id writes it and its member what it renders;
    SpecError naming the field otherwise."""
    layer, group, scene = spec.view_layer, spec.group, spec.scene
    if layer is not None and (scene is None or layer not in scene.view_layers):
        rendered = ", ".join(scene.view_layers) if scene else "none"
        raise SpecError(f"view_layer {layer!r}: the scene renders no such layer ({rendered})")
    if group is None:
        return
    if not _GROUP_ID.fullmatch(group.id):
        raise SpecError(f"group.id {group.id!r} is not a group id (g-YYYYMMDD-HHMMSS-xxxxxx)")
    renders = layer if group.each is Each.VIEW_LAYER else spec.camera
    if group.each is Each.CAMERA and "camera" not in spec.overrides:
        renders = None  # the worker applies only the overrides named
    if group.member != renders:
        raise SpecError(f"group.member {group.member!r} is not what the job renders ({renders})")
    if _labels((group.label,)) != (group.label,):
        raise SpecError(f"group.label {group.label!r} is not a plain file name")

"""A submission from a client, checked again as untrusted input: every field its type, every value
in the range the CLI allows, before anything is looked up or recorded. The CLI read the scene
(or probed the master) and built the spec; the server trusts none of it until it has been through
here, and sets what only it may set (the job's asset list, owner and priority bounds).
"""

from __future__ import annotations

import math
import re
import types
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from enum import Enum
from fractions import Fraction
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from farm.blender.assets import Asset, Manifest, safe_relative
from farm.control import uploads
from farm.control.uploads import FileKind, UploadRefused, Wanted
from farm.control.webhooks import TargetRefused, allowed_ranges, resolve
from farm.core import limits
from farm.core.depends import MAX_PARENTS, check_parent_id
from farm.core.errors import SpecError, UnreachableError
from farm.core.preview import check_preview
from farm.core.siblings import check_sibling
from farm.core.spec import (
    AUTO_CHUNK,
    ENGINES,
    RENDER_SETTINGS,
    Codec,
    EncoderChoice,
    JobKind,
    JobSpec,
    parse_frames,
    parse_resolution,
)
from farm.core.tiles import check_tiled
from farm.core.versions import parse_version
from farm.media.containers import container_choice
from farm.media.hdrspec import check_recorded
from farm.media.ladder import check_ladder
from farm.media.quality import score_choice, target_choice
from farm.media.scenecuts import check_starts
from farm.media.streamcheck import check_plan
from farm.media.transcode_spec import MAX_QUALITY, PRESETS
from farm.web.api.answers import ApiError, bad_request

MAX_TEXT = 4096
"""The longest string a spec may carry (a scene's name, a camera's, a path)."""
MAX_ITEMS = 1_000_000
"""The most items in one list of a submission (its body is 8 MiB at most anyway)."""
PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """POST /jobs and /estimate, checked."""

    spec: JobSpec
    source: Wanted
    manifest: Manifest | None
    priority: int
    max_cost: float | None
    notify: str | None
    project: str | None

    @property
    def files(self) -> list[Wanted]:
        """The source and every file the scene uses, as uploads.verify takes them."""
        assets = self.manifest.assets if self.manifest else ()
        return [self.source, *(_asset_file(a) for a in assets)]


def _asset_file(asset: Asset) -> Wanted:
    return uploads.wanted(asset.sha256, asset.size_bytes, FileKind.ASSET, name=asset.path)


def submission(body: dict[str, Any], *, max_chunks: int, webhook_allow: str) -> Submission:
    """The body of POST /jobs or /estimate as a Submission; ApiError 400 (or 413 for a file over
    the one-PUT size) naming what is wrong."""
    known = {"spec", "source", "assets", "priority", "max_cost", "notify", "project"}
    _no_extra(body, known, "the request")
    spec = job_spec(body.get("spec"), max_chunks=max_chunks)
    source = _source(body.get("source"), spec)
    manifest = _manifest(body.get("assets"))
    priority = body.get("priority", 50)
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 100:
        raise bad_request("priority must be a whole number from 0 to 100 (higher runs first)")
    max_cost = body.get("max_cost")
    if max_cost is not None and (not is_number(max_cost) or max_cost < 0):
        raise bad_request("max_cost must be a number of dollars, 0 or more, or null")
    project = body.get("project")
    if project is not None and (not isinstance(project, str) or not PROJECT.fullmatch(project)):
        raise bad_request(
            "project must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
            "a digit, or null"
        )
    return Submission(
        spec=spec, source=source, manifest=manifest, priority=priority,
        max_cost=None if max_cost is None else float(max_cost),
        notify=_notify(body.get("notify"), webhook_allow), project=project,
    )  # fmt: skip


def _no_extra(data: dict[str, Any], known: set[str], what: str) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise bad_request(f"{what} has fields this API does not know: {', '.join(extra)}")


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _source(value: object, spec: JobSpec) -> Wanted:
    if not isinstance(value, dict):
        raise bad_request('source must be an object: {"sha256", "size", "suffix"}')
    _no_extra(value, {"sha256", "size", "suffix"}, "source")
    try:
        source = uploads.wanted(
            value.get("sha256"), value.get("size"), FileKind.SCENE, value.get("suffix"),
            name=spec.source_name,
        )  # fmt: skip
    except UploadRefused as exc:
        raise ApiError(413 if exc.code == "too_large" else 400, exc.code, str(exc)) from exc
    if spec.kind is JobKind.RENDER and source.suffix != ".blend":
        raise bad_request(f"a render job's source is a .blend scene, not a {source.suffix} file")
    return source


def _notify(value: object, webhook_allow: str) -> str | None:
    """A webhook URL checked as the CLI's --notify is (farm.cli.submit): http(s), and a host that
    is public or in FARM_WEBHOOK_ALLOW (one that does not resolve here is left to the notifier,
    which checks again at each delivery)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise bad_request("notify must be an http:// or https:// URL, or null")
    if len(value) > MAX_TEXT or _CONTROL.search(value):
        raise bad_request("notify is not a URL")
    try:
        resolve(value, allowed_ranges(webhook_allow))
    except TargetRefused as exc:
        raise bad_request(f"notify {value}: {exc}") from exc
    except UnreachableError:
        pass
    return value


# ── the manifest ─────────────────────────────────────────────────────────────────────────────
def _manifest(value: object) -> Manifest | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("assets must be the scene's manifest (an object) or null")
    _no_extra(value, {"version", "scene", "assets", "remap", "missing", "unremapped"}, "assets")
    if value.get("version", 1) != 1:
        raise bad_request("assets: this farm reads manifests of version 1; update farm")
    items = value.get("assets", [])
    remap = value.get("remap", {})
    if not isinstance(items, list) or len(items) > MAX_ITEMS:
        raise bad_request("assets.assets must be a list of {path, sha256, size_bytes}")
    if not isinstance(remap, dict) or not all(
        _text(k) and _text(v) and v.startswith("//") for k, v in remap.items()
    ):
        raise bad_request("assets.remap must map each path as the scene stores it to a // path")
    lists = {name: value.get(name, []) for name in ("missing", "unremapped")}
    for name, listed in lists.items():
        if not isinstance(listed, list) or not all(_text(t) for t in listed):
            raise bad_request(f"assets.{name} must be a list of strings")
    scene = value.get("scene")
    if not isinstance(scene, str) or not _text(scene) or "/" in scene:
        raise bad_request("assets.scene must be the scene's file name")
    try:
        for target in remap.values():
            safe_relative(target.removeprefix("//"))
    except ValueError as exc:
        raise bad_request(f"assets.remap: {exc}") from exc
    assets = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"path", "sha256", "size_bytes"}:
            raise bad_request("each of assets.assets must be {path, sha256, size_bytes}")
        path = item["path"]
        try:
            safe_relative(path if isinstance(path, str) else "")
        except ValueError as exc:
            raise bad_request(f"assets: {exc}") from exc
        try:
            uploads.wanted(item["sha256"], item["size_bytes"], FileKind.ASSET, name=path)
        except UploadRefused as exc:
            raise ApiError(413 if exc.code == "too_large" else 400, exc.code, str(exc)) from exc
        assets.append(Asset(path=path, sha256=item["sha256"], size_bytes=item["size_bytes"]))
    return Manifest(
        scene=scene, assets=tuple(assets), remap=dict(remap),
        missing=tuple(lists["missing"]), unremapped=tuple(lists["unremapped"]),
    )  # fmt: skip


def _text(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT and "\0" not in value


# ── the spec ─────────────────────────────────────────────────────────────────────────────────
def job_spec(value: object, *, max_chunks: int) -> JobSpec:
    """JobSpec.to_json() from a client, as a JobSpec the farm can run; ApiError 400 (bad_spec)
    naming the field or the value that is wrong. The asset list is the server's to set: the
    spec's own is dropped."""
    try:
        _fits_dataclass(JobSpec, value, "spec")
        spec = JobSpec.from_json(value)  # type: ignore[arg-type]  # checked just above
        spec = replace(spec, assets_key=None, missing_assets=())
        _check_spec(spec)
        limits.check_chunks(spec.frames.count, spec.chunk_size, max_chunks)
    except SpecError as exc:
        raise bad_request(f"spec: {exc}", "bad_spec") from exc
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise bad_request(f"spec: not a job spec this farm can read ({exc})", "bad_spec") from exc
    return spec


def _check_spec(spec: JobSpec) -> None:
    """The CLI's checks (farm.core.spec, farm.media.transcode_spec) on the values as sent."""
    name = spec.source_name
    if not _text(name) or len(name) > 255 or "/" in name or "\\" in name or _CONTROL.search(name):
        raise SpecError(f"source_name {name!r} is not a file name")
    frames = parse_frames(str(spec.frames))
    if frames != spec.frames:
        raise SpecError(f"frames {spec.frames} is not a frame range")
    parse_resolution(str(spec.resolution))
    _check_after(spec)
    check_preview(spec.preview, spec.hold)
    if spec.preview and spec.kind is not JobKind.RENDER:
        raise SpecError("preview: only a render job has preview frames")
    if spec.tiles:
        check_tiled(spec)
    if spec.kind is JobKind.RENDER:
        _check_render(spec)
    else:
        _check_transcode(spec)


def _check_after(spec: JobSpec) -> None:
    """The parents as `--after` takes them: job ids, each once, 100 at most (that each is a job
    of this farm is checked as the job is created: farm.control.depends.check_parents)."""
    if len(spec.after) > MAX_PARENTS:
        raise SpecError(f"after: a job may wait for {MAX_PARENTS} jobs at most")
    if len(set(spec.after)) != len(spec.after):
        raise SpecError("after names a job twice")
    for job_id in spec.after:
        check_parent_id(job_id, "after")
    if spec.after_any and not spec.after:
        raise SpecError("after_any without after: name the jobs to wait for")


def _check_render(spec: JobSpec) -> None:
    if spec.chunk_size < AUTO_CHUNK:
        raise SpecError(f"chunk_size {spec.chunk_size}: a chunk holds at least one frame (0: auto)")
    if not 1 <= spec.fps <= 240:
        raise SpecError(f"fps {spec.fps}: choose a frame rate between 1 and 240")
    if not 1 <= spec.samples <= 65536:
        raise SpecError(f"samples {spec.samples}: choose between 1 and 65536 samples")
    if spec.engine is not None and spec.engine not in ENGINES:
        raise SpecError(f"engine {spec.engine!r}: choose one of {', '.join(ENGINES)}")
    if spec.camera is not None and not spec.camera.strip():
        raise SpecError("camera '': name a camera object of the scene, or null")
    unknown = sorted(set(spec.overrides) - set(RENDER_SETTINGS))
    if unknown:
        raise SpecError(f"overrides {unknown}: only {', '.join(RENDER_SETTINGS)} may be set")
    if spec.master is not None:
        raise SpecError("a render job has no video master")
    if spec.ladder or spec.package or spec.container:
        raise SpecError("ladder, package and container are for encode jobs")
    check_sibling(spec)  # --each: its layer, camera and group as the CLI makes them
    if spec.scene is not None:
        parse_version(spec.scene.blender_version)
        if spec.scene.frame_step < 1 or spec.scene.resolution_percentage < 1:
            raise SpecError("the scene's frame step and resolution percentage must be 1 or more")


def _check_transcode(spec: JobSpec) -> None:
    master = spec.master
    if master is None:
        raise SpecError("a transcode job needs its master's probe (spec.master)")
    if spec.chunk_size < 1:
        raise SpecError(f"chunk_size {spec.chunk_size}: a segment holds at least one frame")
    if (
        spec.frames.first != 0
        or spec.frames.last != master.frame_count - 1
        or spec.frames.step != 1
    ):
        raise SpecError("a transcode job takes every frame of its master: 0 to frame_count - 1")
    if Fraction(master.avg_frame_rate) <= 0 or Fraction(master.time_base) <= 0:
        raise SpecError("the master's frame rate and time base must be above 0")
    check_starts(master, spec.chunk_size)  # boundaries moved to scene cuts (farm.media.scenecuts)
    if master.width < 1 or master.height < 1 or not 0 < spec.fps <= 1000:
        raise SpecError("the master's size and frame rate must be above 0")
    if spec.quality is not None and (
        spec.codec is Codec.PRORES or not 0 <= spec.quality <= MAX_QUALITY[spec.codec]
    ):
        raise SpecError(f"quality {spec.quality}: from 0 to {MAX_QUALITY[spec.codec]} for "
                        f"{spec.codec} (ProRes takes none)")  # fmt: skip
    if spec.codec is Codec.PRORES and spec.encoder is EncoderChoice.NVENC:
        raise SpecError("encoder nvenc: NVENC has no ProRes; use auto or software")
    if spec.preset not in PRESETS:
        raise SpecError(f"preset {spec.preset!r}: choose one of {', '.join(PRESETS)}")
    if spec.target_quality and spec.target_quality != target_choice(
        spec.target_quality, quality=spec.quality, prores=spec.codec is Codec.PRORES,
        ladder=bool(spec.ladder),
    ):  # fmt: skip
        raise SpecError(
            f"target_quality {spec.target_quality!r}: write it as ssim=0.98, psnr=40 or vmaf=95"
        )
    # The workers' libvmaf is theirs to check (a chunk fails saying what to install).
    scored = score_choice(spec.score, spec.target_quality, ladder=bool(spec.ladder), missing="")
    if spec.score != scored:
        raise SpecError(f"score {spec.score!r}: write it as the CLI does ({scored!r} for this job)")
    if master.hdr is not None:  # names and numbers that reach ffmpeg's options (farm.media.hdrspec)
        check_recorded(master.hdr, spec.codec, spec.encoder)
    if spec.container != container_choice(
        spec.container or None, spec.codec, ladder=bool(spec.ladder), package=bool(spec.package)
    ):
        raise SpecError(f"container {spec.container!r}: mkv, or '' for the codec's own")
    check_plan(master, spec.deliverable)  # the streams the mux maps (farm.media.streams)
    check_ladder(spec)  # rungs and package: ints and bitrates that reach ffmpeg (farm.media.ladder)
    if spec.scene is not None or spec.engine is not None or spec.camera is not None:
        raise SpecError("a transcode job has no scene, engine or camera")


# ── types ────────────────────────────────────────────────────────────────────────────────────
@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _fits_dataclass(cls: type, value: object, where: str) -> None:
    """`value` is JSON of dataclass `cls` (as its to_json writes it): an object with no field it
    does not have, every field without a default present, each of its annotated type. SpecError
    naming the first field that is not."""
    if not isinstance(value, dict):
        raise SpecError(f"{where} must be an object")
    hints = _hints(cls)
    names = {f.name for f in fields(cls)}
    extra = sorted(set(value) - names)
    if extra:
        raise SpecError(f"{where} has fields a job spec does not: {', '.join(map(str, extra))}")
    for f in fields(cls):
        if f.name not in value:
            if f.default is MISSING and f.default_factory is MISSING:
                raise SpecError(f"{where}.{f.name} is missing")
            continue
        _fits(hints[f.name], value[f.name], f"{where}.{f.name}")


def _fits(hint: Any, value: object, where: str) -> None:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                _fits(option, value, where)
                return
            except SpecError as exc:
                errors.append(str(exc))
        raise SpecError(errors[0] if errors else f"{where} must not be null")
    if origin is tuple:
        item = get_args(hint)[0]
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise SpecError(f"{where} must be a list")
        for i, element in enumerate(value):
            _fits(item, element, f"{where}[{i}]")
        return
    if origin is dict:
        _fits_mapping(get_args(hint)[1], value, where)
        return
    if isinstance(hint, type) and issubclass(hint, Enum):
        choices = [str(m.value) for m in hint] + (["encode"] if hint is JobKind else [])
        if value not in choices:
            raise SpecError(f"{where} must be one of {', '.join(choices)}")
        return
    if isinstance(hint, type) and is_dataclass(hint):
        _fits_dataclass(hint, value, where)
        return
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53
    elif hint is float:
        ok = is_number(value)
    elif hint is str:
        ok = isinstance(value, str) and len(value) <= MAX_TEXT and "\0" not in value
    else:
        ok = False
    if not ok:
        name = getattr(hint, "__name__", str(hint))
        raise SpecError(f"{where} must be {'a string' if hint is str else f'a {name}'}")


MAX_KEYS = 64
"""A mapping in a spec (a scene's view settings) is a few named values, never a store."""


def _fits_mapping(values: Any, value: object, where: str) -> None:
    """An object of at most MAX_KEYS short names, each value of the hint `values`; for `Any`, a
    plain JSON value (a string, a number, true or false, or null), never a nested one."""
    if not isinstance(value, dict) or len(value) > MAX_KEYS:
        raise SpecError(f"{where} must be an object of at most {MAX_KEYS} names")
    for key, item in value.items():
        if not isinstance(key, str) or not 0 < len(key) <= 64:
            raise SpecError(f"{where} has a name that is not 1 to 64 characters")
        if values is not Any:
            _fits(values, item, f"{where}.{key}")
        elif item is not None and not isinstance(item, bool) and not is_number(item):
            _fits(str, item, f"{where}.{key}")

"""Every file a scene uses, traced at submit and stored once by content (sha256).

The manifest lists each file by its path in the job's tree (relative to the scene's folder, as the
.blend refers to it); files outside that folder, or named by absolute paths, go under `_abs/` and a
remap tells Blender on the worker where they are now. Tracing is blender-asset-tracer's, run in a
bounded child process (farm.blender.isolated); files come only from the scene's folder tree and
the folders the user allows, never from the places farm.blender.places names.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from blender_asset_tracer import blendfile as bat
from blender_asset_tracer import bpathlib, trace

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.blender.blendfile import BlendCaps, BoundedOpener, read_scene
from farm.blender.isolated import run_isolated
from farm.blender.places import Private
from farm.blender.sequences import usage_files
from farm.core import keys
from farm.core.errors import SpecError
from farm.core.sources import SceneInfo

log = logging.getLogger(__name__)
OUTSIDE = "_abs"
"""Tree folder for files outside the scene's folder: `_abs/<their absolute path, root stripped>`."""
_UPLOAD_THREADS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Asset:
    path: str
    """Where the file goes in the job's tree, relative to the scene: `tex/wood.png`."""
    sha256: str
    size_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    scene: str
    """The scene's file name; it sits at the root of the tree."""
    assets: tuple[Asset, ...]
    remap: dict[str, str] = field(default_factory=dict)
    """Path as stored in the scene -> `//`-relative path in the tree, for paths that would not
    resolve there (absolute, or reaching outside the scene's folder)."""
    missing: tuple[str, ...] = ()
    """Files the scene uses that were not on the submitting machine (`--allow-missing`)."""
    unremapped: tuple[str, ...] = ()
    """Paths stored inside linked libraries that Blender on the farm will not find, `path (in
    library.blend)`: absolute ones, and relative ones from a library on one side of the scene's
    folder to a file on the other (unremapped_warning). Blender cannot rewrite linked data."""

    @property
    def size_bytes(self) -> int:
        return sum(a.size_bytes for a in self.assets)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "scene": self.scene,
            "assets": [
                {"path": a.path, "sha256": a.sha256, "size_bytes": a.size_bytes}
                for a in self.assets
            ],
            "remap": dict(self.remap),
            "missing": list(self.missing),
            "unremapped": list(self.unremapped),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(
            scene=str(data["scene"]),
            assets=tuple(
                Asset(path=str(a["path"]), sha256=str(a["sha256"]), size_bytes=int(a["size_bytes"]))
                for a in data.get("assets", ())
            ),
            remap={str(k): str(v) for k, v in data.get("remap", {}).items()},
            missing=tuple(data.get("missing", ())),
            unremapped=tuple(data.get("unremapped", ())),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Traced:
    """What tracing found: the manifest and where each asset is on this machine."""

    manifest: Manifest
    local: dict[str, Path]
    """Manifest path -> the file on the submitting machine."""


def safe_relative(path: str) -> PurePosixPath:
    """A manifest path as a path inside the tree; ValueError for one that could escape it."""
    pure = PurePosixPath(path)
    if not path or "\\" in path or "\0" in path or pure.is_absolute():
        raise ValueError(f"asset path {path!r} is not a relative path")
    if any(part in ("..", ".", "") for part in path.split("/")):
        raise ValueError(f"asset path {path!r} steps outside the job's tree")
    return pure


def tree_path(resolved: Path, scene_dir: Path) -> str:
    """Where a file the scene uses goes in the tree: its path under the scene's folder, else under
    `_abs/` by its absolute path. Works on glob patterns (`<UDIM>`, `*`) as on file names."""
    absolute = bpathlib.make_absolute(resolved)
    try:
        return absolute.relative_to(scene_dir).as_posix()
    except ValueError:
        return f"{OUTSIDE}/{bpathlib.strip_root(absolute).as_posix()}"


def _stored(usage: trace.result.BlockUsage) -> str:
    return bytes(usage.asset_path).decode("utf-8", "surrogateescape")


def _usages(scene: Path) -> Iterator[trace.result.BlockUsage]:
    try:
        yield from trace.deps(scene)
    except SpecError:
        raise
    except Exception as exc:  # BAT's errors, or a damaged library it reads on the way
        raise SpecError(f"{scene}: tracing the files the scene uses failed: {exc!r}") from exc
    finally:
        bat.close_all_cached()


@dataclass(frozen=True, slots=True, kw_only=True)
class Sources:
    """Where a scene's files may be uploaded from: its project (the scene's folder tree) and the
    folders allowed besides (`submit --allow-path`, FARM_ASSET_ALLOW_PATHS), never the places
    `Private` names; and the caps on reading the .blend files."""

    allowed: tuple[Path, ...] = ()
    data_dirs: tuple[Path, ...] = ()
    """The farm's data folders (settings.data_dir, ./.farm): its secrets, CA key, Redis data."""
    config: Path | None = None
    """The farm config this command reads, when not one of the default places."""
    caps: BlendCaps = field(default_factory=BlendCaps)

    @classmethod
    def of(
        cls, settings: Settings, allow_paths: tuple[str, ...] = (), config: Path | None = None
    ) -> Sources:
        """The sources a command's settings and flags allow."""
        listed = [*allow_paths, *filter(None, settings.asset_allow_paths.split(os.pathsep))]
        return cls(
            allowed=tuple(Path(p).expanduser().resolve() for p in listed),
            data_dirs=tuple(Path(d).expanduser() for d in (settings.data_dir,) if d),
            config=config,
            caps=BlendCaps.from_settings(settings),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """What the walk over a scene's usages found (in the read's child process); hashing the files
    is left to the caller, so the read's timeout counts parsing alone."""

    local: dict[str, Path]
    """Tree path -> the file it resolves to, checked."""
    remap: dict[str, str]
    missing: tuple[str, ...]
    unremapped: tuple[str, ...]


def _walk(scene: Path, sources: Sources) -> Found:
    """Every file `scene` uses, recursively through linked libraries; packed ones stay inside.
    Missing files are listed, not raised (see `require_complete`); a file outside the project and
    the allowed folders, or in a private place (`Private`), after links are followed, is
    refused."""
    scene = bpathlib.make_absolute(scene)
    scene_dir = scene.parent
    local: dict[str, Path] = {}
    missing: dict[Path, str] = {}
    """The file looked for -> how the scene names it (one line per file, however many users)."""
    remap: dict[str, str] = {}
    unremapped: dict[str, None] = {}
    refused: dict[Path, str] = {}
    outside = False
    places = Private.of(config=sources.config, data_dirs=sources.data_dirs)
    project = (scene_dir.resolve(), *sources.allowed)
    for usage in _usages(scene):
        stored = _stored(usage)
        in_scene = bpathlib.make_absolute(Path(usage.block.bfile.filepath)) == scene
        target = tree_path(Path(usage.abspath), scene_dir)
        if in_scene:
            if not stored.startswith("//") or target.startswith(OUTSIDE + "/"):
                remap[stored] = "//" + target
        elif not _found_on_farm(stored, Path(usage.block.bfile.filepath), scene_dir, target):
            unremapped[f"{stored} (in {usage.block.bfile.filepath.name})"] = None
        files = usage_files(usage)
        kind = usage.block.dna_type_name.lower()
        name = usage.block_name.decode("utf-8", "replace")[2:] or "?"
        if not files:
            looked = bpathlib.make_absolute(Path(usage.abspath))
            missing.setdefault(looked, f"{stored} ({kind} {name!r}; looked for {looked})")
        for path in files:
            real = path.resolve()
            reason = places.reason(real)
            if not reason and not any(real.is_relative_to(root) for root in project):
                reason = (
                    f"outside the scene's project {scene_dir} (`--allow-path {real.parent}` "
                    "would allow it)"
                )
                outside = True
            if reason:
                refused.setdefault(path, f"{stored} ({kind} {name!r}): {real}: {reason}")
                continue
            local.setdefault(tree_path(path, scene_dir), real)
    if refused:
        raise SpecError(_refusal(refused.values(), outside))
    return Found(
        local=local, remap=remap, missing=tuple(missing.values()), unremapped=tuple(unremapped)
    )


def _found_on_farm(stored: str, library: Path, scene_dir: Path, target: str) -> bool:
    """Whether Blender on the farm finds a file by the path a linked library stores for it: the
    farm rewrites only the scene's own paths (remap_paths), so a relative one must lead from
    where the library lies in the job's tree to where the file lies there (both inside the
    scene's folder, or both outside it, under _abs/, keep their places to each other); an
    absolute one leads off the job's files, which are all the farm has."""
    if not stored.startswith("//"):
        return False
    here = posixpath.dirname(tree_path(library, scene_dir))
    return posixpath.normpath(posixpath.join(here, stored[2:].replace("\\", "/"))) == target


def unremapped_warning(entry: str) -> str:
    """What `farm submit` says of a path in a linked library the farm will not find (an entry of
    Manifest.unremapped: `the path (in library.blend)`): what it is, what the render does, and
    what to change."""
    if entry.startswith("//"):
        return (
            f"relative path inside a linked library that the farm cannot follow: {entry}: the "
            "library and the file lie on different sides of the scene's folder (the farm keeps "
            "files from outside it apart, and cannot rewrite a linked library's paths), so "
            "Blender on the farm would not find the file; keep the library and the files it uses "
            "together, both inside the scene's folder or both outside it"
        )
    return (
        f"absolute path inside a linked library: {entry}: the farm cannot rewrite a linked "
        "library's paths and holds only the job's files, so Blender on the farm would not find "
        "the file; open the library, use File > External Data > Make Paths Relative and save it"
    )


def _refusal(lines: Iterable[str], outside: bool) -> str:
    """A scene from someone else can name the submitter's secrets, or link to them from inside
    the project, to have them uploaded to the farm and read by its scripts: such files are never
    uploaded, and files outside the project only where the user allowed their folder."""
    names = "\n  ".join(lines)
    advice = (
        "a file outside the scene's folder is uploaded only from a folder you allow: "
        "`farm submit --allow-path DIR` (or FARM_ASSET_ALLOW_PATHS), or move it into the "
        "scene's folder; "
        if outside
        else ""
    )
    return (
        f"the scene names files farm will not upload:\n  {names}\n{advice}"
        "credentials, system folders and the farm's own data and config are never uploaded, "
        "whatever --allow-path says; remove those paths from the scene (File > External Data > "
        "Report Missing Files lists its paths)"
    )


def _hashed(found: Found, scene: Path) -> Traced:
    assets = tuple(
        Asset(path=rel, sha256=_sha256(path), size_bytes=path.stat().st_size)
        for rel, path in sorted(found.local.items())
    )
    manifest = Manifest(
        scene=scene.name,
        assets=assets,
        remap=found.remap,
        missing=found.missing,
        unremapped=found.unremapped,
    )
    return Traced(manifest=manifest, local=found.local)


def _read_and_walk(scene: Path, sources: Sources, read: bool) -> tuple[SceneInfo | None, Found]:
    """In the read's child: BAT opens every .blend through the caps, the scene's settings are read
    (when `read`) and its files walked, from one parse."""
    BoundedOpener(sources.caps).install()
    try:
        info = read_scene(scene, cached=True) if read else None
        return info, _walk(scene, sources)
    finally:
        bat.close_all_cached()


def _isolated(scene: Path, sources: Sources, read: bool) -> tuple[SceneInfo | None, Traced]:
    caps = sources.caps
    info, found = run_isolated(
        _read_and_walk, scene, sources, read,
        what=scene, memory_bytes=caps.memory_bytes, timeout_s=caps.timeout_s,
    )  # fmt: skip
    return info, _hashed(found, scene)


def trace_scene(scene: Path, sources: Sources | None = None) -> Traced:
    """Every file `scene` uses, read within the caps in a child process, each hashed once (see
    `_walk` for what is refused)."""
    return _isolated(scene, sources or Sources(), read=False)[1]


def read_and_trace(scene: Path, sources: Sources) -> tuple[SceneInfo, Traced]:
    """`farm submit`: the scene's settings and every file it uses, from one bounded parse."""
    info, traced = _isolated(scene, sources, read=True)
    assert info is not None
    return info, traced


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def require_complete(manifest: Manifest, *, allow_missing: bool) -> None:
    """Refuse a scene whose render would lack files, naming every one, unless the user chose to
    go on without them: files missing on this machine, and files a linked library names by a
    path Blender on the farm cannot follow (unremapped_warning; their chunks would fail)."""
    if allow_missing or not (manifest.missing or manifest.unremapped):
        return
    said = []
    if count := len(manifest.missing):
        names = "\n  ".join(manifest.missing)
        said.append(
            f"{count} file{'s' if count > 1 else ''} the scene uses "
            f"{'are' if count > 1 else 'is'} missing on this machine:\n  {names}\n"
            "fix the paths in the scene (File > External Data > Find Missing Files)"
        )
    if count := len(manifest.unremapped):
        names = "\n  ".join(unremapped_warning(entry) for entry in manifest.unremapped)
        said.append(
            f"{count} file{'s' if count > 1 else ''} linked libraries use "
            f"{'are' if count > 1 else 'is'} named by a path the farm cannot follow:\n  {names}"
        )
    raise SpecError(
        ";\n".join(said) + ",\nand submit again, or pass --allow-missing to render without them"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Uploaded:
    files: int
    size_bytes: int
    reused: int
    """Files the store already held (by hash), not uploaded again."""


def upload(store: Store, traced: Traced) -> Uploaded:
    """Upload each distinct file by its hash unless the store already holds it (a HEAD each)."""
    by_hash: dict[str, tuple[Path, int]] = {}
    for asset in traced.manifest.assets:
        by_hash.setdefault(asset.sha256, (traced.local[asset.path], asset.size_bytes))

    def one(item: tuple[str, tuple[Path, int]]) -> int:
        digest, (path, size) = item
        key = keys.asset_key(digest)
        if store.size(key) == size:
            return -1
        store.put_file(key, path)
        return size

    with ThreadPoolExecutor(max_workers=_UPLOAD_THREADS) as pool:
        results = list(pool.map(one, by_hash.items()))
    sent = [r for r in results if r >= 0]
    return Uploaded(files=len(sent), size_bytes=sum(sent), reused=len(results) - len(sent))

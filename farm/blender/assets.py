"""Every file a scene uses, traced at submit and stored once by content (sha256).

The manifest lists each file by its path in the job's tree (relative to the scene's folder, as the
.blend refers to it); files outside that folder, or named by absolute paths, go under `_abs/` and a
remap tells Blender on the worker where they are now. Tracing is blender-asset-tracer's.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from blender_asset_tracer import blendfile as bat
from blender_asset_tracer import bpathlib, trace
from blender_asset_tracer.trace import file_sequence

from farm.adapters.settings import config_paths
from farm.adapters.store import Store
from farm.core import keys
from farm.core.errors import SpecError

log = logging.getLogger(__name__)
OUTSIDE = "_abs"
"""Tree folder for files outside the scene's folder: `_abs/<their absolute path, root stripped>`."""
_UPLOAD_THREADS = 8
PRIVATE_ROOTS = ("/proc", "/sys", "/dev", "/run", "/etc", "/boot")
"""System folders no texture lives in, some of which hold secrets (/proc/self/environ,
/run/secrets)..."""
MEDIA = "/run/media"
"""... but for where a desktop mounts a removable drive, which may well hold a project."""
PRIVATE_HOME = (".ssh", ".aws", ".gnupg", ".netrc", ".docker", ".kube", ".azure", ".pgpass",
                ".git-credentials", ".config/farm", ".config/gcloud")  # fmt: skip
"""The places in a home folder where credentials live."""


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
    """Absolute paths stored inside linked libraries: Blender cannot rewrite linked data."""

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


def _files(usage: trace.result.BlockUsage) -> list[Path]:
    """The files one usage stands for (every tile of a UDIM, every frame of a sequence); [] when
    none is there."""
    path = Path(usage.abspath)
    if not usage.is_sequence:
        return [path] if path.is_file() else []
    try:
        return [p for p in file_sequence.expand_sequence(path) if p.is_file()]
    except file_sequence.DoesNotExist:
        return []


def _usages(scene: Path) -> Iterator[trace.result.BlockUsage]:
    try:
        yield from trace.deps(scene)
    except SpecError:
        raise
    except Exception as exc:  # BAT's errors, or a damaged library it reads on the way
        raise SpecError(f"{scene}: tracing the files the scene uses failed: {exc!r}") from exc
    finally:
        bat.close_all_cached()


def trace_scene(scene: Path, config: Path | None = None) -> Traced:
    """Every file `scene` uses, recursively through linked libraries; packed ones stay inside.
    Hashes each file once. Missing files are listed, not raised (see `require_complete`); private
    ones (`private`; `config`: the farm config this command reads) are refused."""
    scene = bpathlib.make_absolute(scene)
    scene_dir = scene.parent
    local: dict[str, Path] = {}
    missing: dict[Path, str] = {}
    """The file looked for -> how the scene names it (one line per file, however many users)."""
    remap: dict[str, str] = {}
    unremapped: dict[str, None] = {}
    refused: dict[Path, str] = {}
    places = Private.of(config=config)
    for usage in _usages(scene):
        stored = _stored(usage)
        in_scene = bpathlib.make_absolute(Path(usage.block.bfile.filepath)) == scene
        target = tree_path(Path(usage.abspath), scene_dir)
        if not stored.startswith("//") or target.startswith(OUTSIDE + "/"):
            if in_scene:
                remap[stored] = "//" + target
            else:
                unremapped[f"{stored} (in {usage.block.bfile.filepath.name})"] = None
        files = _files(usage)
        if not files:
            kind = usage.block.dna_type_name.lower()
            name = usage.block_name.decode("utf-8", "replace")[2:] or "?"
            looked = bpathlib.make_absolute(Path(usage.abspath))
            missing.setdefault(looked, f"{stored} ({kind} {name!r}; looked for {looked})")
        for path in files:
            if reason := places.reason(path):
                kind = usage.block.dna_type_name.lower()
                name = usage.block_name.decode("utf-8", "replace")[2:] or "?"
                refused.setdefault(path, f"{path} ({kind} {name!r}; {reason})")
                continue
            local.setdefault(tree_path(path, scene_dir), path)
    if refused:
        # A scene from someone else can name the submitter's secrets to have them uploaded to the
        # farm and read by its scripts: such files are never uploaded, whatever the flags.
        names = "\n  ".join(refused.values())
        raise SpecError(
            f"the scene names files farm will not upload:\n  {names}\n"
            "a scene can name private files to have them copied to the farm; remove these paths "
            "from it (File > External Data > Report Missing Files lists its paths)"
        )
    assets = tuple(
        Asset(path=rel, sha256=_sha256(path), size_bytes=path.stat().st_size)
        for rel, path in sorted(local.items())
    )
    manifest = Manifest(
        scene=scene.name,
        assets=assets,
        remap=remap,
        missing=tuple(missing.values()),
        unremapped=tuple(unremapped),
    )
    return Traced(manifest=manifest, local=local)


@dataclass(frozen=True, slots=True)
class Private:
    """The places a scene's files are never uploaded from, resolved once per trace."""

    credentials: tuple[Path, ...]
    configs: frozenset[Path]

    @classmethod
    def of(cls, environ: Mapping[str, str] = os.environ, config: Path | None = None) -> Private:
        home = Path(environ.get("HOME") or Path.home())
        configs = {*config_paths(environ), *([config] if config else [])}
        return cls(
            credentials=tuple((home / place).resolve() for place in PRIVATE_HOME),
            configs=frozenset(c.expanduser().resolve() for c in configs),
        )

    def reason(self, path: Path) -> str:
        """Why `path` (a file a scene uses) is never uploaded, or "": a system folder, a home's
        credentials, the farm's own config; links are followed to what they name."""
        real = path.resolve()
        if any(real.is_relative_to(root) for root in PRIVATE_ROOTS) and not _mounted(real):
            return "a system folder"
        if any(real.is_relative_to(place) for place in self.credentials):
            return "where credentials are kept"
        return "the farm's config" if real in self.configs else ""


def private(path: Path, environ: Mapping[str, str] = os.environ, config: Path | None = None) -> str:
    """`Private.reason` for one file (`config`: the one this command reads, when not the
    default)."""
    return Private.of(environ, config).reason(path)


def _mounted(real: Path) -> bool:
    """Under /run, where a desktop mounts drives and shares: a removable drive (/run/media/USER),
    a network share opened in the file manager (/run/user/UID/gvfs), a sandboxed app's files
    (/run/user/UID/doc)."""
    parts = real.parts
    return real.is_relative_to(MEDIA) or (
        parts[1:3] == ("run", "user") and len(parts) > 4 and parts[4] in ("gvfs", "doc")
    )


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def require_complete(manifest: Manifest, *, allow_missing: bool) -> None:
    """Refuse a scene with missing files, naming every one, unless the user chose to go on."""
    if not manifest.missing or allow_missing:
        return
    count = len(manifest.missing)
    names = "\n  ".join(manifest.missing)
    raise SpecError(
        f"{count} file{'s' if count > 1 else ''} the scene uses "
        f"{'are' if count > 1 else 'is'} missing on this machine:\n  {names}\n"
        "fix the paths in the scene (File > External Data > Find Missing Files), "
        "or pass --allow-missing to render without them"
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

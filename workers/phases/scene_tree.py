"""Rebuild a job's scene tree on this host: the .blend and every file it uses, at the paths the
scene refers to, from a per-host cache of files kept by sha256 (capped, least recently used out).

Cache files are read-only and hard-linked into each job's tree, so a tree costs no extra space and
evicting a file never breaks a tree that still uses it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.adapters.store import Store
from farm.blender.assets import Manifest, safe_relative
from farm.core import keys
from farm.core.errors import PermanentError
from farm.core.spec import JobSpec
from workers.attempt.context import WorkerContext
from workers.phases.source import fetch_source

log = logging.getLogger(__name__)
TREE = "tree"
_MANIFEST = "assets.json"
_lock = threading.Lock()


SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class AssetCache:
    """Files by sha256 under `root`, at most `cap_bytes` in all (files in use are kept)."""

    root: Path
    cap_bytes: int

    def path(self, sha256: str) -> Path:
        """The cache's file of a digest; the manifest is the submitter's, so the digest is
        checked to be one before it names a file (`../jobs/…` would reach another job's)."""
        if not SHA256.fullmatch(sha256):
            raise PermanentError(f"the job's asset manifest names {sha256!r}, not a sha256")
        return self.root / sha256

    def get(self, store: Store, sha256: str, size_bytes: int) -> Path:
        """The cached file, downloaded and verified first if this host lacks it."""
        path = self.path(sha256)
        if path.is_file() and path.stat().st_size == size_bytes:
            os.utime(path)  # mtime is the LRU clock: it is only ever set by us
            return path
        self.root.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{sha256}.{os.getpid()}.{threading.get_ident()}.part")
        store.get_file(keys.asset_key(sha256), part)
        with part.open("rb") as fh:
            got = hashlib.file_digest(fh, "sha256").hexdigest()
        if got != sha256:
            part.unlink(missing_ok=True)
            raise PermanentError(
                f"asset {sha256} in the store has sha256 {got}: the store's copy is damaged; "
                "submit the job again to upload it anew"
            )
        part.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        part.replace(path)
        return path

    def evict(self, keep: set[str], *, spare_s: float = 0) -> list[str]:
        """Remove least recently used files until the cache fits its cap; never those in `keep`
        nor those used in the last `spare_s` seconds."""
        entries = []
        recent = time.time() - spare_s
        for entry in self.root.glob("*"):
            # A download in progress: ours (`.part`) or the transfer's own under it (`.part.x1y2`).
            if ".part" in entry.name or not entry.is_file():
                continue
            st = entry.stat()
            entries.append((st.st_mtime, entry.name, st.st_size))
        total = sum(e[2] for e in entries)
        removed = []
        for _, name, size in sorted(entries):
            if total <= self.cap_bytes:
                break
            if name in keep:
                continue
            try:  # its time now, not the listing's: a chunk may have used it since
                if spare_s and (self.root / name).stat().st_mtime > recent:
                    continue
            except FileNotFoundError:
                continue
            (self.root / name).unlink(missing_ok=True)
            total -= size
            removed.append(name)
        if removed:
            log.info("asset cache: evicted %d files, %d bytes left", len(removed), total)
        return removed


def cache_of(ctx: WorkerContext) -> AssetCache:
    return AssetCache(ctx.scratch / "assets", ctx.settings.asset_cache_mb * 1024 * 1024)


def _place(source: Path, dest: Path) -> None:
    """Hard link (copy across file systems) `source` at `dest`, atomically."""
    if dest.exists() and dest.stat().st_ino == source.stat().st_ino:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    tmp.replace(dest)


def inside(tree: Path, relative: str) -> Path:
    """`tree / relative` for a manifest path; PermanentError for one that could leave the tree."""
    try:
        pure = safe_relative(relative)
    except ValueError as exc:
        raise PermanentError(f"the job's asset manifest is refused: {exc}") from None
    dest = tree / pure
    # A symlink planted inside the tree must not carry a write outside it either.
    real_tree = tree.resolve()
    if not dest.parent.resolve().is_relative_to(real_tree):
        raise PermanentError(f"the job's asset manifest is refused: {relative!r} leaves the tree")
    return dest


def build_tree(ctx: WorkerContext, job: dict[str, str]) -> Path:
    """Lay out <jobdir>/tree: the scene at its root and each file it uses at its manifest path,
    from this host's cache. Returns the .blend to render."""
    spec = JobSpec.from_json(json.loads(job["spec"]))
    if not spec.assets_key:
        raise PermanentError("the job has no asset manifest")
    job_id = job["id"]
    data: dict[str, Any] = ctx.store.get_json(spec.assets_key)
    manifest = Manifest.from_json(data)
    tree = ctx.job_dir(job_id) / TREE
    tree.mkdir(parents=True, exist_ok=True)
    scene_dest = inside(tree, manifest.scene)
    if "/" in manifest.scene or not manifest.scene.lower().endswith(".blend"):
        raise PermanentError(f"the job's asset manifest names scene {manifest.scene!r}")
    places = [inside(tree, asset.path) for asset in manifest.assets]  # all checked before any I/O
    cache = cache_of(ctx)
    for asset, dest in zip(manifest.assets, places, strict=True):
        _place(cache.get(ctx.store, asset.sha256, asset.size_bytes), dest)
    _place(fetch_source(ctx, job["source_key"]), scene_dest)
    with _lock:
        cache.evict({a.sha256 for a in manifest.assets})
    (ctx.job_dir(job_id) / _MANIFEST).write_text(json.dumps(data))
    log.info("job %s: tree of %d files at %s", job_id, len(manifest.assets), tree)
    return scene_dest


def tree_remap(ctx: WorkerContext, job_id: str) -> dict[str, str]:
    """Stored paths that would not resolve in the job's tree (absolute, or outside the scene's
    folder), to their copies in it; empty when the job has none or no tree was built. The render
    script applies the table right after the scene loads (farm/blender/script.py)."""
    path = ctx.job_dir(job_id) / _MANIFEST
    if not path.exists():
        return {}
    return dict(Manifest.from_json(json.loads(path.read_text())).remap)

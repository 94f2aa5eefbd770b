"""Every file a scene uses is traced, stored once by hash, and rebuilt on a worker inside its tree
(farm.blender.assets, workers.phases.scene_tree). Fixture scenes: tests/unit/blends/build_deps.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from blender_asset_tracer import blendfile

from farm.blender.assets import (
    Asset,
    Manifest,
    Sources,
    require_complete,
    safe_relative,
    trace_scene,
    upload,
)
from farm.blender.places import private
from farm.core import keys
from farm.core.errors import PermanentError, SpecError
from workers.phases.scene_tree import AssetCache, inside

DEPS = Path(__file__).parent / "blends" / "deps"
SCENES = Path(__file__).resolve().parents[2] / "scenes"


@dataclass
class FakeStore:
    """The parts of farm.adapters.store.Store that assets use, in memory."""

    objects: dict[str, bytes] = field(default_factory=dict)
    puts: list[str] = field(default_factory=list)

    def size(self, key: str) -> int | None:
        return len(self.objects[key]) if key in self.objects else None

    def put_file(self, key: str, path: Path) -> None:
        self.puts.append(key)
        self.objects[key] = path.read_bytes()

    def get_file(self, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.objects[key])

    def get_json(self, key: str) -> Any:
        return json.loads(self.objects[key])


def _copy(src: Path, tmp_path: Path) -> Path:
    dest = tmp_path / src.name
    shutil.copytree(src, dest)
    return dest


def _set_image_path(blend: Path, image: bytes, new: bytes) -> None:
    """Point one image of `blend` elsewhere, as an artist's file might (BAT writes the field)."""
    bfile = blendfile.BlendFile(blend, "r+b")
    try:
        for block in bfile.find_blocks_from_code(b"IM"):
            if block.id_name == b"IM" + image:
                block[b"name"] = new
    finally:
        bfile.close()


def test_traces_textures_udim_tiles_sequences_sounds_and_nested_libraries() -> None:
    traced = trace_scene(DEPS / "shot.blend")
    assert [a.path for a in traced.manifest.assets] == [
        "audio/beep.wav",
        "lib/inner.blend",  # linked by lib/outer.blend, not by the scene itself
        "lib/inner.png",
        "lib/outer.blend",
        "seq/f_0001.png",
        "seq/f_0002.png",
        "seq/f_0003.png",
        "tex/checker.png",
        "tex/wood.1001.png",
        "tex/wood.1002.png",
    ]
    assert traced.manifest.missing == () and traced.manifest.remap == {}
    checker = next(a for a in traced.manifest.assets if a.path == "tex/checker.png")
    body = (DEPS / "tex" / "checker.png").read_bytes()
    assert (checker.sha256, checker.size_bytes) == (hashlib.sha256(body).hexdigest(), len(body))


def test_demo_scene_carries_its_texture_and_library() -> None:
    paths = [a.path for a in trace_scene(SCENES / "textured.blend").manifest.assets]
    assert paths == ["lib/prop.blend", "tex/checker.png"]


def test_missing_texture_is_refused_naming_every_missing_file(tmp_path: Path) -> None:
    tree = _copy(DEPS, tmp_path)
    (tree / "tex" / "checker.png").unlink()
    (tree / "lib" / "inner.png").unlink()
    manifest = trace_scene(tree / "shot.blend").manifest
    with pytest.raises(SpecError) as err:
        require_complete(manifest, allow_missing=False)
    text = str(err.value)
    assert "2 files the scene uses are missing" in text
    assert "//tex/checker.png" in text and "//inner.png" in text
    assert "--allow-missing" in text
    require_complete(manifest, allow_missing=True)  # goes on, the list stays on the manifest
    assert len(manifest.missing) == 2


def test_missing_linked_library_is_named(tmp_path: Path) -> None:
    tree = _copy(SCENES, tmp_path)
    (tree / "lib" / "prop.blend").unlink()
    missing = trace_scene(tree / "textured.blend").manifest.missing
    assert len(missing) == 1 and missing[0].startswith("//lib/prop.blend (library")


def test_absolute_and_outside_paths_go_under_abs_with_a_remap(tmp_path: Path) -> None:
    tree = _copy(DEPS, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copyfile(DEPS / "tex" / "checker.png", elsewhere / "abs.png")
    _set_image_path(tree / "shot.blend", b"plain", str(elsewhere / "abs.png").encode())
    manifest = trace_scene(tree / "shot.blend", Sources(allowed=(elsewhere.resolve(),))).manifest
    moved = "_abs/" + str(elsewhere / "abs.png").lstrip("/")
    assert moved in [a.path for a in manifest.assets]
    assert manifest.remap == {str(elsewhere / "abs.png"): "//" + moved}


@pytest.mark.parametrize("where", ["ssh", "environ", "config", "linked"])
def test_a_scene_naming_private_files_is_refused_and_nothing_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Found by review: a .blend from someone else named /etc/passwd and the farm's config as
    images, and submit uploaded them beside the scene, where a trusted script could read them."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    config = tmp_path / "farm.json"
    config.write_text('{"redis_url": "redis://:hunter2@db:6379/0"}')
    (tmp_path / "innocent.png").symlink_to(home / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FARM_CONFIG", str(config))
    named = {
        "ssh": home / ".ssh" / "id_ed25519",
        "environ": Path("/proc/self/environ"),
        "config": config,
        "linked": tmp_path / "innocent.png",
    }[where]
    tree = _copy(DEPS, tmp_path)
    _set_image_path(tree / "shot.blend", b"plain", str(named).encode())
    with pytest.raises(SpecError, match="files farm will not upload") as refused:
        trace_scene(tree / "shot.blend")
    assert str(named) in str(refused.value)
    assert "image 'plain'" in str(refused.value)


def test_a_drive_or_share_a_desktop_mounted_is_no_system_folder(tmp_path: Path) -> None:
    assert private(Path("/run/media/artist/projects/tex/wood.png")) == ""
    assert private(Path("/run/user/1000/gvfs/smb-share:server=nas,share=proj/tex/a.png")) == ""
    assert private(Path("/run/user/1000/doc/1a2b3c/wood.png")) == ""
    assert private(Path("/run/secrets/db_password")) == "a system folder"
    assert private(Path("/run/user/1000/keyring/control")) == "a system folder"
    # The config this command reads (farm --config PATH), and a ~/.ssh that is a link elsewhere.
    config = tmp_path / "studio-farm.json"
    assert private(config, environ={"HOME": str(tmp_path)}, config=config) == "the farm's config"
    dotfiles = tmp_path / "dotfiles" / "ssh"
    dotfiles.mkdir(parents=True)
    (tmp_path / ".ssh").symlink_to(dotfiles)
    assert private(dotfiles / "id_rsa", environ={"HOME": str(tmp_path)}) != ""


def test_upload_is_content_addressed_and_a_second_job_uploads_nothing() -> None:
    store = FakeStore()
    traced = trace_scene(DEPS / "shot.blend")
    first = upload(store, traced)  # type: ignore[arg-type]
    distinct = {a.sha256 for a in traced.manifest.assets}
    assert first.files == len(distinct) < len(traced.manifest.assets)
    assert sorted(store.puts) == sorted(keys.asset_key(d) for d in distinct)
    second = upload(store, traced)  # type: ignore[arg-type]
    assert (second.files, second.size_bytes, second.reused) == (0, 0, len(distinct))


def test_manifest_round_trips_through_json() -> None:
    manifest = trace_scene(DEPS / "shot.blend").manifest
    assert Manifest.from_json(json.loads(json.dumps(manifest.to_json()))) == manifest


@pytest.mark.parametrize(
    "path", ["../evil", "/etc/passwd", "tex/../../evil", "", "a//b", "./x", "C:\\x", "tex/.."]
)
def test_hostile_manifest_paths_are_rejected(tmp_path: Path, path: str) -> None:
    with pytest.raises(ValueError):
        safe_relative(path)
    with pytest.raises(PermanentError, match="refused"):
        inside(tmp_path, path)


def test_a_symlink_in_the_tree_cannot_carry_a_write_outside(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    os.symlink(outside, tree / "tex")
    with pytest.raises(PermanentError, match="leaves the tree"):
        inside(tree, "tex/wood.png")
    assert inside(tree, "lib/prop.blend") == tree / "lib" / "prop.blend"


def _cached(cache: AssetCache, store: FakeStore, body: bytes, age_s: int) -> str:
    digest = hashlib.sha256(body).hexdigest()
    store.objects[keys.asset_key(digest)] = body
    path = cache.get(store, digest, len(body))  # type: ignore[arg-type]
    os.utime(path, (1_000_000 + age_s, 1_000_000 + age_s))
    return digest


def test_cache_verifies_downloads_and_evicts_least_recently_used(tmp_path: Path) -> None:
    store = FakeStore()
    cache = AssetCache(tmp_path / "assets", cap_bytes=250)
    old, mid, new = (_cached(cache, store, bytes([i]) * 100, i) for i in (1, 2, 3))
    assert not os.access(cache.path(new), os.W_OK) or os.geteuid() == 0  # read-only copies
    removed = cache.evict(keep={old})  # in use by this job: kept even though oldest
    assert removed == [mid]
    assert sorted(p.name for p in cache.root.iterdir()) == sorted([old, new])


def test_cache_refuses_a_damaged_download(tmp_path: Path) -> None:
    store = FakeStore()
    digest = hashlib.sha256(b"good").hexdigest()
    store.objects[keys.asset_key(digest)] = b"evil"
    cache = AssetCache(tmp_path / "assets", cap_bytes=1 << 20)
    with pytest.raises(PermanentError, match="damaged"):
        cache.get(store, digest, 4)  # type: ignore[arg-type]
    assert list(cache.root.iterdir()) == []


def test_cache_hit_does_not_download_again(tmp_path: Path) -> None:
    store = FakeStore()
    cache = AssetCache(tmp_path / "assets", cap_bytes=1 << 20)
    digest = _cached(cache, store, b"x" * 10, 0)
    store.objects.clear()  # a download now would fail
    assert cache.get(store, digest, 10).read_bytes() == b"x" * 10  # type: ignore[arg-type]


@dataclass
class FakeContext:
    """The parts of WorkerContext that build_tree uses."""

    store: FakeStore
    scratch: Path
    settings: Any = field(default_factory=lambda: type("S", (), {"asset_cache_mb": 1})())

    def job_dir(self, job_id: str) -> Path:
        path = self.scratch / "jobs" / job_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scene_cache(self) -> Path:
        path = self.scratch / "scenes"
        path.mkdir(parents=True, exist_ok=True)
        return path


def _job_for(store: FakeStore, scene: Path, manifest: Manifest) -> dict[str, str]:
    from farm.core.spec import JobSpec, build_render_spec

    spec = build_render_spec(
        source_name=scene.name, frames="1-2", chunk_size=1, resolution="320x240", fps=24.0,
        samples=1, codec="h264",
    )  # fmt: skip
    spec = JobSpec.from_json({**spec.to_json(), "assets_key": "jobs/j1/assets.json"})
    store.objects["jobs/j1/assets.json"] = json.dumps(manifest.to_json()).encode()
    store.objects["scenes/abc.blend"] = scene.read_bytes()
    return {"id": "j1", "spec": json.dumps(spec.to_json()), "source_key": "scenes/abc.blend"}


def test_worker_rebuilds_the_scene_tree_from_the_cache(tmp_path: Path) -> None:
    from workers.phases.scene_tree import build_tree

    store = FakeStore()
    traced = trace_scene(DEPS / "shot.blend")
    upload(store, traced)  # type: ignore[arg-type]
    job = _job_for(store, DEPS / "shot.blend", traced.manifest)
    ctx = FakeContext(store=store, scratch=tmp_path / "scratch")
    scene = build_tree(ctx, job)  # type: ignore[arg-type]
    tree = tmp_path / "scratch" / "jobs" / "j1" / "tree"
    assert scene == tree / "shot.blend"
    assert scene.read_bytes() == (DEPS / "shot.blend").read_bytes()
    for asset in traced.manifest.assets:
        assert (tree / asset.path).read_bytes() == (DEPS / asset.path).read_bytes()
    # Hard links into the cache: the second tile is the same inode as its cached copy.
    wood = tree / "tex" / "wood.1002.png"
    assert wood.stat().st_ino == (tmp_path / "scratch" / "assets" / _sha(wood)).stat().st_ino
    assert build_tree(ctx, job) == scene  # a second chunk on this host: same tree, no error


def test_worker_refuses_a_hostile_manifest_and_writes_nothing_outside(tmp_path: Path) -> None:
    from workers.phases.scene_tree import build_tree

    store = FakeStore()
    body = b"payload"
    digest = hashlib.sha256(body).hexdigest()
    store.objects[keys.asset_key(digest)] = body
    evil = Manifest(
        scene="shot.blend",
        assets=(Asset(path="../../../escaped.txt", sha256=digest, size_bytes=len(body)),),
    )
    job = _job_for(store, DEPS / "shot.blend", evil)
    ctx = FakeContext(store=store, scratch=tmp_path / "scratch")
    with pytest.raises(PermanentError, match="refused"):
        build_tree(ctx, job)  # type: ignore[arg-type]
    assert not list(tmp_path.rglob("escaped.txt"))


def test_an_asset_digest_that_is_a_path_reads_no_other_file(tmp_path: Path) -> None:
    """Found by a review: the manifest's sha256 named the cache's file unchecked, so
    `../jobs/OTHER/frames/…` of a known size was linked into this job's tree."""
    other = tmp_path / "jobs" / "other" / "frames" / "preview_000001.png"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"another job's frame")
    cache = AssetCache(tmp_path / "assets", cap_bytes=1 << 20)
    digest = "../jobs/other/frames/preview_000001.png"
    with pytest.raises(PermanentError, match="not a sha256"):
        cache.get(FakeStore(), digest, other.stat().st_size)  # type: ignore[arg-type]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_submit_parses_the_scene_once_and_traces_it_as_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`farm submit` reads the scene's settings and traces its files from one parse of the
    .blend (farm.cli.submit._render_spec), and leaves no file open. The parse runs in a child
    process (farm.blender.isolated): it writes down each file it opens."""
    import inspect

    from blender_asset_tracer import blendfile as bat

    from farm.cli.submit import _render_spec
    from farm.core.spec import build_render_spec

    scene = (SCENES / "textured.blend").resolve()  # a camera, a texture and a library
    alone = trace_scene(scene).manifest.to_json()
    opened = tmp_path / "opened.txt"
    real = bat.BlendFile.__init__

    def counting(self: bat.BlendFile, path: Path, *args: Any, **kwargs: Any) -> None:
        with opened.open("a") as log:
            log.write(f"{Path(path).resolve()}\n")
        real(self, path, *args, **kwargs)

    monkeypatch.setattr(bat.BlendFile, "__init__", counting)
    given = ("source_name", "chunk_size", "codec", "scene")
    flags = {p: None for p in inspect.signature(build_render_spec).parameters if p not in given}
    spec, traced = _render_spec(scene, flags, chunk_size="auto", codec="h264", allow_missing=True)
    # the linked libraries open once each, as before
    assert opened.read_text().splitlines().count(str(scene)) == 1
    assert traced.manifest.to_json() == alone and spec.scene is not None
    assert not bat._cached_bfiles


def test_every_config_farm_may_read_here_is_never_uploaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ./.farm/config.json in the current folder farm reads that one, but the user's own
    (under $XDG_CONFIG_HOME) is just as secret: a scene naming either is refused."""
    monkeypatch.chdir(tmp_path)
    local = tmp_path / ".farm" / "config.json"
    user = tmp_path / "xdg" / "farm" / "config.json"
    for path in (local, user):
        path.parent.mkdir(parents=True)
        path.write_text('{"redis_url": "redis://:hunter2@db:6379/0"}')
    environ = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert private(local, environ=environ) == "the farm's config"
    assert private(user, environ=environ) == "the farm's config"

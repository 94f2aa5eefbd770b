"""A scene's files are uploaded by allowlist (farm.blender.assets): its own folder tree, and the
folders the user allows (`submit --allow-path`); links are followed and their targets checked the
same; the farm's data and config and a home's credentials never go, whatever is allowed;
sequences and UDIMs take only the files whose frame or tile digits differ, in their own folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from blender_asset_tracer import blendfile

from farm.adapters.settings import load_settings
from farm.blender.assets import Sources, trace_scene
from farm.blender.places import private
from farm.core.errors import SpecError

DEPS = Path(__file__).parent / "blends" / "deps"
PNG = (DEPS / "tex" / "checker.png").read_bytes()


def _point(blend: Path, image: bytes, new: str) -> None:
    """Point one image of `blend` at `new`, as a hostile file might (BAT writes the field)."""
    bfile = blendfile.BlendFile(blend, "r+b")
    try:
        for block in bfile.find_blocks_from_code(b"IM"):
            if block.id_name == b"IM" + image:
                block[b"name"] = new.encode()
    finally:
        bfile.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the fixture scene's tree: tmp/proj/shot.blend, tex/, seq/, lib/ ..."""
    tree = tmp_path / "proj"
    shutil.copytree(DEPS, tree)
    return tree


@pytest.fixture
def farm_data(tmp_path: Path) -> Path:
    """A local farm's data folder, as `farm up --data` leaves it."""
    data = tmp_path / "data"
    (data / "tls").mkdir(parents=True)
    (data / "secrets.json").write_text('{"redis_password": "hunter2"}')
    (data / "tls" / "ca.key").write_text("-----BEGIN PRIVATE KEY-----")
    return data


@pytest.mark.parametrize("secret", ["secrets.json", "tls/ca.key"])
def test_a_texture_that_links_to_the_farms_data_is_refused_even_when_allowed(
    project: Path, farm_data: Path, secret: str
) -> None:
    """Found live: tex/a.png, a link to DATA/secrets.json (the Redis password, the store's keys)
    or DATA/tls/ca.key, was uploaded at submit."""
    (project / "tex" / "a.png").symlink_to(farm_data / secret)
    _point(project / "shot.blend", b"plain", "//tex/a.png")
    sources = Sources(allowed=(farm_data.parent,), data_dirs=(farm_data,))
    with pytest.raises(SpecError) as refused:
        trace_scene(project / "shot.blend", sources)
    text = str(refused.value)
    assert f"//tex/a.png (image 'plain'): {farm_data / secret}: the farm's data folder" in text
    assert "whatever --allow-path says" in text


def test_a_link_inside_the_project_to_a_file_outside_it_needs_its_folder_allowed(
    project: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "library"
    elsewhere.mkdir()
    (elsewhere / "wood.png").write_bytes(PNG)
    (project / "tex" / "a.png").symlink_to(elsewhere / "wood.png")
    _point(project / "shot.blend", b"plain", "//tex/a.png")
    with pytest.raises(SpecError, match=r"outside the scene's project") as refused:
        trace_scene(project / "shot.blend")
    assert f"--allow-path {elsewhere}" in str(refused.value)
    traced = trace_scene(project / "shot.blend", Sources(allowed=(elsewhere,)))
    # the tree keeps the scene's own name for it; what is read and uploaded is the target
    assert traced.local["tex/a.png"] == elsewhere / "wood.png"


def test_a_file_outside_the_project_is_refused_then_taken_with_its_folder_allowed(
    project: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "shared" / "tex"
    elsewhere.mkdir(parents=True)
    (elsewhere / "wood.png").write_bytes(PNG)
    _point(project / "shot.blend", b"plain", str(elsewhere / "wood.png"))
    with pytest.raises(SpecError) as refused:
        trace_scene(project / "shot.blend")
    text = str(refused.value)
    assert f"{elsewhere / 'wood.png'} (image 'plain')" in text
    assert "--allow-path DIR" in text and "move it into the scene's folder" in text
    traced = trace_scene(project / "shot.blend", Sources(allowed=(tmp_path / "shared",)))
    assert f"_abs/{str(elsewhere / 'wood.png').lstrip('/')}" in traced.local


@pytest.mark.parametrize("place", [".vault-token", ".config/gh/hosts.yml"])
def test_credentials_the_old_list_missed_are_refused_even_when_home_is_allowed(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    """Found live: absolute paths to ~/.vault-token and ~/.config/gh/hosts.yml went through."""
    home = tmp_path / "home"
    secret = home / place
    secret.parent.mkdir(parents=True)
    secret.write_text("hvs.secret-token")
    monkeypatch.setenv("HOME", str(home))
    _point(project / "shot.blend", b"plain", str(secret))
    with pytest.raises(SpecError) as refused:
        trace_scene(project / "shot.blend", Sources(allowed=(home,)))
    assert f"{secret}: where credentials are kept" in str(refused.value)


def test_a_udim_aimed_at_a_folder_takes_only_tiles_of_that_folder(
    project: Path, tmp_path: Path
) -> None:
    """Found live: `//../../data/<UDIM>` uploaded the whole folder (a recursive glob)."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("secrets.json", "1001", "1002.png", "999", "sub/1003"):
        (data / name).write_bytes(PNG)
    _point(project / "shot.blend", b"udim", "//../data/<UDIM>")
    traced = trace_scene(project / "shot.blend", Sources(allowed=(data,)))
    taken = sorted(p for p in traced.local.values() if p.is_relative_to(data))
    assert taken == [data / "1001"]


def test_a_udim_takes_its_tiles_and_nothing_else_in_its_folder(project: Path) -> None:
    for name in ("wood.1003.png", "wood.1003.png.bak", "wood.x.png", "wood.10010.png"):
        (project / "tex" / name).write_bytes(PNG)
    (project / "tex" / "wood.1004.png").mkdir()
    traced = trace_scene(project / "shot.blend")
    wood = sorted(p for p in traced.local if p.startswith("tex/wood"))
    assert wood == ["tex/wood.1001.png", "tex/wood.1002.png", "tex/wood.1003.png"]


def test_a_hash_sequence_takes_only_its_frames_in_its_own_folder(project: Path) -> None:
    (project / "seq" / "sub").mkdir()
    (project / "seq" / "sub" / "f_0004.png").write_bytes(PNG)
    (project / "seq" / "f_0005.png.bak").write_bytes(PNG)
    (project / "seq" / "g_0006.png").write_bytes(PNG)
    _point(project / "shot.blend", b"seq", "//seq/f_####.png")
    traced = trace_scene(project / "shot.blend")
    seq = sorted(p for p in traced.local if p.startswith("seq/"))
    assert seq == ["seq/f_0001.png", "seq/f_0002.png", "seq/f_0003.png"]


def test_a_sequence_that_names_a_folder_uploads_nothing_of_it(
    project: Path, tmp_path: Path
) -> None:
    """An image sequence named as a folder was walked whole, subfolders and all."""
    data = tmp_path / "data"
    (data / "deep").mkdir(parents=True)
    (data / "secrets.json").write_text("{}")
    (data / "deep" / "f_0001.png").write_bytes(PNG)
    _point(project / "shot.blend", b"seq", "//../data")
    traced = trace_scene(project / "shot.blend", Sources(allowed=(data,)))
    assert not [p for p in traced.local.values() if p.is_relative_to(data)]
    assert any("looked for" in m and str(data) in m for m in traced.manifest.missing)


def test_the_default_data_folders_of_a_local_farm_are_never_uploaded(tmp_path: Path) -> None:
    """`farm up` without --data keeps its secrets in $XDG_DATA_HOME/farm; `make demo` in ./.farm."""
    environ = {"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    secrets = tmp_path / "xdg" / "farm" / "secrets.json"
    assert private(secrets, environ=environ) == "the farm's data folder"
    assert private(Path.cwd() / ".farm" / "tls" / "ca.key", environ=environ) == (
        "the farm's data folder"
    )


def test_allowed_folders_come_from_the_flag_and_the_setting(tmp_path: Path) -> None:
    settings = load_settings(
        env={"FARM_ASSET_ALLOW_PATHS": f"{tmp_path / 'a'}:{tmp_path / 'b'}"},
        config_path=tmp_path / "none.json",
    )
    sources = Sources.of(settings, (str(tmp_path / "c"),))
    assert sources.allowed == tuple(tmp_path / n for n in ("c", "a", "b"))

"""Hostile scenes at `farm submit`, as a user runs it: refused with exit 2 and words that say
what was refused and what to do, before anything is queued or uploaded (no farm is needed to be
refused: the scene is read before the farm is reached)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from blender_asset_tracer import blendfile

ROOT = Path(__file__).resolve().parents[2]
DEPS = ROOT / "tests" / "unit" / "blends" / "deps"

pytestmark = pytest.mark.e2e


def _submit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`farm submit ARGS` with a config naming the farm's data folder, and a temp dir watched."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env |= {"FARM_CONFIG": str(tmp_path / "config.json"), "TMPDIR": str(tmp_path / "temp")}
    return subprocess.run(
        [sys.executable, "-m", "farm", "submit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


@pytest.fixture
def farm_dirs(tmp_path: Path) -> Path:
    """tmp/data (a farm's data folder, named by tmp/config.json), tmp/temp (the temp dir)."""
    data = tmp_path / "data"
    (data / "tls").mkdir(parents=True)
    (data / "secrets.json").write_text('{"redis_password": "hunter2"}')
    (tmp_path / "config.json").write_text(json.dumps({"data_dir": str(data)}))
    (tmp_path / "temp").mkdir()
    return data


def test_a_texture_linking_to_the_farms_secrets_is_refused_whatever_is_allowed(
    tmp_path: Path, farm_dirs: Path
) -> None:
    tree = tmp_path / "proj"
    shutil.copytree(DEPS, tree)
    (tree / "tex" / "a.png").symlink_to(farm_dirs / "secrets.json")
    bfile = blendfile.BlendFile(tree / "shot.blend", "r+b")
    try:
        next(b for b in bfile.find_blocks_from_code(b"IM") if b.id_name == b"IMplain")[b"name"] = (
            b"//tex/a.png"
        )
    finally:
        bfile.close()
    result = _submit(tmp_path, str(tree / "shot.blend"), "--allow-path", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "//tex/a.png (image 'plain')" in result.stderr
    assert f"{farm_dirs / 'secrets.json'}: the farm's data folder" in result.stderr
    assert "whatever --allow-path says" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_file_outside_the_project_is_refused_saying_what_to_allow(
    tmp_path: Path, farm_dirs: Path
) -> None:
    tree = tmp_path / "proj"
    shutil.copytree(DEPS, tree)
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copyfile(DEPS / "tex" / "checker.png", shared / "wood.png")
    bfile = blendfile.BlendFile(tree / "shot.blend", "r+b")
    try:
        next(b for b in bfile.find_blocks_from_code(b"IM") if b.id_name == b"IMplain")[b"name"] = (
            str(shared / "wood.png").encode()
        )
    finally:
        bfile.close()
    result = _submit(tmp_path, str(tree / "shot.blend"))
    assert result.returncode == 2, result.stderr
    assert f"outside the scene's project {tree}" in result.stderr
    assert f"`--allow-path {shared}` would allow it" in result.stderr


def test_a_zstd_bomb_is_refused_naming_the_cap_and_leaves_no_temp_file(
    tmp_path: Path, farm_dirs: Path
) -> None:
    bomb = tmp_path / "bomb.blend"
    zeros = bytes(1024 * 1024)
    with bomb.open("wb") as out, zstandard.ZstdCompressor(level=1).stream_writer(out) as z:
        z.write(b"BLENDER-v304REND")
        for _ in range(4 * 1024):  # 4 GiB of zeros, a few hundred KB compressed
            z.write(zeros)
    result = _submit(tmp_path, str(bomb))
    assert result.returncode == 2, result.stderr
    assert "bomb.blend" in result.stderr and "FARM_BLEND_MAX_RATIO" in result.stderr
    assert list((tmp_path / "temp").iterdir()) == []

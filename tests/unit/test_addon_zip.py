"""The Blender add-on's zip: what Blender needs to install it (farm_blender/__init__.py with its
bl_info), the same bytes from the same source, and `farm addon --path` printing a zip that exists."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

from farm.addon import SOURCE, addon_zip, write_zip
from tests.conftest import ROOT


def _zip(data: bytes) -> zipfile.ZipFile:
    return zipfile.ZipFile(BytesIO(data))


def _bl_info(source: str) -> dict[str, object]:
    """bl_info as Blender reads it: a literal at the module's top, found without running it."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "bl_info":
            info: dict[str, object] = ast.literal_eval(node.value)
            return info
    raise AssertionError("no bl_info")


def test_the_zip_holds_the_module_farm_blender_with_its_bl_info() -> None:
    archive = _zip(addon_zip(farm_command="/opt/farm/bin/farm", farm_version="0.1.0"))
    assert sorted(archive.namelist()) == [
        "farm_blender/__init__.py",
        "farm_blender/built.json",
        "farm_blender/client.py",
    ]
    info = _bl_info(archive.read("farm_blender/__init__.py").decode())
    assert info["name"] == "Farm" and info["category"] == "Render"
    assert info["blender"] == (4, 2, 0)
    built = json.loads(archive.read("farm_blender/built.json"))
    assert built == {"farm": "/opt/farm/bin/farm", "farm_version": "0.1.0"}


def test_the_addon_imports_nothing_of_the_farm() -> None:
    """Blender's Python has no farm installed: the add-on reaches the farm through `farm` and
    its API only."""
    imported = set()
    for path in SOURCE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:  # not the add-on's own
                imported.add(node.module or "")
    assert "bpy" in imported
    assert not {name for name in imported if name.split(".")[0] in ("farm", "workers")}


def test_the_zip_is_the_same_bytes_from_the_same_source() -> None:
    first = addon_zip(farm_command="/opt/farm/bin/farm", farm_version="0.1.0")
    again = addon_zip(farm_command="/opt/farm/bin/farm", farm_version="0.1.0")
    assert first == again
    assert addon_zip(farm_command="/usr/bin/farm", farm_version="0.1.0") != first


def test_a_zip_with_these_bytes_is_kept_and_another_is_replaced(tmp_path: Path) -> None:
    """GIVEN the zip already built WHEN it is built again THEN the file is left as it is; GIVEN
    another zip there (an older add-on) THEN it is replaced."""
    dest = tmp_path / "farm_blender.zip"
    write_zip(dest, farm_command="/opt/farm/bin/farm", farm_version="0.1.0")
    os.utime(dest, (1_000_000_000, 1_000_000_000))
    write_zip(dest, farm_command="/opt/farm/bin/farm", farm_version="0.1.0")
    assert dest.stat().st_mtime == 1_000_000_000
    dest.write_bytes(b"an older add-on")
    write_zip(dest, farm_command="/opt/farm/bin/farm", farm_version="0.1.0")
    assert dest.read_bytes() == addon_zip(farm_command="/opt/farm/bin/farm", farm_version="0.1.0")
    assert [p.name for p in tmp_path.iterdir()] == ["farm_blender.zip"]


def test_farm_addon_path_prints_a_zip_that_exists(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    shown = subprocess.run(
        [sys.executable, "-m", "farm", "addon", "--path"],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    )  # fmt: skip
    path = Path(shown.stdout.strip())
    assert path == tmp_path / "cache" / "farm" / "farm_blender.zip"
    archive = zipfile.ZipFile(path)
    assert "farm_blender/__init__.py" in archive.namelist()
    farm = json.loads(archive.read("farm_blender/built.json"))["farm"]
    assert Path(farm).name == "farm" and os.access(farm, os.X_OK)

"""A .blend carrying a Python script set to run on load renders, and the script never runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import DEMO, LocalFarm

pytestmark = pytest.mark.e2e

PLANT = """
import bpy, sys
marker, out = sys.argv[sys.argv.index('--') + 1:]
text = bpy.data.texts.new('on_load.py')
text.from_string(f"import pathlib\\npathlib.Path({marker!r}).write_text('the embedded script ran')\\n")
text.use_module = True
bpy.ops.wm.save_as_mainfile(filepath=out)
"""


def _trojan(tmp_path: Path) -> tuple[Path, Path]:
    marker, scene = tmp_path / "marker.txt", tmp_path / "trojan.blend"
    subprocess.run(
        ["blender", "--background", str(DEMO), "--python-expr", PLANT, "--", str(marker), str(scene)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return marker, scene


def test_embedded_script_would_run_with_autoexec_on(tmp_path: Path) -> None:
    """The control: the planted script is real and does run when Blender is told to trust it."""
    marker, scene = _trojan(tmp_path)
    subprocess.run(
        ["blender", "--background", "--enable-autoexec", str(scene), "--python-expr", "pass"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert marker.read_text() == "the embedded script ran"


def test_farm_renders_it_without_running_the_script(local_farm: LocalFarm, tmp_path: Path) -> None:
    marker, scene = _trojan(tmp_path)
    result = local_farm.farm(
        "submit", str(scene), "--frames", "1-2", "--chunk-size", "2", "--resolution", "320x180",
        "--samples", "2", "--wait", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "done"
    assert not marker.exists()

"""A hostile scene on a real local farm, submitted with `--trusted-scripts` so its embedded script
runs when the file opens: from inside the render box it tries to write outside its chunk, read the
worker's config and secrets, see the worker's environment and reach the farm's Redis. The frames
still render; every attempt fails, as the chunk's log (uploaded to the store) shows."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import DEMO, LocalFarm

pytestmark = pytest.mark.e2e

PLANT = """
import bpy, sys
attack, out = sys.argv[sys.argv.index('--') + 1:]
text = bpy.data.texts.new('on_load.py')
text.from_string(open(attack).read())
text.use_module = True
bpy.ops.wm.save_as_mainfile(filepath=out)
"""

ATTACK = """
import os, socket
def attempt(name, fn):
    try:
        fn()
        print("ATTACK", name, "ok", flush=True)
    except Exception as exc:
        print("ATTACK", name, "refused", type(exc).__name__, flush=True)
attempt("write-outside", lambda: open(OUTSIDE, "w").write("pwned"))
attempt("read-config", lambda: print("LEAK", open(CONFIG).read()[:40], flush=True))
attempt("read-secrets", lambda: print("LEAK", open(SECRETS).read()[:40], flush=True))
attempt("redis", lambda: socket.create_connection((HOST, PORT), timeout=3).close())
print("ENV", sorted(k for k in os.environ if k.startswith(("FARM_", "AWS_"))), flush=True)
"""


def test_a_trusted_hostile_scene_renders_but_reaches_nothing(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    redis = urlparse(local_farm.settings()["redis_url"])
    outside = tmp_path / "outside.txt"
    values = {
        "OUTSIDE": str(outside),
        "CONFIG": str(local_farm.config),
        "SECRETS": str(local_farm.data / "secrets.json"),
        "HOST": redis.hostname,
        "PORT": redis.port,
    }
    attack = tmp_path / "attack.py"
    attack.write_text("".join(f"{k} = {v!r}\n" for k, v in values.items()) + ATTACK)
    scene = tmp_path / "hostile.blend"
    subprocess.run(
        ["blender", "--background", str(DEMO), "--python-expr", PLANT, "--", str(attack),
         str(scene)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    result = local_farm.farm(
        "submit", str(scene), "--frames", "1-2", "--chunk-size", "2", "--resolution", "320x180",
        "--samples", "2", "--trusted-scripts", "--wait", "--json",
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stderr}\n{local_farm.logs()}"
    summary = json.loads(result.stdout)
    assert summary["state"] == "done", summary.get("error")
    log = local_farm.farm("logs", summary["id"], "--chunk", "0", check=True).stdout
    attacks = {
        line.split()[1]: line.split()[2] for line in log.splitlines() if line.startswith("ATTACK ")
    }
    assert attacks == {
        "write-outside": "ok",  # into the box's own /tmp, gone with it; checked below
        "read-config": "refused",
        "read-secrets": "refused",
        "redis": "refused",
    } or attacks == {
        k: "refused" for k in ("write-outside", "read-config", "read-secrets", "redis")
    }
    assert not outside.exists()
    assert "LEAK" not in log
    assert "ENV []" in log

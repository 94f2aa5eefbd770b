"""The add-on's client (farm_blender/client.py) without Blender: the preferences checked, and
`farm submit` run with the token in its environment, never on its command line, and no farm config
of this machine read. A stand-in `farm` (a real program) records what it was given."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from farm.addon import SOURCE


def _client() -> ModuleType:
    """client.py as Blender loads it, on its own: its package's __init__ imports bpy."""
    spec = importlib.util.spec_from_file_location("farm_blender_client", SOURCE / "client.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


client = _client()
TOKEN = "farm_not-a-real-token-but-a-secret-one"


STAND_IN = """
import json, os, pathlib, sys
here = pathlib.Path(sys.argv[0]).parent
kept = {k: v for k, v in os.environ.items() if k[:5] == "FARM_" or k in ("PYTHONPATH", "PYTHONHOME")}
record = {"argv": sys.argv[1:], "env": kept, "config": open(os.environ["FARM_CONFIG"]).read()}
(here / "record.json").write_text(json.dumps(record))
sys.stdout.write((here / "stdout").read_text())
sys.stderr.write((here / "stderr").read_text())
sys.exit(int((here / "status").read_text()))
"""


def _stand_in(tmp_path: Path, stdout: str, stderr: str = "", status: int = 0) -> str:
    """A `farm` that records its argv, its FARM_* environment (and any Python path) and its
    config in record.json, then prints `stdout` and `stderr` and exits with `status`."""
    farm = tmp_path / "farm"
    farm.write_text(f"#!{sys.executable}\n{STAND_IN}")
    farm.chmod(0o755)
    for name, text in {"stdout": stdout, "stderr": stderr, "status": str(status)}.items():
        (tmp_path / name).write_text(text)
    return str(farm)


def test_submit_passes_the_token_in_the_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN Blender's environment holding another farm's settings WHEN the add-on submits THEN
    `farm` gets the preferences' URL, token and CA in FARM_* variables, an empty config, and the
    token nowhere in its arguments."""
    monkeypatch.setenv("FARM_REDIS_URL", "redis://:secret@10.0.0.1:6379/0")
    monkeypatch.setenv("PYTHONPATH", "/blender/python/lib")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    farm = _stand_in(tmp_path, '{"id": "j1", "state": "queued"}\n')
    access = client.Access.checked("https://farm.example:8443/", TOKEN, str(ca))

    answer = client.run_submit(farm, access, "/shots/a.blend", "--estimate")

    assert answer == {"id": "j1", "state": "queued"}
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["argv"] == ["submit", "/shots/a.blend", "--estimate", "--json"]
    assert record["config"].strip() == "{}"
    env = record["env"]
    assert env.pop("FARM_CONFIG")
    assert env == {
        "FARM_API_URL": "https://farm.example:8443",
        "FARM_API_TOKEN": TOKEN,
        "FARM_CA_FILE": str(ca),
    }


def test_farms_own_error_is_what_the_artist_reads(tmp_path: Path) -> None:
    farm = _stand_in(tmp_path, "", "note: reading\nfarm: error: the scene is broken; fix it\n", 2)
    access = client.Access.checked("http://127.0.0.1:8000", TOKEN, "")
    with pytest.raises(client.FarmFailed, match=r"^the scene is broken; fix it$"):
        client.run_submit(farm, access, "/shots/a.blend")


def test_a_farm_that_cannot_run_says_where_to_set_it(tmp_path: Path) -> None:
    access = client.Access.checked("http://127.0.0.1:8000", TOKEN, "")
    with pytest.raises(client.FarmFailed, match="set the farm command in Edit > Preferences"):
        client.run_submit(str(tmp_path / "no-farm"), access, "/shots/a.blend")


@pytest.mark.parametrize(
    ("url", "token", "ca_file", "said"),
    [
        ("", TOKEN, "", "set the farm's API URL and your token"),
        ("https://farm.example", "  ", "", "set the farm's API URL and your token"),
        ("ftp://farm.example", TOKEN, "", "is not http:// or https://"),
        ("https://farm.example", TOKEN, "/nowhere/ca.pem", "CA file /nowhere/ca.pem: no such"),
    ],
)
def test_preferences_that_cannot_work_are_refused_with_what_to_fix(
    url: str, token: str, ca_file: str, said: str
) -> None:
    with pytest.raises(client.FarmFailed, match=said):
        client.Access.checked(url, token, ca_file)


def test_a_farm_named_in_the_preferences_comes_first(tmp_path: Path) -> None:
    assert client.find_farm(" ~/bin/farm ") == str(Path.home() / "bin" / "farm")

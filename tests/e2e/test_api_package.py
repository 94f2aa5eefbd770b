"""`farm fetch` of a ladder job's HLS/DASH package through the API (farm.cli.remote): an artist's
machine with only the config `farm login` wrote brings the video and every file of the package
by presigned GET, each checked against the package's index as in direct mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.media.package import INDEX, parse_playlist
from tests.conftest import LocalFarm
from tests.e2e.test_api_client import Client, _client, _user
from tests.e2e.test_encode_ladder import _master, _probe

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cid(local_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory) -> Client:
    client = _client(tmp_path_factory, "cid")
    token = _user(local_farm, "cli-cid", "artist")
    client.ok("login", local_farm.settings()["web_url"], "--token-stdin", stdin=token + "\n")
    return client


@pytest.fixture(scope="module")
def packaged(local_farm: LocalFarm, cid: Client) -> str:
    """A two-rung ladder job packaged for HLS, submitted and followed through the API."""
    master = _master(cid.home / "ladder.mov")
    done = cid.farm("submit", str(master), "--ladder", "360p,144p", "--package", "hls",
                    "--segment-frames", "30", "--no-scene-cuts", "--preset", "ultrafast",
                    "--wait", "--json", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr + local_farm.logs()
    summary = json.loads(done.stdout)
    assert summary["state"] == "done", summary["error"]
    return str(summary["id"])


def test_fetch_through_the_api_brings_the_whole_package_checked(
    local_farm: LocalFarm, cid: Client, packaged: str, tmp_path: Path
) -> None:
    # GIVEN the artist's ladder job, done (the fixture)
    job_id = packaged
    # WHEN the artist fetches it
    said = cid.ok("fetch", job_id, str(tmp_path / "out.mp4")).stdout.splitlines()
    # THEN the video and the package folder beside it come down, with no note left behind
    folder = tmp_path / "out-package"
    assert said == [str(tmp_path / "out.mp4"), str(folder)], said
    # ... every file the package's index lists, as the farm's store holds them
    index = local_farm.store().get_json(f"jobs/{job_id}/output.package/{INDEX}")
    assert sorted(p.name for p in folder.iterdir()) == sorted(index["files"])
    for name, want in index["files"].items():
        assert (folder / name).stat().st_size == want["size"], name
    top = parse_playlist((folder / "master.m3u8").read_text())
    assert [a["RESOLUTION"] for a, _ in top.variants] == ["640x360", "256x144"]
    assert all((folder / uri).is_file() for _, uri in top.variants)
    assert _probe(tmp_path / "out.mp4", "-show_entries", "stream=width,height") == ["640,360"]


def test_a_package_file_not_as_its_index_says_fails_the_fetch_by_name(
    local_farm: LocalFarm, cid: Client, packaged: str, tmp_path: Path
) -> None:
    # GIVEN the artist's done ladder job, one of whose package files was
    # changed in the store (its size kept: only its SHA-256 tells)
    job_id = packaged
    prefix = f"jobs/{job_id}/output.package/"
    store = local_farm.store()
    name = parse_playlist(store.get_bytes(prefix + "master.m3u8").decode()).variants[-1][1]
    data = store.get_bytes(prefix + name)
    store.put_bytes(prefix + name, data[:-1] + (b" " if data[-1:] != b" " else b"\n"))
    # WHEN it is fetched through the API
    done = cid.farm("fetch", job_id, str(tmp_path / "again.mp4"))
    # THEN the fetch fails, naming the file that does not match the index
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{tmp_path / 'again-package' / name} does not match the package's index" in done.stderr

"""The CLI as a client of the farm's API (farm.cli.remote), on a real local farm: an artist's
machine with a fresh HOME whose only config is the one `farm login` wrote (an API URL, a token,
a CA file; no Redis URL, no store key), and no FARM_CONFIG. A whole render job with its texture
and library goes up by presigned PUT, renders, and comes down by presigned GET; another artist
cannot cancel it; over https the same login works against the farm's own CA."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from farm.blender.tilemerge import read_exr
from tests.conftest import DEMO, ROOT, LocalFarm, ffprobe
from tests.e2e.farmtools import status, wait_for
from tests.integration.test_tiles_render import HEIGHT, WIDTH, build_scene

pytestmark = pytest.mark.e2e
TEXTURED = ROOT / "scenes" / "textured.blend"
CLIENT_KEYS = {"api_url", "api_token", "ca_file"}


@dataclass
class Client:
    """An artist's machine: its own HOME, no FARM_* variable, run from a folder with no farm."""

    home: Path

    @property
    def config(self) -> Path:
        return self.home / ".config" / "farm" / "config.json"

    def env(self, **extra: str) -> dict[str, str]:
        kept = {k: v for k, v in os.environ.items()
                if not k.startswith("FARM_") and k != "XDG_CONFIG_HOME"}  # fmt: skip
        return {**kept, "HOME": str(self.home), **extra}

    def farm(
        self, *args: str, stdin: str | None = None, timeout: float = 600, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "farm", *args], env=self.env(**env), cwd=self.home,
            input=stdin, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def ok(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        done = self.farm(*args, **env)
        assert done.returncode == 0, f"farm {' '.join(args)}: {done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return done


def _user(farm: LocalFarm, name: str, role: str) -> str:
    """A user made on the farm's store as an admin would, and their token."""
    from farm.control.users import Users
    from farm.core.access import UserRole

    _, token = Users(farm.store()).add(name, UserRole(role))
    return token


def _client(tmp_path_factory: pytest.TempPathFactory, name: str) -> Client:
    home = tmp_path_factory.mktemp(name)
    assert not (home / ".farm").exists()
    return Client(home)


@pytest.fixture(scope="module")
def ann(local_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory) -> Client:
    """An artist logged in with --token-stdin."""
    client = _client(tmp_path_factory, "ann")
    token = _user(local_farm, "cli-ann", "artist")
    said = client.ok("login", local_farm.settings()["web_url"], "--token-stdin", stdin=token + "\n")
    assert "as cli-ann (artist)" in said.stdout
    return client


@pytest.fixture(scope="module")
def bob(local_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory) -> Client:
    """Another artist, logged in with FARM_API_TOKEN (never in argv)."""
    client = _client(tmp_path_factory, "bob")
    token = _user(local_farm, "cli-bob", "artist")
    client.ok("login", local_farm.settings()["web_url"], FARM_API_TOKEN=token)
    return client


def test_login_writes_a_client_config_with_no_farm_secret(
    local_farm: LocalFarm, ann: Client
) -> None:
    # GIVEN the config `farm login` wrote (the fixture)
    written = json.loads(ann.config.read_text())
    # THEN it holds the API's address, the token and the CA, nothing else, readable by its owner
    assert set(written) == CLIENT_KEYS
    assert written["api_url"] == local_farm.settings()["web_url"]
    assert written["api_token"].startswith("farm_") and written["ca_file"] == ""
    assert stat.S_IMODE(ann.config.stat().st_mode) == 0o600
    farm_secrets = {local_farm.settings()[k] for k in ("redis_url", "s3_secret_key")}
    assert not any(secret in ann.config.read_text() for secret in farm_secrets)


def test_a_token_the_farm_refuses_writes_nothing(local_farm: LocalFarm, tmp_path: Path) -> None:
    client = Client(tmp_path)
    done = client.farm("login", local_farm.settings()["web_url"], "--token", "farm_not-a-token")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "refused this token" in done.stderr and "nothing was written" in done.stderr
    assert "farm_not-a-token" not in done.stderr
    assert not client.config.exists()


def test_login_never_replaces_a_farms_own_config(local_farm: LocalFarm, tmp_path: Path) -> None:
    # GIVEN a machine whose user config is a farm's (its Redis password, its store keys)
    client = Client(tmp_path)
    client.config.parent.mkdir(parents=True)
    shutil.copyfile(local_farm.config, client.config)
    before = client.config.read_bytes()
    # WHEN its user logs in to an API THEN it is refused, naming the secrets, and kept as it was
    done = client.farm("login", local_farm.settings()["web_url"], "--token", "farm_anything")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "is a farm's own config (it holds redis_url" in done.stderr
    assert "farm --config CLIENT.json login" in done.stderr
    assert client.config.read_bytes() == before


def test_a_whole_render_job_through_the_api(
    local_farm: LocalFarm, ann: Client, tmp_path: Path
) -> None:
    # GIVEN a scene with a texture and a linked library on the artist's machine
    shot = ann.home / "shot"
    shutil.copytree(TEXTURED.parent, shot, ignore=shutil.ignore_patterns("*.py", "demo.blend"))
    # WHEN it is submitted and followed through the API
    done = ann.farm("submit", str(shot / "textured.blend"), "--frames", "11-18", "--chunk-size",
                    "4", "--wait", "--json", timeout=900)  # fmt: skip
    # THEN the job ran to done, owned by the artist, with the scene's files carried
    assert done.returncode == 0, done.stderr + local_farm.logs()
    summary = json.loads(done.stdout)
    job_id = summary["id"]
    assert (summary["state"], summary["frames_total"]) == ("done", 8), summary["error"]
    assert summary["settings"]["camera"] == {"value": "ShotCam", "from": "scene"}
    manifest = local_farm.store().get_json(f"jobs/{job_id}/assets.json")
    assert [a["path"] for a in manifest["assets"]] == ["lib/prop.blend", "tex/checker.png"]

    # `farm status` and `farm jobs` show it, as in direct mode
    shown = json.loads(ann.ok("status", job_id, "--json").stdout)
    assert (shown["id"], shown["state"], shown["owner"]) == (job_id, "done", "cli-ann")
    assert shown["settings"]["frames"]["value"] == "11-18"
    text = ann.ok("status", job_id).stdout
    assert f"job {job_id}" in text and "done" in text and "ShotCam" in text
    assert job_id in [row["id"] for row in json.loads(ann.ok("jobs", "--json").stdout)]
    assert job_id in ann.ok("jobs").stdout

    # `farm fetch` streams the video down; it decodes, every frame there
    fetched = Path(ann.ok("fetch", job_id, f"{tmp_path}/out/").stdout.strip())
    assert fetched == tmp_path / "out" / f"{job_id}.mp4"
    stream = ffprobe(fetched)["streams"][0]
    assert (int(stream["nb_read_frames"]), stream["width"], stream["height"]) == (8, 320, 240)
    frames = Path(ann.ok("fetch", job_id, str(tmp_path), "--frames").stdout.splitlines()[-1])
    assert len([p for p in frames.rglob("*") if p.is_file()]) >= 8

    # `farm logs` prints each attempt's log from its presigned URL
    logs = ann.ok("logs", job_id, "--chunk", "0").stdout
    assert logs.startswith("===== 00000-") and "===== 00000-render-attempt1" in logs
    assert "Read library:" in logs  # Blender's own words, from the chunk's render
    none = ann.farm("logs", job_id, "--chunk", "99")
    assert none.returncode == 1 and f"no logs for {job_id} chunk 99 yet" in none.stderr


def test_a_tiled_still_through_the_api_comes_down_with_its_passes(
    local_farm: LocalFarm, ann: Client, tmp_path: Path
) -> None:
    # GIVEN a 128x96 still rendering Depth and Normal beside its image, on the artist's machine
    (ann.home / "still").mkdir()
    scene = build_scene(ann.home / "still", samples=2, denoise=False, passes=True)
    # WHEN it is submitted through the API in 2 tiles and fetched
    done = ann.farm("submit", str(scene), "--frames", "9", "--tiles", "2", "--wait", "--json",
                    timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr + local_farm.logs()
    job_id = json.loads(done.stdout)["id"]
    fetched = ann.ok("fetch", job_id, f"{tmp_path}/out/").stdout.split()
    # THEN the image and its passes come down beside each other, as in direct mode
    still, passes = (Path(line) for line in fetched[-2:])
    assert still == tmp_path / "out" / f"{job_id}.png" and still.stat().st_size > 0
    assert passes == tmp_path / "out" / f"{job_id}.passes.exr"
    layers = read_exr(str(passes))[1]
    assert {"ViewLayer.Depth.Z", "ViewLayer.Normal.X", "ViewLayer.Combined.R"} <= set(layers)
    assert layers["ViewLayer.Depth.Z"].shape == (HEIGHT, WIDTH)
    # AND they are the store's bytes
    stored = local_farm.store().get_bytes(f"jobs/{job_id}/output.passes.exr")
    assert passes.read_bytes() == stored


def test_another_artists_cancel_is_refused_and_the_owners_is_not(
    local_farm: LocalFarm, ann: Client, bob: Client
) -> None:
    # GIVEN a long job of ann's on the farm
    job_id = ann.ok("submit", str(DEMO), "--frames", "1-240", "--chunk-size", "4",
                    "--resolution", "320x180", "--samples", "1").stdout.strip()  # fmt: skip
    # WHEN bob, another artist, cancels it THEN the API refuses (403), saying which role may
    refused = bob.farm("cancel", job_id)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.startswith("farm: error: ") and "wrangler" in refused.stderr
    assert status(local_farm, job_id)["state"] in ("queued", "running")
    # WHEN ann cancels it THEN it is cancelled
    said = ann.ok("cancel", job_id).stdout
    assert said.startswith(f"cancelled {job_id} (") and f"`farm retry {job_id} --all`" in said
    wait_for("the cancel", lambda: status(local_farm, job_id)["state"] == "cancelled", 120,
             local_farm)  # fmt: skip
    assert json.loads(ann.ok("status", job_id, "--json").stdout)["state"] == "cancelled"


def test_an_admin_manages_users_through_the_api_and_an_artist_may_not(
    local_farm: LocalFarm, ann: Client, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN an admin logged in from a machine with no farm secret
    admin = _client(tmp_path_factory, "admin")
    admin.ok("login", local_farm.settings()["web_url"],
             FARM_API_TOKEN=_user(local_farm, "cli-admin", "admin"))  # fmt: skip
    # WHEN the admin adds a user THEN the token is printed once and logs that user in
    token = admin.ok("user", "add", "cli-cara", "--role", "wrangler").stdout.strip()
    cara = _client(tmp_path_factory, "cara")
    said = cara.ok("login", local_farm.settings()["web_url"], FARM_API_TOKEN=token).stdout
    assert "as cli-cara (wrangler)" in said
    listed = {u["name"]: u for u in json.loads(admin.ok("user", "list", "--json").stdout)}
    assert listed["cli-cara"]["role"] == "wrangler" and listed["cli-cara"]["revoked"] is None
    assert token not in json.dumps(listed)
    # WHEN an artist tries the same THEN the API refuses (403)
    refused = ann.farm("user", "add", "cli-dan", "--role", "admin")
    assert refused.returncode == 1 and "admin" in refused.stderr, refused.stderr
    # WHEN the admin revokes the new user THEN that token is refused
    admin.ok("user", "revoke", "cli-cara")
    wait_for("the revoke", lambda: cara.farm("jobs").returncode != 0, 60, local_farm)
    assert "revoked" in cara.farm("jobs").stderr


def test_the_farms_own_commands_say_they_need_its_credentials(ann: Client) -> None:
    for command in (["up"], ["worker"], ["reconcile", "--once"], ["watch"]):
        done = ann.farm(*command)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert (
            "runs on the farm's own hosts" in done.stderr
            or "`farm status JOB --wait`" in done.stderr
        )
    assert not (ann.home / ".farm").exists()


def test_an_unknown_job_is_a_usage_error(ann: Client) -> None:
    done = ann.farm("status", "j-20000101-000000-000000")
    assert done.returncode == 2 and "no job j-20000101-000000-000000" in done.stderr


def test_logout_forgets_the_token(
    local_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory
) -> None:
    client = _client(tmp_path_factory, "cat")
    client.ok(
        "login", local_farm.settings()["web_url"], "--token", _user(local_farm, "cli-cat", "artist")
    )
    said = client.ok("logout").stdout
    assert "logged out" in said and set(json.loads(client.config.read_text())) == {
        "api_url",
        "ca_file",
    }
    done = client.farm("jobs")
    assert done.returncode == 1 and "not logged in to" in done.stderr


def test_over_https_login_and_status(
    tls_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN the farm's API on https, signed by the farm's own CA
    url = tls_farm.settings()["web_url"]
    assert url.startswith("https://")
    ca = tls_farm.data / "tls" / "ca.crt"
    client = _client(tmp_path_factory, "dee")
    token = _user(tls_farm, "cli-dee", "wrangler")
    # WHEN the client logs in without the CA THEN it is refused, saying what to pass
    untrusted = client.farm("login", url, "--token", token)
    assert untrusted.returncode == 1 and "--ca-file" in untrusted.stderr
    assert not client.config.exists()
    # WHEN with it THEN the config names it, and a job submitted shows in `farm status`
    assert (
        "as cli-dee (wrangler)"
        in client.ok("login", url, "--token", token, "--ca-file", str(ca)).stdout
    )
    assert json.loads(client.config.read_text())["ca_file"] == str(ca)
    submitted = client.ok("submit", str(DEMO), "--frames", "1-4", "--resolution", "320x180",
                          "--samples", "1", "--wait", "--json")  # fmt: skip
    job_id = json.loads(submitted.stdout)["id"]
    listed = json.loads(client.ok("jobs", "--json").stdout)
    assert (job_id, "cli-dee") in [(row["id"], row["owner"]) for row in listed]
    shown = json.loads(client.ok("status", job_id, "--json").stdout)
    assert (shown["state"], shown["frames_total"]) == ("done", 4), shown["error"]

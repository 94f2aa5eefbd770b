"""The farm's API (farm.web.api) on a real local farm, spoken to as any HTTP client would
(requests, no farm client code): every route against every role, on the owner's job and on
another's; the refusals (401 without, with an unknown, an expired and a revoked token; 403; 413
over a body's limit; 426 for an old client; an upload whose bytes do not match their hash), each
logged without the token; a job whose scene and files go up by presigned PUT and render to done,
followed as server-sent events; the OpenAPI document against what is served; the job pages'
login with a token. Over https too, on a farm started with --tls."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from farm.core.access import UserRole, allowed
from farm.web.api.routes import ROUTES, Route
from tests.conftest import ROOT, LocalFarm, ffprobe
from tests.e2e.farmtools import wait_for

pytestmark = pytest.mark.e2e
TEXTURED = ROOT / "scenes" / "textured.blend"
PEOPLE = {"api-ann": "artist", "api-bob": "artist", "api-wes": "wrangler", "api-ada": "admin"}
OWNER = "api-ann"
ZERO = "0" * 64


@dataclass
class Api:
    """A farm's API as an HTTP client sees it, with the tokens of the users made for the tests."""

    farm: LocalFarm
    url: str
    verify: str | bool
    tokens: dict[str, str] = field(default_factory=dict)

    def call(
        self, method: str, path: str, who: str | None = None, *, token: str | None = None,
        headers: dict[str, str] | None = None, **kw: Any,
    ) -> requests.Response:  # fmt: skip
        sent = dict(headers or {})
        token = token or (self.tokens[who] if who else None)
        if token:
            sent["Authorization"] = f"Bearer {token}"
        kw.setdefault("timeout", 120)
        return requests.request(method, self.url + path, headers=sent, verify=self.verify, **kw)

    def ok(self, method: str, path: str, who: str, **kw: Any) -> Any:
        answer = self.call(method, path, who, **kw)
        assert answer.status_code in (200, 201), f"{method} {path}: {answer.text}"
        return answer.json()

    def log(self) -> str:
        return (self.farm.data / "logs" / "web.log").read_text(errors="replace")


def _add_users(farm: LocalFarm, api: Api) -> None:
    """The users, made on the farm's store as an admin would, each token waited for until the
    web takes it (it reloads its users on an unknown token, at most twice a second)."""
    from farm.control.users import Users

    users = Users(farm.store())
    for name, role in PEOPLE.items():
        api.tokens[name] = users.add(name, UserRole(role))[1]
    api.tokens["api-rex"] = users.add("api-rex", UserRole.ARTIST)[1]
    api.tokens["api-old"] = users.add("api-old", UserRole.ARTIST, expires_days=2 / 86400)[1]
    for name in PEOPLE:
        wait_for(f"{name}'s token taken", lambda n=name: _code(api, n) == "", 60)
    users.revoke("api-rex")
    wait_for("the revoked token refused", lambda: _code(api, "api-rex") == "token_revoked", 60)
    wait_for("the expired token refused", lambda: _code(api, "api-old") == "token_expired", 60)


def _add_projects(farm: LocalFarm, *names: str) -> None:
    """The projects the tests' jobs are submitted to (a job's project must exist)."""
    for name in names:
        farm.farm("project", "add", name, "--weight", "1", check=True)


def _code(api: Api, who: str) -> str:
    answer = api.call("GET", "/api/v1/whoami", who)
    return "" if answer.status_code == 200 else str(answer.json()["code"])


@pytest.fixture(scope="module")
def api(local_farm: LocalFarm) -> Api:
    found = Api(farm=local_farm, url=local_farm.settings()["web_url"], verify=True)
    _add_users(local_farm, found)
    _add_projects(local_farm, "spring", "autumn")
    return found


# ── a job through the API, as a client with no farm secret sends one ─────────────────────────
def submission(
    scene: Path, frames: str = "1-4", resolution: str = "160x90", **more: Any
) -> tuple[dict[str, Any], dict[str, Path]]:
    """POST /jobs's body for `scene` read and traced as the CLI does, and where each file to
    send is on this machine, by sha256."""
    from farm.adapters.store import sha256_file
    from farm.blender.assets import Sources, read_and_trace
    from farm.core.spec import build_render_spec

    info, traced = read_and_trace(scene, Sources())
    spec = build_render_spec(
        source_name=scene.name, frames=frames, chunk_size=2, resolution=resolution, fps=None,
        samples=2, codec="h264", scene=info,
    )  # fmt: skip
    digest = sha256_file(scene)
    local = {digest: scene} | {a.sha256: traced.local[a.path] for a in traced.manifest.assets}
    body = {
        "spec": spec.to_json(),
        "source": {"sha256": digest, "size": scene.stat().st_size, "suffix": ".blend"},
        "assets": traced.manifest.to_json(),
        **more,
    }
    return body, local


def upload(api: Api, who: str, body: dict[str, Any], local: dict[str, Path]) -> dict[str, Any]:
    """POST /uploads for the source and the assets, and a plain PUT of each file it asks for."""
    files = [{**body["source"], "kind": "scene"}]
    assets = body["assets"]["assets"] if body["assets"] else []
    files += [{"sha256": a["sha256"], "size": a["size_bytes"], "kind": "asset"} for a in assets]
    offer: dict[str, Any] = api.ok("POST", "/api/v1/uploads", who, json={"files": files})
    for item in offer["uploads"]:
        with local[item["sha256"]].open("rb") as data:
            put = requests.put(item["url"], data=data, headers=item["headers"],
                               verify=api.verify, timeout=120)  # fmt: skip
        assert put.status_code == 200, put.text
    return offer


def stream(api: Api, who: str, job_id: str, timeout_s: float = 900) -> Iterator[tuple[str, Any]]:
    """The job's server-sent events as they come: (event, data), comments as ("comment",
    text); ends when the stream does."""
    answer = api.call("GET", f"/api/v1/jobs/{job_id}/events", who, stream=True,
                      timeout=(30, timeout_s))  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    name, data = "message", []
    with answer:
        for line in answer.iter_lines(decode_unicode=True):
            if line.startswith(":"):
                yield "comment", line[1:].strip()
            elif line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data.append(line.split(":", 1)[1].strip())
            elif not line and data:
                yield name, json.loads("\n".join(data))
                name, data = "message", []


def events(api: Api, who: str, job_id: str) -> list[tuple[str, Any]]:
    return list(stream(api, who, job_id))


@dataclass(frozen=True)
class Rendered:
    job_id: str
    body: dict[str, Any]
    offer: dict[str, Any]
    submitted: dict[str, Any]
    events: list[tuple[str, Any]]


def submit_and_follow(api: Api, who: str, shot: Path, project: str) -> Rendered:
    body, local = submission(shot / "textured.blend", project=project)
    offer = upload(api, who, body, local)
    answer = api.call("POST", "/api/v1/jobs", who, json=body)
    assert answer.status_code == 201, answer.text
    submitted = answer.json()
    followed = events(api, who, submitted["id"])
    return Rendered(submitted["id"], body, offer, submitted, followed)


@pytest.fixture(scope="module")
def rendered(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    """The artist's job: a scene with a texture and a linked library, uploaded and followed."""
    shot = tmp_path_factory.mktemp("shot")
    shutil.copytree(TEXTURED.parent, shot, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.py", "demo.blend"))  # fmt: skip
    return submit_and_follow(api, OWNER, shot, "spring")


def test_a_job_submitted_through_the_api_renders_to_done(
    api: Api, rendered: Rendered, tmp_path: Path
) -> None:
    # GIVEN the artist's job (the fixture), its three files uploaded by presigned PUT
    assert len(rendered.offer["uploads"]) + len(rendered.offer["stored"]) == 3
    sub = rendered.submitted
    assert (sub["state"], sub["owner"], sub["project"]) == ("queued", OWNER, "spring")
    assert (sub["frames_total"], sub["assets"]["files"], sub["assets"]["missing"]) == (4, 2, [])
    # THEN it is done, owned by the artist, in its project
    shown = api.ok("GET", f"/api/v1/jobs/{rendered.job_id}", OWNER)
    assert (shown["state"], shown["owner"], shown["project"]) == ("done", OWNER, "spring")
    assert shown["settings"]["frames"]["value"] == "1-4" and len(shown["chunks"]) >= 2
    listed = api.ok("GET", "/api/v1/jobs?limit=50", "api-bob")["jobs"]
    row = next(j for j in listed if j["id"] == rendered.job_id)
    assert (row["owner"], row["project"], "chunks" in row) == (OWNER, "spring", False)
    # the files are in the store by their hash, the staging keys empty, owner kept for a rebuild
    store = api.farm.store()
    source = rendered.body["source"]
    assert store.size(f"scenes/{source['sha256']}.blend") == source["size"]
    for asset in rendered.body["assets"]["assets"]:
        assert store.size(f"assets/{asset['sha256']}") == asset["size_bytes"]
    assert store.keys("uploads/") == []
    control = store.get_json(f"jobs/{rendered.job_id}/spec.json")["control"]
    assert (control["owner"], control["project"]) == (OWNER, "spring")
    # and its video, fetched by presigned GET with no farm secret, has every frame
    video = api.ok("GET", f"/api/v1/jobs/{rendered.job_id}/output", OWNER)["video"]
    fetched = requests.get(video["url"], verify=api.verify, timeout=120)
    assert fetched.status_code == 200 and len(fetched.content) == video["size"]
    (tmp_path / "v.mp4").write_bytes(fetched.content)
    assert int(ffprobe(tmp_path / "v.mp4")["streams"][0]["nb_read_frames"]) == 4


def test_the_event_stream_shows_the_states_and_ends_with_end(rendered: Rendered) -> None:
    named = [(name, data) for name, data in rendered.events if name != "comment"]
    assert named[0][0] == "status" and named[-1][0] == "end"
    assert [n for n, _ in named].count("end") == 1
    states = [data["state"] for _, data in named]
    assert states[-1] == "done" and "running" in states
    frames = [data["frames_rendered"] for _, data in named]
    assert frames == sorted(frames) and frames[-1] == 4
    assert all(data["id"] == rendered.job_id for _, data in named)


def test_an_estimate_through_the_api_prices_the_job_and_queues_nothing_of_it(
    api: Api, rendered: Rendered
) -> None:
    # GIVEN the rendered job's submission, its files in the store
    jobs_before = {j["id"] for j in api.ok("GET", "/api/v1/jobs?limit=1000", OWNER)["jobs"]}
    # WHEN it is estimated
    found = api.ok("POST", "/api/v1/estimate", OWNER, json=rendered.body)
    # THEN the answer is `farm submit --estimate --json`'s, and no job came of it but a probe
    assert (found["frames"], found["chunks"], found["chunk_size"]) == (4, 2, 2)
    assert found["cost_spot"] >= 0 and found["timings"]
    jobs_after = {j["id"] for j in api.ok("GET", "/api/v1/jobs?limit=1000", OWNER)["jobs"]}
    assert jobs_after - jobs_before == ({found["probe_job"]} if found["probe_job"] else set())


# ── the role matrix ─────────────────────────────────────────────────────────────────────────
def _request(route: Route, job_id: str) -> tuple[str, dict[str, Any]]:
    """A request for `route` that, let through, changes nothing of the done job: bodies its
    handler refuses (400), controls a done job refuses (409), a user that does not exist."""
    path = route.path.replace("{id}", job_id).replace("{name}", "api-nobody")
    bodies: dict[str, Any] = {
        "uploads": {"files": [{"sha256": ZERO, "size": 1, "kind": "asset"}]},
        "submit": {}, "estimate": {}, "add_user": {}, "priority": {"priority": 60},
        "resume": {}, "retry": {"every_unfinished": True},
    }  # fmt: skip
    return path, ({"json": bodies[route.name]} if route.name in bodies else {})


def test_every_route_answers_each_role_as_the_matrix_says(api: Api, rendered: Rendered) -> None:
    """Artists on their own job and on another's, a wrangler and an admin, on every route: 403
    exactly where farm.core.access says no, and nothing else refused for them."""
    _answers_as_the_matrix_says(api, rendered.job_id)


def _answers_as_the_matrix_says(api: Api, job_id: str) -> None:
    """Every route, as each of PEOPLE, on `job_id` (OWNER's done job)."""
    for route in ROUTES:
        path, kw = _request(route, job_id)
        for who, role in PEOPLE.items():
            owner = OWNER if route.on_job else ""
            assert route.action is not None or route.name in ("version", "openapi")
            if route.action is None:
                assert api.call(route.method, path, **kw).status_code == 200, route.name
                continue
            may = allowed(UserRole(role), route.action, owner=owner, user=who)
            answer = api.call(route.method, path, who, **kw)
            said = f"{route.method} {path} as {who} ({role}): {answer.status_code} {answer.text}"
            if may:
                assert answer.status_code not in (401, 403, 404, 405) or (
                    route.name == "revoke_user" and answer.json()["code"] == "unknown_user"
                ), said
            else:
                assert answer.status_code == 403, said
                assert answer.json()["code"] == "forbidden", said
                assert role in answer.json()["error"], said


def test_a_control_route_answers_the_jobs_owner_and_a_wrangler(api: Api) -> None:
    """Pause and cancel take effect for the owner, and the events stream says so as it happens;
    another artist's cancel is refused; the owner and project are in what a rebuild of the
    ledger would restore."""
    from farm.control.rebuild import JobReader

    # GIVEN the artist's job, paused
    body, local = submission(ROOT / "scenes" / "demo.blend", frames="1-40", project="autumn")
    body["assets"] = None
    upload(api, OWNER, body, local)
    job_id = api.ok("POST", "/api/v1/jobs", OWNER, json=body)["id"]
    paused = api.ok("POST", f"/api/v1/jobs/{job_id}/pause", OWNER)
    assert paused["state"] == "paused" and OWNER in paused["paused_reason"]
    _, plan = JobReader(api.farm.store(), job_id).read()
    assert plan is not None and (plan["job"]["owner"], plan["job"]["project"]) == (OWNER, "autumn")
    # WHEN its events are followed: the paused job's status comes while the stream is open
    # (a server that held the body back until the end would never send it)
    followed = stream(api, "api-bob", job_id)
    first = next(followed)
    assert first[0] == "status" and first[1]["state"] == "paused"
    # THEN another artist may not cancel it, a wrangler may reprioritise it, its owner cancel it
    refused = api.call("POST", f"/api/v1/jobs/{job_id}/cancel", "api-bob")
    assert refused.status_code == 403 and "api-ann's job" in refused.json()["error"]
    again = api.ok("PUT", f"/api/v1/jobs/{job_id}/priority", "api-wes", json={"priority": 70})
    assert again["priority"] == 70
    assert api.ok("POST", f"/api/v1/jobs/{job_id}/cancel", OWNER)["state"] == "cancelled"
    # and the stream ends with it
    rest = [event for event in followed if event[0] != "comment"]
    assert rest[-1][0] == "end" and rest[-1][1]["state"] == "cancelled"


# ── refusals ────────────────────────────────────────────────────────────────────────────────
def test_a_token_missing_unknown_expired_or_revoked_is_answered_401(api: Api) -> None:
    cases = {
        "token_missing": {},
        "token_unknown": {"token": "farm_" + "x" * 43},
        "token_expired": {"who": "api-old"},
        "token_revoked": {"who": "api-rex"},
    }
    for code, how in cases.items():
        answer = api.call("GET", "/api/v1/jobs", how.get("who"), token=how.get("token"))
        assert answer.status_code == 401, answer.text
        assert answer.json()["code"] == code
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="farm"'
    basic = api.call("GET", "/api/v1/whoami", auth=("u", "p"))
    assert basic.status_code == 401 and basic.json()["code"] == "token_missing"


def test_every_refusal_is_logged_and_no_log_holds_a_token(api: Api, rendered: Rendered) -> None:
    # GIVEN refusals of each kind
    api.call("GET", "/api/v1/whoami", "api-rex")
    api.call("GET", "/api/v1/whoami", token="farm_not-anyones")
    api.call("GET", "/api/v1/users", "api-bob")
    api.call("POST", f"/api/v1/jobs/{rendered.job_id}/cancel", "api-bob")
    # THEN the web's log names each, with the user where known, and no log holds a token
    wait_for("the refusals logged", lambda: "users from 127.0.0.1: 403" in api.log(), 30)
    log = api.log()
    assert "refused GET /api/v1/whoami from 127.0.0.1: 401 token_revoked (user api-rex)" in log
    assert "refused GET /api/v1/whoami from 127.0.0.1: 401 token_unknown (user -)" in log
    assert "refused GET /api/v1/users from 127.0.0.1: 403 forbidden (user api-bob)" in log
    assert f"refused POST /api/v1/jobs/{rendered.job_id}/cancel from 127.0.0.1: 403" in log
    every_log = "".join(p.read_text(errors="replace") for p in api.farm.data.glob("logs/*.log"))
    for token in [*api.tokens.values(), "farm_not-anyones"]:
        assert token not in every_log


def test_a_body_over_its_routes_limit_is_answered_413(api: Api, rendered: Rendered) -> None:
    small = api.call("PUT", f"/api/v1/jobs/{rendered.job_id}/priority", OWNER,
                     data=b" " * ((64 << 10) + 1), headers={"Content-Type": "application/json"})  # fmt: skip
    assert small.status_code == 413 and small.json()["code"] == "too_large"
    assert "64 KiB" in small.json()["error"]
    large = api.call("POST", "/api/v1/jobs", OWNER, data=b" " * ((8 << 20) + 1),
                     headers={"Content-Type": "application/json"})  # fmt: skip
    assert large.status_code == 413 and "8 MiB" in large.json()["error"]
    assert api.ok("GET", "/api/v1/whoami", OWNER)["name"] == OWNER  # and the server goes on


def test_an_older_client_is_told_which_farm_to_install(api: Api) -> None:
    from farm.web.api.versions import FARM_VERSION, MIN_CLIENT

    old = api.call("GET", "/api/v1/whoami", OWNER, headers={"X-Farm-Client": "0.0.9"})
    assert old.status_code == 426 and old.json()["code"] == "client_too_old"
    assert f"pip install -U 'farm>={MIN_CLIENT}'" in old.json()["error"]
    current = api.call("GET", "/api/v1/whoami", OWNER, headers={"X-Farm-Client": FARM_VERSION})
    assert current.status_code == 200
    assert api.ok("GET", "/api/v1/version", OWNER)["min_client"] == MIN_CLIENT


def test_an_upload_of_another_size_or_other_bytes_is_refused_and_deleted(api: Api) -> None:
    # GIVEN a scene announced by its hash, and other bytes of its size PUT to its staging URL
    # (its URL takes no other size)
    body, _ = submission(ROOT / "scenes" / "demo.blend")
    scene = b"BLENDER" + os.urandom(4096)  # bytes no other test stored
    sha = hashlib.sha256(scene).hexdigest()
    body |= {"assets": None, "source": {"sha256": sha, "size": len(scene), "suffix": ".blend"}}
    body["spec"]["source_name"] = "shot.blend"
    store = api.farm.store()
    offer = api.ok("POST", "/api/v1/uploads", "api-bob",
                   json={"files": [{**body["source"], "kind": "scene"}]})  # fmt: skip
    url = offer["uploads"][0]["url"]
    assert offer["uploads"][0]["headers"] == {"Content-Length": str(len(scene))}
    # (more bytes, or a chunked body of any length, than announced: the store refuses the PUT)
    for flood in (scene + bytes(1 << 20), iter([scene[:100], scene[100:]])):
        refused = requests.put(url, data=flood, timeout=60)
        assert refused.status_code == 403 and "SignatureDoesNotMatch" in refused.text
        assert store.size(f"uploads/{sha}") is None
    forged = bytes(reversed(scene))
    put = requests.put(url, data=forged, timeout=60)
    assert put.status_code == 200 and store.size(f"uploads/{sha}") == len(forged)
    # WHEN the job is submitted
    answer = api.call("POST", "/api/v1/jobs", "api-bob", json=body)
    # THEN it is refused, naming the file; the staged bytes are gone and nothing was stored
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "upload_mismatch" and "shot.blend" in answer.json()["error"]
    assert store.size(f"uploads/{sha}") is None and store.size(f"scenes/{sha}.blend") is None
    # and submitted again without the file, it is missing (409), listed by hash
    again = api.call("POST", "/api/v1/jobs", "api-bob", json=body)
    assert again.status_code == 409 and again.json()["code"] == "upload_missing"
    assert again.json()["missing"] == [sha]


def test_a_spec_the_cli_would_refuse_is_answered_400(api: Api) -> None:
    body, _ = submission(ROOT / "scenes" / "demo.blend")
    spec = body["spec"]
    bad = {
        "frames after they end": {**spec, "frames": {"first": 9, "last": 2, "step": 1}},
        "an odd width": {**spec, "resolution": {"width": 161, "height": 90}},
        "a string for a number": {**spec, "samples": "2; rm -rf /"},
        "too many chunks": {**spec, "frames": {"first": 0, "last": 999_999, "step": 1},
                            "chunk_size": 1},
        "an engine of no one's": {**spec, "engine": "MYSTERY"},
        "a field no spec has": {**spec, "shell": "sh"},
    }  # fmt: skip
    for why, changed in bad.items():
        answer = api.call("POST", "/api/v1/jobs", OWNER, json={**body, "spec": changed})
        assert answer.status_code == 400, f"{why}: {answer.text}"
        assert answer.json()["code"] == "bad_spec" and answer.json()["error"].startswith("spec:")
    for why, changed in {"priority": 101, "project": "../x", "notify": "ftp://x"}.items():
        answer = api.call("POST", "/api/v1/jobs", OWNER, json={**body, why: changed})
        assert answer.status_code == 400 and why in answer.json()["error"], answer.text


# ── the document ────────────────────────────────────────────────────────────────────────────
def test_the_openapi_document_lists_every_route_served(api: Api, rendered: Rendered) -> None:
    doc = requests.get(api.url + "/openapi.json", verify=api.verify, timeout=30).json()
    assert doc["openapi"].startswith("3.1")
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    listed = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    assert listed == {(r.path, r.method) for r in ROUTES}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            # every path listed is served: no answer says there is no such route
            concrete = path.replace("{id}", rendered.job_id).replace("{name}", "api-nobody")
            answer = api.call(method.upper(), concrete, "api-wes", json=None)
            assert answer.status_code != 405 and answer.headers["Content-Type"]
            if answer.status_code == 404:
                assert answer.json()["code"] != "no_route", f"{method} {path}"
            assert op["operationId"] and {"200", "201"} & set(op["responses"])
            if op["security"]:
                assert {"401", "403"} <= set(op["responses"]), f"{method} {path}"
    # and a path not in it is not served
    assert api.call("GET", "/api/v1/nothing", OWNER).json()["code"] == "no_route"
    assert api.call("DELETE", "/api/v1/jobs", OWNER).status_code == 405


# ── the job pages' login ────────────────────────────────────────────────────────────────────
def test_the_job_pages_log_in_with_a_token_and_show_the_owner(api: Api, rendered: Rendered) -> None:
    # GIVEN another artist logged in to the pages with their token
    browser = requests.Session()
    browser.verify = api.verify
    assert "token" in browser.get(api.url + "/login", timeout=30).text
    wrong = browser.post(api.url + "/login", data={"token": "farm_nope"}, timeout=30)
    assert wrong.status_code == 401 and "not one of this farm" in wrong.text
    login = browser.post(api.url + "/login", data={"token": api.tokens["api-bob"]},
                         allow_redirects=False, timeout=30)  # fmt: skip
    assert login.status_code == 303, login.text
    cookie = login.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert ("Secure" in cookie) == api.url.startswith("https")
    assert api.tokens["api-bob"] not in cookie
    # THEN the pages show each job's owner and project
    jobs = browser.get(api.url + "/", timeout=30)
    assert jobs.status_code == 200 and OWNER in jobs.text and "spring" in jobs.text
    page = browser.get(f"{api.url}/jobs/{rendered.job_id}", timeout=30)
    assert page.status_code == 200 and f"owner {OWNER}" in page.text
    # and not the logs or the video of a job that is not theirs
    assert "/logs/" not in page.text and "video.mp4" not in page.text
    assert browser.get(f"{api.url}/jobs/{rendered.job_id}/video.mp4", timeout=30).status_code == 403
    # the owner's session links them; without a session or credentials there is no page
    owner = requests.Session()
    owner.verify = api.verify
    owner.post(api.url + "/login", data={"token": api.tokens[OWNER]}, timeout=30)
    assert "/logs/" in owner.get(f"{api.url}/jobs/{rendered.job_id}", timeout=30).text
    assert requests.get(api.url + "/", verify=api.verify, timeout=30).status_code == 401


# ── over https ──────────────────────────────────────────────────────────────────────────────
@pytest.fixture(scope="module")
def tls_api(tls_farm: LocalFarm) -> Api:
    s = tls_farm.settings()
    assert s["web_url"].startswith("https://")
    found = Api(farm=tls_farm, url=s["web_url"], verify=s["ca_file"])
    _add_users(tls_farm, found)
    _add_projects(tls_farm, "tls")
    return found


def test_over_https_the_api_answers_refuses_and_renders(
    tls_api: Api, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert tls_api.ok("GET", "/api/v1/whoami", "api-wes") == {
        "name": "api-wes", "role": "wrangler", "expires": None,
    }  # fmt: skip
    refused = tls_api.call("GET", "/api/v1/jobs", token="farm_unknown")
    assert refused.status_code == 401 and refused.json()["code"] == "token_unknown"
    forbidden = tls_api.call("GET", "/api/v1/users", OWNER)
    assert forbidden.status_code == 403
    shot = tmp_path_factory.mktemp("tls-shot")
    shutil.copytree(TEXTURED.parent, shot, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.py", "demo.blend"))  # fmt: skip
    done = submit_and_follow(tls_api, OWNER, shot, "tls")
    assert done.events[-1][0] == "end" and done.events[-1][1]["state"] == "done"
    assert done.events[-1][1]["owner"] == OWNER
    _answers_as_the_matrix_says(tls_api, done.job_id)  # the whole role matrix over https too
    assert "refused GET /api/v1/users from 127.0.0.1: 403 forbidden (user api-ann)" in (
        tls_api.log()
    )

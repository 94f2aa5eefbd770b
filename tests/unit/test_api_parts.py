"""The API's pure parts: a submission checked as untrusted input, the routes table against its
handlers and its OpenAPI document, the client version gate, the pages' session cookie, and the
event stream's order (status at each change, keepalives, end)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from farm.core import cost
from farm.core.spec import build_render_spec
from farm.web import session
from farm.web.api.answers import ApiError
from farm.web.api.app import HANDLERS
from farm.web.api.events import job_events
from farm.web.api.openapi import document
from farm.web.api.routes import ROUTES, find
from farm.web.api.validate import job_spec, submission
from farm.web.api.versions import too_old

SHA = "ab" * 32


def _spec() -> dict[str, Any]:
    spec = build_render_spec(source_name="shot.blend", frames="1-48", chunk_size=4,
                             resolution="320x180", fps=24, samples=8, codec="h264")  # fmt: skip
    return spec.to_json()


def _body(**more: Any) -> dict[str, Any]:
    source = {"sha256": SHA, "size": 10, "suffix": ".blend"}
    return {"spec": _spec(), "source": source, "assets": None, **more}


def _refusal(value: Any) -> str:
    with pytest.raises(ApiError) as refused:
        job_spec(value, max_chunks=100)
    assert refused.value.status == 400 and refused.value.code == "bad_spec"
    return str(refused.value)


def test_a_spec_the_cli_built_reads_back_as_it_was_and_without_its_asset_list() -> None:
    data = _spec() | {"assets_key": "jobs/someone-elses/assets.json", "missing_assets": ["x"]}
    spec = job_spec(data, max_chunks=100)
    assert (spec.frames.count, spec.chunk_size, str(spec.resolution)) == (48, 4, "320x180")
    assert (spec.assets_key, spec.missing_assets) == (None, ())


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"frames": {"first": 9, "last": 2, "step": 1}}, "ends before it starts"),
        ({"frames": {"first": "1", "last": 2, "step": 1}}, "spec.frames.first must be a int"),
        ({"resolution": {"width": 321, "height": 180}}, "odd side"),
        ({"samples": True}, "spec.samples must be a int"),
        ({"samples": 0}, "samples 0"),
        ({"fps": 1e9}, "fps"),
        ({"engine": "MYSTERY"}, "engine 'MYSTERY'"),
        ({"codec": "mpeg2"}, "spec.codec must be one of"),
        ({"chunk_size": 1, "frames": {"first": 0, "last": 5000, "step": 1}}, "at most 100"),
        ({"source_name": "../../etc/passwd"}, "not a file name"),
        ({"overrides": ["frames", "shell"]}, "overrides"),
        ({"shell": "sh"}, "fields a job spec does not"),
        ({"kind": "transcode"}, "master"),
    ],
)
def test_a_spec_the_cli_would_refuse_is_refused_naming_what(
    change: dict[str, Any], said: str
) -> None:
    assert said in _refusal(_spec() | change)


def test_a_spec_missing_a_field_or_not_an_object_is_refused() -> None:
    data = _spec()
    del data["codec"]
    assert "spec.codec is missing" in _refusal(data)
    assert "must be an object" in _refusal(["not", "a", "spec"])


def test_a_submissions_own_fields_are_checked() -> None:
    found = submission(_body(priority=80, project="spring"), max_chunks=100, webhook_allow="")
    assert (found.priority, found.project, found.source.key) == (
        80,
        "spring",
        f"scenes/{SHA}.blend",
    )
    for change, field in [
        ({"priority": 101}, "priority"),
        ({"priority": True}, "priority"),
        ({"project": "../x"}, "project"),
        ({"max_cost": -1}, "max_cost"),
        ({"notify": "file:///etc/passwd"}, "notify"),
        ({"notify": "http://127.0.0.1:9/hook"}, "notify"),
        ({"source": {"sha256": "ABC", "size": 1, "suffix": ".blend"}}, "sha256"),
        ({"source": {"sha256": SHA, "size": 1, "suffix": ".mov"}}, ".blend"),
        ({"unknown": 1}, "unknown"),
    ]:
        with pytest.raises(ApiError) as refused:
            submission(_body(**change), max_chunks=100, webhook_allow="")
        assert refused.value.status == 400 and field in str(refused.value), change


def test_a_manifest_path_that_leaves_the_tree_is_refused() -> None:
    asset = {"path": "../../home/someone/.ssh/id_ed25519", "sha256": SHA, "size_bytes": 1}
    manifest = {"version": 1, "scene": "shot.blend", "assets": [asset]}
    with pytest.raises(ApiError) as refused:
        submission(_body(assets=manifest), max_chunks=100, webhook_allow="")
    assert "steps outside the job's tree" in str(refused.value)
    remapped = {**manifest, "assets": [], "remap": {"/abs/tex.png": "//../tex.png"}}
    with pytest.raises(ApiError):
        submission(_body(assets=remapped), max_chunks=100, webhook_allow="")


def test_a_file_over_one_put_is_413_naming_it() -> None:
    huge = {"path": "cache/fluid.vdb", "sha256": SHA, "size_bytes": 6 << 30}
    manifest = {"version": 1, "scene": "shot.blend", "assets": [huge]}
    with pytest.raises(ApiError) as refused:
        submission(_body(assets=manifest), max_chunks=100, webhook_allow="")
    assert refused.value.status == 413 and "cache/fluid.vdb" in str(refused.value)


def test_every_route_has_a_handler_and_is_in_the_document() -> None:
    assert set(HANDLERS) == {r.name for r in ROUTES} - {"openapi"}
    doc = document("0.1.0")
    listed = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    assert listed == {(r.path, r.method) for r in ROUTES}
    assert len({r.name for r in ROUTES}) == len(ROUTES)
    json.dumps(doc)  # it is JSON


def test_a_path_finds_its_route_or_says_which_methods_it_takes() -> None:
    route, params, _ = find("PUT", "/api/v1/jobs/j-1/priority")
    assert route is not None and route.name == "priority" and params == {"id": "j-1"}
    assert find("DELETE", "/api/v1/jobs/j-1") == (None, {}, ["GET"])
    assert find("GET", "/api/v1/jobs/../users") == (None, {}, [])


def test_a_client_older_than_the_minimum_is_too_old() -> None:
    assert too_old("0.0.9", "0.1.0") and too_old("0.1", "0.1.1")
    assert not too_old("0.1.0", "0.1.0") and not too_old("0.1", "0.1.0")
    assert not too_old("1.0.0rc1", "0.1.0")
    with pytest.raises(ValueError):
        too_old("latest", "0.1.0")


def test_a_session_cookie_is_read_back_only_as_signed_and_until_it_ends() -> None:
    key = session.session_key("flower-password")
    value = session.issue(key, "ann", token_expires=None, now=1000.0)
    found = session.read(key, value, now=1001.0)
    assert found is not None and (found.name, found.issued) == ("ann", 1000.0)
    assert session.read(key, value, now=1000.0 + session.SESSION_S) is None
    assert session.read(session.session_key("another"), value, now=1001.0) is None
    assert session.read(key, value.replace("ann", "ada"), now=1001.0) is None
    short = session.issue(key, "ann", token_expires=1100.0, now=1000.0)
    assert session.read(key, short, now=1101.0) is None
    header = session.cookie_header(value, secure=True)[1]
    assert "HttpOnly" in header and "SameSite=Strict" in header and header.endswith("Secure")
    assert session.from_cookies(f"a=b; {session.COOKIE}={value}; c=d") == value


class FakeLedger:
    """A job's record as it moves: each read of it gives the next state in `states`."""

    def __init__(self, states: list[str]) -> None:
        self.states = states
        self.reads = 0

    def job(self, job_id: str) -> dict[str, str]:
        state = self.states[min(self.reads, len(self.states) - 1)]
        self.reads += 1
        return {"id": job_id, "kind": "render", "state": state, "chunks_total": "0",
                "frames_total": "4", "owner": "ann"}  # fmt: skip

    def chunks(self, job_id: str) -> list[dict[str, str]]:
        return []

    def spend(self, job_id: str, job: dict[str, str] | None = None) -> cost.Spend:
        return cost.spend_of(job or {}, cost.job_cost({}), 0)

    def job_fields(self, job_ids: list[str], *names: str) -> list[tuple[str, ...]]:
        return [tuple("" for _ in names) for _ in job_ids]

    def children(self, job_id: str) -> list[str]:
        return []

    def group(self, group_id: str) -> list[str]:
        return []


def test_the_events_say_each_change_keep_alive_and_end_with_the_job() -> None:
    now = [0.0]
    ledger = FakeLedger(["queued", "queued", "queued", "running", "running", "done"])

    def clock() -> float:
        now[0] += 10.0  # every poll is 10 s after the last: a keepalive falls due
        return now[0]

    sent = list(job_events(ledger, "j1", keepalive_s=15.0, clock=clock))
    names = [chunk.split(b"\n")[0] for chunk in sent]
    assert names == [b"event: status", b"", b": keepalive", b"event: status", b"", b"event: end"]
    end = json.loads(sent[-1].split(b"\n")[1].removeprefix(b"data: "))
    assert (end["state"], end["owner"]) == ("done", "ann")

"""The API's routes, version 1, as one table: method, path, the Action the caller's role must be
allowed (farm.core.access), whether it acts on a job (its owner decides for an artist), the body
it takes and its limit, its query parameters and what it answers. FarmAPI serves this table and
farm.web.api.openapi describes it: what is served and what is documented cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from farm.core.access import Action

BASE = "/api/v1"
SMALL_BODY = 64 << 10
"""Every request body but a submission's: a priority, a user, a retry's flag."""
LARGE_BODY = 8 << 20
"""A submission's body (its spec and its scene's manifest: a few hundred bytes a file) and an
upload's list of files."""
_PARAMS = {"id": r"(?P<id>[\w-]+)", "name": r"(?P<name>[a-z0-9][a-z0-9._-]{0,63})"}
"""Path parameters: a job id (letters, digits, - and _, as farm.web.app reads one), a user name
(farm.control.users.NAME)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Param:
    """A query parameter."""

    name: str
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    method: str
    path: str
    """As OpenAPI writes it: `/api/v1/jobs/{id}`."""
    name: str
    """The handler's name in FarmAPI, and the operationId."""
    summary: str
    action: Action | None
    """None: answered without a token (the version, the OpenAPI document)."""
    on_job: bool = False
    """The path names a job: it must exist (404), and an artist may act only on their own where
    the action reaches no further."""
    body: str | None = None
    """The request body's schema (farm.web.api.schemas), or None for none."""
    body_max_bytes: int = SMALL_BODY
    query: tuple[Param, ...] = ()
    answer: str = ""
    """The schema of the success answer's body."""
    status: int = 200
    content_type: str = "application/json"
    tags: tuple[str, ...] = field(default=())

    def match(self, path: str) -> dict[str, str] | None:
        found = _pattern(self.path).fullmatch(path)
        return found.groupdict() if found else None


@cache
def _pattern(path: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", path)  # literal, parameter, literal, ...
    return re.compile("".join(_PARAMS[p] if i % 2 else re.escape(p) for i, p in enumerate(parts)))


_JOB = f"{BASE}/jobs/{{id}}"
ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/openapi.json", name="openapi", action=None, answer="OpenAPI",
          summary="This document.", tags=("meta",)),
    Route(method="GET", path=f"{BASE}/version", name="version", action=None, answer="Version",
          summary="The API's version, the farm's, and the oldest client it serves.",
          tags=("meta",)),
    Route(method="GET", path=f"{BASE}/whoami", name="whoami", action=Action.WHOAMI,
          answer="WhoAmI", summary="The token's user and role.", tags=("meta",)),
    Route(method="POST", path=f"{BASE}/uploads", name="uploads", action=Action.UPLOAD,
          body="UploadRequest", body_max_bytes=LARGE_BODY, answer="UploadOffer",
          summary="Which of a job's files the store holds, and a presigned PUT (1 h) to a "
          "staging key for each of the others.", tags=("submit",)),
    Route(method="POST", path=f"{BASE}/jobs", name="submit", action=Action.SUBMIT,
          body="Submission", body_max_bytes=LARGE_BODY, answer="Submitted", status=201,
          summary="A new job, owned by the caller, from a source and files uploaded by hash: "
          "staged uploads are hashed and refused if they do not match.", tags=("submit",)),
    Route(method="POST", path=f"{BASE}/estimate", name="estimate", action=Action.ESTIMATE,
          body="Submission", body_max_bytes=LARGE_BODY, answer="Estimate",
          summary="What the job would take and cost; nothing is queued (a short probe job "
          "runs first when the farm has no timings of the scene).", tags=("submit",)),
    Route(method="GET", path=f"{BASE}/jobs", name="list_jobs", action=Action.LIST_JOBS,
          answer="JobList", summary="The farm's jobs, newest first.", tags=("jobs",),
          query=(Param(name="limit", schema={"type": "integer", "minimum": 1, "maximum": 1000,
                                              "default": 20}, description="How many jobs."),)),
    Route(method="GET", path=_JOB, name="read_job", action=Action.READ_JOB, on_job=True,
          answer="JobStatus", summary="One job, as `farm status --json` prints it.",
          tags=("jobs",)),
    Route(method="GET", path=f"{_JOB}/events", name="events", action=Action.EVENTS, on_job=True,
          answer="Events", content_type="text/event-stream", tags=("jobs",),
          summary="The job as server-sent events: `status` at once and at each change, a "
          "keepalive comment every 15 s, `end` with the last summary when it ends."),
    Route(method="POST", path=f"{_JOB}/pause", name="pause", action=Action.CONTROL, on_job=True,
          answer="JobStatus", summary="No new chunk starts; running ones finish.",
          tags=("control",)),
    Route(method="POST", path=f"{_JOB}/resume", name="resume", action=Action.CONTROL,
          on_job=True, body="Resume", answer="JobStatus", tags=("control",),
          summary="Back to running, with a new budget if given."),
    Route(method="POST", path=f"{_JOB}/cancel", name="cancel", action=Action.CONTROL,
          on_job=True, answer="JobStatus", tags=("control",),
          summary="Queued chunks never start, running ones stop within seconds."),
    Route(method="POST", path=f"{_JOB}/retry", name="retry", action=Action.CONTROL, on_job=True,
          body="Retry", answer="JobStatus", tags=("control",),
          summary="A failed or cancelled job's chunks queued again; done frames are reused."),
    Route(method="PUT", path=f"{_JOB}/priority", name="priority", action=Action.CONTROL,
          on_job=True, body="Priority", answer="JobStatus", tags=("control",),
          summary="The job's priority (0..100, higher runs first)."),
    Route(method="GET", path=f"{_JOB}/output", name="output", action=Action.OUTPUT, on_job=True,
          answer="Output", tags=("files",),
          summary="Presigned GETs (10 min) of the job's video and, with frames=1, its frames.",
          query=(Param(name="frames", schema={"type": "integer", "enum": [0, 1], "default": 0},
                       description="1: the frames too (and File Output files)."),
                 Param(name="version", schema={"type": "integer", "minimum": 1},
                       description="An earlier video, kept when frames were fixed."))),
    Route(method="GET", path=f"{_JOB}/logs", name="logs", action=Action.LOGS, on_job=True,
          answer="Logs", summary="Presigned GETs (10 min) of each attempt's log.",
          tags=("files",),
          query=(Param(name="chunk", schema={"type": "integer", "minimum": 0},
                       description="Only this chunk's logs."),)),
    Route(method="GET", path=f"{BASE}/users", name="list_users", action=Action.MANAGE_USERS,
          answer="UserList", summary="Every user, revoked ones too (never a token).",
          tags=("users",)),
    Route(method="POST", path=f"{BASE}/users", name="add_user", action=Action.MANAGE_USERS,
          body="NewUser", answer="AddedUser", status=201, tags=("users",),
          summary="A new user; the answer holds their token, the one time it is shown."),
    Route(method="DELETE", path=f"{BASE}/users/{{name}}", name="revoke_user",
          action=Action.MANAGE_USERS, answer="User", tags=("users",),
          summary="The user's token is refused from now on."),
)  # fmt: skip


def find(method: str, path: str) -> tuple[Route | None, dict[str, str], list[str]]:
    """The route for `method` and `path` with its path parameters; else None and the methods
    the path has (empty: no such path)."""
    methods = []
    for route in ROUTES:
        params = route.match(path)
        if params is None:
            continue
        if route.method == method or (method == "HEAD" and route.method == "GET"):
            return route, params, []
        methods.append(route.method)
    return None, {}, methods


def streams(path: str) -> bool:
    """Whether `path` answers with a stream (farm.web.server writes it as it is made)."""
    return any(r.content_type == "text/event-stream" and r.match(path) is not None for r in ROUTES)

"""Who may call which part of the farm's API (pure): the people's roles, the kinds of request the
API answers, and one table of which role may make which, on any job or only on their own.

These are the roles of people holding API tokens (farm.control.users), not the roles of the
farm's own processes (farm.core.roles), which say what each process may do to Redis and the store.
"""

from __future__ import annotations

from enum import Enum, StrEnum


class UserRole(StrEnum):
    ARTIST = "artist"
    """Submits jobs, watches every job, and steers, fetches and reads the logs of their own."""
    WRANGLER = "wrangler"
    """Watches and steers the whole farm: pauses, cancels, retries and reprioritises anyone's job."""
    ADMIN = "admin"
    """A wrangler who also adds and revokes users."""


class Action(StrEnum):
    """One member per kind of API route (farm.web.api)."""

    VERSION = "version"
    """GET /version: which API and farm version answers."""
    WHOAMI = "whoami"
    """GET /whoami: the token's user and role."""
    UPLOAD = "upload"
    """POST /uploads: presigned PUTs for a job's scene and assets."""
    SUBMIT = "submit"
    """POST /jobs: a new job, owned by the caller."""
    ESTIMATE = "estimate"
    """POST /estimate: what a job would cost, nothing queued."""
    LIST_JOBS = "list_jobs"
    """GET /jobs: the farm's jobs."""
    READ_JOB = "read_job"
    """GET /jobs/{id}: one job's summary."""
    EVENTS = "events"
    """GET /jobs/{id}/events: a job's summary as it changes."""
    CONTROL = "control"
    """pause, resume, cancel, retry and priority of a job."""
    OUTPUT = "output"
    """GET /jobs/{id}/output: presigned GETs of a job's video and frames."""
    LOGS = "logs"
    """GET /jobs/{id}/logs: presigned GETs of a job's logs."""
    MANAGE_USERS = "manage_users"
    """GET, POST and DELETE /users: list, add and revoke users."""


class Reach(Enum):
    """How far a role's right to an action goes."""

    NONE = "none"
    """Never."""
    OWN = "own"
    """Only on jobs the user owns."""
    ANY = "any"
    """On any job (or, for an action on no job, always)."""


_WATCH = {Action.VERSION, Action.WHOAMI, Action.UPLOAD, Action.SUBMIT, Action.ESTIMATE,
          Action.LIST_JOBS, Action.READ_JOB, Action.EVENTS}  # fmt: skip
"""What every role may do: come in, submit, and see what the farm is doing."""
_STEER = {Action.CONTROL, Action.OUTPUT, Action.LOGS}
"""What changes a job or hands out its files: an artist's own jobs, a wrangler's any."""

MATRIX: dict[UserRole, dict[Action, Reach]] = {
    UserRole.ARTIST: {
        **{a: Reach.ANY for a in _WATCH},
        **{a: Reach.OWN for a in _STEER},
        Action.MANAGE_USERS: Reach.NONE,
    },
    UserRole.WRANGLER: {
        **{a: Reach.ANY for a in _WATCH | _STEER},
        Action.MANAGE_USERS: Reach.NONE,
    },
    UserRole.ADMIN: {a: Reach.ANY for a in Action},
}
"""Each role's reach for each action: the whole policy, as data."""


def allowed(role: UserRole, action: Action, *, owner: str, user: str) -> bool:
    """Whether `user`, in `role`, may do `action` on a job that `owner` owns (`owner` "" for an
    action on no job, or a job that records no owner: only a role reaching ANY may then)."""
    reach = MATRIX[role][action]
    return reach is Reach.ANY or (reach is Reach.OWN and bool(owner) and owner == user)


def roles_allowed(action: Action) -> list[UserRole]:
    """The roles that may do `action` on any job, for a refusal that says who may."""
    return [role for role in UserRole if MATRIX[role][action] is Reach.ANY]

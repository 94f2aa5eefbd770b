"""Each process of a local farm holds only its role's credentials (farm.core.roles), and Redis and
the store let each role do only its part: a worker cannot flush Redis, rewrite the job list or
replace a job's spec; the CLI cannot write a job's frames; no one but the admin reconfigures.

Commands that would harm the farm if they were allowed (FLUSHALL, SHUTDOWN ...) are asked of
Redis by `ACL DRYRUN`, which answers whether the user may run them without running them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from botocore.exceptions import ClientError

from farm.adapters.settings import load_settings
from farm.adapters.store import Store
from tests.conftest import DEMO, LocalFarm
from tests.e2e.farmtools import submit, wait_final

pytestmark = pytest.mark.e2e

SCRIPT = "return 1"
SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()  # as EVALSHA names it
JOB = "j-least-privilege"

DENIED_TO_EVERY_ROLE = [
    ["FLUSHALL"], ["FLUSHDB"], ["CONFIG", "GET", "maxmemory"], ["CONFIG", "SET", "save", ""],
    ["ACL", "LIST"], ["ACL", "SETUSER", "x"], ["KEYS", "*"], ["SCAN", "0"], ["DEBUG", "SLEEP", "0"],
    ["SHUTDOWN"], ["SCRIPT", "FLUSH"], ["FUNCTION", "FLUSH"], ["MODULE", "LIST"],
    ["REPLICAOF", "NO", "ONE"], ["MIGRATE", "h", "1", "farm:jobs", "0", "1"], ["SAVE"],
    ["BGREWRITEAOF"], ["CLIENT", "KILL", "ID", "1"], ["MONITOR"], ["SET", "not-the-farms", "1"],
    ["PUBLISH", "elsewhere", "x"],
]  # fmt: skip
ALLOWED_TO_EVERY_ROLE = [
    ["PING"], ["HGETALL", f"farm:job:{JOB}"], ["ZRANGE", "farm:jobs", "0", "-1"],
    ["HSET", f"farm:job:{JOB}", "state", "x"], ["LPUSH", "render", "m"], ["LLEN", "encode\x06\x165"],
    ["SMEMBERS", "_kombu.binding.render"], ["SCRIPT", "LOAD", SCRIPT],
    ["EVALSHA", SHA, "1", f"farm:chunk:{JOB}:0"], ["PUBLISH", "farm:wake:w1", "x"],
    ["PUBLISH", "/0.celeryev/task.sent", "x"],
]  # fmt: skip
BY_ROLE: dict[str, list[tuple[list[str], bool]]] = {
    "worker": [
        (["DEL", "farm:jobs"], False), (["ZADD", "farm:jobs", "1", JOB], False),
        (["ZREM", "farm:jobs:live", JOB], False), (["ZRANGE", "farm:jobs:live", "0", "-1"], True),
        (["EVALSHA", SHA, "1", "farm:jobs"], False), (["HSET", "unacked", "t", "m"], True),
        (["HSET", "farm:workers", "w1", "{}"], True), (["ZADD", "farm:leases", "1", "j:0"], True),
    ],
    "control": [
        (["ZADD", "farm:jobs:live", "1", JOB], True), (["HVALS", "unacked"], True),
        (["SET", "unacked_mutex", "1", "NX"], True),
    ],
    "cli": [
        (["ZADD", "farm:jobs", "1", JOB], True), (["HVALS", "unacked"], False),
        (["HSET", "unacked", "t", "m"], False),
    ],
}  # fmt: skip


def _matrix() -> list[tuple[str, list[str], bool]]:
    rows = [(role, argv, False) for role in BY_ROLE for argv in DENIED_TO_EVERY_ROLE]
    rows += [(role, argv, True) for role in BY_ROLE for argv in ALLOWED_TO_EVERY_ROLE]
    rows += [(role, argv, allowed) for role, row in BY_ROLE.items() for argv, allowed in row]
    return rows


def _role_settings(farm: LocalFarm, role: str) -> Any:
    path = farm.config if role == "cli" else farm.data / "roles" / f"{role}.json"
    return load_settings(env={}, config_path=path)


@pytest.fixture(scope="module")
def admin(local_farm: LocalFarm) -> redis.Redis:
    return redis.Redis.from_url(local_farm.admin().redis_url, decode_responses=True)


@pytest.mark.parametrize(
    ("role", "argv", "allowed"),
    _matrix(),
    ids=[f"{r}-{'may' if a else 'not'}-{' '.join(v)[:30]}" for r, v, a in _matrix()],
)
def test_each_roles_redis_user_may_run_only_its_commands_on_its_keys(
    admin: redis.Redis, role: str, argv: list[str], allowed: bool
) -> None:
    # GIVEN the farm's Redis, with a user for the role
    assert admin.acl_getuser(role), f"no Redis user {role}"
    # WHEN asked whether the user may run argv (ACL DRYRUN runs nothing)
    try:
        answer = admin.execute_command("ACL", "DRYRUN", role, *argv)
    except redis.ResponseError as exc:  # Redis 7.0 answers a refusal as an error
        answer = str(exc)
    # THEN it says OK exactly for what the role needs
    assert (answer == "OK") is allowed, f"{role} {argv}: {answer}"


@pytest.mark.parametrize("role", ["worker", "control", "cli"])
def test_each_process_config_holds_its_roles_redis_user_and_no_other(
    local_farm: LocalFarm, role: str
) -> None:
    settings = _role_settings(local_farm, role)
    assert urlsplit(settings.redis_url).username == role
    client = redis.Redis.from_url(settings.redis_url)
    assert client.ping()
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set("not-the-farms", "1")


def test_the_default_user_is_off_so_the_farms_first_password_alone_opens_nothing(
    local_farm: LocalFarm,
) -> None:
    """The admin's password without the admin's name (what every client sent before roles) and
    no password at all are both refused."""
    url = local_farm.admin().redis_url.replace("redis://admin:", "redis://:", 1)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(url).ping()
    anonymous = url.split("@", 1)[1]
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(f"redis://{anonymous}").ping()


def test_workers_hold_no_flower_password_no_webhook_secret_and_no_admin_password(
    local_farm: LocalFarm,
) -> None:
    keys = json.loads((local_farm.data / "secrets.json").read_text())
    secret = [keys[n] for n in ("flower_password", "webhook_secret", "redis_password",
                                 "s3_secret_key", "redis_password_control", "s3_secret_key_cli")]  # fmt: skip
    config = (local_farm.data / "roles" / "worker.json").read_text()
    assert not [s for s in secret if s in config]
    state = json.loads((local_farm.data / "farm-up.json").read_text())
    for name, pid in state["pids"].items():
        if name.startswith("worker"):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"FARM_CONFIG={local_farm.data / 'roles/worker.json'}".encode() in environ
    assert os.stat(local_farm.data / "roles" / "worker.json").st_mode & 0o077 == 0


PUT, GET, DELETE = "put", "get", "delete"
STORE_MATRIX: dict[str, list[tuple[str, str, bool]]] = {
    "worker": [
        (PUT, f"jobs/{JOB}/frames/000001.png", True), (PUT, f"jobs/{JOB}/thumbs/000001.jpg", True),
        (PUT, f"jobs/{JOB}/masters/000001.c1/f.exr", True),
        (PUT, f"jobs/{JOB}/file_output/000001.c1/Depth/a.exr", True),
        (PUT, f"jobs/{JOB}/segments/00000-claim1.mp4", True),
        (PUT, f"jobs/{JOB}/manifests/00000.json", True), (PUT, f"jobs/{JOB}/logs/a.log", True),
        (PUT, f"jobs/{JOB}/output.mp4", True), (DELETE, f"jobs/{JOB}/frames/000001.png", True),
        (PUT, f"jobs/{JOB}/spec.json", False), (PUT, f"jobs/{JOB}/assets.json", False),
        (DELETE, f"jobs/{JOB}/spec.json", False), (PUT, "scenes/lp.blend", False),
        (PUT, "assets/lp", False), (DELETE, "scenes/lp.blend", False), (PUT, "elsewhere/x", False),
        (GET, "scenes/lp.blend", True), (GET, "assets/lp", True), (GET, f"jobs/{JOB}/spec.json", True),
        (GET, "elsewhere/x", False),
    ],
    "cli": [
        (PUT, "scenes/lp.blend", True), (PUT, "assets/lp", True),
        (PUT, f"jobs/{JOB}/spec.json", True), (PUT, f"jobs/{JOB}/assets.json", True),
        (PUT, f"jobs/{JOB}/frames/000001.png", False), (PUT, f"jobs/{JOB}/output.mp4", False),
        (DELETE, f"jobs/{JOB}/output.mp4", False), (PUT, f"jobs/{JOB}/manifests/00000.json", False),
        (GET, f"jobs/{JOB}/output.mp4", True), (GET, "scenes/lp.blend", True),
        (GET, "elsewhere/x", False),
    ],
    # The API (farm web) keeps the users, signs staged uploads' PUTs, moves them to their
    # content-addressed keys and writes a submitted job's record; a job's outputs stay the
    # workers'. (SeaweedFS's Write covers DELETE: the IAM policy is narrower, tests/infra.)
    "control": [
        (GET, f"jobs/{JOB}/logs/a.log", True), (GET, f"jobs/{JOB}/spec.json", True),
        (PUT, f"jobs/{JOB}/spec.json", True), (PUT, f"jobs/{JOB}/assets.json", True),
        (PUT, f"jobs/{JOB}/frames/000001.png", False),
        (PUT, f"jobs/{JOB}/manifests/00000.json", False),
        (PUT, "scenes/lp.blend", True), (GET, "scenes/lp.blend", True),
        (PUT, "assets/lp", True), (GET, "assets/lp", True),
        (PUT, "users/lp.json", True), (GET, "users/lp.json", True),
        (PUT, "uploads/lp", True), (GET, "uploads/lp", True), (DELETE, "uploads/lp", True),
        (PUT, "elsewhere/x", False), (GET, "elsewhere/x", False),
    ],
}  # fmt: skip
# No one but the control plane (and the admin) reads or writes the users' records (their tokens'
# hashes) or the staged uploads.
for _role in ("worker", "cli"):
    STORE_MATRIX[_role] += [(PUT, "users/lp.json", False), (GET, "users/lp.json", False),
                            (PUT, "uploads/lp", False), (GET, "uploads/lp", False)]  # fmt: skip
STORE_ROWS = [(role, *row) for role, rows in STORE_MATRIX.items() for row in rows]


@pytest.fixture(scope="module")
def stored(local_farm: LocalFarm) -> Store:
    """The admin's store, holding one object at each key the matrix reads or deletes."""
    store: Store = local_farm.store()
    for _, _, key, _ in STORE_ROWS:
        store.put_bytes(key, b"x")
    return store


def _refused(call: Any) -> bool:
    try:
        call()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code in ("AccessDenied", "403"):
            return True
        raise
    return False


@pytest.mark.parametrize(
    ("role", "op", "key", "allowed"),
    STORE_ROWS,
    ids=[f"{r}-{'may' if a else 'not'}-{o}-{k.split('/', 2)[-1]}" for r, o, k, a in STORE_ROWS],
)
def test_each_roles_store_identity_may_write_only_its_prefixes(
    local_farm: LocalFarm, stored: Store, role: str, op: str, key: str, allowed: bool
) -> None:
    # GIVEN the role's own store keys, from the config file its processes read
    s3 = Store.from_settings(_role_settings(local_farm, role)).s3
    bucket = stored.bucket
    calls = {
        PUT: lambda: s3.put_object(Bucket=bucket, Key=key, Body=b"y"),
        GET: lambda: s3.get_object(Bucket=bucket, Key=key)["Body"].read(),
        DELETE: lambda: s3.delete_object(Bucket=bucket, Key=key),
    }
    # WHEN it tries; THEN only what the role does is let through
    assert _refused(calls[op]) is not allowed, f"{role} {op} {key}"
    if op != GET:
        stored.put_bytes(key, b"x")  # as it was, for the next row


@pytest.mark.parametrize(
    "key", [f"jobs/{JOB}/frames/../spec.json", f"jobs/{JOB}/frames/%2e%2e/spec.json"]
)
def test_a_worker_cannot_reach_a_spec_through_dot_dot_in_an_output_key(
    local_farm: LocalFarm, stored: Store, key: str
) -> None:
    """Its write actions match `jobs/*/frames/*`: a key that climbs out of frames/ must not
    land on the spec (refused, or stored under its own literal name)."""
    s3 = Store.from_settings(_role_settings(local_farm, "worker")).s3
    spec = f"jobs/{JOB}/spec.json"
    stored.put_bytes(spec, b"the spec")
    with contextlib.suppress(ClientError):  # refused is as good as stored apart
        s3.put_object(Bucket=stored.bucket, Key=key, Body=b"evil")
    assert stored.get_bytes(spec) == b"the spec"


@pytest.mark.parametrize("role", ["worker", "control", "cli"])
def test_no_role_but_the_admin_makes_or_drops_buckets(local_farm: LocalFarm, role: str) -> None:
    s3 = Store.from_settings(_role_settings(local_farm, role)).s3
    name = f"lp-{uuid.uuid4().hex[:8]}"
    assert _refused(lambda: s3.create_bucket(Bucket=name))
    assert _refused(lambda: s3.delete_bucket(Bucket=load_settings(
        env={}, config_path=local_farm.config).s3_bucket))  # fmt: skip


def test_a_render_and_its_stitch_need_nothing_the_roles_refuse(
    local_farm: LocalFarm, admin: redis.Redis
) -> None:
    """The roles are enough: a render job goes through render, segment and stitch with each
    process on its own credentials, and Redis logged no refusal of any role meanwhile."""
    admin.acl_log_reset()
    job = submit(local_farm, DEMO, "--frames", "1-4", "--chunk-size", "2")
    assert wait_final(local_farm, job, 600)["state"] == "done", local_farm.logs()
    assert local_farm.farm("status", job).returncode == 0
    refusals = {(e["username"], e["reason"], e["object"]) for e in admin.acl_log()}
    assert not refusals, refusals

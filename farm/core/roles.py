"""Who may do what on a farm (pure): the roles its processes run as, each role's Redis ACL user
and its store (S3) actions. `farm up` and `farm up --containers` hand each process only its
role's credentials, so a worker cannot rewrite any job, flush Redis, or replace a job's spec.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum

from farm.core.keys import PROJECTS_PREFIX, REDIS_PREFIX, USERS_PREFIX
from farm.core.pipeline import Queue


class Role(StrEnum):
    ADMIN = "admin"
    """`farm up`, `farm down` and operators: every Redis command and key, the store's Admin."""
    CONTROL = "control"
    """The reconciler, Flower and `farm web`: the ledger, the queues, reads of the store and the
    end of an abandoned upload; and for the API `farm web` serves, the users' records, staged
    uploads (its keys sign their presigned PUTs), and what a submit through it writes: scenes,
    assets, a job's spec and asset list."""
    WORKER = "worker"
    """Celery workers (render, segment, transcode, stitch): the ledger's chunk keys, the queues,
    reads of scenes, assets and jobs, writes of a job's outputs only."""
    CLI = "cli"
    """The people who submit, watch, fetch and cancel: the ledger, sending to the queues, writes
    of scenes, assets and a job's spec and asset list."""


SERVICE_ROLES = {"reconciler": Role.CONTROL, "flower": Role.CONTROL, "web": Role.CONTROL,
                 "worker": Role.WORKER}  # fmt: skip
"""The role of each process `farm up` starts (and of each compose service of docker-compose.yml
that runs the farm's image)."""
CLIENT_ROLES = (Role.CONTROL, Role.WORKER, Role.CLI)
"""The roles whose credentials go into a config file; admin's stay in secrets.json."""


def redis_password_name(role: Role) -> str:
    """The secrets.json entry holding `role`'s Redis password (admin keeps the farm's first)."""
    return "redis_password" if role is Role.ADMIN else f"redis_password_{role}"


def s3_key_names(role: Role) -> tuple[str, str]:
    """The secrets.json entries holding `role`'s store access key and secret key."""
    if role is Role.ADMIN:
        return "s3_access_key", "s3_secret_key"
    return f"s3_access_key_{role}", f"s3_secret_key_{role}"


# ── Redis ─────────────────────────────────────────────────────────────────────────────────────
_COMMANDS = (
    "-@all", "+@connection", "+@read", "+@write", "+@pubsub", "+@transaction", "+@scripting",
    # No FLUSHALL/FLUSHDB, KEYS, CONFIG, ACL, DEBUG, SHUTDOWN, MODULE, REPLICAOF, MIGRATE,
    # SAVE, CLIENT KILL, SORT ...: every command Redis counts as dangerous or admin.
    "-@dangerous", "-@admin", "+time",  # the ledger's scripts read the server's clock
    # Left in the categories above but no role's business: dropping every script, killing
    # one, functions, listing every key name (SCAN), moving keys between databases.
    "-script|flush", "-script|kill", "-function", "-scan", "-randomkey", "-move",
)  # fmt: skip
"""The commands of every role but admin: the data commands the ledger's scripts, kombu and
Celery run (ACL rules also apply to the commands a script calls)."""
_BROKER_KEYS = (
    "_kombu.binding*",  # kombu's exchange bindings (`.` and `_permanent.`)
    *(f"{queue}*" for queue in Queue),  # the queues, one list per priority step each
    "*.celery.pidbox*",  # each worker's broadcast commands, and the replies (ping, cancel)
    "celeryev.*",  # the queue an event receiver (Flower, `celery events`) declares
    # Celery's result backend: the farm's tasks keep no result, but a task a studio adds
    # (FARM_WORKER_INCLUDE) may, and its sender waits on it.
    "celery-task-meta-*",
)
_CONSUMER_KEYS = ("unacked*",)
"""kombu's record of delivered, unacknowledged messages: consumers keep it and bring back what
outlived its visibility (the workers, and Flower, which consumes Celery's events); the reconciler
reads it for lost messages (farm.ledger.fleet). The CLI only sends, and never touches it."""
_CHANNELS = (f"{REDIS_PREFIX}:wake:*", "/0.celeryev/*", "/0.celery.pidbox", "celery-task-meta-*")
"""The ledger's wake-ups, Celery's events and its broadcast commands (kombu's fanout channels
on database 0, the farm's), and the result backend's announcements of kept results."""
_WORKER_LEDGER = tuple(
    f"{REDIS_PREFIX}:{name}"
    for name in (
        "job:*",
        "chunk:*",
        "frames:*",
        "renders:*",
        "blocklist:*",
        "leases",
        "events:*",
        "workers",
        "outbox",
        "noticed:*",
        "measure:*",
        "cost:*",
        "attempts:*",
    )
)
"""Every ledger key a worker's scripts read and write (farm.core.keys); the job lists it only
reads (_WORKER_READ_ONLY): it cannot add, drop or hide a job."""
_WORKER_READ_ONLY = (
    f"{REDIS_PREFIX}:jobs",
    f"{REDIS_PREFIX}:jobs:live*",
    f"{REDIS_PREFIX}:ledger:*",
    f"{REDIS_PREFIX}:children:*",  # which jobs wait for which: the control plane's to write
    f"{REDIS_PREFIX}:group:*",  # `farm submit --each` siblings: the control plane's to write
    # The projects, whose queues it consumes and sends work to again, and their jobs' lists.
    f"{REDIS_PREFIX}:project*",
)


def redis_keys(role: Role) -> tuple[str, ...]:
    """`role`'s key patterns as ACL rules: `~pattern` read and write, `%R~pattern` read only."""
    if role is Role.ADMIN:
        return ("~*",)
    if role is Role.WORKER:
        ledger = (*(f"~{k}" for k in _WORKER_LEDGER), *(f"%R~{k}" for k in _WORKER_READ_ONLY))
    else:
        ledger = (f"~{REDIS_PREFIX}:*",)
    broker = _BROKER_KEYS + (() if role is Role.CLI else _CONSUMER_KEYS)
    return (*ledger, *(f"~{k}" for k in broker))


def password_rule(password: str) -> str:
    """A Redis ACL password rule naming `password` by its SHA-256, so a config never holds it."""
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def _acl_rules(role: Role) -> tuple[str, ...]:
    """`role`'s keys, channels and commands as ACL rules."""
    if role is Role.ADMIN:
        return ("~*", "&*", "+@all")
    return (*redis_keys(role), *(f"&{c}" for c in _CHANNELS), *_COMMANDS)


def redis_acl(role: Role, password: str) -> str:
    """`role`'s ACL user as one redis.conf `user` line; `password` is an ACL password rule
    (password_rule, or a placeholder the container's entrypoint fills in)."""
    rules = ("user", str(role), "on", password, "resetkeys", "resetchannels", *_acl_rules(role))
    return " ".join(rules)


def redis_conf_users(passwords: dict[Role, str], nobodys: str) -> str:
    """The `user` lines of every role (each password an ACL password rule), and the `default`
    user behind `nobodys` password rule: a password made at each start and given to no one (a
    hash of random bytes), so a connection that names no user, or only the farm's first
    password, is refused. The default user keeps every right all the same: Redis 7.0 replays
    the append-only file's transactions (each of the ledger's scripts) as the default user, and
    one without the rights drops every one of them on a restart (NOPERM at EXEC), which lost a
    running job's ledger. Never `nopass`: Redis's protected mode then refuses every client from
    another host (the containers reach Redis over their network)."""
    lines = [f"user default on {nobodys} resetkeys resetchannels ~* &* +@all"]
    lines += [redis_acl(role, password) for role, password in passwords.items()]
    return "\n".join(lines) + "\n"


def redis_image_users() -> str:
    """infra/images/redis/users.acl: every role's user with `@ROLE_SHA256@` where its password's
    SHA-256 goes; the farm-redis image's entrypoint fills them in from REDIS_PASSWORD_<ROLE>, and
    the default user's `@NOBODYS_SHA256@` with the hash of random bytes."""
    return redis_conf_users(
        {role: f"#@{role.upper()}_SHA256@" for role in Role}, "#@NOBODYS_SHA256@"
    )


ELASTICACHE_USERS = "infra/terraform/modules/broker/redis-users.json"
"""Where elasticache_users() is kept, from the repository's root: the farm's Terraform reads it."""


def elasticache_access_string(role: Role) -> str:
    """`role`'s ElastiCache user as an RBAC access string: redis_acl's rules with neither a
    password (ElastiCache sets passwords beside the string and refuses one in it) nor the
    resets (an access string replaces a user's rules whole, and ElastiCache refuses `reset`)."""
    return " ".join(("on", *_acl_rules(role)))


def elasticache_users() -> str:
    """ELASTICACHE_USERS: each ElastiCache user's access string by user name, a role's and the
    `default` user's, which a user group must hold. That one is `off` with no right, unlike
    redis_conf_users' default: ElastiCache keeps no append-only file to replay as the default
    user (its replicas follow the primary's replication stream, its backups are snapshots), so
    nothing runs as default, and a client that names no user is refused. Regenerate with
    `python -c "from farm.core import roles; print(roles.elasticache_users(), end='')" >
    infra/terraform/modules/broker/redis-users.json`."""
    users = {"default": "off -@all"} | {str(r): elasticache_access_string(r) for r in Role}
    return json.dumps(users, indent=2) + "\n"


# ── The store ─────────────────────────────────────────────────────────────────────────────────
WORKER_OUTPUTS = ("frames", "thumbs", "masters", "file_output", "segments", "manifests", "logs")
"""The folders of a job a worker writes (farm.core.keys), besides its delivered output."""


def store_actions(role: Role, bucket: str) -> list[str]:
    """`role`'s SeaweedFS S3 identity actions (weed/s3api/auth_credentials.go: `Action:bucket/
    key-pattern`, `*` matching any characters, `/` included; Write covers PUT, tags given with
    it, DELETE, copy and multipart). A worker writes only a job's outputs: never a spec, an
    asset list, a scene or an asset. The control plane writes the upload of an output it
    abandons (aborting it is a Write), jobs' ends and the ledger's mark; and, serving the API,
    the users, staged uploads (presigned with its keys, then moved to their content-addressed
    key or deleted) and what a submit writes (scenes, assets, spec, asset list)."""
    if role is Role.ADMIN:
        return ["Admin", "Read", "Write", "List", "Tagging"]
    jobs = f"{bucket}/jobs/*"
    # HEAD on the bucket is a Read of the bucket alone. `Read:farm` would read every key (an
    # action without a wildcard is matched against the bucket only); `Read:far?` matches the
    # bucket's own name and no key in it.
    reads = [f"Read:{bucket[:-1]}?", f"Read:{jobs}", f"List:{bucket}"]
    if role is Role.WORKER:
        writes = [f"{jobs}/{folder}/*" for folder in WORKER_OUTPUTS] + [f"{jobs}/output.*"]
        reads += [f"Read:{bucket}/scenes/*", f"Read:{bucket}/assets/*"]
        return [*reads, *(f"Write:{w}" for w in writes)]
    if role is Role.CONTROL:
        # The reconciler keeps jobs' ends and the ledger's mark (farm.control.rebuild).
        ledger = f"{bucket}/ledger/*"
        # The API (farm web): users' records; staged uploads, which it signs PUTs for, reads
        # to hash and moves to their content-addressed keys; a submit's sources (looked up by
        # HEAD first) and the job's record.
        api = [f"{bucket}/{USERS_PREFIX}*", f"{bucket}/uploads/*", f"{bucket}/scenes/*",
               f"{bucket}/assets/*"]  # fmt: skip
        # The projects' records: read back into a ledger that lost them, written by `farm
        # project` on a control plane's host (farm.control.projects).
        projects = f"{bucket}/{PROJECTS_PREFIX}*"
        writes = [f"{jobs}/output.*", f"{jobs}/control.json", ledger, *api,
                  f"{jobs}/spec.json", f"{jobs}/assets.json", projects]  # fmt: skip
        return [*reads, f"Read:{ledger}", *(f"Read:{r}" for r in api), f"Read:{projects}",
                *(f"Write:{w}" for w in writes)]  # fmt: skip
    writes = [f"{bucket}/scenes/*", f"{bucket}/assets/*", f"{jobs}/spec.json",
              f"{jobs}/assets.json", f"{jobs}/control.json"]  # fmt: skip
    # A submit checks by HEAD whether a scene's or asset's bytes are stored already.
    reads += [f"Read:{bucket}/scenes/*", f"Read:{bucket}/assets/*"]
    return [*reads, *(f"Write:{w}" for w in writes)]


def store_identities(keys: dict[Role, tuple[str, str]], bucket: str) -> dict[str, object]:
    """SeaweedFS's identities file (`weed mini -s3.config`): one identity per role, each with
    its (access key, secret key) from `keys` and only its actions."""
    return {
        "identities": [
            {
                "name": f"farm-{role}",
                "credentials": [{"accessKey": access, "secretKey": secret}],
                "actions": store_actions(role, bucket),
            }
            for role, (access, secret) in keys.items()
        ]
    }


def format_store_keys(keys: dict[Role, tuple[str, str]]) -> str:
    """`keys` as the `store_identities` setting: `ROLE=ACCESS_KEY:SECRET_KEY`, comma-separated."""
    return ",".join(f"{role}={access}:{secret}" for role, (access, secret) in keys.items())


def parse_store_keys(text: str) -> dict[Role, tuple[str, str]]:
    """The `store_identities` setting read back; ValueError naming what is wrong."""
    keys: dict[Role, tuple[str, str]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, pair = item.partition("=")
        access, _, secret = pair.partition(":")
        if name not in set(Role) or not access or not secret:
            raise ValueError(
                f"store_identities: {name or item!r} is not ROLE=ACCESS_KEY:SECRET_KEY with a "
                f"ROLE of {', '.join(Role)}"
            )
        keys[Role(name)] = (access, secret)
    return keys

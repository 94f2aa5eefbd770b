"""A local farm's credentials: its secrets (made on first start, kept owner-only in
DATA/secrets.json) and the settings each role reads (farm.core.roles): the CLI's config file,
DATA/roles/worker.json and control.json for the processes `farm up` starts, and the admin's for
whoever must go beyond a role's rights. `farm up` and `farm up --containers` both use them.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from farm.adapters import tls, weedsec
from farm.adapters.private import private_dir, write_private
from farm.adapters.settings import Settings, load_settings, save_settings
from farm.core import roles
from farm.core.roles import Role

HOST = "127.0.0.1"
"""Every server of a local farm listens on loopback only."""


def _s3_access_key() -> str:
    return "FARM" + secrets.token_hex(8).upper()


_SECRETS: dict[str, Callable[[], str]] = {
    "flower_user": lambda: "farm",
    "flower_password": lambda: secrets.token_urlsafe(12),
    "webhook_secret": lambda: secrets.token_urlsafe(24),
    **{name: lambda: secrets.token_urlsafe(32) for name in weedsec.JWT_SECRETS},
    **{roles.redis_password_name(r): lambda: secrets.token_urlsafe(24) for r in Role},
    **{roles.s3_key_names(r)[0]: _s3_access_key for r in Role},
    **{roles.s3_key_names(r)[1]: lambda: secrets.token_urlsafe(30) for r in Role},
}
"""Every secret of a farm and how it is made (secrets.json's entries)."""


def farm_secrets(data: Path) -> dict[str, str]:
    """Generated on first start, kept (owner-only) so the data stays reachable across restarts.
    A farm made before a secret existed (webhooks, the store's JWTs, each role's own Redis
    password and store keys) gets it on its next start."""
    path = data / "secrets.json"
    loaded: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    missing = {name: make() for name, make in _SECRETS.items() if name not in loaded}
    if missing or not path.exists():  # read-only otherwise: `farm user` and the tests call it often
        loaded |= missing
        write_private(path, json.dumps(loaded, indent=2))
    return loaded


def role_password_rules(keys: Mapping[str, str]) -> dict[Role, str]:
    """Each role's Redis password from the farm's secrets, as an ACL rule (its SHA-256)."""
    return {role: roles.password_rule(keys[roles.redis_password_name(role)]) for role in Role}


def role_s3_keys(keys: Mapping[str, str]) -> dict[Role, tuple[str, str]]:
    """Each role's (access key, secret key) for the store from the farm's secrets."""
    return {role: (keys[roles.s3_key_names(role)[0]], keys[roles.s3_key_names(role)[1]])
            for role in Role}  # fmt: skip


def farm_settings(
    base: Settings,
    data: Path,
    ports: Mapping[str, int],
    keys: Mapping[str, str],
    tls_files: tuple[Path, Path, Path] | None = None,
    role: Role = Role.CLI,
) -> Settings:
    """The settings a client of this farm in `role` reads: its addresses on loopback (`ports`:
    redis, s3, flower, web), the role's own Redis user and store keys, and folders; `tls_files`
    (CA, certificate, key) for a TLS farm. A worker gets no Flower password and no webhook
    secret. `farm up` and `farm up --containers` both write them (the CLI's at the config path)."""
    scheme = "https" if tls_files else "http"
    user, password = str(role), keys[roles.redis_password_name(role)]
    redis_url = f"redis://{user}:{password}@{HOST}:{ports['redis']}/0"
    ca, cert, key = (str(p) for p in tls_files) if tls_files else ("", "", "")
    if tls_files:  # rediss_url names no user: the role's goes in front of its password
        url = tls.rediss_url(password, HOST, ports["redis"], tls_files[0])
        redis_url = url.replace("rediss://:", f"rediss://{user}:", 1)
    access_key, secret_key = (keys[name] for name in roles.s3_key_names(role))
    operator = role is not Role.WORKER
    return base.replace(
        redis_url=redis_url,
        s3_endpoint=f"{scheme}://{HOST}:{ports['s3']}",
        s3_bucket="farm",
        s3_access_key=access_key,
        s3_secret_key=secret_key,
        flower_url=f"{scheme}://{HOST}:{ports['flower']}",
        flower_user=keys["flower_user"] if operator else "",
        flower_password=keys["flower_password"] if operator else "",
        web_url=f"{scheme}://{HOST}:{ports['web']}",
        ca_file=ca,
        tls_cert_file=cert if operator else "",
        tls_key_file=key if operator else "",
        webhook_secret=(base.webhook_secret or keys["webhook_secret"]) if operator else "",
        data_dir=str(data),
        scratch_dir=str(data / "scratch"),
        imds_url="",  # no instance metadata service off EC2: no spot watcher to run
        api_url="",  # a user's login (FARM_API_*) is not the farm's: no token in its configs
        api_token="",
    )


def role_config(data: Path, role: Role) -> Path:
    """Where `farm up` keeps the config file of the processes it starts in `role`."""
    return data / "roles" / f"{role}.json"


def admin_settings(data: Path, config: Path) -> Settings:
    """An operator's settings for the farm in `data`: the cli role's config file (`config`, as
    `farm up` wrote it) with the admin's Redis user and store keys from `data`/secrets.json, for
    whoever must change the ledger or the store beyond a role's rights (tests, benchmarks)."""
    cli = load_settings(env={}, config_path=config)
    urls = {"redis": cli.redis_url, "s3": cli.s3_endpoint, "flower": cli.flower_url}
    ports = {name: urlsplit(url).port or 0 for name, url in (urls | {"web": cli.web_url}).items()}
    tls_files = (Path(cli.ca_file), Path(cli.tls_cert_file), Path(cli.tls_key_file))
    return farm_settings(
        cli, data, ports, farm_secrets(data), tls_files if cli.ca_file else None, role=Role.ADMIN
    )


def write_role_configs(
    base: Settings,
    data: Path,
    ports: Mapping[str, int],
    keys: Mapping[str, str],
    tls_files: tuple[Path, Path, Path] | None,
) -> dict[Role, Path]:
    """The owner-only config file of each role `farm up` starts processes in (farm.core.roles.
    SERVICE_ROLES): the workers' and the control plane's."""
    private_dir(data / "roles")
    written = {}
    for role in set(roles.SERVICE_ROLES.values()):
        path = role_config(data, role)
        save_settings(farm_settings(base, data, ports, keys, tls_files, role=role), path)
        written[role] = path
    return written

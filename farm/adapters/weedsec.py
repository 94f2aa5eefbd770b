"""SeaweedFS's own ports locked for a local farm: only the S3 gateway (which checks the farm's keys)
answers without a client certificate.

`weed mini` runs master, volume, filer and admin servers beside the S3 gateway, each on HTTP and
gRPC ports that by default serve and accept any object with no credentials. Here every one of
them requires TLS with a client certificate from a CA made for this farm (SeaweedFS's
security.toml `[grpc.*]` and `[https.*]`), and the volume and filer also demand JWTs signed with
the farm's keys (`[jwt.*]`), so a process on the host without the farm's files reads and writes
nothing. The CA and certificate are the farm's own (farm.adapters.tls.ensure_local_ca).
"""

from __future__ import annotations

import json
from pathlib import Path

from farm.adapters.private import private_dir, write_private
from farm.adapters.tls import NODE_CN, ensure_local_ca
from farm.core.roles import Role, store_identities

JWT_SECRETS = ("weed_jwt_write", "weed_jwt_read", "weed_filer_jwt_write", "weed_filer_jwt_read")
"""The farm's secrets.json entries that sign SeaweedFS's JWTs."""
_COMPONENTS = ("master", "volume", "filer", "s3", "admin")


def _toml(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; control characters are refused earlier)."""
    return json.dumps(text)


def security_toml(tls_dir: Path, keys: dict[str, str]) -> str:
    """The security.toml of a local farm's SeaweedFS (pure)."""
    ca, cert, key = (_toml(str(tls_dir / n)) for n in ("ca.crt", "node.crt", "node.key"))
    jwt = dict(zip(JWT_SECRETS, (_toml(keys[n]) for n in JWT_SECRETS), strict=True))
    lines = [
        "# Written by `farm up`: every SeaweedFS port but S3 needs the farm's client certificate.",
        "[jwt.signing]", f"key = {jwt['weed_jwt_write']}", "expires_after_seconds = 10",
        "[jwt.signing.read]", f"key = {jwt['weed_jwt_read']}", "expires_after_seconds = 10",
        "[jwt.filer_signing]", f"key = {jwt['weed_filer_jwt_write']}",
        "expires_after_seconds = 10",
        "[jwt.filer_signing.read]", f"key = {jwt['weed_filer_jwt_read']}",
        "expires_after_seconds = 10",
        "[access]", "ui = false",
        "[grpc]", f"ca = {ca}",
    ]  # fmt: skip
    for component in _COMPONENTS:
        lines += [f"[grpc.{component}]", f"cert = {cert}", f"key = {key}",
                  f'allowed_commonNames = "{NODE_CN}"']  # fmt: skip
    lines += ["[grpc.client]", f"cert = {cert}", f"key = {key}"]
    lines += ["[https.client]", "enabled = true", f"cert = {cert}", f"key = {key}", f"ca = {ca}"]
    for component in ("master", "volume", "filer", "admin"):
        lines += [f"[https.{component}]", f"cert = {cert}", f"key = {key}", f"ca = {ca}"]
    return "\n".join(lines) + "\n"


def write_home(home: Path, tls_dir: Path, keys: dict[str, str]) -> Path:
    """Make the CA and certificate in `tls_dir` if missing and write `home`/.seaweedfs/
    security.toml (weed reads it from $HOME), owner-only. Used by `farm up` and, through
    `farm store-security`, by docker-compose.yml's one-shot `s3-security` service."""
    ensure_local_ca(tls_dir)
    path = private_dir(home / ".seaweedfs") / "security.toml"
    write_private(path, security_toml(tls_dir, keys))
    return path


def write_identities(home: Path, keys: dict[Role, tuple[str, str]], bucket: str) -> Path:
    """`home`/identities.json, owner-only: SeaweedFS's S3 identities (`weed -s3.config`), one per
    role with only its actions (farm.core.roles.store_identities)."""
    path = home / "identities.json"
    write_private(path, json.dumps(store_identities(keys, bucket)))
    return path

"""SeaweedFS's own ports locked for a local farm: only the S3 gateway (which checks the farm's keys)
answers without a client certificate.

`weed mini` runs master, volume, filer and admin servers beside the S3 gateway, each on HTTP and
gRPC ports that by default serve and accept any object with no credentials. Here every one of
them requires TLS with a client certificate from a CA made for this farm (SeaweedFS's
security.toml `[grpc.*]` and `[https.*]`), and the volume and filer also demand JWTs signed with
the farm's keys (`[jwt.*]`), so a process on the host without the farm's files reads and writes
nothing. The CA and certificate are made once by openssl and kept in the data dir (owner-only).
"""

from __future__ import annotations

import json
from pathlib import Path

from farm import proc
from farm.errors import ConfigError

CN = "farm-weed"
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
                  f'allowed_commonNames = "{CN}"']  # fmt: skip
    lines += ["[grpc.client]", f"cert = {cert}", f"key = {key}"]
    lines += ["[https.client]", "enabled = true", f"cert = {cert}", f"key = {key}", f"ca = {ca}"]
    for component in ("master", "volume", "filer"):
        lines += [f"[https.{component}]", f"cert = {cert}", f"key = {key}", f"ca = {ca}"]
    return "\n".join(lines) + "\n"


def ensure_certs(tls_dir: Path) -> None:
    """Make the farm's CA and the one certificate every SeaweedFS server and client uses
    (127.0.0.1, server and client auth), unless they are there already."""
    if all((tls_dir / n).exists() for n in ("ca.crt", "node.crt", "node.key")):
        return
    tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ext = tls_dir / "node.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    d = str(tls_dir)
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key",
         "-out", f"{d}/ca.crt", "-days", "3650", "-subj", "/CN=farm local CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/node.key",
         "-out", f"{d}/node.csr", "-subj", f"/CN={CN}"],
        ["x509", "-req", "-in", f"{d}/node.csr", "-CA", f"{d}/ca.crt", "-CAkey", f"{d}/ca.key",
         "-CAcreateserial", "-out", f"{d}/node.crt", "-days", "3650", "-extfile", str(ext)],
    ]  # fmt: skip
    for args in steps:
        done = proc.capture(["openssl", *args], 60)
        if done.returncode != 0:
            raise ConfigError(
                f"openssl could not make the farm's SeaweedFS certificates in {tls_dir}: "
                f"{done.stderr.strip()[-300:]}"
            )
    for path in tls_dir.iterdir():
        path.chmod(0o600)

"""TLS made explicit where the libraries leave it loose, and a local farm's own CA.

`rediss://` URLs always verify the server's certificate (Celery refuses a rediss URL without
`ssl_cert_reqs`; redis-py's default differs by version), and unverified TLS is refused with what
to write instead. `farm up` makes one CA per farm and one certificate for 127.0.0.1 that every
server of the farm presents (Redis, the S3 gateway, SeaweedFS's own ports, Flower, `farm web`)
and every client verifies against (`FARM_CA_FILE`, `ssl_ca_certs=` in the Redis URL).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

from farm.adapters import proc
from farm.core.errors import ConfigError

_UNVERIFIED = {"none", "cert_none", "optional", "cert_optional"}
NODE_CN = "farm-node"
"""The common name on the farm's one certificate; SeaweedFS admits gRPC peers by it."""
CA, CERT, KEY = "ca.crt", "node.crt", "node.key"


def verified_redis_url(url: str) -> str:
    """`url` with `ssl_cert_reqs=required` when it is `rediss://` and says nothing; ValueError
    (a message a person can act on) when it asks for TLS without verifying the server."""
    if not url.startswith("rediss://"):
        return url
    query = dict(parse_qsl(urlsplit(url).query))
    reqs = query.get("ssl_cert_reqs")
    ca = query.get("ssl_ca_certs")
    if ca is not None and not Path(ca).is_file():
        raise ValueError(
            f"ssl_ca_certs={ca}: no such file; give the CA that signed Redis's certificate"
        )
    if reqs is None:
        # Appended as text: re-encoding the query would mangle ssl_ca_certs paths for kombu.
        return url + ("&" if "?" in url else "?") + "ssl_cert_reqs=required"
    if reqs.lower() in _UNVERIFIED:
        raise ValueError(
            f"ssl_cert_reqs={reqs} would accept any server's certificate; use "
            "ssl_cert_reqs=required (and ssl_ca_certs=/path/to/ca.pem for a private CA)"
        )
    if reqs.lower() not in ("required", "cert_required"):
        raise ValueError(f"ssl_cert_reqs={reqs} is not a value Redis knows; use required")
    return url


def rediss_url(password: str, host: str, port: int, ca_file: Path) -> str:
    """A verified `rediss://` URL for a server whose certificate `ca_file` signed (the path
    percent-encoded: spaces and quotes in a data dir survive kombu's and redis-py's parsing)."""
    return (
        f"rediss://:{quote(password, safe='')}@{host}:{port}/0"
        f"?ssl_ca_certs={quote(str(ca_file), safe='/')}&ssl_cert_reqs=required"
    )


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """What `farm web` serves https with (TLS 1.2 and up)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def ensure_local_ca(tls_dir: Path) -> tuple[Path, Path, Path]:
    """Make the farm's CA and its one certificate (IP 127.0.0.1 only: the farm binds nothing
    else, so any other name is refused; server and client auth), unless they are there already.
    Returns (ca, cert, key). Everything stays in the owner-only `tls_dir`."""
    paths = (tls_dir / CA, tls_dir / CERT, tls_dir / KEY)
    if all(p.exists() for p in paths):
        return paths
    tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    tls_dir.chmod(0o700)
    ext = tls_dir / "node.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    d = str(tls_dir)
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key",
         "-out", f"{d}/{CA}", "-days", "3650", "-subj", "/CN=farm local CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{KEY}",
         "-out", f"{d}/node.csr", "-subj", f"/CN={NODE_CN}"],
        ["x509", "-req", "-in", f"{d}/node.csr", "-CA", f"{d}/{CA}", "-CAkey", f"{d}/ca.key",
         "-CAcreateserial", "-out", f"{d}/{CERT}", "-days", "3650", "-extfile", str(ext)],
    ]  # fmt: skip
    for args in steps:
        done = proc.capture(["openssl", *args], 60)
        if done.returncode != 0:
            raise ConfigError(
                f"openssl could not make the farm's certificates in {tls_dir}: "
                f"{done.stderr.strip()[-300:]}"
            )
    for path in tls_dir.iterdir():
        path.chmod(0o600)
    return paths

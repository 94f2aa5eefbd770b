"""TLS settings made explicit where the libraries leave them loose: `rediss://` URLs always verify
the server's certificate (Celery refuses a rediss URL without `ssl_cert_reqs`; redis-py's default
differs by version), and unverified TLS is refused with what to write instead."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

_UNVERIFIED = {"none", "cert_none", "optional", "cert_optional"}


def verified_redis_url(url: str) -> str:
    """`url` with `ssl_cert_reqs=required` when it is `rediss://` and says nothing; ValueError
    (a message a person can act on) when it asks for TLS without verifying the server."""
    if not url.startswith("rediss://"):
        return url
    query = dict(parse_qsl(urlsplit(url).query))
    reqs = query.get("ssl_cert_reqs")
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

"""A CA of the test's own and a server certificate for 127.0.0.1 signed by it (openssl)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def make_certs(d: Path, host: str = "127.0.0.1") -> Certs:
    def ssl_cmd(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    ssl_cmd("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=farm test CA")  # fmt: skip
    ssl_cmd("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
            "-subj", f"/CN={host}")  # fmt: skip
    (d / "ext").write_text(f"subjectAltName=IP:{host}\n")
    ssl_cmd("x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "srv.crt", "-days", "2", "-extfile", "ext")  # fmt: skip
    return Certs(ca=d / "ca.crt", cert=d / "srv.crt", key=d / "srv.key")

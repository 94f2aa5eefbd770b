"""The ledger and Celery over `rediss://` against a real Redis serving TLS with a CA of the test's
own: a URL without `ssl_cert_reqs` verifies by default and works end to end; an untrusted server
is refused with a one-line error; asking not to verify is a ConfigError that says what to write."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import kombu.pools
import pytest

from farm.adapters.settings import Settings, load_settings
from farm.core.errors import ConfigError, UnreachableError
from farm.core.pipeline import Phase
from farm.dispatch import Dispatcher, make_app
from farm.ledger import Ledger
from tests.integration.conftest import _free_port
from tests.integration.tls_certs import Certs, make_certs


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Certs]]:
    """(rediss URL without any TLS parameter, the certificates)."""
    d = tmp_path_factory.mktemp("redis-tls")
    certs = make_certs(d)
    port = _free_port()
    server = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", "0", "--tls-port", str(port),
         "--tls-cert-file", str(certs.cert), "--tls-key-file", str(certs.key),
         "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "no", "--bind", "127.0.0.1",
         "--requirepass", "tls-pass", "--save", "", "--dir", str(d)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)
    yield f"rediss://:tls-pass@127.0.0.1:{port}/0", certs
    server.terminate()
    server.wait(10)


def settings_for(url: str, tmp_path: Path) -> Settings:
    return load_settings(env={"FARM_REDIS_URL": url}, config_path=tmp_path / "none.json")


def test_a_rediss_url_without_cert_reqs_verifies_and_runs_ledger_and_celery(
    tls_redis: tuple[str, Certs], tmp_path: Path
) -> None:
    url, certs = tls_redis
    settings = settings_for(f"{url}?ssl_ca_certs={certs.ca}", tmp_path)
    assert settings.redis_url.endswith("&ssl_cert_reqs=required")
    ledger = Ledger.from_url(settings.redis_url)
    ledger.r.flushdb()
    ledger.ping()
    Dispatcher(make_app(settings), priority_of=lambda _: 50).send(Phase.RENDER, "j1", 0)
    assert ledger.queue_length("render") == 1


def test_an_untrusted_server_is_refused_with_one_clear_error(
    tls_redis: tuple[str, Certs], tmp_path: Path
) -> None:
    url, _ = tls_redis
    settings = settings_for(url, tmp_path)  # the system CAs do not know the test's CA
    with pytest.raises(UnreachableError, match="certificate verify failed"):
        Ledger.from_url(settings.redis_url).ping()
    # kombu keeps producers in one pool per process, keyed by host and password, not by TLS
    # settings: the test before left a verified connection to this very server in it.
    kombu.pools.reset()
    with pytest.raises(UnreachableError, match="could not send"):
        Dispatcher(make_app(settings), priority_of=lambda _: 50).send(Phase.RENDER, "j1", 0)


@pytest.mark.parametrize("reqs", ["none", "CERT_NONE", "optional"])
def test_asking_not_to_verify_is_a_config_error_that_says_what_to_write(
    tls_redis: tuple[str, Certs], tmp_path: Path, reqs: str
) -> None:
    url, _ = tls_redis
    with pytest.raises(ConfigError, match="ssl_cert_reqs=required") as caught:
        settings_for(f"{url}?ssl_cert_reqs={reqs}", tmp_path)
    assert "tls-pass" not in str(caught.value)


def test_the_cli_says_so_in_one_line_without_a_traceback(
    tls_redis: tuple[str, Certs], tmp_path: Path
) -> None:
    url, _ = tls_redis
    done = subprocess.run(
        [sys.executable, "-m", "farm", "jobs"],
        env={"FARM_REDIS_URL": url + "?ssl_cert_reqs=none", "FARM_CONFIG": str(tmp_path / "c"),
             "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "ssl_cert_reqs=required" in done.stderr

"""A whole farm over TLS (`farm up --tls`): Redis on its TLS port only, the S3 gateway, Flower and
`farm web` on https, all signed by a CA the farm made at first start, in a data dir whose name has
a space and an apostrophe. A render job and a transcode job (ffmpeg reading presigned https URLs)
run to the end. Every client refuses the same servers when it is given another CA or another host
name, each with one line that says what to set."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests

from farm.media.probe import input_options, option_args
from tests.conftest import ROOT, LocalFarm, ffprobe
from tests.e2e.encode_media import make_master

pytestmark = pytest.mark.e2e
DEMO = ROOT / "scenes" / "demo.blend"
SYSTEM_CAS = "/etc/ssl/certs/ca-certificates.crt"


def one_line_error(farm: LocalFarm, *args: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "farm", *args], env={**farm.env, **env}, capture_output=True,
        text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_every_server_speaks_tls_with_the_farms_ca(tls_farm: LocalFarm) -> None:
    again = tls_farm.farm("up", "--data", str(tls_farm.data), check=True).stdout
    assert "already up with TLS" in again and "`farm up`" in again  # asked without --tls
    s = tls_farm.settings()
    ca = tls_farm.data / "tls" / "ca.crt"
    assert s["ca_file"] == str(ca) and s["redis_url"].startswith("rediss://")
    assert all(s[k].startswith("https://") for k in ("s3_endpoint", "flower_url", "web_url"))
    # Redis has no plain-text port: a PING in the clear gets no PONG.
    port = int(s["redis_url"].split("@")[1].split(":")[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        sock.settimeout(3)
        try:
            answer = sock.recv(100)
        except (TimeoutError, ConnectionResetError):
            answer = b""
    assert b"PONG" not in answer
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # Flower (which reads the broker over TLS) and the job pages over https, behind a password.
    auth = (s["flower_user"], s["flower_password"])
    flower = f"{s['flower_url']}/api/workers"
    assert requests.get(flower, verify=str(ca), timeout=10).status_code == 401
    deadline = time.monotonic() + 60
    workers: dict[str, object] = {}
    while not workers and time.monotonic() < deadline:
        workers = requests.get(f"{flower}?refresh=1", auth=auth, verify=str(ca), timeout=30).json()
        time.sleep(1)
    assert list(workers) and all(name.startswith("worker") for name in workers)
    page = requests.get(f"{s['web_url']}/", auth=auth, verify=str(ca), timeout=10)
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_a_render_and_a_transcode_run_to_the_end_over_tls(
    tls_farm: LocalFarm, tmp_path: Path
) -> None:
    out = tls_farm.farm(
        "submit", str(DEMO), "--frames", "1-4", "--chunk-size", "2", "--resolution", "160x90",
        "--samples", "2", "--wait", "--json", check=True, timeout=600,
    )  # fmt: skip
    job = json.loads(out.stdout)
    assert job["state"] == "done", job
    status = tls_farm.farm("status", job["id"], check=True).stdout
    assert re.search(r"frame in the store [\d.]+ s after submit, its thumbnail [\d.]+ s", status)
    video = tmp_path / "it's the video.mp4"
    tls_farm.farm("fetch", job["id"], str(video), check=True)
    assert int(ffprobe(video)["streams"][0]["nb_read_frames"]) == 4

    master = make_master(tmp_path / "master's cut.mp4", size="320x180", rate="24", seconds=3)
    out = tls_farm.farm("submit", str(master), "--wait", "--json", check=True, timeout=600)
    job = json.loads(out.stdout)
    assert job["state"] == "done", job
    tls_farm.farm("fetch", job["id"], str(tmp_path / "transcoded.mp4"), check=True)
    streams = ffprobe(tmp_path / "transcoded.mp4")["streams"]
    assert int(next(s for s in streams if s["codec_type"] == "video")["nb_read_frames"]) == 72


def test_another_ca_or_another_name_is_refused_in_one_line(tls_farm: LocalFarm) -> None:
    s = tls_farm.settings()
    url = s["redis_url"]
    # The ledger and Celery: the system's CAs do not know the farm's; nor is "localhost" its name.
    other_ca = url.split("?")[0] + f"?ssl_ca_certs={SYSTEM_CAS}"
    line = one_line_error(tls_farm, "jobs", FARM_REDIS_URL=other_ca)
    assert "certificate was refused" in line and "certificate verify failed" in line, line
    assert s["redis_url"].split("@")[0] not in line  # no password in the message
    wrong_name = url.replace("@127.0.0.1:", "@localhost:")
    line = one_line_error(tls_farm, "jobs", FARM_REDIS_URL=wrong_name)
    assert "certificate was refused" in line and "mismatch" in line, line
    # boto3 to the S3 gateway.
    submit = ("submit", str(DEMO), "--frames", "1-2")
    line = one_line_error(tls_farm, *submit, FARM_CA_FILE=SYSTEM_CAS)
    assert "S3 endpoint's certificate was refused" in line and "FARM_CA_FILE" in line, line
    endpoint = s["s3_endpoint"].replace("127.0.0.1", "localhost")
    line = one_line_error(tls_farm, *submit, FARM_S3_ENDPOINT=endpoint)
    assert "S3 endpoint's certificate was refused" in line and "match" in line, line
    # A setting that cannot verify is refused when it loads.
    line = one_line_error(tls_farm, "jobs", FARM_CA_FILE="/nonexistent/ca.pem")
    assert "FARM_CA_FILE" in line, line

    # ffprobe on a presigned https URL: verified against the farm's CA, refused with another.
    store = tls_farm.store()  # the admin's: no role may write under probe/
    store.put_bytes("probe/tiny.txt", b"hello")
    presigned = store.presign_get("probe/tiny.txt")
    assert presigned.startswith("https://")

    def probe(ca_file: str) -> subprocess.CompletedProcess[str]:
        argv = ["ffprobe", "-v", "error", *option_args(input_options(presigned, ca_file)),
                "-f", "data", presigned]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    assert probe(s["ca_file"]).returncode == 0
    refused = probe(SYSTEM_CAS)
    assert refused.returncode != 0 and "certificate" in refused.stderr.lower(), refused.stderr

    # Flower and farm web: only the farm's CA, only the name on the certificate.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"{s['web_url']}/metrics", timeout=10)
    context = ssl.create_default_context(cafile=s["ca_file"])
    with pytest.raises(urllib.error.URLError, match="match"):
        urllib.request.urlopen(
            s["flower_url"].replace("127.0.0.1", "localhost") + "/healthcheck",
            timeout=10, context=context,
        )  # fmt: skip

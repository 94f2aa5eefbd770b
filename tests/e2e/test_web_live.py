"""The farm seen from outside on a real local farm that rendered a small job: the signed webhook
arrives, the exporter serves the ledger's numbers (every dashboard query among them), and
headless Chromium loads the job pages with their thumbnails."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from farm.core import notices
from tests.conftest import DEMO, LocalFarm
from tests.promql import DASHBOARD, metric_names

pytestmark = pytest.mark.e2e


@dataclass
class Hooks:
    url: str = ""
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Rendered:
    job_id: str
    hooks: Hooks


@pytest.fixture(scope="module")
def rendered(local_farm: LocalFarm) -> Iterator[Rendered]:
    """One small render submitted with --notify, waited for."""
    hooks = Hooks()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers["Content-Length"]))
            hooks.got.append((dict(self.headers), data))
            self.send_response(204)
            self.end_headers()
            hooks.arrived.set()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hooks.url = f"http://127.0.0.1:{server.server_address[1]}/farm-events"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = local_farm.farm(
        "submit", str(DEMO), "--frames", "1-4", "--chunk-size", "2", "--resolution", "320x180",
        "--samples", "2", "--notify", hooks.url, "--wait", "--json", check=True,
    )  # fmt: skip
    summary = json.loads(out.stdout)
    assert summary["state"] == "done", local_farm.logs()
    yield Rendered(job_id=summary["id"], hooks=hooks)
    server.shutdown()


def _auth(farm: LocalFarm) -> tuple[str, str]:
    s = farm.settings()
    return s["flower_user"], s["flower_password"]


# ── webhooks ─────────────────────────────────────────────────────────────────────────────────
def test_the_done_job_is_announced_signed_to_its_notify_url(
    local_farm: LocalFarm, rendered: Rendered
) -> None:
    assert rendered.hooks.arrived.wait(60), local_farm.logs()
    headers, data = rendered.hooks.got[0]
    secret = local_farm.settings()["webhook_secret"]
    assert secret and notices.verify(data, secret, headers[notices.SIGNATURE_HEADER])
    body = json.loads(data)
    assert body["event"] == "job.done"
    assert body["job"]["id"] == rendered.job_id and body["job"]["state"] == "done"
    assert body["job"]["output"].endswith("output.mp4")


# ── exporter ─────────────────────────────────────────────────────────────────────────────────
def _scrape(farm: LocalFarm) -> dict[str, list[tuple[dict[str, str], float]]]:
    answer = requests.get(f"{farm.settings()['web_url']}/metrics", auth=_auth(farm), timeout=30)
    answer.raise_for_status()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def test_the_exporter_refuses_without_credentials(local_farm: LocalFarm) -> None:
    url = f"{local_farm.settings()['web_url']}/metrics"
    assert requests.get(url, timeout=10).status_code == 401
    assert requests.get(url, auth=("farm", "wrong"), timeout=10).status_code == 401


def test_the_exporter_serves_the_rendered_jobs_numbers(
    local_farm: LocalFarm, rendered: Rendered
) -> None:
    samples = _scrape(local_farm)

    def total(name: str, **labels: str) -> float:
        return sum(v for lab, v in samples.get(name, []) if labels.items() <= lab.items())

    assert total("farm_up") == 1
    assert total("farm_jobs", state="done") >= 1
    assert total("farm_chunks", state="done") >= 2
    assert total("farm_workers", draining="false") >= 2  # two workers, on several queues each
    assert total("farm_chunk_duration_seconds_count", phase="render") >= 2
    assert total("farm_chunk_duration_seconds_count", phase="encode") >= 2
    assert total("farm_frame_time_seconds_count") >= 4
    assert total("farm_store_bytes_written_total", what="frames") > 0
    assert total("farm_store_bytes_written_total", what="segments") > 0
    assert total("farm_gpu_seconds_total") > 0
    assert total("farm_chunk_attempts_total") >= 2
    assert {lab["queue"] for lab, _ in samples["farm_backlog_per_worker"]} >= {"render", "encode"}


def test_every_dashboard_query_names_a_metric_the_live_exporter_serves(
    local_farm: LocalFarm, rendered: Rendered
) -> None:
    served = set(_scrape(local_farm))
    dashboard = json.loads(DASHBOARD.read_text())
    for expr in (t["expr"] for p in dashboard["panels"] for t in p["targets"]):
        assert metric_names(expr) <= served, expr


# ── the job pages, in a real browser ─────────────────────────────────────────────────────────
def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("chromium is not installed; run `make setup`", pytrace=False)
    return found


def _browse(farm: LocalFarm, path: str, tmp: Path, *extra: str) -> str:
    """Load a page in headless Chromium (credentials in the URL, as a user would type them)."""
    user, password = _auth(farm)
    parts = urlsplit(farm.settings()["web_url"])
    url = f"{parts.scheme}://{user}:{password}@{parts.netloc}{path}"
    argv = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}",
        "--virtual-time-budget=10000", "--window-size=1280,1000", *extra, url,
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


class _Dom(HTMLParser):
    """Elements of interest in Chromium's --dump-dom output: rows and images with attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [
            a for t, a in self.elements
            if t == tag and all(re.fullmatch(v, a.get(k.rstrip("_").replace("_", "-"), "")) for k, v in attrs.items())
        ]  # fmt: skip


def _dom(html: str) -> _Dom:
    dom = _Dom()
    dom.feed(html)
    return dom


def test_the_job_list_shows_the_job_as_done(
    local_farm: LocalFarm, rendered: Rendered, tmp_path: Path
) -> None:
    dom = _dom(_browse(local_farm, "/", tmp_path, "--dump-dom"))
    rows = dom.find("tr", class_="job", data_job=re.escape(rendered.job_id))
    assert rows and rows[0]["data-state"] == "done"
    assert dom.find("a", href=f"/jobs/{re.escape(rendered.job_id)}")


def test_the_job_page_shows_loaded_thumbnails_and_done_chunks(
    local_farm: LocalFarm, rendered: Rendered, tmp_path: Path
) -> None:
    html = _browse(local_farm, f"/jobs/{rendered.job_id}", tmp_path, "--dump-dom")
    dom = _dom(html)
    thumbs = dom.find("img", class_="thumb")
    assert len(thumbs) == 4, html[-3000:]
    # data-loaded is the image's naturalWidth, written by the browser once it decoded the JPEG.
    assert all(t.get("data-loaded") == "320" for t in thumbs), thumbs
    chunks = dom.find("tr", class_="chunk")
    assert [c["data-state"] for c in chunks] == ["done", "done"]
    assert dom.find("video", src=f"/jobs/{re.escape(rendered.job_id)}/video.mp4")
    assert len(dom.find("a", href=r"/jobs/.*/logs/.*\.log")) >= 4  # render + encode per chunk


def test_a_screenshot_of_the_job_page(
    local_farm: LocalFarm, rendered: Rendered, tmp_path: Path
) -> None:
    shot = tmp_path / "job-page.png"
    _browse(local_farm, f"/jobs/{rendered.job_id}", tmp_path, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    keep = os.environ.get("FARM_KEEP_SCREENSHOT")  # docs/job-page.png was made this way
    if keep:
        shutil.copyfile(shot, keep)

"""A render job on a real farm whose workers reach the store and Redis through a fault proxy
(tests/faults): 503 SlowDown bursts, requests held past the client's timeout, slow bodies,
connections reset mid-answer and Redis cut off mid-job each leave the job whole: done, every frame
in the video once and in order (each frame's own grey, read back from the decoded video), and no
frame stored and recorded was rendered again. A refusal (403) still fails the job at once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import greys as grey_scene
from tests.conftest import LocalFarm
from tests.e2e.farmtools import status, wait_final, wait_for
from tests.faults.farm import ProxiedFarm, start_proxied_farm

pytestmark = pytest.mark.e2e

CHUNK = 3
"""Frames per chunk: the grey scene's 12 frames make 4 chunks."""


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedFarm]:
    found = start_proxied_farm(tmp_path_factory.mktemp("faults"), workers=2)
    try:
        yield found
    finally:
        print(f"faults injected in the last test: {found.injected()}")
        found.down()


@pytest.fixture(scope="module")
def greys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grey_scene.build(tmp_path_factory.mktemp("scene") / "greys.blend")


@pytest.fixture
def farm(proxied: ProxiedFarm) -> Iterator[ProxiedFarm]:
    proxied.quiet()
    yield proxied
    print(f"faults injected: {proxied.injected()}")
    proxied.quiet()


def _submit(farm: LocalFarm, scene: Path) -> str:
    out = farm.farm("submit", str(scene), "--chunk-size", str(CHUNK), "--json", check=True)
    job_id: str = json.loads(out.stdout)["id"]
    return job_id


def _frames_shown(farm: LocalFarm, job_id: str, dest: Path) -> list[int | None]:
    """Which frame each frame of the delivered video is, by its grey (bench.greys); None for a
    frame whose grey is no frame's."""
    video = dest / f"{job_id}.mp4"
    farm.store().get_file(f"jobs/{job_id}/output.mp4", video)
    return grey_scene.frames_shown(video)


def _assert_whole(farm: LocalFarm, job_id: str, dest: Path) -> dict[str, Any]:
    """The job is done, its video shows every frame once and in order, and each frame was
    rendered and stored once: none already stored was rendered again."""
    summary = wait_final(farm, job_id, 600)
    assert summary["state"] == "done", f"{summary['error']}\n{farm.logs()}"
    assert _frames_shown(farm, job_id, dest) == list(range(1, grey_scene.FRAMES + 1))
    assert farm.ledger().render_counts(job_id) == dict.fromkeys(range(1, grey_scene.FRAMES + 1), 1)
    assert sorted(farm.ledger().frame_records(job_id)) == list(range(1, grey_scene.FRAMES + 1))
    return summary


StoreFault = Callable[[ProxiedFarm], None]


def _slowdown(farm: ProxiedFarm) -> None:
    """A burst of 503 SlowDown to the next 12 requests, then one request in five."""
    farm.store.error(503, "SlowDown", count=12)
    farm.store.error(503, "SlowDown", fraction=0.2)


def _timeout(farm: ProxiedFarm) -> None:
    """One frame's upload and one read held past the client's read timeout (the store does the
    upload; its answer never comes)."""
    farm.store.hold(count=1, method="PUT", path=r"/frames/")
    farm.store.hold(count=1, method="GET", forward=False)


def _slow_body(farm: ProxiedFarm) -> None:
    """Every answer's body at 64 KB/s."""
    farm.store.slow(bytes_per_s=64_000)


def _reset(farm: ProxiedFarm) -> None:
    """Eight connections reset part way through the answer, spread over the job."""
    farm.store.reset(count=8, fraction=0.3, after_bytes=600)


@pytest.mark.parametrize(
    ("fault", "kind"),
    [(_slowdown, "503 SlowDown"), (_timeout, "hold"), (_slow_body, "slow"), (_reset, "reset")],
    ids=["503-slowdown", "timeout", "slow-body", "reset"],
)
def test_a_job_ends_whole_through_store_faults(
    farm: ProxiedFarm, greys: Path, tmp_path: Path, fault: StoreFault, kind: str
) -> None:
    """GIVEN the store proxy injecting `kind` WHEN a job of 12 frames in 4 chunks renders on
    2 workers THEN it ends done, the video has every frame once and in order, and no frame was
    rendered twice."""
    fault(farm)
    job_id = _submit(farm.farm, greys)
    _assert_whole(farm.farm, job_id, tmp_path)
    injected = farm.store.injected()
    assert injected.get(kind, 0) >= 1, injected
    if kind == "503 SlowDown":
        assert injected[kind] >= 12
    if kind == "hold":
        assert injected[kind] == 2
    print(f"{kind}: {injected}; chunks: "
          f"{[(c['state'], c['attempt']) for c in status(farm.farm, job_id)['chunks']]}")  # fmt: skip


def test_a_refused_upload_fails_the_job_at_once_with_the_reason(
    farm: ProxiedFarm, greys: Path
) -> None:
    """GIVEN a store that refuses every frame upload (403 AccessDenied) WHEN a job renders THEN
    it fails, saying the store refused and why, no chunk was tried again, and no refused request
    was sent again by the store's client."""
    farm.store.error(403, "AccessDenied", "Access Denied", method="PUT", path=r"/frames/")
    job_id = _submit(farm.farm, greys)
    summary = wait_final(farm.farm, job_id, 300)
    assert summary["state"] == "failed"
    assert "AccessDenied" in summary["error"] and "credentials may not" in summary["error"]
    chunks = farm.farm.ledger().chunks(job_id)
    assert all(int(c.get("failures", 0)) <= 1 for c in chunks), chunks
    assert sum(int(c.get("failures", 0)) for c in chunks) >= 1
    denied = [s for s in farm.store.seen() if s.fault == "403 AccessDenied"]
    assert denied and max(Counter(s.invocation for s in denied).values()) == 1
    assert all(s.attempt == 1 for s in denied)
    shown = farm.farm.farm("status", job_id)
    assert "AccessDenied" in shown.stdout + shown.stderr


def test_a_job_ends_whole_when_redis_is_cut_off_mid_job(
    farm: ProxiedFarm, greys: Path, tmp_path: Path
) -> None:
    """GIVEN a job rendering, a chunk's frames stored WHEN every connection of the workers
    and the reconciler to Redis (ledger and broker) is cut, and new ones refused, for 5 s THEN
    the job ends done, its video whole and in order, no stored frame rendered again."""
    job_id = _submit(farm.farm, greys)
    wait_for(
        "a chunk to store 2 frames",
        lambda: any(c["frames_rendered"] >= 2 for c in status(farm.farm, job_id)["chunks"]),
        300,
        farm.farm,
    )
    cut = farm.redis.cut(for_s=5)
    # Mid-job: nothing could end it since (its last frames, encodes and stitch need Redis).
    assert farm.farm.ledger().job(job_id)["state"] == "running"
    assert cut >= 2  # at least each worker's ledger and broker connections
    summary = _assert_whole(farm.farm, job_id, tmp_path)
    assert farm.redis.injected()["cut"] == cut
    print(f"cut {cut} connections; {farm.redis.injected()}; chunks: "
          f"{[(c['state'], c['attempt']) for c in summary['chunks']]}")  # fmt: skip

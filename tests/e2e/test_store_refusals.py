"""The real SeaweedFS of a local farm refusing for good: wrong keys, unknown keys, a missing bucket.
Each refusal is a StoreRefused with the S3 code, and a chunk that meets one fails at once."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from farm.adapters.settings import Settings, load_settings
from farm.adapters.store import Store
from farm.core.errors import StoreRefused
from farm.core.pipeline import PHASES, Phase
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.ledger import Ledger
from tests.conftest import LocalFarm
from workers.attempt.context import WorkerContext
from workers.attempt.lifecycle import ChunkAttempt, Outcome
from workers.attempt.policy import run_chunk_phase
from workers.host.gpu import Capabilities

pytestmark = pytest.mark.e2e


def farm_settings(farm: LocalFarm) -> Settings:
    return load_settings(env={}, config_path=farm.config)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"s3_secret_key": "not-the-secret"}, "SignatureDoesNotMatch"),
        ({"s3_access_key": "FARMNOSUCHKEY0000"}, "InvalidAccessKeyId"),
    ],
)
def test_a_permanent_refusal_is_named_with_its_s3_code(
    local_farm: LocalFarm, tmp_path: Path, change: dict[str, str], code: str
) -> None:
    store = Store.from_settings(farm_settings(local_farm).replace(**change))
    path = tmp_path / "x.bin"
    path.write_bytes(b"x" * 10)
    with pytest.raises(StoreRefused, match=code):
        store.put_file("probe/x.bin", path)
    with pytest.raises(StoreRefused, match=code):
        store.get_bytes("probe/x.bin")


def test_reading_from_a_missing_bucket_is_refused_by_name(local_farm: LocalFarm) -> None:
    """(SeaweedFS makes a missing bucket on an admin's first write, so only reads can miss it;
    the roles' identities name the farm's bucket only, so the admin's keys ask.)"""
    store = Store.from_settings(local_farm.admin().replace(s3_bucket="no-such-bucket"))
    with pytest.raises(StoreRefused, match="NoSuchBucket"):
        store.get_bytes("probe/x.bin")
    with pytest.raises(StoreRefused, match="NoSuchBucket"):
        store.keys("probe/")


def test_the_right_keys_still_work(local_farm: LocalFarm) -> None:
    store = local_farm.store()  # the admin's: no role may write outside the farm's prefixes
    store.put_bytes("probe/ok.txt", b"ok")
    assert store.get_bytes("probe/ok.txt") == b"ok"


class Sent:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, phase: Phase, job_id: str, chunk: int, countdown_s: float = 0) -> str:
        self.sent.append((phase, job_id, chunk))
        return "id"

    def stitch(self, job_id: str, countdown_s: float = 0) -> str:
        self.sent.append(("stitch", job_id))
        return "id"


def test_a_chunk_refused_by_the_store_fails_the_job_at_once(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    """GIVEN a worker whose S3 secret is wrong, WHEN its chunk uploads a frame, THEN the chunk
    and the job fail on the first try with the S3 code, and nothing is re-sent."""
    settings = farm_settings(local_farm)
    ledger = Ledger.from_url(settings.redis_url)
    job_id = "refused-" + secrets.token_hex(4)
    spec = build_render_spec(
        source_name="s.blend", frames="1-2", chunk_size=2, resolution="32x32",
        fps=24, samples=1, codec="h264",
    )  # fmt: skip
    ledger.create_job(job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 2), source_key="k")
    dispatch = Sent()
    ctx = WorkerContext(
        settings=settings.replace(max_attempts=3),
        ledger=ledger,
        store=Store.from_settings(settings.replace(s3_secret_key="wrong")),
        dispatch=dispatch,  # type: ignore[arg-type]
        caps=Capabilities(),
        name="refused-worker",
        scratch=tmp_path,
    )

    def upload(attempt: ChunkAttempt) -> Outcome:
        frame = attempt.fresh_workspace() / "frame_000001.png"
        frame.write_bytes(b"png")
        attempt.ctx.store.put_file(f"jobs/{job_id}/frames/000001.png", frame)
        return Outcome()

    render = PHASES[Phase.RENDER]
    run_chunk_phase(ctx, job_id, 0, render, {render.phase: upload})
    chunk, job = ledger.chunk(job_id, 0), ledger.job(job_id)
    assert chunk["state"] == "failed" and chunk["failures"] == "1"
    assert job["state"] == "failed" and "SignatureDoesNotMatch" in job["error"]
    assert dispatch.sent == []

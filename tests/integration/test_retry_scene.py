"""`farm retry --scene`: the fixed scene replaces the job's only where the job may retry, and
brings the files it uses; a real Redis and a real SeaweedFS."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.blender.assets import Manifest
from farm.blender.blendfile import read_scene
from farm.cli.submit import trace_fixed_scene
from farm.control.jobs import reopen
from farm.core import keys
from farm.core.errors import LedgerError, SpecError
from farm.core.plan import plan_chunks
from farm.core.spec import build_render_spec
from farm.core.state import JobState
from farm.ledger import Ledger
from tests.conftest import DEMO

TEXTURED = DEMO.with_name("textured.blend")


def _settings(redis_url: str, store: Store) -> Settings:
    return Settings(
        redis_url=redis_url,
        s3_endpoint=store.s3.meta.endpoint_url, s3_bucket=store.bucket,
        s3_access_key="test-key", s3_secret_key="test-secret",
    )  # fmt: skip


def _job(ledger: Ledger, job_id: str) -> str:
    """A render job of the demo with its asset tree, as `farm submit` records it."""
    spec = build_render_spec(
        source_name="demo.blend", frames="1-8", chunk_size=4, resolution="64x36", fps=24,
        samples=1, codec="h264",
    )  # fmt: skip
    spec = dataclasses.replace(spec, assets_key=keys.assets_manifest_key(job_id))
    ledger.create_job(
        job_id=job_id, spec=spec, chunks=plan_chunks(spec.frames, 4), source_key="scenes/old"
    )
    return spec.assets_key or ""


@pytest.mark.parametrize(
    ("state", "hint"),
    [
        (JobState.RUNNING, "`farm cancel j1`, then `farm retry j1 --all --scene FIXED.blend`"),
        (JobState.PAUSED, "`farm resume j1` runs it again"),
    ],
)
def test_a_job_that_may_not_retry_keeps_its_scene(
    ledger: Ledger, redis_url: str, store: Store, state: JobState, hint: str
) -> None:
    """Found by a review: the scene was swapped before the state was checked, so a running job's
    remaining chunks rendered the other scene, and a paused one was resumed by a retry."""
    _job(ledger, "j1")
    ledger.move_job("j1", JobState.RUNNING)
    if state is JobState.PAUSED:
        assert ledger.pause_job("j1", "paused by a user").moved
    before = set(store.keys("scenes/"))
    with pytest.raises(LedgerError, match="only failed or cancelled jobs retry") as refused:
        reopen(
            _settings(redis_url, store), "j1", every_unfinished=True,
            fixed=(TEXTURED, *trace_fixed_scene(TEXTURED, None)),
        )  # fmt: skip
    assert hint in str(refused.value)
    job = ledger.job("j1")
    assert (job["state"], job["source_key"]) == (state, "scenes/old")
    assert set(store.keys("scenes/")) == before


def test_a_fixed_scene_brings_its_files_into_the_jobs_tree(
    ledger: Ledger, redis_url: str, store: Store, tmp_path: Path
) -> None:
    assets_key = _job(ledger, "j2")
    ledger.cancel_job("j2")
    fixed = tmp_path / "fixed.blend"
    for folder in ("tex", "lib"):
        shutil.copytree(TEXTURED.parent / folder, tmp_path / folder)
    shutil.copy(TEXTURED, fixed)
    info, traced = trace_fixed_scene(fixed, None)
    assert traced.manifest.assets  # the texture beside it
    # A fixed scene whose textures live elsewhere takes the same --allow-path as at submit.
    shot = tmp_path / "shot"
    shot.mkdir()
    shutil.copy(TEXTURED, shot / "fixed.blend")
    for folder in ("tex", "lib"):  # links out of the shot's folder, followed and checked
        (shot / folder).symlink_to(tmp_path / folder)
    with pytest.raises(SpecError, match="--allow-path"):
        trace_fixed_scene(shot / "fixed.blend", None)
    _, elsewhere = trace_fixed_scene(shot / "fixed.blend", None, (tmp_path,))
    assert len(elsewhere.manifest.assets) == len(traced.manifest.assets)

    reopened = reopen(_settings(redis_url, store), "j2", every_unfinished=True,
                      fixed=(fixed, info, traced))  # fmt: skip

    assert (reopened.waiting, reopened.remade) == ([0, 1], {})
    job = ledger.job("j2")
    assert job["state"] == JobState.RUNNING
    assert job["source_key"] != "scenes/old" and store.exists(job["source_key"])
    # Workers lay the tree out from the job's manifest: it names the fixed scene and its files,
    # each stored by hash.
    manifest = Manifest.from_json(store.get_json(assets_key))
    assert manifest.scene == "fixed.blend"
    assert manifest == traced.manifest
    assert all(store.exists(keys.asset_key(a.sha256)) for a in manifest.assets)


def test_a_fixed_scene_of_another_size_or_rate_is_a_new_job(
    ledger: Ledger, redis_url: str, store: Store
) -> None:
    """Found by a review: the job's done segments were made at the scene's size and rate, and a
    fixed scene of another size rendered frames they could not join with (the stitch failed
    the job after every chunk had rendered again)."""
    spec = build_render_spec(
        source_name="demo.blend", frames="1-8", chunk_size=4, resolution=None, fps=None,
        samples=None, codec="h264", scene=read_scene(DEMO),
    )  # fmt: skip
    ledger.create_job(
        job_id="j5", spec=spec, chunks=plan_chunks(spec.frames, 4), source_key="scenes/old"
    )
    ledger.cancel_job("j5")
    before = set(store.keys("scenes/"))
    with pytest.raises(SpecError) as refused:
        reopen(
            _settings(redis_url, store), "j5", every_unfinished=True,
            fixed=(TEXTURED, *trace_fixed_scene(TEXTURED, None)),
        )  # fmt: skip
    assert str(refused.value) == (
        "the fixed scene renders at 320x240 (the job's: 1280x720) and plays at 25 fps (the "
        "job's: 24 fps); job j5's video is joined from frames made as the job's: set the scene "
        "back, or submit it as a new job"
    )
    job = ledger.job("j5")
    assert (job["state"], job["source_key"]) == (JobState.CANCELLED, "scenes/old")
    assert set(store.keys("scenes/")) == before


def test_a_retry_that_will_be_refused_reads_no_scene(
    ledger: Ledger, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal comes before the fixed scene's trace, which hashes every file it uses."""
    from click.testing import CliRunner

    from farm.cli import main as cli

    _job(ledger, "j3")
    ledger.move_job("j3", JobState.RUNNING)
    traced: list[Path] = []
    monkeypatch.setattr(cli, "trace_fixed_scene", lambda path, *_: traced.append(path))
    env = {"FARM_REDIS_URL": redis_url, "FARM_S3_ENDPOINT": "http://127.0.0.1:1",
           "FARM_CONFIG": str(tmp_path / "none.json")}  # fmt: skip
    done = CliRunner().invoke(cli.cli, ["retry", "j3", "--scene", str(TEXTURED)], env=env)
    assert done.exit_code == 1 and "only failed or cancelled jobs retry" in done.output
    assert traced == []


def test_a_job_reopened_after_it_was_read_ended_stays_watched(ledger: Ledger) -> None:
    """The reconciler drops a job it read ended only if it still is: a retry in between keeps
    it (the live set's only way to watch it again)."""
    _job(ledger, "j4")
    ledger.cancel_job("j4")
    ledger.reopen_job("j4", every_unfinished=True)  # after the read, before the drop
    dropped = ledger.scripts.drop_ended(keys=[keys.r_live_jobs(), keys.r_job("j4")], args=["j4"])
    assert dropped == 0 and ledger.live_job_ids() == ["j4"]

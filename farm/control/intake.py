"""Submitting a job: validate, store the scene once, record the job and its chunks, send the chunks
(the CLI's direct submit, and the API's, from a source and assets already stored by hash)."""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.blender import assets
from farm.control.depends import check_parents
from farm.control.preview import send_chunks
from farm.control.projects import require_project
from farm.core import cost, keys, limits, preview, versions
from farm.core.chunking import Measurement, Pool, initial_plan
from farm.core.errors import FarmError, SpecError
from farm.core.preview import check_preview, preview_frames
from farm.core.spec import JobSpec
from farm.core.state import JobState
from farm.dispatch import DEFAULT_PRIORITY, Dispatcher, make_app
from farm.ledger import Ledger, speeds
from farm.ledger.ports import SubmitLedger
from farm.media.scenecuts import cut_plan

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


def new_job_id() -> str:
    """Sortable by submit time, unique without coordination: j-20261202-101500-3fa9c1."""
    return time.strftime("j-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Submitted:
    job_id: str
    state: str = "queued"
    """queued, or waiting for the jobs its spec names (`--after`)."""
    source_key: str
    """The scene (render jobs) or master (transcode jobs) in the store, by content hash."""
    source_uploaded: bool
    chunks: int
    frames: int
    assets_uploaded: int = 0
    """Files the scene uses that this submit uploaded (the rest the store held by hash)."""
    assets_reused: int = 0
    assets_bytes_uploaded: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Stored:
    """A job's source and the files it uses, in the store by hash already (the API's uploads,
    verified): what `create_job` and an estimate's probe take in place of local files."""

    source_key: str
    sha256: str
    manifest: assets.Manifest | None = None


def submit(
    settings: Settings,
    spec: JobSpec,
    source: Path,
    traced: assets.Traced | None = None,
    *,
    priority: int = DEFAULT_PRIORITY,
    max_cost: float | None = None,
    notify: str | None = None,
    owner: str = "",
    project: str | None = None,
) -> Submitted:
    """Everything past validation: nothing here runs until the spec is known to be good.
    `traced`: the files the scene uses, uploaded by hash beside it, their manifest on the job.
    `notify`: a webhook URL the job's events go to as well (checked by the caller), recorded with
    the job, so its first event is not sent before it is known. The source and the files go up
    from this machine, then `create_job` records the job (the API uploads them by presigned URL
    and calls `create_job` itself)."""
    ledger = _checked_ledger(settings, spec)
    store = Store.from_settings(settings)
    store.check()
    if spec.after:  # an unknown parent is refused before a byte goes up (again in create_job)
        check_parents(ledger, store, "", spec)
    source_key, digest, uploaded = store_source(store, source)
    sent = assets.Uploaded(files=0, size_bytes=0, reused=0)
    if traced is not None:
        sent = assets.upload(store, traced)
    done = create_job(
        settings, spec, source_key, digest, traced.manifest if traced else None,
        priority=priority, max_cost=max_cost, notify=notify, owner=owner, project=project,
        ledger=ledger,
    )  # fmt: skip
    return replace(
        done,
        source_uploaded=uploaded,
        assets_uploaded=sent.files,
        assets_reused=sent.reused,
        assets_bytes_uploaded=sent.size_bytes,
    )


def store_source(store: Store, source: Path) -> tuple[str, str, bool]:
    """The scene or master in the store by its content hash, uploaded unless the same bytes are
    there: (its key, its sha256, whether it went up now)."""
    suffix = source.suffix.lower() or ".bin"
    return store.put_content_addressed(source, lambda sha: keys.scene_key(sha, suffix))


def _checked_ledger(settings: Settings, spec: JobSpec) -> SubmitLedger:
    """The ledger, reached, once the job's size and its scene's Blender are known to be fine."""
    check_preview(spec.preview, spec.hold)
    limits.check_chunks(spec.frames.count, spec.chunk_size, settings.max_chunks)
    ledger: SubmitLedger = Ledger.from_url(settings.redis_url)
    ledger.ping()
    if spec.scene is not None:
        check_blender(ledger.workers(), spec.scene.blender_version)
    return ledger


def create_job(
    settings: Settings,
    spec: JobSpec,
    source_key: str,
    digest: str,
    manifest: assets.Manifest | None,
    *,
    priority: int = DEFAULT_PRIORITY,
    max_cost: float | None = None,
    notify: str | None = None,
    owner: str = "",
    project: str | None = None,
    ledger: SubmitLedger | None = None,
) -> Submitted:
    """Record and send a job whose source (`source_key`, sha256 `digest`) and files (`manifest`'s
    assets, by hash) the store holds already. `owner`: the user who submitted it (the API's; ''
    from a farm host's CLI); `project`: one the ledger knows (UnknownProject otherwise), whose
    queues its messages go to. Both go into the ledger's job and spec.json's control, so a
    ledger rebuilt from the store keeps them."""
    ledger = ledger or _checked_ledger(settings, spec)
    if project:  # its messages go to the project's queues (farm.control.projects)
        require_project(ledger.projects(), project)
    store = Store.from_settings(settings)
    job_id = new_job_id()
    if spec.after:  # every parent a job of this farm, and no chain back to this one
        check_parents(ledger, store, job_id, spec)
    if manifest is not None:
        manifest_key = keys.assets_manifest_key(job_id)
        store.put_json(manifest_key, manifest.to_json())
        # A file missing, or one a linked library names by a path the farm cannot follow, is one
        # the render goes on without (--allow-missing): the worker's check lets them be.
        missing = manifest.missing + manifest.unremapped
        spec = replace(spec, assets_key=manifest_key, missing_assets=missing)
    pool = speeds.render_pool(settings, ledger)
    measured = ledger.measurement(source_key, resolution=str(spec.resolution), samples=spec.samples)
    shown = preview_frames(spec.frames, spec.preview)
    if shown:  # the preview frames first, then (unless it holds) the rest: farm.core.preview
        chunks, plan = preview.initial_plan(spec.frames, spec.chunk_size, shown, hold=spec.hold,
                                            pool=pool, measured=measured)  # fmt: skip
    elif spec.master is not None and spec.master.segment_starts:  # boundaries on scene cuts
        chunks, plan = cut_plan(spec.frames, spec.chunk_size, spec.master)
    else:
        chunks, plan = initial_plan(spec.frames, spec.chunk_size, pool, measured)
    limits.check_planned(len(chunks), settings.max_chunks)
    plan = {**plan, **_control_fields(settings, spec, pool, measured, priority, max_cost)}
    if notify:
        plan["notify_url"] = notify
    plan |= {name: value for name, value in (("owner", owner), ("project", project)) if value}
    store.put_json(
        keys.spec_key(job_id),
        {
            "id": job_id,
            "spec": spec.to_json(),
            "source_key": source_key,
            "source_sha256": digest,
            "chunks": [list(c.frames) for c in chunks],
            "submitted": time.time(),
            "control": plan,  # priority, budget, plan and owner: a rebuilt ledger keeps them
        },
    )
    try:
        ledger.create_job(job_id=job_id, spec=spec, chunks=chunks, source_key=source_key, plan=plan)
    except FarmError:
        # Not submitted: a ledger rebuilt from the store must not find it (farm.control.rebuild).
        with contextlib.suppress(FarmError):
            store.delete(keys.spec_key(job_id))
        raise
    state = JobState.WAITING if spec.after else JobState.QUEUED
    if spec.after:  # nothing is sent: the reconciler releases it (farm.control.depends)
        log.info("job %s: waits for %s", job_id, ", ".join(spec.after))
    else:
        dispatch = Dispatcher(make_app(settings), priority_of=lambda _: priority)
        # Preview chunks go first, at the top priority (farm.control.preview.send_chunks).
        record = {"id": job_id, "kind": str(spec.kind), **plan}
        send_chunks(dispatch, record, ((c.index, c.frames) for c in chunks))
        log.info("job %s: %d chunks sent", job_id, len(chunks))
    return Submitted(
        job_id=job_id,
        state=str(state),
        source_key=source_key,
        source_uploaded=False,
        chunks=len(chunks),
        frames=spec.frames.count,
    )


def check_blender(live: dict[str, dict[str, Any]], saved: str) -> None:
    """Refuse (exit 2) a scene no live render worker's Blender can open (`live`: the ledger's
    workers), saying which it needs."""
    workers = [
        tuple(info["blender_file_version"])
        for info in live.values()
        if "render" in info.get("queues", []) and info.get("blender_file_version")
    ]
    reason = versions.refusal(versions.parse_version(saved), workers)
    if reason:
        raise SpecError(f"{reason}; add workers with that Blender, or save the scene with it")


def _control_fields(
    settings: Settings,
    spec: JobSpec,
    pool: Pool,
    measured: Measurement | None,
    priority: int,
    max_cost: float | None,
) -> dict[str, str]:
    """Priority, budget and, from a remembered measurement, the expected cost per frame the
    budget uses until the job's own frames say what they cost."""
    fields = {
        "priority": str(priority),
        "max_cost": str(settings.max_cost if max_cost is None else max_cost),
    }
    if measured is not None:
        price = cost.load_prices(settings.price_file).price(
            settings.region, settings.local_instance_type
        )
        est = cost.estimate(
            frames=spec.frames.count, chunk_size=spec.chunk_size, m=measured, pool=pool,
            price=price,
        )  # fmt: skip
        fields["est_cost_per_frame"] = f"{est.cost_per_frame_on_demand:.9f}"
    return fields

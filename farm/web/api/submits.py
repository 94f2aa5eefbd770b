"""The routes that bring work in and show it: uploads, submit, estimate, the job list, one job
and its events."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from farm.control import intake, uploads
from farm.control.estimate import estimate_job
from farm.control.status import job_status
from farm.control.uploads import Outcome, UploadRefused, Wanted
from farm.core.spec import provenance
from farm.web.api import events as job_events
from farm.web.api.answers import Answer, ApiError, bad_request
from farm.web.api.call import Call, Farm
from farm.web.api.validate import Submission, submission


def upload_offer(farm: Farm, call: Call) -> Answer:
    """POST /uploads: the hashes stored already, and a presigned PUT for each of the others."""
    call.only("files")
    files = call.body.get("files")
    if not isinstance(files, list) or not files:
        raise bad_request('files must be a list of {"sha256", "size", "kind", "suffix"}')
    wanted: list[Wanted] = []
    for item in files:
        if not isinstance(item, dict) or set(item) - {"sha256", "size", "kind", "suffix"}:
            raise bad_request('each file must be {"sha256", "size", "kind", "suffix"}')
        try:
            wanted.append(uploads.wanted(
                item.get("sha256"), item.get("size"), item.get("kind"), item.get("suffix", ""),
            ))  # fmt: skip
        except UploadRefused as exc:
            raise ApiError(413 if exc.code == "too_large" else 400, exc.code, str(exc)) from exc
    offer = uploads.offer(farm.store, wanted)
    return Answer(200, {"stored": offer.stored, "uploads": offer.uploads})


def _checked(farm: Farm, call: Call) -> tuple[Submission, dict[str, Outcome]]:
    """The submission checked, and every file it names in the store: staged uploads verified and
    moved, or 400 for bytes that do not match their hash (deleted) and 409 for files not sent."""
    found = submission(
        call.body, max_chunks=farm.settings.max_chunks, webhook_allow=farm.settings.webhook_allow
    )
    outcomes = uploads.verify_all(farm.store, found.files)
    files = found.files
    bad = [f.label for f in files if outcomes[f.sha256] is Outcome.MISMATCH]
    if bad:
        raise ApiError(
            400, "upload_mismatch",
            f"the bytes uploaded for {', '.join(bad)} do not match their sha256 or size; they were "
            "deleted: upload the file again (POST /api/v1/uploads) and submit again",
            files=[f.sha256 for f in files if outcomes[f.sha256] is Outcome.MISMATCH],
        )  # fmt: skip
    missing = list({f.sha256: f for f in files if outcomes[f.sha256] is Outcome.MISSING}.values())
    if missing:
        raise ApiError(
            409, "upload_missing",
            f"{len(missing)} file(s) are neither in the store nor uploaded: "
            f"{', '.join(f.label for f in missing[:20])}{' …' if len(missing) > 20 else ''}; "
            "PUT each to the URL POST /api/v1/uploads gives, then submit again",
            missing=[f.sha256 for f in missing],
        )  # fmt: skip
    return found, outcomes


def submit(farm: Farm, call: Call) -> Answer:
    """POST /jobs: a new job owned by the caller, as `farm submit --json` describes one."""
    found, outcomes = _checked(farm, call)
    spec = found.spec
    done = intake.create_job(
        farm.settings, spec, found.source.key, found.source.sha256, found.manifest,
        priority=found.priority, max_cost=found.max_cost, notify=found.notify, owner=call.who,
        project=found.project,
    )  # fmt: skip
    manifest = found.manifest
    assets = list({a.sha256: a for a in manifest.assets}.values()) if manifest else []
    sent = [a for a in assets if outcomes[a.sha256] is Outcome.UPLOADED]
    body: dict[str, Any] = {
        "id": done.job_id,
        "state": done.state,
        "chunks_total": done.chunks,
        "frames_total": done.frames,
        "source_key": done.source_key,
        "source_uploaded": outcomes[found.source.sha256] is Outcome.UPLOADED,
        "owner": call.who,
        "project": found.project,
        "settings": provenance(spec),
        "assets": {
            "files": len(manifest.assets) if manifest else 0,
            "uploaded": len(sent),
            "reused": len(assets) - len(sent),
            "bytes_uploaded": sum(a.size_bytes for a in sent),
            "missing": list(manifest.missing) if manifest else [],
        },
    }
    return Answer(201, body, (("Location", f"/api/v1/jobs/{done.job_id}"),))


def estimate(farm: Farm, call: Call) -> Answer:
    """POST /estimate: `farm submit --estimate --json`'s object; nothing is queued but, where
    the farm has no timings of the scene, a probe job the caller owns."""
    found, _ = _checked(farm, call)
    found = replace(found, spec=replace(found.spec, after=(), after_any=False))  # priced alone
    stored = intake.Stored(
        source_key=found.source.key, sha256=found.source.sha256, manifest=found.manifest
    )
    done = estimate_job(farm.settings, found.spec, stored, owner=call.who)
    return Answer(200, done.to_json())


def list_jobs(farm: Farm, call: Call) -> Answer:
    limit = call.int_query("limit", 20, 1, 1000)
    rows = []
    for job_id in farm.ledger.job_ids(limit):
        job = farm.ledger.job(job_id)
        if job:
            rows.append(job_status(farm.ledger, job_id, job, with_chunks=False))
    return Answer(200, {"jobs": rows})


def read_job(farm: Farm, call: Call) -> Answer:
    return Answer(200, job_status(farm.ledger, call.job_id, call.job))


def events(farm: Farm, call: Call) -> Answer:
    return Answer(
        200,
        stream=job_events.job_events(farm.ledger, call.job_id),
        content_type="text/event-stream; charset=utf-8",
        headers=(("Cache-Control", "no-store"), ("X-Accel-Buffering", "no")),
    )

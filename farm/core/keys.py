"""Every S3 key and Redis key the farm uses, in one place (pure).

S3 is the durable record: a job can be rebuilt from what lies under `jobs/{job_id}/`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

REDIS_PREFIX = "farm"


# ── S3 ────────────────────────────────────────────────────────────────────────────────────────
def scene_key(sha256: str, suffix: str = ".blend") -> str:
    """Scenes and masters are content-addressed: the same bytes are stored once."""
    return f"scenes/{sha256}{suffix}"


def asset_key(sha256: str) -> str:
    """Files a scene uses (textures, libraries, caches) are content-addressed like scenes: a second
    job, or one texture changed, uploads only bytes the store does not hold."""
    return f"assets/{sha256}"


def assets_manifest_key(job_id: str) -> str:
    """The job's asset manifest (farm.blender.assets): each file's path in the scene's tree and hash."""
    return f"jobs/{job_id}/assets.json"


def job_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/"


def spec_key(job_id: str) -> str:
    return f"jobs/{job_id}/spec.json"


def writer(chunk: int, claim: int) -> str:
    """`0-3`: claim 3 of chunk 0, which names what that attempt wrote of its frames. Claims count
    within a chunk, and a split gives a running chunk's last frames to a new chunk, whose first
    claim is 1 again: the chunk keeps the two apart."""
    return f"{chunk}-{claim}"


def frame_key(job_id: str, frame: int, writer: str | None, ext: str = "png") -> str:
    """One name per claim that rendered the frame (`writer`), recorded with the frame (r_frames):
    an attempt that lost its claim and uploads late writes beside the winner's frame, never over
    it. Readers follow the record, never a fixed name. `writer` None: a frame recorded before
    records named their writer, under the one name every attempt wrote."""
    tag = "" if writer is None else f".c{writer}"
    return f"jobs/{job_id}/frames/{frame:06d}{tag}.{ext}"


FRAME_SHA256 = "sha256"
"""A stored frame's metadata field for its sha256: with its size and its name's writer, the
frame's record in the store, which a ledger rebuilt from the store reads back
(farm.control.rebuild)."""


def frame_from_key(key: str, prefix: str) -> tuple[int, str | None] | None:
    """(frame, writer) of a frame's key under `prefix` (frame_key; writer None for the name
    before writers), None for another name."""
    found = _FRAME_NAME.fullmatch(key[len(prefix) :]) if key.startswith(prefix) else None
    return (int(found[1]), found[2]) if found else None


def thumb_key(job_id: str, frame: int, writer: str | None) -> str:
    """A small JPEG of the frame, made by the worker that uploaded it, for the job page; named by
    its writer like the frame (frame_key)."""
    tag = "" if writer is None else f".c{writer}"
    return f"jobs/{job_id}/thumbs/{frame:06d}{tag}.jpg"


def master_key(job_id: str, frame: int, name: str, writer: str | None) -> str:
    """A rendered frame in the scene's own output format (`frame_000012.exr`), kept as rendered,
    in its frame's folder for its writer (frame_folder)."""
    return f"{masters_prefix(job_id)}{frame_folder(frame, writer)}{name}"


def masters_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/masters/"


def file_output_key(job_id: str, frame: int, path: str, writer: str | None) -> str:
    """A file a File Output node of the scene wrote for `frame` (`Depth/Image0012.exr`), laid
    out as the scene's nodes name it inside its frame's folder for its writer (frame_folder)."""
    return f"{file_outputs_prefix(job_id)}{frame_folder(frame, writer)}{path}"


def file_outputs_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/file_output/"


def frame_folder(frame: int, writer: str | None) -> str:
    """`000012.c0-7/`: what claim 7 of chunk 0 stored beside frame 12 (its masters, its File
    Output files). The frame's record names the writer whose folder is the frame's; a stale
    attempt's files land in a folder of their own. `writer` None: "" (before folders)."""
    return "" if writer is None else f"{frame:06d}.c{writer}/"


_FRAME_NAME = re.compile(r"(\d{6,})(?:\.c(\d+-\d+))?\.[a-z0-9]+")
_FRAME_FOLDER = re.compile(r"(\d{6,})\.c(\d+-\d+)")  # frames past 999,999 take 7 digits


def in_frame_folder(key: str, prefix: str) -> tuple[int, str, str] | None:
    """(frame, writer, the rest of the name) of a key under `prefix` in a frame folder
    (frame_folder); None for a key outside one."""
    head, _, rest = key[len(prefix) :].partition("/")
    found = _FRAME_FOLDER.fullmatch(head)
    return (int(found[1]), found[2], rest) if found and rest else None


def segment_key(job_id: str, chunk: int, claim: int, ext: str = "mp4") -> str:
    """One name per claim of the chunk, recorded in its manifest: an attempt that lost its lease
    and uploads late writes beside the newer attempt's segment, never over it."""
    return f"jobs/{job_id}/segments/{chunk:05d}-claim{claim}.{ext}"


def manifest_key(job_id: str, chunk: int, writer: str | None) -> str:
    """Written last: a chunk is done when its manifest exists and verifies. One name per claim
    (`writer`, keys.writer), recorded on the chunk by its done move (the `manifest` field): a
    stale attempt's late manifest lands beside the winner's, never over it. `writer` None: the one
    name every attempt wrote before manifests were fenced (chunks that record no name)."""
    tag = "" if writer is None else f".c{writer}"
    return f"{manifests_prefix(job_id)}{chunk:05d}{tag}.json"


def manifests_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/manifests/"


def chunk_manifest_key(job_id: str, chunk: Mapping[str, str]) -> str:
    """The manifest a done chunk's record names (its `manifest` field), else the name before
    manifests were fenced."""
    return chunk.get("manifest") or manifest_key(job_id, int(chunk["index"]), None)


def frames_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/frames/"


def control_key(job_id: str) -> str:
    """What was decided about the job after its submit (priority, budget, a fixed scene, a
    cancel), kept in the store beside its spec: the ledger can be rebuilt from the two."""
    return f"jobs/{job_id}/control.json"


def ledger_mark_key() -> str:
    """The ledger's mark as the reconciler last saw it (farm.control.rebuild): a ledger whose
    own mark is missing or older lost jobs, and is rebuilt from the store."""
    return "ledger/mark.json"


USERS_PREFIX = "users/"
"""The farm's API users, one object each (farm.control.users): the store is their record."""


def user_key(name: str) -> str:
    """A user's record: their role, their token's sha256 (never the token), and when it was made,
    expires and was revoked."""
    return f"{USERS_PREFIX}{name}.json"


PROJECTS_PREFIX = "projects/"
"""The farm's projects, one object each (farm.control.projects): the store is their record, the
ledger's r_projects a copy for fast reads."""


def project_key(name: str) -> str:
    """A project's record: its weight (its share of the workers' turns) and its quotas."""
    return f"{PROJECTS_PREFIX}{name}.json"


def log_key(job_id: str, chunk: int, attempt: int, phase: str, claim: int) -> str:
    """One log per claim: the attempt number starts again when a job is retried, and a stale
    attempt's last upload must not replace the log of the attempt that won the chunk."""
    return f"jobs/{job_id}/logs/{chunk:05d}-{phase}-attempt{attempt}-claim{claim}.log"


def output_key(job_id: str, ext: str = "mp4") -> str:
    return f"jobs/{job_id}/output.{ext}"


def output_version_key(job_id: str, version: int, ext: str = "mp4") -> str:
    """An earlier output of the job, kept when `farm retry --frames` fixed frames of it:
    `output.v1.mp4` beside `output.mp4` (the newest); version 1 is the first video made."""
    return f"jobs/{job_id}/output.v{version}.{ext}"


# ── Redis ─────────────────────────────────────────────────────────────────────────────────────
def r_live_jobs() -> str:
    """Jobs not yet ended, by submit time: what the reconciler watches, however many jobs the
    farm has had (Ledger.live_job_ids drops the ended ones as it meets them)."""
    return f"{REDIS_PREFIX}:jobs:live"


def r_children(job_id: str) -> str:
    """The jobs that wait for this one (`farm submit --after`), by submit time: what its status
    shows (farm.control.depends); each child's own record names its parents."""
    return f"{REDIS_PREFIX}:children:{job_id}"


def r_group(group_id: str) -> str:
    """The jobs one `farm submit --each` made (farm.core.siblings), by submit time: what each
    one's status lists as its siblings; each job's own record names its group."""
    return f"{REDIS_PREFIX}:group:{group_id}"


def r_live_jobs_seeded() -> str:
    """Set once the live set holds every job recorded before it existed."""
    return f"{REDIS_PREFIX}:jobs:live:seeded"


def r_ledger_mark() -> str:
    """The ledger's mark: its id and a count each reconcile pass adds one to, copied into the
    store (ledger_mark_key); missing or behind the store's copy, the ledger lost writes."""
    return f"{REDIS_PREFIX}:ledger:mark"


def r_jobs() -> str:
    """Sorted set of job ids scored by submit time."""
    return f"{REDIS_PREFIX}:jobs"


def r_wake(worker: str) -> str:
    """Pub/sub channel: "job_id chunk" for a chunk of this worker's that another one split, so
    its lease keeper hears at once instead of at its next renewal."""
    return f"{REDIS_PREFIX}:wake:{worker}"


def r_job(job_id: str) -> str:
    """Hash: the job's state, spec, counters and timings."""
    return f"{REDIS_PREFIX}:job:{job_id}"


def r_chunk(job_id: str, chunk: int) -> str:
    """Hash: one chunk's state, attempt, lease and timings."""
    return f"{REDIS_PREFIX}:chunk:{job_id}:{chunk}"


def r_frames(job_id: str) -> str:
    """Hash: frame number -> "size:sha256" of the frame verified in the store."""
    return f"{REDIS_PREFIX}:frames:{job_id}"


def r_renders(job_id: str) -> str:
    """Hash: frame number -> how many times it was rendered and stored (1 unless work was lost)."""
    return f"{REDIS_PREFIX}:renders:{job_id}"


def r_blocklist(job_id: str) -> str:
    """Hash: worker name -> permanent failures on this job."""
    return f"{REDIS_PREFIX}:blocklist:{job_id}"


def r_leases() -> str:
    """Sorted set of "job_id:chunk" scored by lease expiry (unix seconds)."""
    return f"{REDIS_PREFIX}:leases"


def r_events(job_id: str) -> str:
    """List of JSON events for `farm watch` and post-mortems."""
    return f"{REDIS_PREFIX}:events:{job_id}"


def r_workers() -> str:
    """Hash: worker name -> JSON heartbeat (queues, devices, last seen)."""
    return f"{REDIS_PREFIX}:workers"


def r_outbox() -> str:
    """Sorted set of webhook notices (JSON) scored by when each is next due (farm.outbox)."""
    return f"{REDIS_PREFIX}:outbox"


def r_notice_once(job_id: str, event: str, stamp: str) -> str:
    """String with a TTL: this job event was put in the outbox once already."""
    return f"{REDIS_PREFIX}:noticed:{job_id}:{event}:{stamp}"


def r_measurement(scene_key: str, resolution: str, samples: int) -> str:
    """Hash: Blender start-up and frame time measured for this scene at this size and samples."""
    return f"{REDIS_PREFIX}:measure:{scene_key}:{resolution}:{samples}"


def r_cost(job_id: str) -> str:
    """Hash: the job's metered GPU-seconds and dollars (all, wasted, start-up; per instance type
    and lifecycle), added to by every attempt's end (farm.ledger.lua)."""
    return f"{REDIS_PREFIX}:cost:{job_id}"


def r_attempts(job_id: str) -> str:
    """List of JSON records, one per ended attempt: chunk, phase, seconds, dollars, instance."""
    return f"{REDIS_PREFIX}:attempts:{job_id}"


def r_projects() -> str:
    """Hash: project name -> JSON record (weight, lanes, quotas): a copy of the store's
    (keys.project_key) that dispatch, workers and the reconciler read at every turn."""
    return f"{REDIS_PREFIX}:projects"


def r_project_jobs(name: str) -> str:
    """Sorted set of the project's job ids scored by submit time: what its use of its quota is
    summed over."""
    return f"{REDIS_PREFIX}:project:{name}:jobs"


def lease_member(job_id: str, chunk: int) -> str:
    return f"{job_id}:{chunk}"


def parse_lease_member(member: str) -> tuple[str, int]:
    job_id, _, chunk = member.rpartition(":")
    return job_id, int(chunk)

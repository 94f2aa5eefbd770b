"""The ledger rebuilt from the store: the store is the record.

What the store holds of a job is enough to put an unfinished one back in the ledger:
- its spec (`jobs/J/spec.json`, written at submit, with its priority, budget, plan, owner,
  project and the jobs it waits for) and what was decided since (`jobs/J/control.json`:
  priority, budget, a fixed scene, a pause, its release from waiting, its end);
- each done chunk's manifest (claim-keyed, keys.manifest_key), whose segment is checked to be
  there, at the size it names;
- each stored frame (keys.frame_key), whose size, sha256 (its metadata, keys.FRAME_SHA256) and
  writer (its name) are its record: reused, never rendered again.

Done chunks keep their index; the job's other frames are cut again into chunks of the job's size,
put in the free indices. Each chunk's claim count starts past every claim the store has seen for
its index, so no new attempt writes a name an old one wrote. A job whose output is in the store
is done (its output stays fetchable, `farm fetch` reads it there); one the store says was
cancelled or failed stays ended. Jobs the ledger still holds are left as they are, but stored
frames the ledger has no record of get one back (a ledger rolled back to an older snapshot).

The reconciler notices a ledger that lost writes by its mark (farm.ledger.restore.Mark): a copy
of it is kept in the store each pass, and a ledger whose mark is gone (started empty) or behind
the store's copy (rolled back) is rebuilt before anything else is done.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from farm.control.preview import send_chunks
from farm.core import keys
from farm.core.errors import FarmError, ObjectMissing
from farm.core.preview import HOLD, HOLD_RELEASED, PREVIEW_FRAMES, preview_frames
from farm.core.spec import JobKind, JobSpec
from farm.core.state import ENDED, JobState
from farm.ledger import FrameRecord
from farm.ledger.ports import RebuildLedger
from farm.ledger.restore import Mark, RestoredChunk

if TYPE_CHECKING:
    from farm.adapters.store import Store
    from farm.dispatch import Dispatcher

log = logging.getLogger(__name__)

LOOKUPS = 16
"""Store requests in flight while a job is read back (manifests, segments, frames' records)."""

_MANIFEST = re.compile(r"(\d{5,})(?:\.c(\d+)-(\d+))?\.json")
_CLAIMS = (
    re.compile(r"/segments/(\d{5,})-claim(\d+)\."),  # keys.segment_key
    re.compile(r"/logs/(\d{5,})-[^/]*-claim(\d+)\.log$"),  # keys.log_key
    re.compile(r"\.c(\d+)-(\d+)[./]"),  # keys.writer in frame, thumb, master and manifest names
)


# ── what was decided about a job, in the store ────────────────────────────────────────────────
def read_control(store: Store, job_id: str) -> dict[str, Any]:
    """The job's control record ({} where nothing was decided since its submit)."""
    try:
        found = store.get_json(keys.control_key(job_id))
    except ObjectMissing:
        return {}
    return found if isinstance(found, dict) else {}


def record_control(store: Store, job_id: str, **changes: Any) -> None:
    """Keep a decision about the job in the store beside its spec (`state`, `priority`,
    `max_cost`, `source_key`, `paused_reason`), so a ledger rebuilt from the store keeps it."""
    store.put_json(keys.control_key(job_id), {**read_control(store, job_id), **changes,
                                              "updated": time.time()})  # fmt: skip


def stored_output(store: Store, job_id: str) -> str | None:
    """The done job's output in the store, None where it has none (or no spec): what `farm
    fetch` reads where the ledger lost the job."""
    try:
        spec = JobSpec.from_json(store.get_json(keys.spec_key(job_id))["spec"])
    except (ObjectMissing, KeyError, TypeError, ValueError):
        return None
    output = keys.output_key(job_id, spec.deliverable)
    return output if store.exists(output) else None


# ── one job, read back ───────────────────────────────────────────────────────────────────────
@dataclass(slots=True)
class Found:
    """What the rebuild found of one job in the store, and did with it."""

    job_id: str
    outcome: str
    """rebuilt | kept (the ledger has it) | done (its output is stored) | ended (cancelled or
    failed, as the store says) | unreadable"""
    chunks: int = 0
    chunks_done: int = 0
    frames_kept: int = 0
    """Stored frames of the chunks still to run, their records put back: reused, never
    rendered again (the done chunks' frames get theirs back too, for `farm fetch --frames`)."""
    frames_to_render: int = 0
    why: str = ""


@dataclass(slots=True)
class Rebuilt:
    jobs: list[Found] = field(default_factory=list)
    seconds: float = 0.0

    def of(self, outcome: str) -> list[Found]:
        return [f for f in self.jobs if f.outcome == outcome]

    @property
    def chunks(self) -> int:
        return sum(f.chunks for f in self.jobs)

    def lines(self) -> list[str]:
        """What `farm reconcile --rebuild` prints: a line per job, then the sums."""
        out = []
        for f in self.jobs:
            if f.outcome == "rebuilt":
                out.append(
                    f"{f.job_id}: rebuilt, {f.chunks_done} of {f.chunks} chunks done, "
                    f"{f.frames_kept} stored frames kept, {f.frames_to_render} frames to render"
                )
            elif f.outcome == "kept":
                tail = f", {f.frames_kept} frame records put back" if f.frames_kept else ""
                out.append(f"{f.job_id}: in the ledger already{tail}")
            else:
                out.append(f"{f.job_id}: {f.outcome}" + (f" ({f.why})" if f.why else ""))
        counts = {o: len(self.of(o)) for o in ("rebuilt", "kept", "done", "ended", "unreadable")}
        out.append(
            f"{len(self.jobs)} jobs in the store: "
            + ", ".join(f"{n} {o}" for o, n in counts.items() if n)
            + f" ({self.chunks} chunks rebuilt in {self.seconds:.2f} s)"
            if self.jobs
            else "no jobs in the store"
        )
        return out


@dataclass(frozen=True, slots=True)
class _Manifest:
    key: str
    chunk: int
    claim: int
    frames: tuple[int, ...]


def _manifest_frames(manifest: dict[str, Any], kind: JobKind) -> tuple[int, ...]:
    """The frames a segment's manifest covers (workers.attempt.lifecycle.segment_manifest)."""
    frames = manifest.get("frames")
    if kind is JobKind.TRANSCODE and isinstance(frames, dict):
        return tuple(range(int(frames["first"]), int(frames["end"])))
    if isinstance(frames, list):
        return tuple(int(e["frame"]) for e in frames)
    raise ValueError("a manifest without its frames")


def _verified(store: Store, key: str, kind: JobKind) -> _Manifest | None:
    """The manifest at `key`, where it reads and its segment is stored as it says; else None."""
    found = _MANIFEST.fullmatch(key.rsplit("/", 1)[-1])
    if found is None:
        return None
    try:
        manifest = store.get_json(key)
        segment = manifest["segment"]
        head = store.head(str(segment["key"]))
        if head is None or head[0] != int(segment["size"]):
            return None
        if segment.get("etag") and head[1] != segment["etag"]:
            return None
        frames = _manifest_frames(manifest, kind)
        if len(frames) != int(manifest["frame_count"]):
            return None
    except (ObjectMissing, KeyError, TypeError, ValueError):
        return None
    return _Manifest(key=key, chunk=int(found[1]), claim=int(found[3] or 0), frames=frames)


def _claims_seen(names: Iterable[str]) -> dict[int, int]:
    """The highest claim each chunk index has written anything under."""
    seen: dict[int, int] = {}
    for name in names:
        for pattern in _CLAIMS:
            for chunk, claim in pattern.findall(name):
                seen[int(chunk)] = max(seen.get(int(chunk), 0), int(claim))
    return seen


def _cut(
    frames: list[int], size: int, order: dict[int, int], alone: set[int] | None = None
) -> list[list[int]]:
    """The frames left to render, in the job's order, cut into chunks of `size` that never span
    a gap (a done chunk's frames between them); each frame of `alone` (a preview's) a chunk of
    its own."""
    chunks: list[list[int]] = []
    alone = alone or set()
    for frame in frames:
        last = chunks[-1] if chunks else None
        if frame in alone or (last and last[-1] in alone):
            chunks.append([frame])
        elif last and len(last) < size and order[frame] == order[last[-1]] + 1:
            last.append(frame)
        else:
            chunks.append([frame])
    return chunks


def _stored_records(
    store: Store, job_id: str, pool: ThreadPoolExecutor, names: dict[str, int], wanted: set[int]
) -> dict[int, FrameRecord]:
    """The stored frames among `wanted` (of `names`, the job's listed keys) with a record (sha256
    in their metadata), one per frame: the newest claim's where several attempts stored one."""
    prefix = keys.frames_prefix(job_id)
    best: dict[int, tuple[tuple[int, int], str, str]] = {}
    for name in names:
        parsed = keys.frame_from_key(name, prefix)
        if parsed is None or parsed[1] is None or parsed[0] not in wanted:
            continue  # a frame from before writers: no sha256 kept with it
        frame, writer = parsed[0], parsed[1]
        chunk, claim = (int(x) for x in writer.split("-"))
        if frame not in best or (chunk, claim) > best[frame][0]:
            best[frame] = ((chunk, claim), name, writer)

    def record(
        item: tuple[int, tuple[tuple[int, int], str, str]],
    ) -> tuple[int, FrameRecord | None]:
        frame, (_, name, writer) = item
        head = store.head_metadata(name)
        if head is None or not head[2].get(keys.FRAME_SHA256):
            return frame, None
        return frame, FrameRecord(head[0], head[2][keys.FRAME_SHA256], writer)

    return {f: r for f, r in pool.map(record, best.items()) if r is not None}


class JobReader:
    """One job read back from the store (`read`), for `restore` to write to the ledger."""

    def __init__(self, store: Store, job_id: str) -> None:
        self.store = store
        self.job_id = job_id

    def read(self) -> tuple[Found, dict[str, Any] | None]:
        """What the store says of the job, and, for an unfinished one, what to restore: the
        arguments of RebuildLedger.restore_job (job, chunks, records, claims, submitted, cost)."""
        job_id, store = self.job_id, self.store
        try:
            doc = store.get_json(keys.spec_key(job_id))
            spec = JobSpec.from_json(doc["spec"])
        except ObjectMissing:
            return Found(job_id, "unreadable", why="no spec.json"), None
        except (KeyError, TypeError, ValueError) as exc:
            return Found(job_id, "unreadable", why=f"spec.json: {exc}"), None
        control = {**doc.get("control", {}), **read_control(store, job_id)}
        state = str(control.get("state", ""))
        if state in ENDED and state != JobState.DONE:
            return Found(job_id, "ended", why=state), None
        output = keys.output_key(job_id, spec.deliverable)
        if store.exists(output):  # `farm fetch` finds it there
            return Found(job_id, "done", why=output), None
        names = store.sizes(keys.job_prefix(job_id))
        with ThreadPoolExecutor(LOOKUPS, thread_name_prefix="rebuild") as pool:
            candidates = [k for k in names if k.startswith(keys.manifests_prefix(job_id))]
            manifests = [
                m for m in pool.map(lambda k: _verified(store, k, spec.kind), candidates) if m
            ]
            done_frames: set[int] = set()
            done: dict[int, _Manifest] = {}
            # The newest claim of each chunk first; a manifest whose frames another already
            # covers (a stale attempt's, from before a split) is left out.
            for m in sorted(manifests, key=lambda m: (m.chunk, -m.claim)):
                if m.chunk in done or done_frames.intersection(m.frames):
                    continue
                done[m.chunk] = m
                done_frames.update(m.frames)
            every = list(spec.frames.frames)
            waiting = [f for f in every if f not in done_frames]
            render = spec.kind is JobKind.RENDER
            records = _stored_records(store, job_id, pool, names, set(every)) if render else {}
        order = {frame: i for i, frame in enumerate(every)}
        planned = doc.get("chunks") or [[]]
        asked = str(control.get("chunk_size") or "")  # "auto" while an auto size is pending
        size = int(asked if asked.isdigit() else 0) or spec.chunk_size or len(planned[0]) or 1
        # Every chunk, done or not, in the video's order, numbered again from 0: a manifest names
        # its segment whatever the chunk's index, and each index's claims count on past every
        # claim the store has seen for it (below), so no new attempt writes an old one's name.
        shown = preview_frames(spec.frames, spec.preview)
        holds = spec.hold and not control.get(HOLD_RELEASED)
        if holds:  # held, or not yet: only its preview frames are planned (farm.control.preview)
            waiting = [f for f in waiting if f in shown]
        parts = [(m.frames, m.key) for m in done.values()]
        parts += [(tuple(c), "") for c in _cut(waiting, max(size, 1), order, alone=set(shown))]
        parts.sort(key=lambda part: order.get(part[0][0], -1) if part[0] else -1)
        chunks = [RestoredChunk(index=i, frames=f, manifest=k) for i, (f, k) in enumerate(parts)]
        claims = _claims_seen(names)
        fields = {
            "id": job_id,
            "kind": str(spec.kind),
            "state": str(self._state(state, done, records, spec, control)),
            "spec": json.dumps(spec.to_json()),
            "source_key": str(control.get("source_key") or doc["source_key"]),
            "frames_total": spec.frames.count,
            "created": float(doc.get("submitted") or time.time()),
            "error": "",
            "output": "",
            "rebuilt": time.time(),
            **{k: str(v) for k, v in control.items() if k in _CONTROL_FIELDS and v is not None},
        }
        if control.get("fixes"):  # `farm retry --frames` (farm.control.fixes): what was fixed
            fields["fixes"] = json.dumps(control["fixes"])
        if spec.group:  # its siblings (farm.core.siblings), as the ledger's submit wrote it
            fields["group"] = spec.group.id
        if shown:  # its preview frames go first; a hold not released holds it again
            fields[PREVIEW_FRAMES] = json.dumps(list(shown))
            fields |= {HOLD: "1"} if spec.hold else {}
            fields |= {"plan_pending": "1"} if holds else {}
            if holds and fields["state"] == JobState.RUNNING and not waiting:
                fields["state"] = str(JobState.HELD)
        if spec.after:  # the jobs it waits for, as the ledger's submit wrote them
            fields |= {"after": ",".join(spec.after),
                       "after_mode": "any" if spec.after_any else "done"}  # fmt: skip
        found = Found(
            job_id, "rebuilt", chunks=len(chunks), chunks_done=len(done),
            frames_kept=len(set(waiting) & set(records)),
            frames_to_render=len(set(waiting) - set(records)),
        )  # fmt: skip
        return found, {
            "job": fields,
            "chunks": chunks,
            "records": records,
            "claims": {c.index: claims.get(c.index, 0) for c in chunks},
            "submitted": fields["created"],
            "cost": {str(k): str(v) for k, v in dict(control.get("cost") or {}).items()},
        }

    @staticmethod
    def _state(
        state: str,
        done: dict[int, _Manifest],
        records: dict[int, FrameRecord],
        spec: JobSpec,
        control: dict[str, Any],
    ) -> str:
        if state == JobState.PAUSED:
            return JobState.PAUSED
        if spec.after and not control.get("released"):  # its parents decide (control.depends)
            return JobState.WAITING
        return JobState.RUNNING if done or records else JobState.QUEUED


_CONTROL_FIELDS = ("priority", "max_cost", "chunk_size", "chunk_plan", "est_cost_per_frame",
                   "notify_url", "paused_reason", "paused", "owner", "project",
                   "released", HOLD_RELEASED)  # fmt: skip


# ── the whole ledger ─────────────────────────────────────────────────────────────────────────
def rebuild(ledger: RebuildLedger, store: Store, dispatch: Dispatcher | None) -> Rebuilt:
    """Every job in the store the ledger lost, put back; its waiting chunks sent (`dispatch`
    None: recorded only). Jobs the ledger holds get back the records of frames it lost."""
    started = time.monotonic()
    result = Rebuilt()
    for job_id in store.folders("jobs/"):
        try:
            result.jobs.append(restore(ledger, store, dispatch, job_id))
        except FarmError as exc:
            log.warning("rebuild of %s failed: %s", job_id, exc)
            result.jobs.append(Found(job_id, "unreadable", why=str(exc)))
    result.seconds = time.monotonic() - started
    return result


def restore(ledger: RebuildLedger, store: Store, dispatch: Dispatcher | None, job_id: str) -> Found:
    """One job (rebuild)."""
    held = ledger.job(job_id)
    if held:
        return _catch_up(ledger, store, job_id, held)
    found, plan = JobReader(store, job_id).read()
    if plan is None:
        return found
    if not ledger.restore_job(job_id, job=plan["job"], chunks=plan["chunks"],
                              records=plan["records"], submitted=plan["submitted"],
                              claims=plan["claims"], cost=plan["cost"]):  # fmt: skip
        return Found(job_id, "kept")
    log.warning("job %s rebuilt from the store: %d of %d chunks done, %d stored frames kept",
                job_id, found.chunks_done, found.chunks, found.frames_kept)  # fmt: skip
    if dispatch is not None and plan["job"]["state"] not in (
        JobState.PAUSED, JobState.WAITING, JobState.HELD
    ):  # fmt: skip
        _send(ledger, dispatch, job_id, plan["chunks"])
    return found


def _send(
    ledger: RebuildLedger, dispatch: Dispatcher, job_id: str, chunks: list[RestoredChunk]
) -> None:
    # A preview's chunks first, at the top priority (farm.control.preview).
    send_chunks(
        dispatch, ledger.job(job_id), ((c.index, c.frames) for c in chunks if not c.manifest)
    )
    if ledger.try_start_stitch(job_id):
        dispatch.stitch(job_id)


def _catch_up(ledger: RebuildLedger, store: Store, job_id: str, job: dict[str, str]) -> Found:
    """A job the ledger holds, which may have been rolled back to an older snapshot: its chunks'
    claim counts are raised past every claim the store has seen (no new attempt writes an old
    one's names), and the stored frames it has no record of get their records back."""
    if job.get("state") in ENDED:
        return Found(job_id, "kept")
    names = store.sizes(keys.job_prefix(job_id))
    ledger.raise_claims(job_id, _claims_seen(names))
    if job.get("kind") != JobKind.RENDER:
        return Found(job_id, "kept")
    have = set(ledger.frame_records(job_id))
    wanted = {f for f in JobSpec.from_json(json.loads(job["spec"])).frames.frames if f not in have}
    if not wanted:
        return Found(job_id, "kept")
    with ThreadPoolExecutor(LOOKUPS, thread_name_prefix="rebuild") as pool:
        records = _stored_records(store, job_id, pool, names, wanted)
    added = ledger.add_frame_records(job_id, records) if records else 0
    return Found(job_id, "kept", frames_kept=added)


def keep_spend(
    ledger: RebuildLedger, store: Store, job_ids: Iterable[str], kept: dict[str, dict[str, str]]
) -> list[str]:
    """Each job's spend (its cost hash) into its control record where it changed since it was
    last kept (`kept`, updated): a rebuilt ledger counts its budget on from there. The jobs
    whose spend was kept."""
    done = []
    for job_id in job_ids:
        cost = ledger.cost_record(job_id)
        if cost and cost != kept.get(job_id):
            record_control(store, job_id, cost=cost)
            kept[job_id] = cost
            done.append(job_id)
    return done


# ── noticing a ledger that lost writes ────────────────────────────────────────────────────────
MARK_COPY_EVERY = 10
"""Passes between copies of the ledger's mark into the store. A reconciler compares the mark with
the count it holds in memory each pass; the store's copy serves the next reconciler to start (or
another one), so a copy every pass (17,280 PUTs a day at the default 5 s) buys nothing. A new
ledger's mark and one after a rebuild are copied at once."""


class MarkWatch:
    """The reconciler's check, each pass, that the ledger did not lose writes: its mark, moved
    on by one and copied into the store every MARK_COPY_EVERY passes; a mark gone, or behind the
    last count seen (this reconciler's, else the store's copy), is a loss."""

    def __init__(self, ledger: RebuildLedger, store: Store, on_loss: Callable[[], Rebuilt]) -> None:
        self.ledger = ledger
        self.store = store
        self.on_loss = on_loss
        self._stored: Mark | None = None
        self._read = False
        self._copied: Mark | None = None
        """The mark as last written to the store."""

    def stored(self) -> Mark | None:
        if not self._read:
            try:
                self._stored = Mark.from_json(self.store.get_json(keys.ledger_mark_key()))
            except ObjectMissing:
                self._stored = None
            except (KeyError, TypeError, ValueError):
                log.warning("the store's copy of the ledger's mark cannot be read; writing anew")
                self._stored = None
            self._read = True
            self._copied = self._stored
        return self._stored

    def check(self) -> Rebuilt | None:
        """One pass: the rebuild it ran (None where the ledger lost nothing)."""
        stored = self.stored()
        mark = self.ledger.mark()
        rebuilt = None
        behind = mark is not None and stored is not None and mark.count < stored.count
        if mark is None or behind:
            why = "has no mark" if mark is None else f"is at {mark.count}, the store's copy ahead"
            if mark is not None or stored is not None:
                log.warning("the ledger %s: it lost writes; rebuilding it from the store", why)
            # Marked first (a new name where it had none), so a loss during the rebuild is seen
            # by the advance after it.
            mark = self.ledger.advance_mark(stored, read=mark)
            if mark is None:
                return None  # lost again meanwhile: the next pass rebuilds
            rebuilt = self.on_loss()
        moved = self.ledger.advance_mark(stored, read=mark)
        if moved is None:  # lost since it was read: the next pass rebuilds
            log.warning("the ledger lost its mark during this pass; rebuilding on the next")
            return rebuilt
        copied = self._copied
        if (
            rebuilt is not None
            or copied is None
            or copied.ledger != moved.ledger
            or moved.count - copied.count >= MARK_COPY_EVERY
        ):
            self.store.put_json(keys.ledger_mark_key(), moved.to_json())
            self._copied = moved
        self._stored = moved
        return rebuilt

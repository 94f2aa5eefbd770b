"""The pipeline, declared once (pure): each job kind's phases, and for each phase its task, queue,
the states a chunk is claimed from and into, where it goes on success, failure, a lost lease or an
interruption, and what comes next.

The ledger's scripts, dispatch, the reconciler, retries, queue depths and the workers' phase
runner all read these tables. Adding a phase (a denoise pass, a thumbnail pass) is one entry here
plus its worker function.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from farm.core.spec import JobKind
from farm.core.state import ChunkState, JobState


class Queue(StrEnum):
    RENDER = "render"
    """Blender renders: any worker with a Blender that can open the scene (GPU, else CPU)."""
    ENCODE = "encode"
    """Video encoding (frames to segments, masters to segments): workers with NVENC, or CPU-only
    workers. A GPU without an encoder (H100, A100) never takes it."""
    STITCH = "stitch"
    """Joining segments by stream copy: any worker."""


class Phase(StrEnum):
    RENDER = "render"
    """Blender renders the chunk's frames; each frame is uploaded as it is saved."""
    SEGMENT = "segment"
    """A render job's frames become one closed-GOP video segment, manifest written last."""
    TRANSCODE = "transcode"
    """A transcode job's master is cut and transcoded into one segment, manifest written last."""
    STITCH = "stitch"
    """Every segment of the job joined into the deliverable (once per job, not per chunk)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseSpec:
    phase: Phase
    task: str
    """The Celery task name; farm sends it by name and never imports workers."""
    queue: Queue
    claim_from: frozenset[ChunkState]
    """States a chunk waits in for this phase; a claim moves it from one of them..."""
    running: ChunkState
    """...into this one, under a lease."""
    done: ChunkState
    """Where a successful attempt leaves the chunk."""
    on_failure: ChunkState
    """Where a failed attempt returns the chunk to be tried again (a failure is counted)."""
    on_lost: ChunkState
    """Where the reconciler returns a chunk whose worker stopped renewing its lease."""
    on_interrupt: ChunkState
    """Where a worker that is going away hands the chunk back (no failure counted)."""
    next: Phase | None
    """The chunk's next phase once this one is done; None: the chunk is finished."""
    log_name: str
    """The attempt log's name in the store (`logs/<chunk>-<attempt>-<log_name>.log`)."""


RENDER_TASK = "farm.render_chunk"
SEGMENT_TASK = "farm.segment_chunk"
TRANSCODE_TASK = "farm.transcode_segment"
STITCH_TASK = "farm.stitch_job"

_WAITING = frozenset({ChunkState.QUEUED, ChunkState.INTERRUPTED})

PHASES: dict[Phase, PhaseSpec] = {
    Phase.RENDER: PhaseSpec(
        phase=Phase.RENDER,
        task=RENDER_TASK,
        queue=Queue.RENDER,
        claim_from=_WAITING,
        running=ChunkState.RENDERING,
        done=ChunkState.RENDERED,
        on_failure=ChunkState.QUEUED,
        on_lost=ChunkState.QUEUED,
        on_interrupt=ChunkState.INTERRUPTED,
        next=Phase.SEGMENT,
        log_name="render",
    ),
    Phase.SEGMENT: PhaseSpec(
        phase=Phase.SEGMENT,
        task=SEGMENT_TASK,
        queue=Queue.ENCODE,
        claim_from=frozenset({ChunkState.RENDERED}),
        running=ChunkState.ENCODING,
        done=ChunkState.DONE,
        # The frames are kept: a failed or lost encode waits for another encode, not a render.
        on_failure=ChunkState.RENDERED,
        on_lost=ChunkState.RENDERED,
        on_interrupt=ChunkState.RENDERED,
        next=None,
        log_name="encode",
    ),
    Phase.TRANSCODE: PhaseSpec(
        phase=Phase.TRANSCODE,
        task=TRANSCODE_TASK,
        queue=Queue.ENCODE,
        claim_from=_WAITING,
        running=ChunkState.TRANSCODING,
        done=ChunkState.DONE,
        on_failure=ChunkState.QUEUED,
        on_lost=ChunkState.QUEUED,
        on_interrupt=ChunkState.INTERRUPTED,
        next=None,
        log_name="transcode",
    ),
}
"""Chunk phases. The stitch is a job phase: see STITCH."""

STITCH = PhaseSpec(
    phase=Phase.STITCH,
    task=STITCH_TASK,
    queue=Queue.STITCH,
    claim_from=frozenset(),
    running=ChunkState.DONE,
    done=ChunkState.DONE,
    on_failure=ChunkState.DONE,
    on_lost=ChunkState.DONE,
    on_interrupt=ChunkState.DONE,
    next=None,
    log_name="stitch",
)
"""Opened by the completion gate (the job moves RUNNING -> STITCHING), not by chunk states."""

CHUNK_PHASES: dict[JobKind, tuple[Phase, ...]] = {
    JobKind.RENDER: (Phase.RENDER, Phase.SEGMENT),
    JobKind.TRANSCODE: (Phase.TRANSCODE,),
}
"""Each job kind's chunk phases in order; every kind ends with one STITCH."""

TASK_QUEUES: dict[str, Queue] = {
    **{spec.task: spec.queue for spec in PHASES.values()},
    STITCH.task: STITCH.queue,
}


def spec_of(phase: Phase) -> PhaseSpec:
    return STITCH if phase is Phase.STITCH else PHASES[phase]


def kind_of(job: dict[str, str]) -> JobKind:
    """The kind of a ledger job record (records written before the rename say 'encode')."""
    return JobKind.parse(job.get("kind") or JobKind.RENDER)


def first_phase(kind: JobKind) -> PhaseSpec:
    return PHASES[CHUNK_PHASES[kind][0]]


def waiting_for(kind: JobKind, state: str) -> PhaseSpec | None:
    """The phase a chunk of this kind in `state` waits for (whose message it needs), if any."""
    for phase in CHUNK_PHASES[kind]:
        if state in PHASES[phase].claim_from:
            return PHASES[phase]
    return None


def running_in(kind: JobKind, state: str) -> PhaseSpec | None:
    """The phase a chunk of this kind in `state` is running, if any."""
    for phase in CHUNK_PHASES[kind]:
        if state == PHASES[phase].running:
            return PHASES[phase]
    return None


def running_states() -> frozenset[ChunkState]:
    """States in which a worker holds the chunk's lease (what a renewal accepts)."""
    return frozenset(spec.running for spec in PHASES.values())


def _chunk_transitions() -> dict[ChunkState, frozenset[ChunkState]]:
    moves: dict[ChunkState, set[ChunkState]] = {state: set() for state in ChunkState}
    for spec in PHASES.values():
        for source in spec.claim_from:
            moves[source].add(spec.running)
        moves[spec.running] |= {spec.done, spec.on_failure, spec.on_lost, spec.on_interrupt}
        # Frames missing at encode: the chunk goes back to the start of its job's pipeline.
        moves[spec.running].add(ChunkState.QUEUED)
        moves[spec.running].add(ChunkState.FAILED)
    for state in ChunkState:
        if state is not ChunkState.DONE:
            moves[state].add(ChunkState.CANCELLED)
    # `farm retry` reopens failed and cancelled chunks; an interrupted chunk may be requeued.
    for state in (ChunkState.FAILED, ChunkState.CANCELLED, ChunkState.INTERRUPTED):
        moves[state].add(ChunkState.QUEUED)
    for state in ChunkState:
        moves[state].discard(state)
    return {state: frozenset(targets) for state, targets in moves.items()}


CHUNK_TRANSITIONS: dict[ChunkState, frozenset[ChunkState]] = _chunk_transitions()
"""Allowed moves, derived from the phases. DONE is terminal: a late or duplicate result can never
move a chunk backwards."""

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # A waiting job is released (queued), cancelled with its chain, or held (paused).
    JobState.WAITING: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.PAUSED}),
    JobState.QUEUED: frozenset(
        {JobState.RUNNING, JobState.FAILED, JobState.CANCELLED, JobState.PAUSED}
    ),
    # A job with `--hold` stops once its preview frames are done (farm.control.preview).
    JobState.RUNNING: frozenset(
        {JobState.STITCHING, JobState.FAILED, JobState.CANCELLED, JobState.PAUSED, JobState.HELD}
    ),
    # `farm resume` releases a held job: the rest is planned and sent.
    JobState.HELD: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    # A paused job that was never released goes back to waiting (farm.control.jobs.resume).
    JobState.PAUSED: frozenset(
        {JobState.RUNNING, JobState.WAITING, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.STITCHING: frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED}),
    JobState.FAILED: frozenset({JobState.RUNNING}),
    # `farm retry` of a job cancelled while it waited puts it back to waiting for its parents.
    JobState.CANCELLED: frozenset({JobState.RUNNING, JobState.WAITING}),
    JobState.DONE: frozenset(),
}


def can_move(current: ChunkState, target: ChunkState) -> bool:
    """Whether a chunk may go from `current` to `target`."""
    return target in CHUNK_TRANSITIONS[current]


def sources_of(target: ChunkState) -> frozenset[ChunkState]:
    """Every state from which a chunk may move to `target` (what the ledger's script checks)."""
    return frozenset(s for s, targets in CHUNK_TRANSITIONS.items() if target in targets)


def job_sources_of(target: JobState) -> frozenset[JobState]:
    """Every job state from which a job may move to `target`."""
    return frozenset(s for s, targets in JOB_TRANSITIONS.items() if target in targets)


def markdown_table() -> str:
    """The pipeline as the README shows it (a test keeps the two the same)."""
    rows = [
        "| job kind | phase | task | queue | claimed from → into | done | on failure | "
        "lease lost | interrupted | next |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, phases in CHUNK_PHASES.items():
        for spec in (*(PHASES[p] for p in phases), STITCH):
            if spec is STITCH:
                rows.append(
                    f"| {kind} | {spec.phase} | `{spec.task}` | {spec.queue} | "
                    "job running → stitching (the completion gate, once) | job done | job failed "
                    "| re-sent by the reconciler | re-sent | — |"
                )
                continue
            sources = ", ".join(sorted(spec.claim_from))
            rows.append(
                f"| {kind} | {spec.phase} | `{spec.task}` | {spec.queue} | {sources} → "
                f"{spec.running} | {spec.done} | {spec.on_failure} | {spec.on_lost} | "
                f"{spec.on_interrupt} | {spec.next or 'stitch gate'} |"
            )
    return "\n".join(rows)

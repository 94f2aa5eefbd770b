"""Each consumer's view of the ledger: the few methods it calls, as a Protocol it is annotated with
instead of the whole `Ledger`. A consumer's tests may hand it anything with those methods; a
method a view lacks is one its consumer cannot reach for without saying so here.

The views live beside the ledger rather than beside each consumer because consumers on different
floors share them (sizing a job: the control plane's submit and the worker's autochunk) and a
view in farm.control could not be seen from workers; one module also lets mypy prove, at its end,
that `Ledger` is every one of them. The worker attempt's own view is workers.attempt's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from farm.core import cost
from farm.core.chunking import Measurement
from farm.core.plan import Chunk
from farm.core.spec import JobSpec
from farm.core.state import ChunkState
from farm.ledger.base import FrameRecord, Move
from farm.ledger.restore import Mark, RestoredChunk

Records = list[tuple[dict[str, str], list[dict[str, str]], dict[str, str]]]
"""Jobs as `job_records` reads them: each job's hash, its chunks' hashes, its cost hash."""


class ChunkMover(Protocol):
    """Moving a chunk (Ledger.move_chunk): the reconciler's and the worker attempt's views share
    it."""

    def move_chunk(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        token: str = "",
        lease_s: float | None = None,
        mode: str = "",
        max_failures: int = 0,
        only_from: frozenset[ChunkState] | None = None,
        gate: bool = False,
        **fields: Any,
    ) -> Move: ...


class SizingLedger(Protocol):
    """Sizing a job's chunks (farm.ledger.speeds): the live workers, and the recent jobs' chunks
    that tell each worker's speed."""

    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]: ...
    def job_records(self, limit: int = 1000) -> Records: ...


class SubmitLedger(SizingLedger, Protocol):
    """Submitting and estimating a job, and following it to its end (farm.control.jobs.submit,
    farm.control.estimate, farm.cli.submit)."""

    def ping(self) -> None: ...
    def measurement(
        self, scene_key: str, *, resolution: str, samples: int
    ) -> Measurement | None: ...
    def save_measurement(
        self, scene_key: str, m: Measurement, *, resolution: str, samples: int
    ) -> None: ...
    def create_job(
        self,
        *,
        job_id: str,
        spec: JobSpec,
        chunks: Iterable[Chunk],
        source_key: str,
        plan: dict[str, str] | None = None,
    ) -> None: ...
    def job(self, job_id: str) -> dict[str, str]: ...
    def chunks(self, job_id: str) -> list[dict[str, str]]: ...
    def cancel_job(self, job_id: str) -> list[int]: ...
    def cost_record(self, job_id: str) -> dict[str, str]: ...


class JobControlLedger(Protocol):
    """Steering a submitted job: retry (with a fixed scene), pause, resume, priority
    (farm.control.jobs)."""

    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]: ...
    def job(self, job_id: str) -> dict[str, str]: ...
    def job_or_fail(self, job_id: str) -> dict[str, str]: ...
    def chunks(self, job_id: str) -> list[dict[str, str]]: ...
    def check_reopen(self, job_id: str, *, every_unfinished: bool) -> None: ...
    def remake_chunk(self, job_id: str, index: int, why: str, target: ChunkState) -> bool: ...
    def reopen_job(self, job_id: str, *, every_unfinished: bool) -> list[int]: ...
    def replace_source(self, job_id: str, source_key: str) -> None: ...
    def try_start_stitch(self, job_id: str) -> bool: ...
    def pause_job(self, job_id: str, reason: str) -> Move: ...
    def resume_job(self, job_id: str, max_cost: float | None = None) -> Move: ...
    def priority(self, job_id: str) -> int: ...
    def set_priority(self, job_id: str, priority: int) -> None: ...
    def spend(self, job_id: str, job: dict[str, str] | None = None) -> cost.Spend: ...


class RebuildLedger(Protocol):
    """The ledger rebuilt from the store (farm.control.rebuild), and its mark."""

    def job(self, job_id: str) -> dict[str, str]: ...
    def frame_records(
        self, job_id: str, frames: Iterable[int] | None = None
    ) -> dict[int, FrameRecord]: ...
    def restore_job(
        self,
        job_id: str,
        *,
        job: Mapping[str, str],
        chunks: Sequence[RestoredChunk],
        records: Mapping[int, FrameRecord],
        submitted: float,
        claims: Mapping[int, int],
        cost: Mapping[str, str] | None = None,
    ) -> bool: ...
    def cost_record(self, job_id: str) -> dict[str, str]: ...
    def add_frame_records(self, job_id: str, records: Mapping[int, FrameRecord]) -> int: ...
    def raise_claims(self, job_id: str, claims: Mapping[int, int]) -> int: ...
    def try_start_stitch(self, job_id: str) -> bool: ...
    def mark(self) -> Mark | None: ...
    def advance_mark(
        self, base: Mark | None = None, *, read: Mark | None = None
    ) -> Mark | None: ...


class ReconcilerLedger(ChunkMover, RebuildLedger, Protocol):
    """The reconciler's pass (farm.control.reconcile): a ledger that lost writes, expired leases,
    completion gates, lost messages, early uploads left behind."""

    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]: ...
    def job(self, job_id: str) -> dict[str, str]: ...
    def chunk(self, job_id: str, index: int) -> dict[str, str]: ...
    def chunks(self, job_id: str) -> list[dict[str, str]]: ...
    def job_ids(self, limit: int = 50) -> list[str]: ...
    def live_job_ids(self, *, keep_ended: bool = False) -> list[str]: ...
    def job_fields(self, job_ids: list[str], *names: str) -> list[tuple[str, ...]]: ...
    def expired_leases(self, now: float | None = None) -> list[tuple[str, int]]: ...
    def drop_lease(self, job_id: str, index: int, *, expired_by: float | None = None) -> None: ...
    def try_start_stitch(self, job_id: str) -> bool: ...
    def stitch_sent_again(self, job_id: str, now: float) -> None: ...
    def broker_messages(self, queues: Iterable[str]) -> list[bytes]: ...
    def forget_early_upload(self, job_id: str, upload_id: str) -> bool: ...


class CensusLedger(Protocol):
    """Counting the farm (farm.control.census, and the exporter's scrape through it)."""

    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]: ...
    def job_records(self, limit: int = 1000) -> Records: ...


class WebLedger(CensusLedger, Protocol):
    """The web pages and /metrics (farm.web)."""

    def job_ids(self, limit: int = 50) -> list[str]: ...
    def job(self, job_id: str) -> dict[str, str]: ...
    def chunks(self, job_id: str) -> list[dict[str, str]]: ...
    def spend(self, job_id: str, job: dict[str, str] | None = None) -> cost.Spend: ...
    def frame_records(
        self, job_id: str, frames: Iterable[int] | None = None
    ) -> dict[int, FrameRecord]: ...


class SplitterLedger(Protocol):
    """An idle worker splitting a running chunk (workers.phases.splitter)."""

    def queue_length(self, queue: str) -> int: ...
    def job_ids(self, limit: int = 50) -> list[str]: ...
    def job(self, job_id: str) -> dict[str, str]: ...
    def chunks(self, job_id: str) -> list[dict[str, str]]: ...
    def worker_info(self, names: Iterable[str]) -> dict[str, dict[str, Any]]: ...
    def split_chunk(
        self,
        job_id: str,
        index: int,
        *,
        token: str,
        last_frame: int,
        chunks_total: int,
        min_rest: int = 2,
    ) -> int | None: ...


class AutochunkLedger(SizingLedger, Protocol):
    """Planning the rest of an auto-sized job after its probe chunk (workers.phases.autochunk)."""

    def job(self, job_id: str) -> dict[str, str]: ...
    def save_measurement(
        self, scene_key: str, m: Measurement, *, resolution: str, samples: int
    ) -> None: ...
    def plan_rest(
        self, job_id: str, *, after: int, chunks: list[Chunk], chunk_size: int, reason: str
    ) -> bool: ...


if TYPE_CHECKING:
    # mypy proves the one `Ledger` is every view: a view naming a method the ledger lacks, or
    # with another signature, fails `make lint` here.
    from farm.ledger.ledger import Ledger

    _SIZING: type[SizingLedger] = Ledger
    _SUBMIT: type[SubmitLedger] = Ledger
    _JOB_CONTROL: type[JobControlLedger] = Ledger
    _RECONCILER: type[ReconcilerLedger] = Ledger
    _REBUILD: type[RebuildLedger] = Ledger
    _CENSUS: type[CensusLedger] = Ledger
    _WEB: type[WebLedger] = Ledger
    _SPLITTER: type[SplitterLedger] = Ledger
    _AUTOCHUNK: type[AutochunkLedger] = Ledger

"""The worker attempt's view of the ledger: the methods the attempt lifecycle, its lease keeper
and its failure policy call, as Protocols they are annotated with instead of the whole `Ledger`
(the other consumers' views are farm.ledger.ports)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from farm.core.state import ChunkState
from farm.ledger import Claim, FrameRecord, Move
from farm.ledger.ports import ChunkMover


class LeaseLedger(Protocol):
    """Holding a lease (workers.attempt.lease)."""

    def renew(self, job_id: str, index: int, token: str, lease_s: float) -> str: ...


class AttemptLedger(LeaseLedger, ChunkMover, Protocol):
    """One chunk attempt and the failure policy around it (workers.attempt.lifecycle, policy):
    claim, read what the attempt needs, end it with a move, count its failures."""

    @property
    def meter(self) -> Mapping[str, str]: ...
    def claim(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        only_from: frozenset[ChunkState],
        lease_s: float,
        worker: str,
        block_after: int = 0,
        **fields: Any,
    ) -> Claim: ...
    def move_then_claim(
        self,
        job_id: str,
        index: int,
        target: ChunkState,
        *,
        token: str,
        fields: dict[str, Any],
        then: ChunkState,
        then_from: frozenset[ChunkState],
        lease_s: float,
        worker: str,
        block_after: int = 0,
        **claim_fields: Any,
    ) -> tuple[Move, Claim | None]: ...
    def job(self, job_id: str) -> dict[str, str]: ...
    def chunk(self, job_id: str, index: int) -> dict[str, str]: ...
    def frame_records(
        self, job_id: str, frames: Iterable[int] | None = None
    ) -> dict[int, FrameRecord]: ...
    def bump(self, job_id: str, index: int, counter: str) -> int: ...
    def blame(self, job_id: str, worker: str) -> int: ...
    def blocked(self, job_id: str) -> dict[str, int]: ...
    def workers(self, max_age_s: float = 60.0) -> dict[str, dict[str, Any]]: ...


if TYPE_CHECKING:
    # mypy proves the one `Ledger` is the attempt's view: a method it lacks, or one with another
    # signature, fails `make lint` here.
    from farm.ledger import Ledger

    _LEASE: type[LeaseLedger] = Ledger
    _ATTEMPT: type[AttemptLedger] = Ledger

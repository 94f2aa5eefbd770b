"""The farm's error hierarchy: every error says what the caller should do next.

Transient errors are retried with backoff, permanent ones fail the chunk, interruptions requeue it
without spending its failure budget. The CLI prints any FarmError plainly and exits 1 (SpecError,
UnknownJob and ContainerError, a machine without what the farm needs: 2).
"""

from __future__ import annotations


class FarmError(Exception):
    """Base of every error the farm raises on purpose; its message is meant for a person."""


class SpecError(FarmError):
    """The job as submitted cannot run: fix the input and submit again (CLI exit code 2)."""


class UnknownJob(FarmError):
    """A job id the ledger does not know: bad input, like a mistyped file name (CLI exit code 2)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id}; `farm jobs` lists the jobs")
        self.job_id = job_id

    def __reduce__(self) -> tuple[type[UnknownJob], tuple[str]]:
        return (UnknownJob, (self.job_id,))


class ConfigError(FarmError):
    """Settings are missing or inconsistent: run `farm up` or set the FARM_* variables."""


class ContainerError(ConfigError):
    """The container engine is missing, or refused a build or a compose command: what to
    install, the build step that stopped, or the engine's own words (CLI exit code 2)."""


class TransientError(FarmError):
    """A hiccup worth retrying with backoff (network, broker, object store)."""


class NotHere(TransientError):
    """This worker cannot do the chunk and another can (an NVENC job's encode on a host without
    NVENC): handed back at once, counted against nothing."""


class UnreachableError(TransientError):
    """A farm service (Redis, S3, Flower) does not answer at the configured address."""


class StoreError(TransientError):
    """The object store refused or failed a request."""


class ObjectMissing(StoreError):
    """The object asked for is not in the store (404). A StoreError, as ever, for callers to
    whom a missing object may yet appear; those that know it never will tell it apart."""


class LedgerError(TransientError):
    """The Redis ledger refused or failed a request."""


class PermanentError(FarmError):
    """Running the same work again will fail the same way: fail the chunk, keep the log."""


class StoreRefused(PermanentError):
    """The object store refused for good (access denied, no such bucket, KMS key denied, wrong keys,
    disk full): retrying will not help, so the chunk or stitch fails with the S3 code. A
    PermanentError rather than a StoreError, because every StoreError is retried as transient."""


class Refused(PermanentError):
    """The farm refuses this work by a rule of its own (a cap on what a frame writes, a master
    in a container that is not a master's): every try would be refused the same way, so the
    chunk fails at once, naming the rule."""


class ObjectChanged(PermanentError):
    """A stored object is no longer the one a manifest named (its ETag changed): a read or copy
    made on that condition was refused."""


class FramesMissing(PermanentError):
    """An encode found frames missing or corrupt in the store: the chunk goes back to render."""


class ChunkInterrupted(FarmError):
    """The worker is going away (spot reclaim, shutdown): requeue, do not count a failure."""


class LeaseLost(FarmError):
    """Another attempt owns this chunk now: stop and discard this attempt's results."""

"""The ledger: jobs, chunks, attempts, leases, fleet and cost in Redis, changed only by atomic Lua
scripts. The only place that knows Redis keys or talks to Redis; everyone else holds a `Ledger`
(or its consumer's view of it, farm.ledger.ports)."""

from farm.ledger.base import FrameRecord
from farm.ledger.jobs import EARLY_PART, EARLY_UPLOAD
from farm.ledger.ledger import Claim, Ledger, Move
from farm.ledger.projects import Project

__all__ = ["EARLY_PART", "EARLY_UPLOAD", "Claim", "FrameRecord", "Ledger", "Move", "Project"]

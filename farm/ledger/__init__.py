"""The ledger: jobs, chunks, attempts, leases, fleet and cost in Redis, changed only by atomic Lua
scripts. The only place that knows Redis keys or talks to Redis; everyone else holds a `Ledger`
(or a narrow Protocol of it)."""

from farm.ledger.ledger import Claim, Ledger, Move

__all__ = ["Claim", "Ledger", "Move"]

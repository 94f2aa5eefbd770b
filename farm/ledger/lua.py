"""The ledger's Lua (farm/ledger/scripts/*.lua, one script a file): each read once, its
placeholders filled in one place (`source`), and registered with a client once (`Scripts`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any, Self

from redis.commands.core import Script

from farm.core.pipeline import PHASES, running_states
from farm.core.state import ENDED

_PLACEHOLDER = re.compile(r"\{\{ *(include +)?(\w+) *\}\}")
"""`{{ NAME }}`: one of `sets()`, as a Lua set; `{{ include NAME }}`: the piece _NAME.lua (Lua
functions that more than one script needs; Redis scripts cannot load one another)."""


def lua_set(names: Iterable[str]) -> str:
    """A Lua table literal usable as a set: ({['a']=true, ['b']=true})."""
    return "({" + ", ".join(f"['{n}']=true" for n in sorted(names)) + "})"


def sets() -> dict[str, frozenset[str]]:
    """The states the scripts test against, drawn from the pipeline table (farm.core.pipeline)
    and the states a job ends in, so that no script spells out a state set of its own."""
    return {
        "RUNNING": frozenset(running_states()),
        "DONE": frozenset(spec.done for spec in PHASES.values()),
        "ENDED": frozenset(ENDED),
    }


def _read(name: str) -> str:
    return resources.files("farm.ledger").joinpath("scripts", f"{name}.lua").read_text("utf-8")


@functools.cache
def source(name: str) -> str:
    """The script scripts/NAME.lua as Redis runs it: its pieces and the pipeline's sets put in."""
    values = sets()

    def fill(match: re.Match[str]) -> str:
        if match[1]:
            return source(f"_{match[2]}").rstrip("\n")
        return lua_set(values[match[2]])

    return _PLACEHOLDER.sub(fill, _read(name))


@dataclass(frozen=True, slots=True, kw_only=True)
class Scripts:
    """Every ledger script registered with one client: each call is an EVALSHA, and redis-py's
    Script loads the script (SCRIPT LOAD) on NOSCRIPT, as after a Redis restart. A field per
    scripts/NAME.lua that is no piece (_NAME.lua)."""

    chunk_move: Script
    renew: Script
    start_stitch: Script
    job_move: Script
    plan_rest: Script
    split: Script
    drop_expired: Script
    drop_ended: Script
    field_once: Script
    remake_chunk: Script
    fix_frames: Script
    forget_early_upload: Script
    push_notice: Script
    claim_notices: Script
    record_frame: Script
    raise_claims: Script
    advance_mark: Script

    @classmethod
    def registered(cls, client: Any) -> Self:
        """`client`: a redis.Redis (typed Any: the ledger's client is decode_responses=True)."""
        return cls(**{f.name: client.register_script(source(f.name)) for f in fields(cls)})

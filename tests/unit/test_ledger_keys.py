"""Redis keys are built only in the ledger: farm.core.keys names both the store's keys (anyone may
build those) and Redis's, and an import contract cannot tell one call from the other."""

from __future__ import annotations

import ast
from pathlib import Path

from farm.core import keys

ROOT = Path(__file__).resolve().parents[2]
REDIS_KEYS = {name for name in vars(keys) if name.startswith("r_")} | {"lease_member"}
"""The helpers that build a Redis key (or a member of one, a lease in the leases' sorted set)."""


def redis_key_uses(source: str) -> list[int]:
    """Lines that build a Redis key: `keys.r_job(...)` or a name imported from farm.core.keys."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in REDIS_KEYS:
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "farm.core.keys":
            found += [node.lineno for alias in node.names if alias.name in REDIS_KEYS]
    return found


def test_the_helpers_that_build_redis_keys_are_known() -> None:
    assert {"r_job", "r_chunk", "r_measurement", "lease_member"} <= REDIS_KEYS
    assert redis_key_uses("from farm.core import keys\nkeys.r_measurement('s', '1x1', 4)") == [2]
    assert redis_key_uses("from farm.core.keys import r_job, scene_key") == [1]
    assert redis_key_uses("keys.scene_key('abc')") == []


def test_only_the_ledger_builds_redis_keys() -> None:
    """GIVEN every production module outside farm/ledger/ (farm.core.keys defines them)
    WHEN its code is read
    THEN none of it builds a Redis key: it asks the ledger, which builds its own."""
    offenders = []
    for package in ("farm", "workers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if name.startswith("farm.ledger.") or name == "farm.core.keys":
                continue
            offenders += [f"{name}:{line}" for line in redis_key_uses(path.read_text())]
    assert offenders == []

"""The one boundary an import contract cannot see: `ledger.r`, the ledger's raw Redis client, is
used by the ledger's own modules alone. The import boundaries (floors, no cycle up a floor, farm
never importing workers, Redis, boto3 and Celery each in their one place) are the import-linter
contracts in pyproject.toml, checked by `make lint`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("farm", "workers")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def production_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def test_only_the_ledger_touches_its_redis_client() -> None:
    """`ledger.r` (the raw client) is used by the ledger's own modules alone (the modules of
    farm/ledger/)."""
    offenders = []
    for name, path in production_modules().items():
        if name == "farm.ledger" or name.startswith("farm.ledger."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "r":
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []

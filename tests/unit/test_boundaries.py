"""The code's boundaries, read from its imports: no import cycle, farm never imports workers,
production code never imports bench or tests, and only the ledger touches its Redis client."""

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


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def graph() -> dict[str, set[str]]:
    modules = production_modules()
    return {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str]:
    """One cycle as a path of modules, or [] (depth-first search with colours)."""
    colour: dict[str, int] = dict.fromkeys(edges, 0)
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if colour[nxt] == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if colour[nxt] == 0 and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        colour[node] = 2
        return []

    for node in sorted(edges):
        if colour[node] == 0 and (cycle := visit(node)):
            return cycle
    return []


def test_the_import_graph_has_no_cycle() -> None:
    assert find_cycle(graph()) == []


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_farm_never_imports_workers() -> None:
    offenders = {
        name: sorted(i for i in imports_of(path) if i.split(".")[0] == "workers")
        for name, path in production_modules().items()
        if name.startswith("farm")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_production_code_never_imports_bench_or_tests() -> None:
    offenders = {
        name: sorted(i for i in imports_of(path) if i.split(".")[0] in ("bench", "tests"))
        for name, path in production_modules().items()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_the_ledger_touches_its_redis_client() -> None:
    """`ledger.r` (the raw client) is used by the ledger's own modules alone (farm/ledger.py and
    the farm/ledger_*.py it is made of)."""
    offenders = []
    for name, path in production_modules().items():
        if name == "farm.ledger" or name.startswith("farm.ledger_"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "r":
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []

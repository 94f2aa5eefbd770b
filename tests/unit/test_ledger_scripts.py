"""The ledger's Lua: one .lua file a script, each used, each filled in whole, and none in Python."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

from farm.core.pipeline import PHASES, running_states
from farm.core.state import ENDED
from farm.ledger.lua import Scripts, lua_set, source

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "farm" / "ledger" / "scripts"
LEDGER = ROOT / "farm" / "ledger"


def _files() -> set[str]:
    return {path.stem for path in SCRIPTS.glob("*.lua")}


def _calls() -> set[str]:
    """The scripts the ledger's modules reach as `self.scripts.NAME` (or `.sha` / `.script` of
    one): each a use of a registered script."""
    return {
        node.attr
        for path in LEDGER.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "scripts"
    }


def test_every_script_file_is_registered_and_every_piece_included() -> None:
    registered = {f.name for f in fields(Scripts)}
    pieces = {name for name in _files() if name.startswith("_")}
    assert _files() - pieces == registered
    included = set()
    for name in registered:
        text = (SCRIPTS / f"{name}.lua").read_text()
        included |= {f"_{m}" for m in re.findall(r"\{\{ *include +(\w+) *\}\}", text)}
    assert included == pieces


def test_every_registered_script_is_called_by_the_ledger() -> None:
    unused = sorted({f.name for f in fields(Scripts)} - _calls())
    assert unused == []


def test_every_script_loads_with_no_placeholder_left() -> None:
    for name in _files():
        text = source(name)
        assert "{{" not in text and "}}" not in text, name


def test_the_sets_come_from_the_pipeline_table() -> None:
    assert lua_set(running_states()) in source("renew")
    assert lua_set(running_states()) in source("chunk_move")
    assert lua_set({spec.done for spec in PHASES.values()}) in source("chunk_move")
    assert lua_set(ENDED) in source("drop_ended")


def test_the_shared_pieces_are_put_in_where_included() -> None:
    assert "local function open_gate" in source("chunk_move")
    assert "local function open_gate" in source("start_stitch")
    assert "local function end_pause" in source("job_move")
    assert "local function end_pause" not in source("start_stitch")


def test_no_python_file_holds_lua_or_sends_a_script_body() -> None:
    """Lua lives in farm/ledger/scripts; Python sends it by EVALSHA (redis-py's Script), never
    as a body with EVAL."""
    offenders = []
    for package in ("farm", "workers"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            if "redis.call(" in text or "redis.pcall(" in text:
                offenders.append(f"{path.relative_to(ROOT)}: Lua")
            for node in ast.walk(ast.parse(text)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"eval", "eval_ro"}
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: EVAL")
    assert offenders == []

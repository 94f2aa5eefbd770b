"""The tables in docs/ are what docs/tables.py makes from the code and bench/results/*.json: the
CLI and settings references, the pipeline, the import contracts and the benchmark figures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "docs" / "tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tables = _tables()


@pytest.mark.parametrize("page", sorted(tables.PAGES))
def test_each_page_holds_the_tables_made_from_their_source(page: str) -> None:
    assert (ROOT / page).read_text() == tables.regenerate(page), (
        f"{page} differs from what its tables are made from: run `make docs`"
    )


def test_the_cli_reference_names_every_command_and_option() -> None:
    from farm.cli.main import cli

    text = tables.cli_table()
    for name, command in cli.commands.items():
        assert (f"`farm {name}" in text) != command.hidden  # hidden: for the compose stack only
    assert "| `--workers WORKERS` | `2` |" in text  # farm up's option with its default


def test_the_settings_reference_gives_each_variable_its_default_and_docstring() -> None:
    text = tables.settings_table()
    assert (
        "| `FARM_LEASE_S` | `30.0` | A chunk whose lease is not renewed for this long is taken "
        "back by the reconciler. |" in text
    )


def test_a_results_file_becomes_a_table_naming_its_machine_and_date(tmp_path: Path) -> None:
    results = {
        "machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 3.5, "blender": "bpy 4.5.4"},
        "quick": False,
        "started": 1_700_000_000.0,
        "finished": 1_700_000_600.0,
        "rows": [{"bench": "ledger", "case": "c", "farm": "f", "baseline": "b", "ratio": 4.3,
                  "note": "a | b"}],
    }  # fmt: skip
    (tmp_path / "bench-20231114-222000.json").write_text(json.dumps(results))
    text = tables.benchmarks_tables(tmp_path)
    assert "### 2023-11-14 22:13 to 22:23" in text
    assert "Machine: Test CPU, 2 cores; 3.5 GiB; bpy 4.5.4." in text
    assert "| ledger | c | f | b | 4.30 | a \\| b |" in text


def test_fill_replaces_only_what_stands_between_the_sentinels() -> None:
    page = "intro\n<!-- t:begin -->\nold\n<!-- t:end -->\nafter\n"
    assert tables.fill(page, "t", "new") == "intro\n<!-- t:begin -->\nnew\n<!-- t:end -->\nafter\n"
    with pytest.raises(ValueError):
        tables.fill("no sentinels", "t", "new")

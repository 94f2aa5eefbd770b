"""The tables in docs/ made from what they describe: the CLI from its click commands, the settings
from the Settings class, the pipeline from farm.core.pipeline, the import contracts from
pyproject.toml and the benchmark figures from bench/results/*.json. Each sits between
`<!-- NAME:begin -->` and `<!-- NAME:end -->` in its page. `make docs` writes them;
tests/unit/test_docs_tables.py fails while a page differs from what this makes.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import tomllib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _cell(text: str) -> str:
    """Text as one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        if isinstance(command, click.Group):
            for sub, leaf in _commands(command, ctx):
                yield f"{name} {sub}", leaf
        else:
            yield name, command


def _option_usage(option: click.Option) -> str:
    names = "/".join(option.opts + option.secondary_opts)
    if option.is_flag:
        return f"[{names}]"
    if isinstance(option.type, click.Choice):
        metavar = "|".join(str(c) for c in option.type.choices)
    else:
        metavar = option.metavar or (option.name or "value").upper()
    return f"[{names} {metavar}]"


def _default(option: click.Option) -> str:
    value = option.default
    if callable(value) or value is None or (option.is_flag and value is not True):
        return ""
    if option.is_flag:
        return "on"
    if not isinstance(value, str | int | float) or value == "":
        return ""
    return f"`{value}`"


def _usage(name: str, command: click.Command) -> str:
    words = [f"farm {name}"]
    for param in command.params:
        if isinstance(param, click.Argument):
            metavar = param.metavar or (param.name or "ARG").upper()
            words.append(metavar if param.required else f"[{metavar}]")
    words += [_option_usage(p) for p in command.params if isinstance(p, click.Option)]
    return " ".join(words)


def cli_table() -> str:
    """Every `farm` command with its usage and what it does, then each one's options."""
    from farm.cli.main import cli

    ctx = click.Context(cli, info_name="farm")
    commands = list(_commands(cli, ctx))
    lines = ["| command | what it does |", "|---|---|"]
    for name, command in commands:
        lines.append(f"| `{_cell(_usage(name, command))}` | {_cell(command.help or '')} |")
    lines += ["", "Options every command takes (before the command's name):", ""]
    lines += _options_table(cli)
    for name, command in commands:
        options = [p for p in command.params if isinstance(p, click.Option)]
        if options:
            lines += ["", f"`farm {name}`:", "", *_options_table(command)]
    return "\n".join(lines)


def _options_table(command: click.Command) -> list[str]:
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for option in command.params:
        if isinstance(option, click.Option) and option.name != "help":
            usage = _option_usage(option).strip("[]")
            lines.append(f"| `{_cell(usage)}` | {_default(option)} | {_cell(option.help or '')} |")
    return lines


def _field_docstrings(cls: type) -> dict[str, str]:
    """The docstring under each field of a class, as pydantic's own docs write them."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    found: dict[str, str] = {}
    for field, after in pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[field.target.id] = after.value.value
    return found


def settings_table() -> str:
    """Every setting: its FARM_* variable, its default and its docstring."""
    from farm.adapters.settings import ENV_PREFIX, Settings

    docs = _field_docstrings(Settings)
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = (
            ""
            if default in ("", None)
            else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        )
        meaning = field.description or docs.get(name, "")
        lines.append(f"| `{ENV_PREFIX}{name.upper()}` | {shown} | {_cell(meaning)} |")
    return "\n".join(lines)


def pipeline_table() -> str:
    from farm.core.pipeline import markdown_table

    return markdown_table()


def contracts_table() -> str:
    """The import contracts `make lint` checks (pyproject.toml's [tool.importlinter])."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["| contract | kind |", "|---|---|"]
    for contract in config["contracts"]:
        lines.append(f"| {_cell(contract['name'])} | {contract['type']} |")
    return "\n".join(lines)


def _when(results: dict[str, Any]) -> str:
    """The run's date and clock times (UTC for files `python -m bench` writes)."""
    started = datetime.fromtimestamp(results["started"], UTC)
    if "finished" not in results or results["finished"] == results["started"]:
        return f"{started:%Y-%m-%d %H:%M}"
    return f"{started:%Y-%m-%d %H:%M} to {datetime.fromtimestamp(results['finished'], UTC):%H:%M}"


def _machine(m: dict[str, Any]) -> str:
    parts = [f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores"]
    if m.get("memory_gib"):
        parts.append(f"{m['memory_gib']} GiB")
    parts += [str(m[k]) for k in ("os", "blender", "ffmpeg") if m.get(k)]
    load = m.get("load_avg_at_start")
    if load:
        parts.append(f"load at start {load[0]}")
    if m.get("note"):
        parts.append(str(m["note"]))
    return "; ".join(parts)


def benchmarks_tables(results_dir: Path = RESULTS) -> str:
    """One table per committed results file, newest first, each naming its machine and date."""
    files = sorted(results_dir.glob("*.json"), reverse=True)
    if not files:
        return "No results are committed yet: `make bench` writes them to bench/results/."
    out: list[str] = []
    for path in files:
        results = json.loads(path.read_text())
        out += [
            f"### {_when(results)}: `bench/results/{path.name}`",
            "",
            f"Machine: {_cell(_machine(results['machine']))}.",
        ]
        if results.get("source"):
            out += ["", f"Source: {_cell(results['source'])}"]
        out += [
            "",
            "| bench | case | farm | baseline | ratio | note |",
            "|---|---|---|---|---|---|",
        ]
        for r in results["rows"]:
            ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else ""
            cells = [r["bench"], r["case"], r["farm"], r["baseline"], ratio, r.get("note", "")]
            out.append("| " + " | ".join(_cell(str(c)) for c in cells) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n")


PAGES: dict[str, dict[str, Callable[[], str]]] = {
    "docs/guide.md": {"cli": cli_table, "settings": settings_table},
    "docs/design/architecture.md": {"pipeline": pipeline_table, "contracts": contracts_table},
    "docs/benchmarks.md": {"benchmarks": benchmarks_tables},
}


def fill(text: str, name: str, table: str) -> str:
    """`text` with what stands between NAME's sentinels replaced by `table`."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text.split(begin, 1)[1]:
        raise ValueError(f"no {begin} ... {end} in the page")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + table + "\n" + end + rest.split(end, 1)[1]


def regenerate(page: str) -> str:
    """What `page` (a path under the repository) should hold."""
    text = (ROOT / page).read_text()
    for name, make in PAGES[page].items():
        text = fill(text, name, make())
    return text


def main(argv: list[str]) -> int:
    """Write every page's tables; with --check, write nothing and exit 1 if any page differs."""
    check = "--check" in argv
    stale = []
    for page in PAGES:
        text = regenerate(page)
        if text != (ROOT / page).read_text():
            stale.append(page)
            if not check:
                (ROOT / page).write_text(text)
    if stale:
        print(("out of date: " if check else "wrote: ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

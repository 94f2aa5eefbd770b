"""`farm project add`, `farm project set` and `farm projects`: who shares the farm, by what
weight, within what quota (registered on the `farm` group by farm.cli.main). They run on the
farm's host: a project's record is written to the store with the admin's keys where `farm up`
keeps them, as `farm user` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich import box
from rich.table import Table

from farm.adapters.settings import Settings, command_settings
from farm.cli import remote
from farm.core.cost import money
from farm.core.errors import ConfigError
from farm.core.queues import MAX_WEIGHT
from farm.core.report import printable, to_text

if TYPE_CHECKING:
    from farm.control.projects import Projects
    from farm.ledger import Project


def _settings(ctx: click.Context) -> Settings:
    settings = command_settings(ctx)
    if remote.client(settings) is not None:
        raise ConfigError(
            "projects are kept by the farm itself: run `farm project` and `farm projects` on "
            "the farm's host, not through the API this machine is logged in to"
        )
    return settings.require_farm()


def _admin(settings: Settings, config_path: Path | None) -> Settings:
    """The admin's settings for a local farm's data folder (the CLI role may not write
    projects/*, farm.core.roles), else the config's own (an operator's, on a cloud farm)."""
    data = Path(settings.data_dir) if settings.data_dir else None
    if data and (data / "secrets.json").is_file() and config_path and config_path.is_file():
        from farm.control.credentials import admin_settings

        return admin_settings(data, config_path)
    return settings


def _projects(ctx: click.Context, *, writing: bool) -> tuple[Projects, Settings]:
    from farm.control.projects import Projects
    from farm.ledger import Ledger

    settings = _settings(ctx)
    if not writing:
        return Projects(Ledger.from_url(settings.redis_url)), settings
    from farm.adapters.store import Store

    admin = _admin(settings, ctx.meta.get("config_path"))
    return Projects(Ledger.from_url(admin.redis_url), Store.from_settings(admin)), admin


def _tell_workers(settings: Settings) -> int:
    """Ask every live worker to take the projects' queues of the phases it serves now (one
    that misses it catches up within seconds by itself): how many were asked."""
    from farm.dispatch import add_consumers, make_app
    from farm.ledger import Ledger

    ledger = Ledger.from_url(settings.redis_url)
    served = {name: list(info.get("queues", [])) for name, info in ledger.workers().items()}
    asked = add_consumers(make_app(settings), served, ledger.project_lanes())
    return sum(1 for queues in asked.values() if queues)


def _quota_text(project: Project) -> str:
    parts = []
    if project.quota_gpu_hours is not None:
        parts.append(f"{project.quota_gpu_hours:g} GPU-hours")
    if project.quota_dollars is not None:
        parts.append(money(project.quota_dollars))
    return " and ".join(parts) or "no quota"


weight_help = (
    f"1..{MAX_WEIGHT}: turns of the workers against a weight-1 project's one, while both have "
    "work (with chunks of similar length, as --chunk-size auto makes them, turns are worker time)"
)


@click.group()
def project() -> None:
    """Add and change the projects that share the farm's workers by weight."""


@project.command("add")
@click.argument("name")
@click.option("--weight", type=int, default=1, show_default=True, help=weight_help)
@click.option("--quota-gpu-hours", type=float, default=None,
              help="Pause the project's jobs once its jobs used this many GPU-hours.")  # fmt: skip
@click.option("--quota-dollars", type=float, default=None,
              help="Pause the project's jobs once its jobs spent this many dollars.")  # fmt: skip
@click.pass_context
def add(
    ctx: click.Context,
    name: str,
    weight: int,
    quota_gpu_hours: float | None,
    quota_dollars: float | None,
) -> None:
    """Add project NAME (`farm submit --project NAME` then submits to it)."""
    projects, settings = _projects(ctx, writing=True)
    added = projects.add(
        name, weight=weight, quota_gpu_hours=quota_gpu_hours, quota_dollars=quota_dollars
    )
    told = _tell_workers(settings)
    click.echo(
        printable(
            f"added project {added.name}: weight {added.weight}, {_quota_text(added)}; "
            f"{told} workers told to take its work; `farm submit --project {added.name}`"
        )
    )


@project.command("set")
@click.argument("name")
@click.option("--weight", type=int, default=None, help=weight_help)
@click.option("--quota-gpu-hours", type=float, default=None, help="A new quota; 0 removes it.")
@click.option("--quota-dollars", type=float, default=None, help="A new quota; 0 removes it.")
@click.pass_context
def set_project(
    ctx: click.Context,
    name: str,
    weight: int | None,
    quota_gpu_hours: float | None,
    quota_dollars: float | None,
) -> None:
    """Change project NAME's weight or quotas (a paused job stays paused: `farm resume JOB`)."""
    if weight is None and quota_gpu_hours is None and quota_dollars is None:
        raise click.UsageError("give --weight, --quota-gpu-hours or --quota-dollars")
    projects, settings = _projects(ctx, writing=True)
    changed = projects.set(
        name, weight=weight, quota_gpu_hours=quota_gpu_hours, quota_dollars=quota_dollars
    )
    if weight is not None:
        _tell_workers(settings)
    click.echo(
        printable(f"project {changed.name}: weight {changed.weight}, {_quota_text(changed)}")
    )


@click.command("projects")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@click.pass_context
def list_projects(ctx: click.Context, as_json: bool) -> None:
    """List the projects: weight, live jobs, use against quota, share of the workers' time in
    the last hour."""
    projects, _ = _projects(ctx, writing=False)
    rows = projects.report()
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no projects yet; `farm project add NAME --weight 1`")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("project", "weight", "jobs live", "GPU-hours", "dollars", "share (1 h)"):
        table.add_column(column)
    for row in rows:
        hours = f"{row['gpu_hours']:.3f}"
        if row["quota_gpu_hours"] is not None:
            hours += f" of {row['quota_gpu_hours']:g}"
        dollars = money(row["dollars"])
        if row["quota_dollars"] is not None:
            dollars += f" of {money(row['quota_dollars'])}"
        over = " (over quota)" if row["over_quota"] else ""
        table.add_row(row["name"] + over, str(row["weight"]), str(row["jobs_live"]), hours,
                      dollars, f"{row['share_last_hour']:.0%}")  # fmt: skip
    click.echo(to_text(table))


COMMANDS = (project, list_projects)

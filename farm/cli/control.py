"""`farm pause`, `resume`, `priority` and `watch`: steering jobs already on the farm (registered
on the `farm` group by farm.cli.main)."""

from __future__ import annotations

import click

from farm.adapters.settings import command_settings
from farm.cli import remote
from farm.core.cost import money
from farm.ledger import Ledger


@click.command()
@click.argument("job_id")
@click.pass_context
def pause(ctx: click.Context, job_id: str) -> None:
    """Pause a job: running chunks finish, no new chunk starts, every frame is kept."""
    if api := remote.api(ctx):
        remote.pause(api, job_id)
        return
    from farm.control.jobs import pause as pause_job

    was = pause_job(command_settings(ctx).require_farm(), job_id)
    if was == "waiting":
        click.echo(f"paused {job_id} (was waiting): held, it is not queued when its parents are "
                   f"done; `farm resume {job_id}` puts it back to waiting")  # fmt: skip
        return
    click.echo(f"paused {job_id} (was {was}); running chunks finish; `farm resume {job_id}`")


@click.command()
@click.argument("job_id")
@click.option("--max-cost", type=click.FloatRange(min=0), default=None,
              help="A new budget in dollars (0: none).")  # fmt: skip
@click.pass_context
def resume(ctx: click.Context, job_id: str, max_cost: float | None) -> None:
    """Resume a paused job (its waiting chunks are sent again), or release one held after its
    preview frames (the rest is planned and sent)."""
    if api := remote.api(ctx):
        remote.resume(api, job_id, max_cost)
        return
    from farm.control.jobs import resume as resume_job

    settings = command_settings(ctx).require_farm()
    sent, spend = resume_job(settings, job_id, max_cost)
    if Ledger.from_url(settings.redis_url).job(job_id).get("state") == "waiting":
        click.echo(f"resumed {job_id}: waiting for its parents again (`farm status {job_id}`)")
        return
    click.echo(f"resumed {job_id}: {sent} chunks waiting")
    if spend.over_budget:
        click.echo(
            f"warning: spent {money(spend.spent)} + expected "
            f"{money(spend.expected_rest)} passes the budget {money(spend.max_cost)}; it will "
            "pause again before its next chunk (raise it with --max-cost)",
            err=True,
        )


@click.command()
@click.argument("job_id")
@click.argument("priority", type=click.IntRange(0, 100))
@click.pass_context
def priority(ctx: click.Context, job_id: str, priority: int) -> None:
    """Set a job's priority, 0..100, higher first (default 50): its waiting chunks move up."""
    if api := remote.api(ctx):
        remote.priority(api, job_id, priority)
        return
    from farm.control.jobs import reprioritize

    sent = reprioritize(command_settings(ctx).require_farm(), job_id, priority)
    click.echo(f"{job_id}: priority {priority} ({sent} waiting chunks re-sent)")


@click.command()
@click.argument("job_id", required=False)
@click.option("--interval-s", type=click.FloatRange(min=0.1), default=1.0, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.pass_context
def watch(ctx: click.Context, job_id: str | None, interval_s: float, limit: int) -> None:
    """A live view of the farm's jobs, or of one job (chunks, workers, ETA, cost); Ctrl-C ends."""
    from farm.cli.watch import watch as watch_live

    ledger = Ledger.from_url(command_settings(ctx).require_farm().redis_url)
    if job_id:
        ledger.job_or_fail(job_id)
    watch_live(ledger, job_id, interval_s=interval_s, limit=limit)


COMMANDS = (pause, resume, priority, watch)

"""What a wait and a fetch say when they stop short, written once for both modes (direct, in
farm.cli.submit and main; through the API, in farm.cli.remote)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from farm.core.errors import FarmError
from farm.core.report import printable
from farm.core.state import ENDED, JobState

STOPS = ENDED | {JobState.PAUSED, JobState.HELD}
"""Where a wait stops: the job has ended, or it is paused or held after its preview frames and
only a person can go on."""
INTERRUPTED_EXIT = 130
"""A wait ended by Ctrl-C (128 + SIGINT, as a shell reports it): not the job's end, whose exit
a script reads (0 done, 1 failed, cancelled or paused)."""


def stopped_waiting(job_id: str) -> SystemExit:
    """Ctrl-C ends only the wait: the job goes on (and is paid for) until someone stops it. Says
    so and how to follow or stop it; the exit to raise."""
    click.echo(f"stopped waiting; job {job_id} goes on: `farm status {job_id} --wait` "
               f"follows it again, `farm cancel {job_id}` stops it", err=True)  # fmt: skip
    return SystemExit(INTERRUPTED_EXIT)


def unwritable(exc: OSError, target: Path) -> FarmError:
    """A fetch that could not write `target`: what stood in the way, and what to do."""
    blocked = Path(exc.filename) if exc.filename else None
    why = f", {blocked} is in the way" if blocked in target.parents else ""
    return FarmError(f"cannot write {target}: {exc.strerror or exc}{why}; choose another DEST")


def say_stop(job_id: str, summary: Mapping[str, Any], paused_reason: str) -> None:
    """Why a wait ended short of done, on stderr: a paused job, with how to go on; an ended
    one, with its error."""
    if summary["state"] == JobState.PAUSED:
        reason = paused_reason
        if "farm resume" not in reason:
            reason += f"; `farm resume {job_id}` continues it"
        said = f"job {job_id} paused: {reason}; `farm status {job_id} --wait` follows it again"
        click.echo(printable(said), err=True)
    elif summary["state"] == JobState.HELD:
        click.echo(hold_message(job_id), err=True)
    else:
        click.echo(printable(f"job {job_id} {summary['state']}: {summary['error']}"), err=True)


def hold_message(job_id: str) -> str:
    """What a job held after its preview frames tells its submitter."""
    return (f"held: job {job_id}'s preview frames are done; look at them on its page or with "
            f"`farm fetch {job_id} DEST --frames ...`, then `farm resume {job_id}` renders the "
            f"rest (`farm status {job_id}` shows its estimate), or `farm cancel {job_id}`")  # fmt: skip

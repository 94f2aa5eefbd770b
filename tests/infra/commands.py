"""Check an argv against the farm CLI's click tree without running anything."""

from __future__ import annotations

from collections.abc import Sequence

import click


def check_farm_argv(cli: click.Group, argv: Sequence[str]) -> str:
    """Resolve `farm ARGV` to a leaf command and parse its options; return the command path.

    Raises click.UsageError (unknown command, unknown option, bad value) like `farm` would,
    but never invokes a callback.
    """
    args = list(argv)
    command: click.Command = cli
    ctx = click.Context(cli, info_name="farm")
    path = ["farm"]
    while isinstance(command, click.Group):
        if not args or args[0].startswith("-"):
            raise click.UsageError(f"`{' '.join(path)}` needs a subcommand, got {args}", ctx)
        name = args.pop(0)
        sub = command.get_command(ctx, name)
        if sub is None:
            raise click.UsageError(f"no command `{' '.join([*path, name])}`", ctx)
        command, path = sub, [*path, name]
        ctx = click.Context(command, info_name=name, parent=ctx)
    with command.make_context(path[-1], args, parent=ctx.parent):
        pass
    return " ".join(path)

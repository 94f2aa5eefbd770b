"""`farm user add`, `list` and `revoke`: the people who may use the farm's API, and their tokens
(registered on the `farm` group by farm.cli.main). On a farm host they write the store's user
records themselves (farm.control.users), with the admin's store keys where `farm up` keeps them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import click
from rich import box
from rich.table import Table

from farm.adapters.settings import Settings, command_settings
from farm.core.access import UserRole
from farm.core.errors import ConfigError
from farm.core.report import printable, to_text

if TYPE_CHECKING:
    from farm.adapters.farmapi import FarmAPI
    from farm.control.users import User


class UserBook(Protocol):
    """What `farm user` needs of wherever the users are kept: the store on a farm host
    (farm.control.users.Users), the API elsewhere."""

    def add(
        self, name: str, role: UserRole | str, *, expires_days: float | None = None
    ) -> tuple[User, str]: ...

    def list(self) -> list[User]: ...

    def revoke(self, name: str) -> User: ...


def user_book(settings: Settings, config_path: Path | None) -> UserBook:
    """The farm's users as this host may reach them: through the API when the config names one
    (an admin's token), else in the farm's store. A local farm's CLI keys may not write users/*
    (farm.core.roles), so on the host that ran `farm up` the admin's store keys are used, from
    the data folder's secrets.json, as an operator's tools do (credentials.admin_settings)."""
    from farm.cli.remote import client

    if (api := client(settings)) is not None:
        return RemoteUsers(api)
    from farm.adapters.store import Store
    from farm.control.users import Users

    return Users(Store.from_settings(_store_settings(settings, config_path)))


class RemoteUsers:
    """The users as an admin reaches them through the API (/api/v1/users; other roles get its
    403)."""

    def __init__(self, api: FarmAPI) -> None:
        self.api = api

    def add(
        self, name: str, role: UserRole | str, *, expires_days: float | None = None
    ) -> tuple[User, str]:
        from farm.control.users import User

        answer = self.api.add_user(name, str(role), expires_days)
        return User.from_json(answer), str(answer["token"])

    def list(self) -> list[User]:
        from farm.control.users import User

        return [User.from_json(found) for found in self.api.users()]

    def revoke(self, name: str) -> User:
        from farm.control.users import User

        return User.from_json(self.api.revoke_user(name))


def _store_settings(settings: Settings, config_path: Path | None) -> Settings:
    """The admin's settings for a local farm's data folder, else the config's own (a cloud
    control plane, whose role may write users/*)."""
    data = Path(settings.data_dir) if settings.data_dir else None
    if data and (data / "secrets.json").is_file() and config_path and config_path.is_file():
        from farm.control.credentials import admin_settings

        return admin_settings(data, config_path)
    if not settings.s3_bucket:
        raise ConfigError(
            "no farm configured: run `farm user` on the farm's host (where `farm up` ran), or "
            "set FARM_S3_* to the farm's store with keys that may write users/*"
        )
    return settings


def _book(ctx: click.Context) -> UserBook:
    return user_book(command_settings(ctx), ctx.meta.get("config_path"))


def _when(unix_s: float | None) -> str:
    from datetime import UTC, datetime

    return "-" if unix_s is None else datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M")


@click.group()
def user() -> None:
    """Add, list and revoke the people who may use the farm's API."""


@user.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice([str(r) for r in UserRole]), required=True,
              help="artist: submits and steers their own jobs; wrangler: steers any job; "
                   "admin: also manages users.")  # fmt: skip
@click.option("--expires-days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Refuse the token after this many days (default: never).")  # fmt: skip
@click.pass_context
def add(ctx: click.Context, name: str, role: str, expires_days: float | None) -> None:
    """Add user NAME and print their token, this once: only its hash is kept."""
    added, token = _book(ctx).add(name, UserRole(role), expires_days=expires_days)
    click.echo(
        f"the token of {added.name} ({added.role}) is shown only once, below: give it to them "
        "(`farm login URL --token TOKEN`); `farm user revoke` if it is lost",
        err=True,
    )
    click.echo(token)


@user.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_users(ctx: click.Context, as_json: bool) -> None:
    """List the farm's users, revoked ones too (never a token)."""
    users = _book(ctx).list()
    if as_json:
        click.echo(json.dumps([u.to_json() for u in users]))
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("user", "role", "created", "expires", "revoked"):
        table.add_column(column)
    for u in users:
        table.add_row(u.name, str(u.role), _when(u.created), _when(u.expires), _when(u.revoked))
    click.echo(to_text(table) if users else "no users yet; `farm user add NAME --role artist`")


@user.command("revoke")
@click.argument("name")
@click.pass_context
def revoke(ctx: click.Context, name: str) -> None:
    """Refuse NAME's token from now on (the API sees it within seconds)."""
    revoked = _book(ctx).revoke(name)
    again = f"`farm user add {revoked.name} --role ROLE` gives a new token"
    click.echo(printable(f"revoked {revoked.name}; {again}"))


COMMANDS = (user,)

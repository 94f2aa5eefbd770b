"""`farm login URL --token T` and `farm logout`: this machine set up as a client of the farm's API,
with a config that holds the API's address, the user's token and a CA file, and none of the
farm's own secrets (registered on the `farm` group by farm.cli.main)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from farm.adapters.farmapi import FarmAPI, TokenRejected, is_loopback
from farm.adapters.private import write_private
from farm.adapters.settings import LOCAL_CONFIG, user_config_path
from farm.core.errors import ConfigError

CLIENT_KEYS = ("api_url", "api_token", "ca_file")
"""All a client config holds: no Redis URL, no store key."""
FARM_SECRETS = ("redis_url", "s3_secret_key", "s3_access_key", "flower_password")
"""What a farm's own config holds that a login must never overwrite; named first when refused."""


@click.command()
@click.argument("url")
@click.option("--token", default=None, help="Your token (`farm user add` made it). It stays in "
              "the shell's history: --token-stdin or FARM_API_TOKEN keep it out.")  # fmt: skip
@click.option("--token-stdin", is_flag=True, help="Read the token from standard input.")
@click.option(
    "--ca-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The CA that signed the API's certificate (a local farm's: DATA/tls/ca.crt); default: "
    "the system's CAs.",
)
@click.pass_context
def login(
    ctx: click.Context, url: str, token: str | None, token_stdin: bool, ca_file: Path | None
) -> None:
    """Use the farm's API at URL (`farm web`'s address) with your token: the token is checked,
    then kept with the URL in your config (mode 0600); later commands go through the API."""
    token = _token(token, token_stdin)
    url = url.strip().rstrip("/").removesuffix("/api/v1")
    if not url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{url!r} is not an http:// or https:// URL", param_hint="URL")
    if url.startswith("http://") and not is_loopback(url):
        click.echo(f"warning: {url} is plain http: your token crosses the network unencrypted "
                   "(a farm run with `farm up --tls` serves https)", err=True)  # fmt: skip
    ca = str(ca_file.resolve()) if ca_file else ""
    path = _config_path(ctx)
    _refuse_farm_config(path)  # before asking the API: nothing is written if it would be lost
    try:
        me = FarmAPI(url, token, ca).whoami()
    except TokenRejected as exc:
        raise ConfigError(
            f"the farm at {url} refused this token ({str(exc).split(';')[0]}): check it, or ask "
            "the farm's admin for a new one (`farm user add`); nothing was written"
        ) from None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, json.dumps({"api_url": url, "api_token": token, "ca_file": ca}, indent=2))
    click.echo(f"logged in to {url} as {me['name']} ({me['role']}); config: {path}")
    here = Path.cwd() / LOCAL_CONFIG
    if "FARM_CONFIG" not in os.environ and here.is_file() and here.resolve() != path.resolve():
        click.echo(f"note: commands run in {Path.cwd()} read {LOCAL_CONFIG} (a farm's config) "
                   "instead; run them elsewhere, or with --config", err=True)  # fmt: skip


@click.command()
@click.pass_context
def logout(ctx: click.Context) -> None:
    """Forget your token: this machine no longer reaches the farm's API until `farm login`."""
    path = _config_path(ctx)
    found = _read(path)
    if not found.get("api_token"):
        click.echo(f"not logged in ({path} holds no token)")
    else:
        kept = {k: v for k, v in found.items() if k != "api_token"}
        write_private(path, json.dumps(kept, indent=2))
        click.echo(
            f"logged out of {found.get('api_url') or 'the farm'}: the token is gone from {path} "
            "(it stays valid on the farm until an admin revokes it: `farm user revoke NAME`)"
        )
    if os.environ.get("FARM_API_TOKEN"):
        click.echo("note: FARM_API_TOKEN is still set in this shell: unset it", err=True)


def _token(given: str | None, from_stdin: bool) -> str:
    if given is not None and from_stdin:
        raise click.UsageError("give the token once: --token or --token-stdin")
    if from_stdin:
        token = sys.stdin.readline().strip()
    else:
        token = (given if given is not None else os.environ.get("FARM_API_TOKEN", "")).strip()
    if not token:
        raise click.UsageError(
            "no token: give it with --token T, --token-stdin, or FARM_API_TOKEN "
            "(`farm user add NAME` on the farm makes one)"
        )
    return token


def _config_path(ctx: click.Context) -> Path:
    """The client config: --config, else $FARM_CONFIG, else the user's own
    (~/.config/farm/config.json), never a folder's ./.farm/config.json (a local farm's)."""
    given: Path | None = ctx.find_root().params.get("config_path")
    if given is not None:
        return given
    if os.environ.get("FARM_CONFIG"):
        return Path(os.environ["FARM_CONFIG"]).expanduser()
    return user_config_path(os.environ)


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read farm config ({exc}); fix or delete it") from exc
    if not isinstance(found, dict):
        raise ConfigError(f"{path}: a farm config is a JSON object; fix or delete it")
    return found


def _refuse_farm_config(path: Path) -> None:
    """A farm's own config (its Redis password, its store keys) is never overwritten by a login."""
    others = [k for k, v in _read(path).items() if k not in CLIENT_KEYS and v]
    if others:
        rank = {k: i for i, k in enumerate(FARM_SECRETS)}
        others.sort(key=lambda k: (rank.get(k, len(rank)), k))
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise ConfigError(
            f"{path} is a farm's own config (it holds {shown}): logging in would replace it. "
            "Log in to another file (`farm --config CLIENT.json login ...`, then FARM_CONFIG="
            "CLIENT.json), or move this one"
        )

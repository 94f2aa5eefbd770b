"""`farm addon`: the Blender add-on's zip, built (or rebuilt when its source changed) into the
user's cache, for Blender's Install from Disk (registered on the `farm` group by farm.cli.main)."""

from __future__ import annotations

import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

import click

from farm.addon import default_zip_path, write_zip


def this_farm() -> str:
    """The `farm` command of the Python running now (a venv's bin/farm), else the one on PATH,
    else '' (the add-on then looks on PATH itself)."""
    found = shutil.which("farm", path=str(Path(sys.executable).parent)) or shutil.which("farm")
    return os.path.abspath(found) if found else ""


@click.command()
@click.option(
    "--path",
    "path_only",
    is_flag=True,
    help="Print only the zip's path (for scripts: `blender --addons ...`, a deploy step).",
)
def addon(path_only: bool) -> None:
    """Build the Blender add-on farm_blender and show where its zip is. In Blender: Edit >
    Preferences > Add-ons > Install from Disk, pick the zip, enable Farm, and set the API URL
    and your token (`farm user add NAME` makes one); the panel is in Render Properties."""
    dest = write_zip(
        default_zip_path(os.environ),
        farm_command=this_farm(),
        farm_version=metadata.version("farm"),
    )
    if path_only:
        click.echo(str(dest))
        return
    click.echo(f"{dest}\n")
    click.echo(
        "Install it in Blender: Edit > Preferences > Add-ons > Install from Disk, pick the zip,\n"
        "enable Farm and set its API URL and token (the panel is in Render Properties > Farm)."
    )

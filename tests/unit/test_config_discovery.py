"""Which config file a command reads: --config, $FARM_CONFIG, ./.farm/config.json in the current
folder (as git finds .git, but never a parent's), then ~/.config/farm/config.json."""

from __future__ import annotations

from pathlib import Path

from farm.adapters.settings import default_config_path


def _local_config(folder: Path) -> Path:
    path = folder / ".farm" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    return path


def test_a_config_in_the_current_folder_is_found(tmp_path: Path) -> None:
    found = _local_config(tmp_path)
    assert default_config_path({"XDG_CONFIG_HOME": str(tmp_path / "xdg")}, cwd=tmp_path) == found


def test_farm_config_wins_over_the_current_folder(tmp_path: Path) -> None:
    _local_config(tmp_path)
    env = {"FARM_CONFIG": str(tmp_path / "other.json")}
    assert default_config_path(env, cwd=tmp_path) == tmp_path / "other.json"


def test_a_parent_folders_config_is_never_read(tmp_path: Path) -> None:
    _local_config(tmp_path)
    below = tmp_path / "shots" / "sh010"
    below.mkdir(parents=True)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert default_config_path(env, cwd=below) == tmp_path / "xdg" / "farm" / "config.json"


def test_a_folder_named_like_the_config_is_not_a_config(tmp_path: Path) -> None:
    (tmp_path / ".farm" / "config.json").mkdir(parents=True)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert default_config_path(env, cwd=tmp_path) == tmp_path / "xdg" / "farm" / "config.json"

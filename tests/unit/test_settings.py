from pathlib import Path

import pytest

from farm.adapters.settings import Settings, load_settings, save_settings
from farm.core.errors import ConfigError


def test_env_overrides_file_and_flags_override_env(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    save_settings(Settings(redis_url="redis://file", lease_s=30), path)
    env = {"FARM_REDIS_URL": "redis://env", "FARM_LEASE_S": "12"}
    s = load_settings(env=env, config_path=path)
    assert (s.redis_url, s.lease_s) == ("redis://env", 12.0)
    s = load_settings(env=env, config_path=path, overrides={"redis_url": "redis://flag"})
    assert s.redis_url == "redis://flag"


def test_config_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    save_settings(Settings(redis_url="redis://:secret@h:1/0"), path)
    assert path.stat().st_mode & 0o777 == 0o600


def test_no_farm_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="farm up"):
        load_settings(env={}, config_path=tmp_path / "none.json").require_farm()


def test_bad_number_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"FARM|lease_s"):
        load_settings(env={"FARM_LEASE_S": "soon"}, config_path=tmp_path / "none.json")


def test_recovery_bound_is_lease_plus_interval() -> None:
    assert Settings(lease_s=30, reconcile_interval_s=5).recovery_bound_s == 35


def test_a_negative_lease_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"FARM_LEASE_S .*greater than 0"):
        load_settings(env={"FARM_LEASE_S": "-5"}, config_path=tmp_path / "none.json")


def test_a_bad_value_in_the_file_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"max_attempts": 0}')
    with pytest.raises(ConfigError, match="FARM_MAX_ATTEMPTS"):
        load_settings(env={}, config_path=path)


def test_a_bare_settings_object_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_LEASE_S", "7")
    assert Settings().lease_s == 30.0
    assert load_settings(config_path=Path("/nonexistent.json")).lease_s == 7.0


def test_replace_validates_like_any_source() -> None:
    assert Settings().replace(lease_s=9).lease_s == 9
    with pytest.raises(ValueError, match="greater than 0"):
        Settings().replace(lease_s=0)


def test_a_url_setting_without_a_scheme_is_refused_without_echoing_it(tmp_path: Path) -> None:
    secret = "hooks.slack.com/services/T000/B000/very-secret-path"
    with pytest.raises(ConfigError, match="FARM_NOTIFY_URL") as caught:
        load_settings(env={"FARM_NOTIFY_URL": secret}, config_path=tmp_path / "c.json")
    assert "very-secret-path" not in str(caught.value)


def test_tls_files_are_checked_when_the_settings_load(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    https = {"FARM_S3_ENDPOINT": "https://s3.example.com"}
    assert load_settings(env=https, config_path=config).ca_file == ""  # the system's CAs
    with pytest.raises(ConfigError, match=r"FARM_CA_FILE /nowhere/ca\.pem: no such file"):
        load_settings(env={**https, "FARM_CA_FILE": "/nowhere/ca.pem"}, config_path=config)
    cert = tmp_path / "node.crt"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="go together"):
        load_settings(env={"FARM_TLS_CERT_FILE": str(cert)}, config_path=config)


@pytest.mark.parametrize(("text", "kind"), [("[1, 2]", "list"), ("null", "null"), ('"x"', "str")])
def test_a_config_that_is_json_but_no_object_is_one_clear_error(
    tmp_path: Path, text: str, kind: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"a farm config is a JSON object .*not {kind}; fix"):
        load_settings(env={}, config_path=path)

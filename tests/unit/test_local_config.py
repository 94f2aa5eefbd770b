"""Config files `farm up` writes for its servers, from paths it does not control (pure)."""

from __future__ import annotations

import fnmatch
import inspect
import json
from pathlib import Path

import pytest

from farm.adapters.weedsec import JWT_SECRETS, security_toml
from farm.control.credentials import farm_secrets
from farm.control.stores import redis_quoted
from farm.core import keys
from farm.core.roles import (
    Role,
    format_store_keys,
    parse_store_keys,
    password_rule,
    redis_conf_users,
    redis_image_users,
    redis_keys,
    redis_password_name,
    s3_key_names,
)


def test_a_redis_path_is_one_quoted_argument_whatever_it_holds() -> None:
    assert redis_quoted("/data/it's a dir") == '"/data/it\'s a dir"'
    quoted = redis_quoted('/d/"x"\\\nrequirepass ""')
    assert "\n" not in quoted and quoted.count('"') == 2
    assert quoted == '"/d/\\x22x\\x22\\x5c\\x0arequirepass \\x22\\x22"'
    assert redis_quoted("/d/é") == '"/d/\\xc3\\xa9"'


def test_security_toml_locks_every_port_but_s3_and_quotes_paths() -> None:
    keys = {name: f"key-{name}" for name in JWT_SECRETS}
    text = security_toml(Path('/data/it\'s "x"/tls'), keys)
    assert 'cert = "/data/it\'s \\"x\\"/tls/node.crt"' in text
    for section in ("[jwt.signing]", "[jwt.signing.read]", "[jwt.filer_signing]",
                    "[jwt.filer_signing.read]", "[grpc.master]", "[grpc.volume]",
                    "[grpc.filer]", "[https.master]", "[https.volume]", "[https.filer]"):  # fmt: skip
        assert section in text
    assert 'key = "key-weed_jwt_read"' in text


def test_the_redis_images_users_are_the_roles_users() -> None:
    """infra/images/redis/users.acl is farm.core.roles' users, written out: regenerate it with
    `python -c "from farm.core.roles import redis_image_users as u; print(u(), end='')"`."""
    shipped = (Path(__file__).parents[2] / "infra/images/redis/users.acl").read_text()
    assert shipped == redis_image_users()
    assert all(f"#@{role.upper()}_SHA256@ " in shipped for role in Role)


def test_redis_users_name_each_password_by_its_hash_and_give_the_default_user_nobodys() -> None:
    nobodys = password_rule("made at each start, given to no one")
    text = redis_conf_users({role: password_rule(f"pw-{role}") for role in Role}, nobodys)
    assert "pw-" not in text and "given to no one" not in text
    assert text.splitlines()[0].startswith(f"user default on {nobodys} ")
    worker = next(line for line in text.splitlines() if line.startswith("user worker "))
    assert "-@dangerous" in worker and "-@admin" in worker and "~farm:* " not in worker
    assert "%R~farm:jobs " in worker and "~unacked*" in worker
    cli = next(line for line in text.splitlines() if line.startswith("user cli "))
    assert "unacked" not in cli


def test_store_keys_setting_reads_back_what_it_wrote_and_names_a_bad_entry() -> None:
    keys = {Role.WORKER: ("AK1", "s-1_x"), Role.CLI: ("AK2", "s2")}
    assert parse_store_keys(format_store_keys(keys)) == keys
    assert parse_store_keys(" worker=AK1:s-1_x,\n cli=AK2:s2") == keys
    with pytest.raises(ValueError, match="'boss'"):
        parse_store_keys("boss=a:b")


def test_a_farm_made_before_roles_gets_each_roles_secrets_and_keeps_its_own(
    tmp_path: Path,
) -> None:
    (tmp_path / "secrets.json").write_text(
        json.dumps({"redis_password": "old", "s3_access_key": "AK", "s3_secret_key": "SK"})
    )
    keys = farm_secrets(tmp_path)
    assert (keys["redis_password"], keys["s3_access_key"]) == ("old", "AK")
    for role in Role:
        assert keys[redis_password_name(role)] and all(keys[n] for n in s3_key_names(role))
    assert farm_secrets(tmp_path) == keys


def test_every_ledger_key_is_one_a_worker_may_read() -> None:
    """A key family added to farm.core.keys that the worker's Redis user does not name would be
    refused inside the ledger's scripts on a live farm: each is named (the wake-up is a channel)."""
    patterns = [p.split("~", 1)[1] for p in redis_keys(Role.WORKER)]
    for name, make in vars(keys).items():
        if not name.startswith("r_") or name == "r_wake":
            continue
        args = [1 if p.annotation in (int, "int") else "x"
                for p in inspect.signature(make).parameters.values()]  # fmt: skip
        key = make(*args)
        assert any(fnmatch.fnmatchcase(key, p) for p in patterns), f"{name}: {key}"

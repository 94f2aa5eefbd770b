"""`farm user add`, `list` and `revoke` on a real local farm, run as a person on its host would:
the token printed once authenticates as the API's process would check it (with the control
role's store keys, farm web's), and is refused once revoked."""

from __future__ import annotations

import json
import uuid

import pytest

from farm.adapters.settings import load_settings
from farm.adapters.store import Store
from farm.control.users import TokenRefused, Users
from farm.core import keys
from tests.conftest import LocalFarm

pytestmark = pytest.mark.e2e


def api_users(farm: LocalFarm) -> Users:
    """The users as `farm web` reads them: with the control role's own store keys."""
    settings = load_settings(env={}, config_path=farm.data / "roles" / "control.json")
    return Users(Store.from_settings(settings))


def refusal(users: Users, token: str) -> str:
    try:
        users.authenticate(token)
    except TokenRefused as exc:
        return exc.reason
    return ""


def test_a_user_added_listed_and_revoked_through_the_cli(local_farm: LocalFarm) -> None:
    name = f"ada-{uuid.uuid4().hex[:6]}"
    # WHEN an admin adds a user on the farm's host
    added = local_farm.farm("user", "add", name, "--role", "artist", "--expires-days", "30")
    # THEN the token is printed once, alone on stdout, and stderr says it will not be again
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert token.startswith("farm_") and "\n" not in token
    assert "shown only once" in added.stderr and token not in added.stderr
    # AND it authenticates as the API checks it
    user = api_users(local_farm).authenticate(token)
    assert (user.name, user.role, user.revoked) == (name, "artist", None)
    assert token.encode() not in local_farm.store().get_bytes(keys.user_key(name))

    # WHEN they are listed THEN with role and dates, never a token or a hash
    listed = local_farm.farm("user", "list", "--json", check=True).stdout
    [row] = [u for u in json.loads(listed) if u["name"] == name]
    assert row["role"] == "artist" and row["revoked"] is None and row["expires"] > row["created"]
    table = local_farm.farm("user", "list", check=True).stdout
    assert name in table and "artist" in table
    for shown in (listed, table):
        assert token not in shown and "sha256" not in shown

    # WHEN they are revoked THEN the token is refused as revoked, and a second revoke is fine
    revoked = local_farm.farm("user", "revoke", name)
    assert revoked.returncode == 0, revoked.stderr
    assert f"revoked {name}" in revoked.stdout
    assert refusal(api_users(local_farm), token) == "revoked"
    assert local_farm.farm("user", "revoke", name).returncode == 0
    listed = local_farm.farm("user", "list", "--json", check=True).stdout
    [row] = [u for u in json.loads(listed) if u["name"] == name]
    assert row["revoked"] is not None


def test_a_name_in_use_is_refused_with_what_to_do(local_farm: LocalFarm) -> None:
    name = f"bob-{uuid.uuid4().hex[:6]}"
    first = local_farm.farm("user", "add", name, "--role", "wrangler", check=True).stdout.strip()
    again = local_farm.farm("user", "add", name, "--role", "admin")
    assert again.returncode == 1
    assert f"`farm user revoke {name}` first" in again.stderr and again.stdout == ""
    assert api_users(local_farm).authenticate(first).role == "wrangler"  # still theirs


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["add", "Not_A_Name", "--role", "artist"], 1, "is not a user name"),
        (["add", "cy", "--role", "boss"], 2, "'boss' is not one of"),
        (["add", "cy", "--role", "artist", "--expires-days", "0"], 2, "--expires-days"),
        (["revoke", "nobody-here"], 1, "no user nobody-here; `farm user list`"),
    ],
)
def test_bad_input_gets_a_plain_error(
    local_farm: LocalFarm, args: list[str], code: int, said: str
) -> None:
    done = local_farm.farm("user", *args)
    assert done.returncode == code, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr

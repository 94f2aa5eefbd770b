"""The API's users and tokens (farm.control.users) on a real SeaweedFS: the store is the record,
only a token's hash is kept, refusals say why, a revoke made by one process holds in another
within its ttl, and made-up tokens cannot make the store work harder than the miss rate allows."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from farm.adapters.store import Store
from farm.control.users import (
    MISS_INTERVAL_S,
    BadUserInput,
    NameInUse,
    TokenRefused,
    UnknownUser,
    Users,
)
from farm.core import keys
from farm.core.access import UserRole

from .conftest import wait_until


class Clock:
    """A monotonic clock the test moves by hand, for the cache's ages."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def users(store: Store) -> Users:
    """No user in the store, and a Users on it."""
    for key in store.keys(keys.USERS_PREFIX):
        store.delete(key)
    return Users(store)


def refusal(users: Users, token: str) -> str:
    """Why `token` is refused, "" if it is taken."""
    try:
        users.authenticate(token)
    except TokenRefused as exc:
        return exc.reason
    return ""


@contextmanager
def store_requests(store: Store) -> Iterator[Counter[str]]:
    """Every request the store's S3 client sends meanwhile, counted by operation."""
    sent: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        sent[model.name] += 1

    store.s3.meta.events.register("before-call.s3", count, unique_id="test-users-count")
    try:
        yield sent
    finally:
        store.s3.meta.events.unregister("before-call.s3", unique_id="test-users-count")


def test_an_added_users_token_authenticates_as_them(users: Users) -> None:
    user, token = users.add("ada", UserRole.ARTIST)
    assert token.startswith("farm_") and len(token) > 40
    found = users.authenticate(token)
    assert (found.name, found.role, found.revoked, found.expires) == ("ada", "artist", None, None)
    assert found == user


def test_a_second_instance_finds_a_user_added_elsewhere_on_first_use(
    users: Users, store: Store
) -> None:
    elsewhere = Users(store)
    assert refusal(elsewhere, "farm_not-yet") == "unknown"  # it has read the users once
    _, token = users.add("bob", UserRole.WRANGLER)
    wait_until(lambda: refusal(elsewhere, token) == "", timeout_s=30)
    assert elsewhere.authenticate(token).role is UserRole.WRANGLER


def test_only_the_tokens_hash_is_stored(users: Users, store: Store) -> None:
    _, token = users.add("ada", UserRole.ADMIN)
    stored = store.get_bytes(keys.user_key("ada"))
    assert token.encode() not in stored
    assert token.removeprefix("farm_").encode() not in stored
    record = json.loads(stored)
    assert record["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert set(record) == {"name", "role", "token_sha256", "created", "expires", "revoked"}
    assert (record["name"], record["role"], record["revoked"]) == ("ada", "admin", None)


def test_list_shows_every_user_revoked_too_and_no_hash(users: Users) -> None:
    users.add("cy", UserRole.ARTIST, expires_days=30)
    users.add("ada", UserRole.WRANGLER)
    users.revoke("cy")
    listed = users.list()
    assert [(u.name, u.role) for u in listed] == [("ada", "wrangler"), ("cy", "artist")]
    assert listed[0].revoked is None and listed[1].revoked is not None
    assert listed[1].expires is not None and listed[1].expires > listed[1].created + 29 * 86400
    assert all("token_sha256" not in u.to_json() for u in listed)


def test_a_revoked_token_is_refused_as_revoked_and_revoking_twice_is_fine(users: Users) -> None:
    _, token = users.add("ada", UserRole.ARTIST)
    first = users.revoke("ada")
    with pytest.raises(TokenRefused, match="ada was revoked") as refused:
        users.authenticate(token)
    assert (refused.value.reason, refused.value.name) == ("revoked", "ada")
    assert token not in str(refused.value)
    assert users.revoke("ada") == first  # nothing changes


def test_revoking_no_such_user_says_so(users: Users) -> None:
    with pytest.raises(UnknownUser, match="no user nobody; `farm user list`"):
        users.revoke("nobody")


def test_a_name_in_use_is_refused_until_revoked_then_given_a_new_token(users: Users) -> None:
    _, old = users.add("ada", UserRole.ARTIST)
    with pytest.raises(NameInUse, match="`farm user revoke ada` first"):
        users.add("ada", UserRole.ADMIN)
    assert users.authenticate(old).role is UserRole.ARTIST  # the refusal changed nothing
    users.revoke("ada")
    _, new = users.add("ada", UserRole.WRANGLER)
    assert users.authenticate(new).role is UserRole.WRANGLER
    assert refusal(users, old) == "unknown"  # its record now holds the new token's hash


def test_an_expired_token_is_refused_as_expired(users: Users) -> None:
    _, token = users.add("ada", UserRole.ARTIST, expires_days=0.5 / 86400)  # half a second
    wait_until(lambda: refusal(users, token) == "expired", timeout_s=60)
    with pytest.raises(TokenRefused, match=r"the token of ada expired at .*ask an admin"):
        users.authenticate(token)


@pytest.mark.parametrize("junk", [b"probe", b"[1, 2]", b'{"name": "lp"}', b"\xff\xfe"])
def test_a_record_that_is_no_user_locks_no_one_out(users: Users, store: Store, junk: bytes) -> None:
    """Found by the full suite: the least-privilege test's probe object under users/ (not JSON)
    made every listing fail, so no token could be checked and no user added."""
    store.put_bytes("users/lp.json", junk)
    _, token = users.add("ada", UserRole.ARTIST)
    assert Users(store).authenticate(token).name == "ada"  # a fresh cache reads every record
    assert [u.name for u in users.list()] == ["ada"]
    with pytest.raises(TokenRefused):
        Users(store).authenticate("farm_made-up")


@pytest.mark.parametrize("token", ["farm_made-up", "not-even-a-farm-token", "", "farm_"])
def test_an_unknown_token_is_refused_as_unknown(users: Users, token: str) -> None:
    users.add("ada", UserRole.ARTIST)
    with pytest.raises(TokenRefused, match="not one of this farm's") as refused:
        users.authenticate(token)
    assert (refused.value.reason, refused.value.name) == ("unknown", "")


@pytest.mark.parametrize(
    ("name", "role", "expires_days", "said"),
    [
        ("Ada", "artist", None, "not a user name"),
        ("../ada", "artist", None, "not a user name"),
        ("a" * 65, "artist", None, "not a user name"),
        ("", "artist", None, "not a user name"),
        ("ada", "boss", None, "'boss' is not a role: choose one of artist, wrangler, admin"),
        ("ada", "artist", 0.0, "not a number of days above 0"),
        ("ada", "artist", float("nan"), "not a number of days above 0"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    users: Users, store: Store, name: str, role: str, expires_days: float | None, said: str
) -> None:
    with pytest.raises(BadUserInput, match=said):
        users.add(name, role, expires_days=expires_days)
    assert store.keys(keys.USERS_PREFIX) == []


def test_a_revoke_made_elsewhere_holds_here_within_the_ttl(users: Users, store: Store) -> None:
    # GIVEN an API process that has taken ada's token (and keeps it for its ttl)
    _, token = users.add("ada", UserRole.ARTIST)
    api = Users(store, ttl_s=0.5)
    assert api.authenticate(token).name == "ada"
    # WHEN an admin revokes her from another process
    Users(store).revoke("ada")
    # THEN the API refuses her token as revoked once it reads her again
    wait_until(lambda: refusal(api, token) == "revoked", timeout_s=60)


def test_a_flood_of_made_up_tokens_reloads_the_users_at_most_once_per_interval(
    users: Users, store: Store
) -> None:
    users.add("ada", UserRole.ARTIST)
    clock = Clock()
    api = Users(store, clock=clock)
    with store_requests(store) as sent:
        # WHEN a thousand made-up tokens arrive within one interval
        for n in range(1000):
            assert refusal(api, f"farm_guess{n}") == "unknown"
        # THEN the users were read once: one listing, one record
        assert sent == {"ListObjectsV2": 1, "GetObject": 1}
        clock.now += MISS_INTERVAL_S * 0.9
        assert refusal(api, "farm_guess-again") == "unknown"
        assert sent["ListObjectsV2"] == 1
        # and once more in the next interval, however many come
        clock.now += MISS_INTERVAL_S * 0.2
        for n in range(1000):
            assert refusal(api, f"farm_more{n}") == "unknown"
        assert sent["ListObjectsV2"] == 2
        # and what does not even look like a token costs the store nothing
        clock.now += MISS_INTERVAL_S * 10
        before = sum(sent.values())
        assert refusal(api, "Bearer nonsense") == "unknown"
        assert sum(sent.values()) == before


def test_a_known_token_is_read_again_once_per_ttl_by_its_own_record(
    users: Users, store: Store
) -> None:
    _, token = users.add("ada", UserRole.ARTIST)
    clock = Clock()
    api = Users(store, ttl_s=2.0, clock=clock)
    api.authenticate(token)  # the first use reads every user
    with store_requests(store) as sent:
        for _ in range(100):
            api.authenticate(token)
        assert sum(sent.values()) == 0  # kept
        clock.now += 2.0
        for _ in range(100):
            api.authenticate(token)
        assert sent == {"GetObject": 1}  # her record alone, once

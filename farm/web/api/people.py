"""The routes about who calls: the version (no token), whoami, and the users an admin manages
(farm.control.users keeps them in the store)."""

from __future__ import annotations

from farm.control.users import BadUserInput, NameInUse, UnknownUser
from farm.web.api.answers import Answer, ApiError, bad_request
from farm.web.api.call import Call, Farm
from farm.web.api.validate import is_number
from farm.web.api.versions import API_VERSION, FARM_VERSION, MIN_CLIENT


def version(farm: Farm, call: Call) -> Answer:
    return Answer(200, {"api": API_VERSION, "farm": FARM_VERSION, "min_client": MIN_CLIENT})


def whoami(farm: Farm, call: Call) -> Answer:
    assert call.user is not None  # a route with an action: the token named a user
    user = call.user
    return Answer(200, {"name": user.name, "role": str(user.role), "expires": user.expires})


def list_users(farm: Farm, call: Call) -> Answer:
    return Answer(200, {"users": [user.to_json() for user in farm.users.list()]})


def add_user(farm: Farm, call: Call) -> Answer:
    call.only("name", "role", "expires_days")
    name, role = call.body.get("name"), call.body.get("role")
    expires = call.body.get("expires_days")
    if not isinstance(name, str) or not isinstance(role, str):
        raise bad_request('a new user is {"name", "role", "expires_days"?}')
    if expires is not None and not is_number(expires):
        raise bad_request("expires_days must be a number of days, or null")
    try:
        user, token = farm.users.add(
            name, role, expires_days=None if expires is None else float(expires)
        )
    except BadUserInput as exc:
        raise bad_request(str(exc)) from exc
    except NameInUse as exc:
        raise ApiError(409, "name_in_use", str(exc)) from exc
    return Answer(201, user.to_json() | {"token": token})


def revoke_user(farm: Farm, call: Call) -> Answer:
    try:
        user = farm.users.revoke(call.params["name"])
    except UnknownUser as exc:
        raise ApiError(404, "unknown_user", str(exc)) from exc
    return Answer(200, user.to_json())

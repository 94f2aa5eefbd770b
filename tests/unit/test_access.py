"""The API's permission matrix (farm.core.access), every role by every action, on a job of the
caller's own and on someone else's: written out here by hand, so a change to the table shows."""

from __future__ import annotations

import pytest

from farm.core.access import Action, UserRole, allowed, roles_allowed

A, W, M = UserRole.ARTIST, UserRole.WRANGLER, UserRole.ADMIN
# action: (roles allowed on their own job, roles allowed on another's job)
EXPECTED: dict[Action, tuple[set[UserRole], set[UserRole]]] = {
    Action.VERSION: ({A, W, M}, {A, W, M}),
    Action.WHOAMI: ({A, W, M}, {A, W, M}),
    Action.UPLOAD: ({A, W, M}, {A, W, M}),
    Action.SUBMIT: ({A, W, M}, {A, W, M}),
    Action.ESTIMATE: ({A, W, M}, {A, W, M}),
    Action.LIST_JOBS: ({A, W, M}, {A, W, M}),
    Action.READ_JOB: ({A, W, M}, {A, W, M}),
    Action.EVENTS: ({A, W, M}, {A, W, M}),
    Action.CONTROL: ({A, W, M}, {W, M}),
    Action.OUTPUT: ({A, W, M}, {W, M}),
    Action.LOGS: ({A, W, M}, {W, M}),
    Action.MANAGE_USERS: ({M}, {M}),
}
CASES = [
    (role, action, own)
    for role in UserRole
    for action in Action
    for own in (True, False)
]  # fmt: skip


def test_the_table_names_every_action() -> None:
    assert set(EXPECTED) == set(Action)


@pytest.mark.parametrize(
    ("role", "action", "own"),
    CASES,
    ids=[f"{r}-{a}-{'own' if o else 'others'}" for r, a, o in CASES],
)
def test_each_role_may_do_exactly_its_part(role: UserRole, action: Action, own: bool) -> None:
    # GIVEN a job owned by ada, WHEN ada herself or bob asks in `role`
    user = "ada" if own else "bob"
    # THEN the answer is the matrix's
    expected = role in EXPECTED[action][0 if own else 1]
    assert allowed(role, action, owner="ada", user=user) is expected


@pytest.mark.parametrize("action", [Action.CONTROL, Action.OUTPUT, Action.LOGS])
def test_an_artist_steers_no_job_that_records_no_owner(action: Action) -> None:
    """A job submitted before owners were recorded, or straight on a farm host: no artist's."""
    assert not allowed(UserRole.ARTIST, action, owner="", user="")
    assert not allowed(UserRole.ARTIST, action, owner="", user="ada")
    assert allowed(UserRole.WRANGLER, action, owner="", user="ada")


def test_a_refusal_can_say_which_roles_may() -> None:
    assert roles_allowed(Action.MANAGE_USERS) == [UserRole.ADMIN]
    assert roles_allowed(Action.CONTROL) == [UserRole.WRANGLER, UserRole.ADMIN]
    assert roles_allowed(Action.SUBMIT) == list(UserRole)


def test_roles_are_named_as_the_cli_takes_them() -> None:
    assert [str(r) for r in UserRole] == ["artist", "wrangler", "admin"]

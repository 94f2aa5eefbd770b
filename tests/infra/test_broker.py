"""ElastiCache's users (modules/broker), planned by Terraform with the AWS provider offline: one
user per role with exactly farm.core.roles' rules, a default user that is off, each user's own
password, and the replication group behind the user group instead of an AUTH token.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from farm.core import roles
from farm.core.roles import Role

from .tfdoc import REPO, TERRAFORM_DIR, offline_aws_provider, offline_terraform

USERS_FILE = REPO / roles.ELASTICACHE_USERS
REGENERATE = (
    """python -c "from farm.core import roles; print(roles.elasticache_users(), end='')" > """
    + roles.ELASTICACHE_USERS
)
PASSWORDS = {user: f"{user}-password-0123456789" for user in ("default", *map(str, Role))}
GROUP = "farm-redis-users"


def test_the_checked_in_access_strings_are_what_roles_builds_now() -> None:
    # GIVEN the file Terraform reads WHEN compared with farm.core.roles THEN they agree
    assert USERS_FILE.read_text() == roles.elasticache_users(), f"stale: run {REGENERATE}"


def _plan(root: Path) -> dict[str, dict[str, Any]]:
    """The broker module planned for sample inputs: each resource's planned values by address."""
    terraform, env = offline_terraform(root)
    module = {
        "source": str(TERRAFORM_DIR / "modules" / "broker"),
        "name": "farm",
        "subnet_ids": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
        "security_group_id": "sg-0123456789abcdef0",
        "kms_key_arn": "arn:aws:kms:eu-west-1:111122223333:key/farm",
        "passwords": PASSWORDS,
        "node_type": "cache.t4g.micro",
        "replicas": 1,
    }
    provider = offline_aws_provider("eu-west-1", ("elasticache", "sts"))
    config = {"provider": {"aws": provider}, "module": {"broker": module}}
    (root / "main.tf.json").write_text(json.dumps(config))
    for command in (["init", "-input=false"], ["plan", "-input=false", "-out=broker.plan"]):
        run = subprocess.run(
            [terraform, f"-chdir={root}", *command, "-no-color"],
            capture_output=True, text=True, timeout=300, env=env, check=False,
        )  # fmt: skip
        assert run.returncode == 0, f"terraform {command[0]}:\n{run.stdout}\n{run.stderr}"
    shown = subprocess.run(
        [terraform, f"-chdir={root}", "show", "-json", "broker.plan"],
        capture_output=True, text=True, timeout=300, env=env, check=True,
    )  # fmt: skip
    changes = json.loads(shown.stdout)["resource_changes"]
    return {change["address"]: change["change"]["after"] for change in changes}


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _plan(tmp_path_factory.mktemp("broker"))


def _of_type(planned: dict[str, dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [values for address, values in planned.items() if address.split(".")[-2] == type_]


def _users(planned: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The planned ElastiCache users by user name."""
    return {user["user_name"]: user for user in _of_type(planned, "aws_elasticache_user")}


def test_the_user_group_holds_one_user_per_role_with_exactly_roles_rules(
    planned: dict[str, dict[str, Any]],
) -> None:
    users = _users(planned)
    rules = {name: user["access_string"] for name, user in users.items() if name != "default"}
    assert rules == {str(role): roles.elasticache_access_string(role) for role in Role}
    [group] = _of_type(planned, "aws_elasticache_user_group")
    assert group["user_group_id"] == GROUP
    assert sorted(group["user_ids"]) == sorted(user["user_id"] for user in users.values())
    assert all(user["engine"] == group["engine"] == "REDIS" for user in users.values())


def test_each_user_logs_in_with_its_own_password_alone(
    planned: dict[str, dict[str, Any]],
) -> None:
    for name, user in _users(planned).items():
        [mode] = user["authentication_mode"]
        assert mode["type"] == "password", name
        assert mode["passwords"] == [PASSWORDS[name]], name


def test_the_default_user_the_group_needs_is_off_with_no_right(
    planned: dict[str, dict[str, Any]],
) -> None:
    """ElastiCache refuses a group without a user named default; nothing runs as it (no
    append-only file is replayed), so it gets no command, key or channel and cannot log in."""
    default = _users(planned)["default"]
    assert default["access_string"] == "off -@all"
    assert default["user_id"] == "farm-default"  # ElastiCache's own "default" id keeps +@all


def test_the_replication_group_admits_the_users_and_no_auth_token(
    planned: dict[str, dict[str, Any]],
) -> None:
    [group] = _of_type(planned, "aws_elasticache_replication_group")
    assert group["user_group_ids"] == [GROUP]
    assert group["auth_token"] is None
    # A group made with a token gives it up as it takes the users (AUTH to RBAC).
    assert group["auth_token_update_strategy"] == "DELETE"
    assert group["transit_encryption_enabled"] is True

"""IAM least privilege, read from modules/iam: bucket prefixes, one key, no wildcard on wildcard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .tfdoc import blocks

TF = dict[Path, dict[str, Any]]
BUCKET = "${var.bucket_arn}"
PREFIXES = ("scenes/*", "inputs/*", "jobs/*")
# Actions AWS offers no resource-level permissions for; each needs Resource "*".
UNSCOPABLE = {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData"}


def _statements(tf: TF, document: str) -> list[dict[str, Any]]:
    """Static and dynamic statements of one policy document in modules/iam."""
    [body] = [
        b
        for _, n, b in blocks(tf, "data", "aws_iam_policy_document", under="modules/iam")
        if n == document
    ]
    found = []
    for source in body.get("source_policy_documents", []):
        found += _statements(
            tf, source.removeprefix("${data.aws_iam_policy_document.").removesuffix(".json}")
        )
    found += body.get("statement", [])
    for dynamic in body.get("dynamic", []):
        for content in dynamic.get("statement", {}).get("content", []):
            found.append(content)
    return found


@pytest.fixture(params=["worker", "control_plane"])
def statements(request: pytest.FixtureRequest, tf: TF) -> list[dict[str, Any]]:
    found = _statements(tf, request.param)
    assert found
    return found


def test_no_wildcard_action_anywhere(statements: list[dict[str, Any]]) -> None:
    for statement in statements:
        for action in statement["actions"]:
            assert action != "*" and not action.endswith(":*"), statement["sid"]


def test_wildcard_resources_only_for_actions_without_resource_scoping(
    statements: list[dict[str, Any]],
) -> None:
    for statement in statements:
        if "*" in statement["resources"]:
            assert set(statement["actions"]) <= UNSCOPABLE, statement["sid"]
            if "cloudwatch:PutMetricData" in statement["actions"]:
                [condition] = statement["condition"]
                assert condition["variable"] == "cloudwatch:namespace"


def test_object_access_is_scoped_to_the_farm_prefixes(statements: list[dict[str, Any]]) -> None:
    allowed = {f"{BUCKET}/{prefix}" for prefix in PREFIXES}
    for statement in statements:
        object_actions = [
            a for a in statement["actions"] if a.startswith("s3:") and a != "s3:ListBucket"
        ]
        if object_actions:
            assert set(statement["resources"]) <= allowed, statement["sid"]
        if any(a in object_actions for a in ("s3:PutObject", "s3:DeleteObject")):
            assert statement["resources"] == [f"{BUCKET}/jobs/*"], "writes only under jobs/"


def test_listing_is_conditioned_on_the_farm_prefixes(statements: list[dict[str, Any]]) -> None:
    [listing] = [s for s in statements if "s3:ListBucket" in s["actions"]]
    assert listing["resources"] == [BUCKET]
    [condition] = listing["condition"]
    assert condition["variable"] == "s3:prefix"
    assert set(condition["values"]) == set(PREFIXES)


def test_kms_use_is_limited_to_the_farm_key(statements: list[dict[str, Any]]) -> None:
    for statement in statements:
        if any(a.startswith("kms:") for a in statement["actions"]):
            assert statement["resources"] == ["${var.kms_key_arn}"]


def test_workers_can_neither_delete_objects_nor_read_flower_credentials(tf: TF) -> None:
    worker = _statements(tf, "worker")
    actions = {a for s in worker for a in s["actions"]}
    assert "s3:DeleteObject" not in actions
    resources = {r for s in worker for r in s["resources"]}
    assert "${var.flower_secret_arn}" not in resources


def test_reading_scenes_and_inputs_is_read_only(tf: TF) -> None:
    [read] = [s for s in _statements(tf, "worker") if s["sid"] == "ReadScenesAndInputs"]
    assert read["actions"] == ["s3:GetObject"]

"""The IAM evaluator the role tests rest on, checked on the cases AWS documents."""

from __future__ import annotations

from typing import Any

import pytest

from .iam import Decision, Request, decide, matches

BUCKET = "arn:aws:s3:::b"


def _policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def _allow(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


@pytest.mark.parametrize(
    "pattern,value,expected",
    [
        ("jobs/*/frames/*", "jobs/j1/frames/000012.png", True),
        ("jobs/*/frames/*", "jobs/j1/spec.json", False),
        ("jobs/*", "jobs/j1/a/b/c", True),  # `*` crosses `/`
        ("jobs/*/output.*", "jobs/j1/output.mp4", True),
        ("jobs/*/output.*", "jobs/j1/outputXmp4", False),  # `.` is literal
        ("frame-??.png", "frame-12.png", True),
        ("frame-??.png", "frame-123.png", False),
    ],
)
def test_wildcards_match_as_iam_does(pattern: str, value: str, expected: bool) -> None:
    assert matches(pattern, value) is expected


def test_nothing_granted_is_an_implicit_deny() -> None:
    policy = _policy(_allow("s3:GetObject", f"{BUCKET}/a/*"))
    assert decide(policy, Request(action="s3:GetObject", resource=f"{BUCKET}/b/x")) == (
        Decision.IMPLICIT_DENY
    )


def test_an_explicit_deny_wins_over_an_allow() -> None:
    policy = _policy(
        _allow("s3:*", f"{BUCKET}/*"),
        {"Effect": "Deny", "Action": "s3:PutObject", "Resource": f"{BUCKET}/jobs/*/spec.json"},
    )
    spec = Request(action="s3:PutObject", resource=f"{BUCKET}/jobs/j/spec.json")
    frame = Request(action="s3:PutObject", resource=f"{BUCKET}/jobs/j/frames/1.png")
    assert decide(policy, spec) == Decision.DENIED
    assert decide(policy, frame) == Decision.ALLOWED


def test_actions_match_without_case_and_resources_with_it() -> None:
    policy = _policy(_allow("S3:getobject", f"{BUCKET}/Jobs/*"))
    assert decide(policy, Request(action="s3:GetObject", resource=f"{BUCKET}/Jobs/x")) == (
        Decision.ALLOWED
    )
    assert decide(policy, Request(action="s3:GetObject", resource=f"{BUCKET}/jobs/x")) == (
        Decision.IMPLICIT_DENY
    )


def test_not_action_and_not_resource_match_everything_else() -> None:
    policy = _policy(
        {"Effect": "Allow", "NotAction": "s3:DeleteObject", "NotResource": f"{BUCKET}/scenes/*"}
    )
    assert decide(policy, Request(action="s3:GetObject", resource=f"{BUCKET}/jobs/x")) == (
        Decision.ALLOWED
    )
    assert decide(policy, Request(action="s3:DeleteObject", resource=f"{BUCKET}/jobs/x")) == (
        Decision.IMPLICIT_DENY
    )
    assert decide(policy, Request(action="s3:GetObject", resource=f"{BUCKET}/scenes/x")) == (
        Decision.IMPLICIT_DENY
    )


def test_a_statement_needs_action_or_not_action() -> None:
    with pytest.raises(ValueError, match="Action or NotAction"):
        decide(_policy({"Effect": "Allow", "Resource": "*"}), Request(action="s3:x", resource="y"))


def test_string_like_on_a_missing_key_does_not_hold() -> None:
    policy = _policy(
        _allow("s3:ListBucket", BUCKET, Condition={"StringLike": {"s3:prefix": ["jobs/*"]}})
    )
    listing = Request(action="s3:ListBucket", resource=BUCKET, context={"s3:prefix": "jobs/j/"})
    assert decide(policy, listing) == Decision.ALLOWED
    assert decide(policy, Request(action="s3:ListBucket", resource=BUCKET)) == (
        Decision.IMPLICIT_DENY
    )
    other = Request(action="s3:ListBucket", resource=BUCKET, context={"s3:prefix": "scenes/"})
    assert decide(policy, other) == Decision.IMPLICIT_DENY


def test_negated_operators_hold_for_a_missing_key() -> None:
    policy = _policy(
        _allow("s3:GetObject", "*", Condition={"StringNotEquals": {"aws:SourceVpce": "vpce-1"}})
    )
    assert decide(policy, Request(action="s3:GetObject", resource="x")) == Decision.ALLOWED
    inside = Request(action="s3:GetObject", resource="x", context={"aws:SourceVpce": "vpce-1"})
    assert decide(policy, inside) == Decision.IMPLICIT_DENY


def test_null_checks_whether_a_key_is_there() -> None:
    deny_unconditional = {
        "Effect": "Deny",
        "Action": "s3:PutObject",
        "Resource": "*",
        "Condition": {
            "Bool": {"s3:ObjectCreationOperation": "true"},
            "Null": {"s3:if-none-match": "true"},
        },
    }
    policy = _policy(_allow("s3:PutObject", "*"), deny_unconditional)
    plain = {"s3:ObjectCreationOperation": "true"}
    assert decide(policy, Request(action="s3:PutObject", resource="k", context=plain)) == (
        Decision.DENIED
    )
    guarded = {**plain, "s3:if-none-match": "*"}
    assert decide(policy, Request(action="s3:PutObject", resource="k", context=guarded)) == (
        Decision.ALLOWED
    )
    part = {"s3:ObjectCreationOperation": "false"}
    assert decide(policy, Request(action="s3:PutObject", resource="k", context=part)) == (
        Decision.ALLOWED
    )


def test_every_operator_and_every_key_must_hold_and_any_value_may() -> None:
    condition = {
        "StringEquals": {
            "kms:ViaService": ["s3.r.amazonaws.com", "secretsmanager.r.amazonaws.com"]
        },
        "Bool": {"aws:SecureTransport": "true"},
    }
    policy = _policy(_allow("kms:Decrypt", "k", Condition=condition))
    both = {"kms:ViaService": "secretsmanager.r.amazonaws.com", "aws:SecureTransport": "true"}
    assert decide(policy, Request(action="kms:Decrypt", resource="k", context=both)) == (
        Decision.ALLOWED
    )
    one = {"kms:ViaService": "s3.r.amazonaws.com"}
    assert decide(policy, Request(action="kms:Decrypt", resource="k", context=one)) == (
        Decision.IMPLICIT_DENY
    )


def test_an_unknown_operator_fails_loudly() -> None:
    policy = _policy(_allow("s3:GetObject", "*", Condition={"DateLessThan": {"aws:x": "1"}}))
    with pytest.raises(ValueError, match="DateLessThan"):
        decide(policy, Request(action="s3:GetObject", resource="x", context={"aws:x": "0"}))

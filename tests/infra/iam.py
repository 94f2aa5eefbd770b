"""A small evaluator of IAM identity policies, for the tests of the farm's roles (test_iam_policy).

moto's IAM enforcement (5.x) evaluates StringEquals alone and gives S3 calls no request context
(no s3:prefix, s3:if-none-match, s3:ObjectCreationOperation, kms:ViaService), so the conditions
the farm's policies rest on would go unchecked there. This one follows AWS's documented logic
for one identity policy: an explicit Deny wins, else an Allow is needed; Action and Resource
(or NotAction, NotResource) match with `*` and `?`; a statement's conditions all hold, each key's
values any. An operator it does not know fails loudly rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Decision(StrEnum):
    ALLOWED = "allowed"
    """An Allow matched and no Deny did."""
    DENIED = "denied"
    """An explicit Deny matched."""
    IMPLICIT_DENY = "implicitly denied"
    """Nothing matched: what AWS does with a call no statement grants."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One authorization question: an IAM action on a resource ARN, with the request's context
    keys (absent keys are absent, as in AWS)."""

    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)


def _wildcard(pattern: str, *, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards: `*` any run of characters (across `/` too), `?` one character."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{body}$", re.IGNORECASE if ignore_case else 0)


def matches(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    return bool(_wildcard(pattern, ignore_case=ignore_case).match(value))


def _listed(statement: Mapping[str, Any], key: str) -> list[str] | None:
    value = statement.get(key)
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _element_matches(
    statement: Mapping[str, Any], positive: str, negative: str, value: str, *, ignore_case: bool
) -> bool:
    """Action/NotAction or Resource/NotResource: exactly one of the two must be there."""
    yes, no = _listed(statement, positive), _listed(statement, negative)
    if (yes is None) == (no is None):
        raise ValueError(f"statement {statement.get('Sid')!r} needs {positive} or {negative}")
    if yes is not None:
        return any(matches(p, value, ignore_case=ignore_case) for p in yes)
    assert no is not None
    return not any(matches(p, value, ignore_case=ignore_case) for p in no)


def _string_like(value: str, wanted: str) -> bool:
    return matches(wanted, value)


def _bool(value: str, wanted: str) -> bool:
    return value.lower() == wanted.lower()


_POSITIVE: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda value, wanted: value == wanted,
    "StringEqualsIgnoreCase": lambda value, wanted: value.lower() == wanted.lower(),
    "StringLike": _string_like,
    "ArnEquals": lambda value, wanted: value == wanted,
    "ArnLike": _string_like,
    "Bool": _bool,
}
_NEGATED = {"StringNotEquals": "StringEquals", "StringNotLike": "StringLike"}


def _condition_holds(operator: str, key: str, wanted: Sequence[str], request: Request) -> bool:
    present = key in request.context
    if operator == "Null":
        [flag] = wanted
        return present != (flag.lower() == "true")
    if operator.endswith("IfExists") and not present:
        return True
    base = operator.removesuffix("IfExists")
    if base in _NEGATED:  # a negated operator holds for an absent key: nothing equals it
        return not present or not any(
            _POSITIVE[_NEGATED[base]](request.context[key], w) for w in wanted
        )
    if base not in _POSITIVE:
        raise ValueError(f"condition operator {operator} is not modelled here")
    return present and any(_POSITIVE[base](request.context[key], w) for w in wanted)


def _conditions_hold(statement: Mapping[str, Any], request: Request) -> bool:
    for operator, entries in statement.get("Condition", {}).items():
        for key, wanted in entries.items():
            values = [wanted] if isinstance(wanted, str) else list(wanted)
            if not _condition_holds(operator, key, values, request):
                return False
    return True


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    return (
        _element_matches(statement, "Action", "NotAction", request.action, ignore_case=True)
        and _element_matches(
            statement, "Resource", "NotResource", request.resource, ignore_case=False
        )
        and _conditions_hold(statement, request)
    )


def decide(policy: Mapping[str, Any], request: Request) -> Decision:
    statements = policy["Statement"]
    statements = [statements] if isinstance(statements, Mapping) else statements
    effects = {s["Effect"] for s in statements if _applies(s, request)}
    if "Deny" in effects:
        return Decision.DENIED
    return Decision.ALLOWED if "Allow" in effects else Decision.IMPLICIT_DENY

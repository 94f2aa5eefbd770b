"""Which object store errors no retry can fix: the classifier is pure (code, status, message)."""

from __future__ import annotations

import pytest

from farm.adapters.store import refusal


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        ("AccessDenied", 403, "Access Denied"),
        ("403", 403, ""),  # a HEAD request's refusal has no body, only the status
        ("NoSuchBucket", 404, "The specified bucket does not exist"),
        ("InvalidAccessKeyId", 403, "The AWS Access Key Id you provided does not exist"),
        ("SignatureDoesNotMatch", 403, "The request signature we calculated does not match"),
        ("KMS.DisabledException", 400, "arn:aws:kms:... is disabled"),
        ("AccessDenied", 403, "User is not authorized to perform kms:GenerateDataKey"),
        ("KMSAccessDenied", 400, "the kms key policy denies it"),
        ("InsufficientStorage", 507, ""),
        ("InternalError", 500, "failed to write: no free volumes left for {collection}"),
        ("InternalError", 500, "write to volume 3: disk full"),
    ],
)
def test_permanent_refusals_are_named(code: str, status: int, message: str) -> None:
    assert refusal(code, status, message)


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        ("InternalError", 500, "We encountered an internal error. Please try again."),
        ("SlowDown", 503, "Please reduce your request rate."),
        ("ServiceUnavailable", 503, ""),
        ("RequestTimeout", 400, "Your socket connection to the server was not read from"),
        ("ExpiredToken", 400, "The provided token has expired."),
        ("404", 404, ""),
    ],
)
def test_hiccups_stay_transient(code: str, status: int, message: str) -> None:
    assert refusal(code, status, message) == ""

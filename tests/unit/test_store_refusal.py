"""Which object store errors no retry can fix: the classifier is pure (code, status, message).
And how long the store's client waits for an answer: the setting."""

from __future__ import annotations

from pathlib import Path

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


def test_the_stores_read_timeout_is_the_setting(tmp_path: Path) -> None:
    """FARM_S3_READ_TIMEOUT_S reaches the client: the fault tests' held requests end at it."""
    from farm.adapters.settings import load_settings
    from farm.adapters.store import Store

    none = tmp_path / "no-config.json"
    env = {"FARM_S3_ENDPOINT": "http://127.0.0.1:9", "FARM_S3_READ_TIMEOUT_S": "7"}
    assert (
        Store.from_settings(load_settings(env, config_path=none)).s3.meta.config.read_timeout == 7
    )
    default = load_settings({"FARM_S3_ENDPOINT": "http://127.0.0.1:9"}, config_path=none)
    assert Store.from_settings(default).s3.meta.config.read_timeout == 60

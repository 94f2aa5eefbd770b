"""The object store (S3 or SeaweedFS's S3 API): the farm's durable record.

All boto3 S3 calls live here; botocore errors become StoreError / UnreachableError where they enter.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from farm.errors import StoreError, UnreachableError
from farm.settings import Settings

log = logging.getLogger(__name__)
INTERMEDIATE_TAG = "farm-data=intermediate"
"""Matches the lifecycle rule in infra/terraform/modules/storage."""
_TRANSFER = TransferConfig(
    multipart_threshold=64 * 1024 * 1024, multipart_chunksize=32 * 1024 * 1024
)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def _wrapped(what: str) -> Iterator[None]:
    try:
        yield
    except EndpointConnectionError as exc:
        raise UnreachableError(f"the object store does not answer while trying to {what}") from exc
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        raise StoreError(f"the object store refused to {what}: {code}") from exc
    except BotoCoreError as exc:
        raise StoreError(f"the object store failed to {what}: {exc}") from exc


class Store:
    def __init__(self, client: Any, bucket: str) -> None:
        self.s3 = client
        self.bucket = bucket

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        kwargs: dict[str, Any] = {
            "region_name": settings.s3_region,
            "config": Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
            ),
        }
        if settings.s3_endpoint:
            kwargs["endpoint_url"] = settings.s3_endpoint
        if settings.s3_access_key:
            kwargs["aws_access_key_id"] = settings.s3_access_key
            kwargs["aws_secret_access_key"] = settings.s3_secret_key
        return cls(boto3.client("s3", **kwargs), settings.s3_bucket)

    def ensure_bucket(self) -> None:
        with _wrapped(f"find bucket {self.bucket}"):
            try:
                self.s3.head_bucket(Bucket=self.bucket)
                return
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                    raise
            self.s3.create_bucket(Bucket=self.bucket)

    def check(self) -> None:
        with _wrapped(f"reach bucket {self.bucket}"):
            self.s3.head_bucket(Bucket=self.bucket)

    def put_file(self, key: str, path: Path, *, intermediate: bool = False) -> None:
        """Upload a file (multipart above 64 MiB). `intermediate` tags frames and segments so the
        bucket's lifecycle rule can expire them once deliverables exist."""
        extra = {"Tagging": INTERMEDIATE_TAG} if intermediate else None
        with _wrapped(f"upload {key}"):
            self.s3.upload_file(str(path), self.bucket, key, Config=_TRANSFER, ExtraArgs=extra)

    def put_bytes(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> None:
        with _wrapped(f"write {key}"):
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)

    def put_json(self, key: str, value: Any) -> None:
        body = json.dumps(value, indent=2, sort_keys=True).encode()
        self.put_bytes(key, body, "application/json")

    def get_file(self, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        with _wrapped(f"download {key}"):
            self.s3.download_file(self.bucket, key, str(tmp), Config=_TRANSFER)
        tmp.replace(path)

    def get_bytes(self, key: str) -> bytes:
        with _wrapped(f"read {key}"):
            body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def size(self, key: str) -> int | None:
        """The object's size, or None when it is not there."""
        with _wrapped(f"look up {key}"):
            try:
                head = self.s3.head_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise
        return int(head["ContentLength"])

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def keys(self, prefix: str) -> list[str]:
        found: list[str] = []
        with _wrapped(f"list {prefix}"):
            paginator = self.s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                found.extend(obj["Key"] for obj in page.get("Contents", []))
        return found

    def delete(self, key: str) -> None:
        with _wrapped(f"delete {key}"):
            self.s3.delete_object(Bucket=self.bucket, Key=key)

    def put_content_addressed(self, path: Path, key_for: Any) -> tuple[str, str, bool]:
        """Upload `path` under key_for(sha256) unless the same bytes are there already.

        Returns (key, sha256, uploaded).
        """
        digest = sha256_file(path)
        key: str = key_for(digest)
        if self.size(key) == path.stat().st_size:
            return key, digest, False
        self.put_file(key, path)
        return key, digest, True

    def presign_get(self, key: str, expires_s: int = 900) -> str:
        with _wrapped(f"sign a URL for {key}"):
            url: str = self.s3.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
            )
        return url

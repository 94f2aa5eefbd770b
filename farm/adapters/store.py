"""The object store (S3 or SeaweedFS's S3 API): the farm's durable record.

All boto3 S3 calls live here; botocore errors become StoreError / UnreachableError (retried) or
StoreRefused (permanent: denied, no bucket, wrong keys, disk full) where they enter.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    SSLError,
)

from farm.adapters.settings import Settings
from farm.core.errors import (
    ObjectChanged,
    ObjectMissing,
    StoreError,
    StoreRefused,
    UnreachableError,
)

log = logging.getLogger(__name__)
INTERMEDIATE_TAG = "farm-data=intermediate"
"""Matches the lifecycle rule in infra/terraform/modules/storage."""
ONE_PUT_BYTES = 64 * 1024 * 1024
"""Files under this size go up in one PUT, its answer their ETag; larger ones in parts."""
_TRANSFER = TransferConfig(multipart_threshold=ONE_PUT_BYTES, multipart_chunksize=32 * 1024 * 1024)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


REFUSALS = {
    "AccessDenied": "the farm's credentials may not do this (bucket policy, IAM role or KMS key)",
    "403": "the farm's credentials may not do this (bucket policy, IAM role or KMS key)",
    "Forbidden": "the farm's credentials may not do this (bucket policy, IAM role or KMS key)",
    "AllAccessDisabled": "all access to the bucket is disabled",
    "AccountProblem": "the AWS account has a problem that blocks S3",
    "NoSuchBucket": "the bucket does not exist (FARM_S3_BUCKET)",
    "InvalidBucketName": "the bucket name is not valid (FARM_S3_BUCKET)",
    "InvalidAccessKeyId": "the access key is not known to the store (FARM_S3_ACCESS_KEY)",
    "SignatureDoesNotMatch": "the secret key is wrong (FARM_S3_SECRET_KEY)",
    "RequestTimeTooSkewed": "this host's clock is too far off for signed requests",
    "KMS.DisabledException": "the bucket's KMS key is disabled",
    "KMS.NotFoundException": "the bucket's KMS key does not exist",
    "KMS.AccessDeniedException": "the farm may not use the bucket's KMS key",
    "KMS.KMSInvalidStateException": "the bucket's KMS key is not usable (pending deletion?)",
    "InsufficientStorage": "the store is out of space",
    "507": "the store is out of space",
    "EntityTooLarge": "the object is larger than the store accepts",
    "InvalidObjectState": "the object is archived (Glacier) and must be restored first",
}
"""S3 error codes that no retry can fix, and what they mean for whoever runs the farm."""
_DISK_FULL = re.compile(r"no (more )?(free|writable) volume|disk (is )?full|no space left|"
                        r"not enough space|out of (disk )?space|volume.*(full|size limit)",
                        re.IGNORECASE)  # fmt: skip
"""SeaweedFS answers 500 with one of these when its disks are full."""


def refusal(code: str, status: int, message: str) -> str:
    """Why a store error is permanent ('' when a retry may help): pure, from the S3 code, the
    HTTP status and the message."""
    if code in REFUSALS:
        return REFUSALS[code]
    if code.startswith("KMS.") or ("kms" in message.lower() and status in (400, 403)):
        return "the farm may not use the bucket's KMS key"
    if status == 403:
        return REFUSALS["403"]
    if status == 507 or (status >= 500 and _DISK_FULL.search(message)):
        return REFUSALS["507"]
    return ""


NOT_FOUND = ("404", "NoSuchKey", "NotFound")
"""S3's codes for an object that is not there (HEAD answers a bare 404)."""


def _precondition_failed(exc: ClientError) -> bool:
    """S3 answered 412: an If-Match, If-None-Match or copy-source condition did not hold."""
    code = exc.response.get("Error", {}).get("Code")
    return code == "PreconditionFailed" or _status(exc) == 412


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _refused(exc: ClientError, what: str) -> StoreError | StoreRefused | ObjectChanged:
    """The farm's error for what S3 answered (ObjectMissing is a StoreError)."""
    error = exc.response.get("Error", {})
    code = str(error.get("Code", "?"))
    status = _status(exc)
    if _precondition_failed(exc):
        return ObjectChanged(f"cannot {what}: it is no longer the object that was recorded")
    if code in NOT_FOUND:
        return ObjectMissing(f"cannot {what}: no such object")
    reason = refusal(code, status, str(error.get("Message", "")))
    if reason:
        return StoreRefused(f"the object store refused to {what}: {code} ({reason})")
    return StoreError(f"the object store refused to {what}: {code}")


def _tls_reason(exc: Exception) -> str:
    """OpenSSL's own words (`certificate verify failed: unable to get local issuer
    certificate`), without the URL and source line botocore wraps them in."""
    text = str(exc)
    start = text.find("certificate verify failed")
    return text[start:].split(" (_ssl")[0] if start >= 0 else text[-200:]


@contextmanager
def _wrapped(what: str) -> Iterator[None]:
    try:
        yield
    except SSLError as exc:  # before EndpointConnectionError: a wrong CA or name is no outage
        raise StoreRefused(
            f"cannot {what}: the S3 endpoint's certificate was refused ({_tls_reason(exc)}); set "
            "FARM_CA_FILE to the CA that signed it and use the name on it"
        ) from exc
    except EndpointConnectionError as exc:
        raise UnreachableError(f"the object store does not answer while trying to {what}") from exc
    except ClientError as exc:
        raise _refused(exc, what) from exc
    except S3UploadFailedError as exc:  # boto3's transfer wraps the ClientError it met
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ClientError):
            raise _refused(cause, what) from exc
        raise StoreError(f"the object store failed to {what}: {exc}") from exc
    except NoCredentialsError as exc:
        raise StoreRefused(
            f"cannot {what}: no S3 credentials (set FARM_S3_ACCESS_KEY/FARM_S3_SECRET_KEY or give "
            "the host an IAM role)"
        ) from exc
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
                # Presigned URLs too (botocore presigns S3 with SigV2 otherwise, which signs the
                # Content-Type a client sends): SigV4 signs the host alone, so an artist's upload
                # or a browser's GET goes through whatever headers its HTTP library adds.
                signature_version="s3v4",
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=5,
                read_timeout=settings.s3_read_timeout_s,
                # Room for the farm's widest fan-out (16 lookups at once: the retry's segment
                # check, the ledger's rebuild) without dropping and reopening connections.
                max_pool_connections=32,
            ),
        }
        if settings.s3_endpoint:
            kwargs["endpoint_url"] = settings.s3_endpoint
        if settings.ca_file:
            kwargs["verify"] = settings.ca_file  # e.g. a private CA's endpoint, verified against it
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

    def put_file(self, key: str, path: Path, *, intermediate: bool = False) -> str:
        """Upload a file (multipart above 64 MiB); returns the stored object's ETag, which names
        these very bytes (a manifest keeps it, so a later copy can insist on them).
        `intermediate` tags frames and segments so the bucket's lifecycle rule can expire them
        once deliverables exist."""
        if path.stat().st_size < ONE_PUT_BYTES:
            with path.open("rb") as body:
                return self.put_open(key, body, intermediate=intermediate)
        extra = {"Tagging": INTERMEDIATE_TAG} if intermediate else {}
        with _wrapped(f"upload {key}"):
            self.s3.upload_file(str(path), self.bucket, key, Config=_TRANSFER, ExtraArgs=extra)
            etag: str = self.s3.head_object(Bucket=self.bucket, Key=key)["ETag"]
        return etag

    def put_open(
        self,
        key: str,
        body: BinaryIO,
        *,
        intermediate: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> str:
        """`put_file` of a file already open, from its start: what was checked of it (its type,
        its checksum; workers.host.box.open_boxed) is what is stored, whatever its name points to
        by now. `metadata`: stored with the object (a frame's sha256: its record, in the store)."""
        extra: dict[str, Any] = {"Tagging": INTERMEDIATE_TAG} if intermediate else {}
        if metadata:
            extra["Metadata"] = dict(metadata)
        body.seek(0)
        with _wrapped(f"upload {key}"):
            if os.fstat(body.fileno()).st_size < ONE_PUT_BYTES:
                # One PUT: s3transfer's thread and future machinery costs more than a frame's send.
                etag: str = self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)[
                    "ETag"
                ]
                return etag
            # The open file's own inode, streamed in parallel parts as upload_file does (a file
            # object would be buffered in memory, 10 parts at a time).
            inode = f"/proc/self/fd/{body.fileno()}"
            self.s3.upload_file(inode, self.bucket, key, Config=_TRANSFER, ExtraArgs=extra)
            etag = self.s3.head_object(Bucket=self.bucket, Key=key)["ETag"]
        return etag

    def put_file_once(self, key: str, path: Path) -> bool:
        """`put_file`, only where `key` holds no object yet (If-None-Match: *, which AWS S3 and
        SeaweedFS honour, on the PUT or on the parts' completion): True once written, False when
        an object was there already; that one stays."""
        with path.open("rb") as body, _wrapped(f"upload {key} once"):
            size = os.fstat(body.fileno()).st_size
            try:
                if size < ONE_PUT_BYTES:
                    self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")
                else:
                    self._put_parts_once(key, body.fileno(), size)
            except ClientError as exc:
                if _precondition_failed(exc):
                    return False
                raise
        return True

    def _put_parts_once(self, key: str, fd: int, size: int) -> None:
        """The parts of the open file `fd`, sent in parallel, completed only where `key` holds
        no object (s3transfer, which upload_file uses, passes no If-None-Match); an upload that
        does not complete is aborted."""
        step = _TRANSFER.multipart_chunksize
        upload_id = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]

        def part(number: int) -> dict[str, Any]:
            body = os.pread(fd, step, (number - 1) * step)
            answer = self.s3.upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
            )
            return {"PartNumber": number, "ETag": answer["ETag"]}

        try:
            with ThreadPoolExecutor(_TRANSFER.max_request_concurrency) as pool:
                parts = list(pool.map(part, range(1, -(-size // step) + 1)))
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": parts}, IfNoneMatch="*",
            )  # fmt: skip
        except BaseException:
            self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def copy(
        self,
        source: str,
        key: str,
        *,
        etag: str = "",
        intermediate: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> str:
        """Object `source` stored again as `key` by the store itself, its bytes never passing
        through this host (up to 5 GiB, one CopyObject); `intermediate` as for `put_file`, the
        source's own tags not carried over. `etag`: only if the source still has that one (else
        ObjectChanged). `metadata`: the copy's own, in place of the source's. Returns the copy's
        ETag."""
        extra: dict[str, Any] = {"CopySourceIfMatch": etag} if etag else {}
        if intermediate:
            extra["Tagging"] = INTERMEDIATE_TAG
        if metadata:
            extra |= {"MetadataDirective": "REPLACE", "Metadata": dict(metadata)}
        with _wrapped(f"copy {source} to {key}"):
            answer = self.s3.copy_object(
                Bucket=self.bucket, Key=key, CopySource={"Bucket": self.bucket, "Key": source},
                TaggingDirective="REPLACE", **extra,
            )  # fmt: skip
            copied: str = answer["CopyObjectResult"]["ETag"]
        return copied

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
        found = self.head(key)
        return None if found is None else found[0]

    def head(self, key: str) -> tuple[int, str] | None:
        """The object's size and ETag, or None when it is not there."""
        found = self.head_metadata(key)
        return None if found is None else (found[0], found[1])

    def head_metadata(self, key: str) -> tuple[int, str, dict[str, str]] | None:
        """The object's size, ETag and metadata (put_open's), or None when it is not there."""
        with _wrapped(f"look up {key}"):
            try:
                head = self.s3.head_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in NOT_FOUND:
                    return None
                raise
        return int(head["ContentLength"]), str(head.get("ETag", "")), dict(head.get("Metadata", {}))

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def keys(self, prefix: str) -> list[str]:
        return list(self.sizes(prefix))

    def sizes(self, prefix: str) -> dict[str, int]:
        """Every key under `prefix` with its size, listed."""
        found: dict[str, int] = {}
        with _wrapped(f"list {prefix}"):
            paginator = self.s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                found |= {obj["Key"]: int(obj["Size"]) for obj in page.get("Contents", [])}
        return found

    def folders(self, prefix: str) -> list[str]:
        """The names one level below `prefix` ("jobs/" -> the job ids), listed with a delimiter."""
        found: list[str] = []
        with _wrapped(f"list {prefix}"):
            paginator = self.s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                found.extend(
                    p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])
                )
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

    def get_range(
        self, key: str, start: int, length: int, *, etag: str = ""
    ) -> tuple[bytes, int, str]:
        """Up to `length` bytes of an object from byte `start`, the object's whole size and its
        ETag. `etag`: only if the object still has that one (else the store refuses, 412)."""
        match = {"IfMatch": etag} if etag else {}
        with _wrapped(f"read {key}"):
            answer = self.s3.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}", **match
            )
            body: bytes = answer["Body"].read()
        total = str(answer.get("ContentRange", "")).rpartition("/")[2]
        size = int(total) if total.isdigit() else start + len(body)
        return body, size, str(answer.get("ETag", ""))

    # Multipart upload, for an object the store assembles from parts (workers.phases.s3join). Whoever
    # creates one must complete or abort it: an open upload's parts are kept, and billed.

    def create_multipart(self, key: str) -> str:
        """A new multipart upload of `key`; returns its upload id."""
        with _wrapped(f"start an upload of {key}"):
            upload_id: str = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)[
                "UploadId"
            ]
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        """Part `number` (from 1) from bytes; returns its ETag."""
        with _wrapped(f"upload part {number} of {key}"):
            etag: str = self.s3.upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
            )["ETag"]
        return etag

    def upload_part_copy(
        self,
        key: str,
        upload_id: str,
        number: int,
        source: str,
        start: int,
        length: int,
        *,
        etag: str = "",
    ) -> str:
        """Part `number` copied by the store from `length` bytes of object `source` at `start`,
        never passing through this host; returns its ETag. `etag`: copy only if the source
        still has that one (it was not replaced since its index was read)."""
        match = {"CopySourceIfMatch": etag} if etag else {}
        with _wrapped(f"copy {source} into part {number} of {key}"):
            answer = self.s3.upload_part_copy(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                CopySource={"Bucket": self.bucket, "Key": source},
                CopySourceRange=f"bytes={start}-{start + length - 1}",
                **match,
            )
            part_etag: str = answer["CopyPartResult"]["ETag"]
        return part_etag

    def complete_multipart(
        self,
        key: str,
        upload_id: str,
        etags: list[str],
        numbers: Sequence[int] = (),
        *,
        only_new: bool = False,
    ) -> None:
        """Join the parts into the object: `etags` in order, numbered `numbers` (rising, gaps
        allowed), else from 1. `only_new`: only where `key` holds no object yet (else
        ObjectChanged, the upload left to abort)."""
        numbers = list(numbers) or list(range(1, len(etags) + 1))
        parts = [{"PartNumber": n, "ETag": etag} for n, etag in zip(numbers, etags, strict=True)]
        once = {"IfNoneMatch": "*"} if only_new else {}
        with _wrapped(f"finish the upload of {key}"):
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": parts}, **once,
            )  # fmt: skip

    def abort_multipart(self, key: str, upload_id: str) -> None:
        """Drop an upload and the parts it holds; one already gone is no error."""
        with _wrapped(f"abort the upload of {key}"):
            try:
                self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":
                    raise

    def multipart_uploads(self, prefix: str = "") -> list[tuple[str, str]]:
        """(key, upload id) of every upload begun and neither completed nor aborted."""
        found: list[tuple[str, str]] = []
        with _wrapped(f"list uploads under {prefix or 'the bucket'}"):
            paginator = self.s3.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                found += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
        return found

    def presign_put(self, key: str, size: int, expires_s: int = 3600) -> str:
        """A URL anyone holding it may PUT `key`'s bytes to, for `expires_s` (the API's staged
        uploads: the client never holds the store's keys): exactly `size` bytes, as the
        signature covers the Content-Length (the store refuses any other length, and a chunked
        body, with 403 SignatureDoesNotMatch), so a URL cannot fill the store."""
        params = {"Bucket": self.bucket, "Key": key, "ContentLength": size}
        with _wrapped(f"sign an upload URL for {key}"):
            url: str = self.s3.generate_presigned_url("put_object", Params=params,
                                                      ExpiresIn=expires_s)  # fmt: skip
        return url

    def sha256(self, key: str, *, block_bytes: int = 1 << 20) -> tuple[str, int, str]:
        """The object's sha256 (hex), size and ETag, read through once in blocks (never whole
        in memory): what an upload that claims a hash really holds."""
        digest = hashlib.sha256()
        size = 0
        with _wrapped(f"read {key}"):
            answer = self.s3.get_object(Bucket=self.bucket, Key=key)
            body = answer["Body"]
            try:
                for block in iter(lambda: body.read(block_bytes), b""):
                    digest.update(block)
                    size += len(block)
            finally:
                body.close()
        return digest.hexdigest(), size, str(answer.get("ETag", ""))

    def presign_get(self, key: str, expires_s: int = 900) -> str:
        with _wrapped(f"sign a URL for {key}"):
            url: str = self.s3.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
            )
        return url

"""A job's files sent through the API: presigned PUTs to a staging key, `uploads/<sha256>`, and each
staged object read back through sha256 before it becomes content-addressed (keys.scene_key,
keys.asset_key). A client holds no store key and cannot write a name its bytes do not hash to:
bytes that do not match their hash are deleted, and nothing else is touched.

The bucket's lifecycle rule expires `uploads/` after a day: an upload no job came for goes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from farm.adapters.store import Store
from farm.core import keys
from farm.core.errors import FarmError, ObjectChanged, ObjectMissing

log = logging.getLogger(__name__)

STAGING_PREFIX = "uploads/"
"""Where presigned PUTs land, by the hash the client claims; nothing reads them but `verify`."""
PUT_EXPIRES_S = 3600
"""How long a presigned PUT may be used: an hour, for a large scene on a slow line."""
ONE_PUT_MAX_BYTES = 5 << 30
"""S3's largest single PUT (and CopyObject): a larger file needs a multipart upload (later work)."""
LOOKUPS = 16
"""Store requests in flight while a job's files are looked up or verified."""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SUFFIX = re.compile(r"\.[a-z0-9]{1,16}")


class FileKind(StrEnum):
    SCENE = "scene"
    """The job's source: a .blend scene or a video master, at keys.scene_key(sha256, suffix)."""
    ASSET = "asset"
    """A file the scene uses, at keys.asset_key(sha256)."""


class UploadRefused(FarmError):
    """A file the client described that the farm will not take; `code` names why for the API."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True, kw_only=True)
class Wanted:
    """A file a client means to send, as it describes it: what it hashes to and how big it is."""

    sha256: str
    size: int
    kind: FileKind
    suffix: str = ""
    """The source's extension (`.blend`, `.mov`): scenes and masters keep it in their key."""
    name: str = ""
    """How the client knows the file (a scene's name, an asset's path): for messages only."""

    @property
    def key(self) -> str:
        """Where the file lives once verified."""
        if self.kind is FileKind.SCENE:
            return keys.scene_key(self.sha256, self.suffix)
        return keys.asset_key(self.sha256)

    @property
    def staged(self) -> str:
        return staging_key(self.sha256)

    @property
    def label(self) -> str:
        return f"{self.name} (sha256 {self.sha256[:12]}…)" if self.name else self.sha256


def staging_key(sha256: str) -> str:
    return f"{STAGING_PREFIX}{sha256}"


def wanted(
    sha256: object, size: object, kind: object, suffix: object = "", name: str = ""
) -> Wanted:
    """A file description from a client's JSON, checked; UploadRefused (bad_request) naming the
    field that is wrong, or (too_large) a file over ONE_PUT_MAX_BYTES."""
    what = name or "a file"
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise UploadRefused("bad_request", f"{what}: sha256 must be 64 lowercase hex digits")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise UploadRefused("bad_request", f"{what}: size must be a whole number of bytes")
    try:
        file_kind = FileKind(str(kind))
    except ValueError:
        raise UploadRefused("bad_request", f"{what}: kind must be scene or asset") from None
    if file_kind is FileKind.SCENE:
        if not isinstance(suffix, str) or not _SUFFIX.fullmatch(suffix):
            raise UploadRefused(
                "bad_request",
                f"{what}: suffix must be the file's lowercase extension with its dot (.blend)",
            )
    else:
        suffix = ""
    if size > ONE_PUT_MAX_BYTES:
        raise UploadRefused(
            "too_large",
            f"{what} is {size} bytes; one file may be at most {ONE_PUT_MAX_BYTES} bytes (5 GiB) "
            "through the API: split it, or submit from a farm host",
        )
    return Wanted(sha256=sha256, size=size, kind=file_kind, suffix=str(suffix), name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Offer:
    """What POST /uploads answers: the hashes the store holds at their size, and a presigned PUT
    for each of the others."""

    stored: list[str]
    uploads: list[dict[str, object]]


def offer(store: Store, files: Iterable[Wanted], expires_s: int = PUT_EXPIRES_S) -> Offer:
    """Look each file up by hash (HEADs, LOOKUPS at a time); sign a PUT to its staging key for
    each the store does not hold."""
    distinct = list({f.sha256: f for f in files}.values())
    with ThreadPoolExecutor(LOOKUPS, thread_name_prefix="upload-lookup") as pool:
        held = list(pool.map(lambda f: store.size(f.key) == f.size, distinct))
    stored = [f.sha256 for f, there in zip(distinct, held, strict=True) if there]
    uploads: list[dict[str, object]] = [
        {
            "sha256": f.sha256,
            "url": store.presign_put(f.staged, f.size, expires_s),
            "method": "PUT",
            "headers": {"Content-Length": str(f.size)},  # signed: no other length is taken
        }
        for f, there in zip(distinct, held, strict=True)
        if not there
    ]
    return Offer(stored=stored, uploads=uploads)


class Outcome(StrEnum):
    REUSED = "reused"
    """The store held the bytes already."""
    UPLOADED = "uploaded"
    """Staged by the client, verified and moved to its key now."""
    MISSING = "missing"
    """Neither stored nor staged: the client has yet to PUT it."""
    MISMATCH = "mismatch"
    """Staged bytes that do not hash to the name, or are another size: deleted."""


def verify(store: Store, file: Wanted) -> Outcome:
    """Where `file` stands, and, for a staged upload, its bytes read through sha256 and, if they
    match, copied by the store to the file's key (the ETag read is the one copied: bytes put
    again meanwhile are not) and the staged object deleted; if they do not, it is deleted and
    nothing else is written."""
    if store.size(file.key) == file.size:
        return Outcome.REUSED
    staged = store.size(file.staged)
    digest, size, etag = ("", staged, "") if staged != file.size else _read(store, file)
    if size is None:  # another request may have verified and moved the same bytes just now
        return Outcome.REUSED if store.size(file.key) == file.size else Outcome.MISSING
    if digest != file.sha256 or size != file.size:
        log.warning(
            "upload %s refused: %d bytes hashing to %s, where %d bytes were announced",
            file.staged, size, digest or "(not read: another size)", file.size,
        )  # fmt: skip
        store.delete(file.staged)
        return Outcome.MISMATCH
    try:
        store.copy(file.staged, file.key, etag=etag)
    except (ObjectChanged, ObjectMissing):  # put again or moved since it was read
        return Outcome.REUSED if store.size(file.key) == file.size else Outcome.MISSING
    store.delete(file.staged)
    return Outcome.UPLOADED


def _read(store: Store, file: Wanted) -> tuple[str, int | None, str]:
    """The staged object's sha256, size and ETag (size None: gone since it was found)."""
    try:
        return store.sha256(file.staged)
    except ObjectMissing:
        return "", None, ""


def verify_all(store: Store, files: Iterable[Wanted]) -> dict[str, Outcome]:
    """`verify` of each distinct hash, LOOKUPS at a time: sha256 -> outcome. Bytes wanted at two
    keys (a scene that is also another's asset) are verified once, then copied to the other."""
    by_hash: dict[str, list[Wanted]] = {}
    for file in files:
        same = by_hash.setdefault(file.sha256, [])
        if all(other.key != file.key for other in same):
            same.append(file)

    def one(same: list[Wanted]) -> Outcome:
        first, *others = same
        outcome = verify(store, first)
        if outcome in (Outcome.REUSED, Outcome.UPLOADED):
            for other in others:
                if store.size(other.key) != other.size:
                    store.copy(first.key, other.key)
        return outcome

    with ThreadPoolExecutor(LOOKUPS, thread_name_prefix="upload-verify") as pool:
        found = list(pool.map(one, by_hash.values()))
    return dict(zip(by_hash, found, strict=True))

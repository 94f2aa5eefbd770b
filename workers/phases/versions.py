"""The video a fix replaces, kept as a version (farm.core.fixes): the stitch that makes the new
video first moves the old one, the very object the fix named by its ETag, to its version's key."""

from __future__ import annotations

import logging

from farm.core import keys
from farm.core.errors import ObjectChanged
from farm.core.fixes import job_fixes
from workers.attempt.context import WorkerContext

log = logging.getLogger(__name__)


def keep_previous(
    ctx: WorkerContext, job_id: str, job: dict[str, str], container: str
) -> str | None:
    """The job's video, where it is one a fix replaced (by its ETag: the last fix's, or an
    earlier one's whose stitch never came, the job having failed since), copied to that fix's
    version key (unless a stitch before this one did) and removed, so the new video can be
    written where the old one was (a stitch never replaces an object). Any other object there
    is a stitch's own from after the fix, and is left alone. Returns the version's key where
    it moved the video there (`container` is the output's extension: a still's `png`)."""
    kept = {f.output_etag: f.version_key for f in job_fixes(job) if f.version_key and f.output_etag}
    if not kept:
        return None
    output = keys.output_key(job_id, container)
    found = ctx.store.head(output)
    if found is None or found[1] not in kept:
        return None
    etag, version_key = found[1], kept[found[1]]
    if ctx.store.head(version_key) is None:
        try:
            ctx.store.copy(output, version_key, etag=etag)
        except ObjectChanged:  # replaced since the HEAD: not the video the fix replaces
            return None
    ctx.store.delete(output)
    log.info("job %s: its video before the fix is kept as %s", job_id, version_key)
    return version_key

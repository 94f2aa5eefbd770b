"""The JSON Schemas of the API's bodies, by the names farm.web.api.routes gives them: the OpenAPI
document's components. They describe; the server's own checks (farm.web.api.validate) decide."""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


_SHA256: Schema = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_NULLABLE_NUMBER: Schema = {"type": ["number", "null"], "minimum": 0}
_PRESIGNED: Schema = {
    "type": "object",
    "required": ["name", "url", "size"],
    "properties": {
        "name": {"type": "string"},
        "url": {"type": "string", "format": "uri", "description": "A presigned GET, 10 min."},
        "size": {"type": "integer"},
    },
}

SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error", "code"],
        "properties": {
            "error": {"type": "string", "description": "What went wrong and what to do."},
            "code": {
                "type": "string",
                "description": "token_missing, token_unknown, token_expired, token_revoked, "
                "forbidden, too_large, client_too_old, bad_request, bad_json, bad_spec, "
                "upload_mismatch, upload_missing, unknown_job, unknown_user, name_in_use, "
                "conflict, no_route, method_not_allowed, unavailable",
            },
        },
    },
    "OpenAPI": {"type": "object", "description": "An OpenAPI 3.1 document."},
    "Version": {
        "type": "object",
        "required": ["api", "farm", "min_client"],
        "properties": {
            "api": {"type": "integer", "const": 1},
            "farm": {"type": "string", "examples": ["0.1.0"]},
            "min_client": {"type": "string", "description": "Older X-Farm-Client: 426."},
        },
    },
    "WhoAmI": {
        "type": "object",
        "required": ["name", "role"],
        "properties": {
            "name": {"type": "string"},
            "role": {"enum": ["artist", "wrangler", "admin"]},
            "expires": _NULLABLE_NUMBER,
        },
    },
    "File": {
        "type": "object",
        "required": ["sha256", "size", "kind"],
        "properties": {
            "sha256": _SHA256,
            "size": {"type": "integer", "minimum": 0, "maximum": 5 << 30},
            "kind": {"enum": ["scene", "asset"]},
            "suffix": {
                "type": "string",
                "pattern": r"^\.[a-z0-9]{1,16}$",
                "description": "A scene's or master's extension, e.g. .blend.",
            },
        },
    },
    "UploadRequest": {
        "type": "object",
        "required": ["files"],
        "properties": {"files": {"type": "array", "items": ref("File")}},
    },
    "UploadOffer": {
        "type": "object",
        "required": ["stored", "uploads"],
        "properties": {
            "stored": {
                "type": "array",
                "items": _SHA256,
                "description": "Hashes the store holds at that size: not to be sent.",
            },
            "uploads": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["sha256", "url", "method", "headers"],
                    "properties": {
                        "sha256": _SHA256,
                        "url": {"type": "string", "format": "uri"},
                        "method": {"const": "PUT"},
                        "headers": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                            "description": "Send these with the PUT: Content-Length, the "
                            "announced size, is signed (the store refuses any other length).",
                        },
                    },
                },
            },
        },
    },
    "JobSpec": {
        "type": "object",
        "description": "farm.core.spec.JobSpec.to_json(): what the CLI builds from the scene (or "
        "the master's probe) and its flags; checked again by the server.",
        "required": [
            "kind",
            "source_name",
            "frames",
            "chunk_size",
            "resolution",
            "fps",
            "samples",
            "codec",
        ],
        "properties": {
            "kind": {"enum": ["render", "transcode"]},
            "source_name": {"type": "string"},
            "frames": {
                "type": "object",
                "required": ["first", "last"],
                "properties": {
                    "first": {"type": "integer"},
                    "last": {"type": "integer"},
                    "step": {"type": "integer", "minimum": 1},
                },
            },
            "chunk_size": {"type": "integer", "minimum": 0, "description": "0: auto."},
            "resolution": {
                "type": "object",
                "required": ["width", "height"],
                "properties": {"width": {"type": "integer"}, "height": {"type": "integer"}},
            },
            "fps": {"type": "number"},
            "samples": {"type": "integer"},
            "codec": {"enum": ["h264", "hevc", "av1", "hevc10", "prores"]},
            "encoder": {"enum": ["auto", "nvenc", "software"]},
            "quality": {"type": ["integer", "null"]},
            "target_quality": {
                "type": "string",
                "description": "`--target-quality`: ssim=0.98, psnr=40 or vmaf=95 (as written "
                "back by the CLI); each chunk's CRF/CQ is the highest whose probes reach it. Not "
                "with `quality`, `ladder` or ProRes. '': none.",
            },
            "score": {
                "enum": ["ssim", "vmaf", "none"],
                "description": "`--score`: what each segment is scored with: ssim (SSIM and "
                "PSNR, the default), vmaf (VMAF too; a vmaf= target scores it either way; not "
                "with `ladder`) or none (no scoring pass; not with `target_quality`).",
            },
            "preset": {"type": "string"},
            "master": {"type": ["object", "null"]},
            "scene": {"type": ["object", "null"]},
            "engine": {"type": ["string", "null"]},
            "camera": {"type": ["string", "null"]},
            "overrides": {"type": "array", "items": {"type": "string"}},
            "view_layer": {
                "type": ["string", "null"],
                "description": "`farm submit --each view-layer`: render this view layer alone "
                "(one the scene renders).",
            },
            "group": {
                "type": ["object", "null"],
                "required": ["id", "each", "member", "label"],
                "description": "`farm submit --each`: the siblings this job is one of. `id` "
                "(g-YYYYMMDD-HHMMSS-xxxxxx) shared by them, `each` (view-layer or camera), "
                "`member` (the layer or camera it renders: `view_layer`, or `camera` named in "
                "`overrides`), `label` (its video's name on fetch).",
                "properties": {
                    "id": {"type": "string"},
                    "each": {"enum": ["view-layer", "camera"]},
                    "member": {"type": "string"},
                    "label": {"type": "string"},
                },
            },
            "trusted_scripts": {"type": "boolean"},
            "check_frames": {
                "type": "boolean",
                "description": "Flag frames that come out black or one flat colour (`--check-frames`).",
            },
            "after": {
                "type": "array",
                "maxItems": 100,
                "items": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"},
                "description": "The jobs this one waits for (`farm submit --after`): it is "
                "`waiting`, nothing sent or charged, until they are done; any job the caller can "
                "see (every role sees every job). Each must exist (400 otherwise).",
            },
            "after_any": {
                "type": "boolean",
                "description": "Run once every parent has ended, however it ended "
                "(`--after-any`); false: a parent that fails or is cancelled cancels this job.",
            },
            "preview": {
                "type": "integer",
                "minimum": 0,
                "maximum": 100,
                "description": "`farm submit --preview N`: N frames spread over the range (the "
                "first, the last, evenly between) render first, each a chunk, at the farm's top "
                "priority; 0: no preview. Render jobs only.",
            },
            "tiles": {
                "type": "integer",
                "minimum": 0,
                "maximum": 64,
                "description": "`farm submit --tiles N`: one still rendered as N tiles (2..64), "
                "`frames` then the tile slots 0..N-1 with `chunk_size` 1, merged into one image "
                "in the scene's format; 0: not tiled. Render jobs only.",
            },
            "tile_frame": {
                "type": "integer",
                "minimum": 0,
                "description": "With `tiles`: the still's frame as Blender numbers it "
                "(`--frames 9`).",
            },
            "hold": {
                "type": "boolean",
                "description": "`--hold`: the job stops `held` once its preview frames are done "
                "(the rest is not planned, sent or charged); `POST /jobs/{id}/resume` renders the "
                "rest, cancel drops it. Needs a preview.",
            },
            "ladder": {
                "type": "array",
                "maxItems": 8,
                "items": {
                    "type": "object",
                    "required": ["width", "height", "bitrate_kbps"],
                    "properties": {
                        "width": {"type": "integer", "minimum": 16, "maximum": 7680},
                        "height": {"type": "integer", "minimum": 16, "maximum": 4320},
                        "bitrate_kbps": {"type": "integer", "minimum": 50, "maximum": 200000},
                    },
                },
                "description": "`farm submit --ladder`: encode jobs (h264, hevc) make these "
                "renditions, largest first (the first is `resolution`), none above the master; "
                "each segment is decoded once for all of them. Empty: one output.",
            },
            "package": {
                "enum": ["", "hls", "dash", "both"],
                "description": "`--package`: the ladder packaged as CMAF for HLS, DASH or both, "
                "under the job's outputs (`output.package/`); needs a ladder.",
            },
            "container": {
                "enum": ["", "mp4", "mov", "mkv"],
                "description": "`--container`: encode jobs' deliverable; '' or the codec's own "
                "(MP4, MOV for prores), or mkv (`output.mkv`; not with a ladder).",
            },
        },
    },
    "Manifest": {
        "type": "object",
        "description": "The files the scene uses (farm.blender.assets.Manifest.to_json()).",
        "required": ["scene", "assets"],
        "properties": {
            "version": {"const": 1},
            "scene": {"type": "string"},
            "assets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["path", "sha256", "size_bytes"],
                    "properties": {
                        "path": {"type": "string"},
                        "sha256": _SHA256,
                        "size_bytes": {"type": "integer", "minimum": 0},
                    },
                },
            },
            "remap": {"type": "object", "additionalProperties": {"type": "string"}},
            "missing": {"type": "array", "items": {"type": "string"}},
            "unremapped": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Submission": {
        "type": "object",
        "required": ["spec", "source"],
        "properties": {
            "spec": ref("JobSpec"),
            "source": {
                "type": "object",
                "required": ["sha256", "size", "suffix"],
                "properties": {
                    "sha256": _SHA256,
                    "size": {"type": "integer"},
                    "suffix": {"type": "string"},
                },
            },
            "assets": {"oneOf": [ref("Manifest"), {"type": "null"}]},
            "priority": {"type": "integer", "minimum": 0, "maximum": 100, "default": 50},
            "max_cost": _NULLABLE_NUMBER,
            "notify": {"type": ["string", "null"], "format": "uri"},
            "project": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
        },
    },
    "Submitted": {
        "type": "object",
        "required": [
            "id",
            "state",
            "chunks_total",
            "frames_total",
            "source_key",
            "owner",
            "assets",
        ],
        "properties": {
            "id": {"type": "string"},
            "state": {"enum": ["queued", "waiting"]},
            "chunks_total": {"type": "integer"},
            "frames_total": {"type": "integer"},
            "source_key": {"type": "string"},
            "owner": {"type": "string"},
            "project": {"type": ["string", "null"]},
            "settings": {"type": "object"},
            "assets": {
                "type": "object",
                "properties": {
                    name: {"type": "integer"}
                    for name in ("files", "uploaded", "reused", "bytes_uploaded")
                }
                | {"missing": {"type": "array", "items": {"type": "string"}}},
            },
        },
    },
    "Estimate": {
        "type": "object",
        "description": "What `farm submit --estimate --json` prints.",
        "properties": {
            "frames": {"type": "integer"},
            "chunks": {"type": "integer"},
            "chunk_size": {"type": "integer"},
            "gpu_hours_spot": {"type": "number"},
            "gpu_hours_on_demand": {"type": "number"},
            "time_s": {"type": "number"},
            "cost_spot": {"type": "number"},
            "cost_on_demand": {"type": "number"},
            "probe_job": {"type": "string"},
        },
    },
    "JobSummary": {
        "type": "object",
        "description": "farm.core.report.job_summary with priority, pause reason and cost.",
        "required": ["id", "kind", "state", "owner", "project", "chunks_total", "frames_total"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"enum": ["render", "transcode"]},
            "state": {"type": "string"},
            "owner": {"type": "string"},
            "project": {"type": "string"},
            "chunks_total": {"type": "integer"},
            "chunks_done": {"type": "integer"},
            "frames_total": {"type": "integer"},
            "frames_rendered": {"type": "integer"},
            "priority": {"type": "integer"},
            "cost": {"type": "object"},
            "spec": {"type": "object"},
        },
    },
    "JobStatus": {
        "allOf": [ref("JobSummary")],
        "description": "The summary with its chunks and settings: `farm status --json`.",
        "properties": {
            "chunks": {"type": "array", "items": {"type": "object"}},
            "settings": {"type": "object"},
            "after": {
                "type": "array",
                "description": "The parents the job waits (or waited) for: {id, state}.",
                "items": {"type": "object"},
            },
            "after_mode": {"enum": ["", "done", "any"]},
            "released": {"type": "boolean"},
            "children": {
                "type": "array",
                "description": "The jobs that wait (or waited) for this one: {id, state}.",
                "items": {"type": "object"},
            },
            "siblings": {
                "type": "array",
                "description": "The other jobs of its `farm submit --each` group (`spec.group`): "
                "{id, state, member}.",
                "items": {"type": "object"},
            },
            "preview": {
                "type": ["object", "null"],
                "description": "`--preview`: {frames, frames_done, chunks, hold, held, released, "
                "rest_estimate} (the rest's frames, chunks, chunk_size, time_s, gpu_s and cost "
                "from the preview's own timings, once held); null without a preview.",
            },
            "fixes": {
                "type": "array",
                "description": "Each `farm retry --frames` of the job, oldest first: {frames, "
                "reason, by, at, chunks, version, version_key} (version: the video it replaced, "
                "`output?version=N`; null where the job had none).",
                "items": {"type": "object"},
            },
            "flagged": {
                "type": "object",
                "description": "`--check-frames`: frame number -> why it looks broken (black, "
                "one flat colour).",
                "additionalProperties": {"type": "string"},
            },
        },
    },
    "JobList": {
        "type": "object",
        "required": ["jobs"],
        "properties": {"jobs": {"type": "array", "items": ref("JobSummary")}},
    },
    "Events": {
        "type": "string",
        "description": "text/event-stream: `event: status` / `event: end`, each `data:` a "
        "JobStatus as JSON on one line; `: keepalive` comments.",
    },
    "Resume": {"type": "object", "properties": {"max_cost": _NULLABLE_NUMBER}},
    "Retry": {
        "type": "object",
        "properties": {
            "every_unfinished": {"type": "boolean", "default": False},
            "frames": {
                "type": "string",
                "description": "Fix these frames of a done or failed render job (12-14,40): "
                "only they are rendered again, only the segments holding them encoded again, "
                "and the video they replace is kept as a version.",
            },
            "reason": {"type": "string", "description": "Why the frames are fixed (with frames)."},
        },
        "description": "A fixed scene (the CLI's --scene) is not taken through the API.",
    },
    "Priority": {
        "type": "object",
        "required": ["priority"],
        "properties": {"priority": {"type": "integer", "minimum": 0, "maximum": 100}},
    },
    "Output": {
        "type": "object",
        "required": ["video", "frames"],
        "properties": {
            "video": {"oneOf": [_PRESIGNED, {"type": "null"}]},
            "frames": {
                "type": "array",
                "items": {
                    "allOf": [_PRESIGNED],
                    "properties": {"frame": {"type": ["integer", "null"]}},
                    "description": "name: the file's path in the frames folder.",
                },
            },
            "note": {
                "type": ["string", "null"],
                "description": "Why the frames keep the farm's names (frame_000019.exr), not "
                "the scene's Output path's; null where they follow the scene.",
            },
            "passes": {
                "oneOf": [_PRESIGNED, {"type": "null"}],
                "description": "A tiled still's render passes merged into one multilayer EXR, "
                "beside its image (the version's with `version=N`); null for any other job.",
            },
            "package": {
                "type": ["array", "null"],
                "description": "A done `--ladder --package` job's HLS/DASH package: each file its "
                "index (package.json) lists, with its sha256; null without one.",
                "items": {
                    "allOf": [_PRESIGNED],
                    "properties": {"sha256": {"type": "string"}},
                    "description": "name: the file's name in the package folder.",
                },
            },
        },
    },
    "Logs": {
        "type": "object",
        "required": ["logs"],
        "properties": {
            "logs": {
                "type": "array",
                "items": {"allOf": [_PRESIGNED], "properties": {"chunk": {"type": "integer"}}},
            }
        },
    },
    "User": {
        "type": "object",
        "required": ["name", "role", "created", "expires", "revoked"],
        "properties": {
            "name": {"type": "string"},
            "role": {"enum": ["artist", "wrangler", "admin"]},
            "created": {"type": "number"},
            "expires": _NULLABLE_NUMBER,
            "revoked": _NULLABLE_NUMBER,
        },
    },
    "UserList": {
        "type": "object",
        "required": ["users"],
        "properties": {"users": {"type": "array", "items": ref("User")}},
    },
    "NewUser": {
        "type": "object",
        "required": ["name", "role"],
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
            "role": {"enum": ["artist", "wrangler", "admin"]},
            "expires_days": _NULLABLE_NUMBER,
        },
    },
    "AddedUser": {
        "type": "object",
        "required": ["name", "role", "token"],
        "properties": {
            "name": {"type": "string"},
            "role": {"type": "string"},
            "token": {"type": "string", "description": "Shown this once; only its hash is kept."},
        },
    },
}

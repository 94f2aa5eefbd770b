"""GET /openapi.json: the API described from the table it is served from (farm.web.api.routes):
every route with its parameters, body, answers, errors and the bearer security scheme."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from farm.web.api.routes import ROUTES, Route
from farm.web.api.schemas import SCHEMAS, ref

_ERRORS = {
    400: "The request or a value in it is wrong; `error` names it.",
    401: "No token, or one the farm refuses (unknown, expired, revoked).",
    403: "The token's role may not do this (here, or on another user's job).",
    404: "No such job (or user).",
    409: "The job is not in a state this applies to, or files are still to be uploaded.",
    413: "The body (or a file) is over its limit; `error` names the limit.",
    426: "The client (X-Farm-Client) is older than the API serves; `error` says what to install.",
    503: "The farm's ledger or store does not answer; try again.",
}


def _errors(route: Route) -> list[int]:
    codes = [400, 426, 503]
    if route.action is not None:
        codes += [401, 403]
    if route.on_job or route.name == "revoke_user":
        codes.append(404)
    if route.on_job or route.name in ("submit", "add_user"):
        codes.append(409)
    if route.body is not None:
        codes.append(413)
    return sorted(codes)


def _operation(route: Route) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ("id", "name")
        if "{" + name + "}" in route.path
    ]
    parameters += [
        {
            "name": p.name,
            "in": "query",
            "required": False,
            "schema": p.schema,
            "description": p.description,
        }
        for p in route.query
    ]
    parameters.append({
        "name": "X-Farm-Client", "in": "header", "required": False,
        "schema": {"type": "string", "examples": ["0.1.0"]},
        "description": "The client's farm version; one older than min_client is answered 426.",
    })  # fmt: skip
    success = {
        "description": HTTPStatus(route.status).phrase,
        "content": {route.content_type: {"schema": ref(route.answer)}},
    }
    operation: dict[str, Any] = {
        "operationId": route.name,
        "summary": route.summary,
        "tags": list(route.tags),
        "parameters": parameters,
        "responses": {
            str(route.status): success,
            **{
                str(code): {
                    "description": _ERRORS[code],
                    "content": {"application/json": {"schema": ref("Error")}},
                }
                for code in _errors(route)
            },
        },
        "security": [{"bearer": []}] if route.action is not None else [],
    }
    if route.action is not None:
        operation["x-farm-action"] = str(route.action)
    if route.body is not None:
        operation["requestBody"] = {
            "required": route.name not in ("resume", "retry"),
            "content": {"application/json": {"schema": ref(route.body)}},
            "description": f"At most {route.body_max_bytes} bytes.",
        }
    return operation


def document(farm_version: str, server_url: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document; `server_url`: where this server answers, when known."""
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "farm",
            "version": farm_version,
            "description": "The render farm's front door, version 1: submit, follow and steer "
            "jobs, fetch their files by presigned URL, manage users. Every route but the "
            "version and this document takes `Authorization: Bearer <token>` (`farm user "
            "add` makes one).",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "A farm_ token."}
            },
        },
        "security": [{"bearer": []}],
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc

"""The farm's HTTP API, version 1: a versioned JSON API with per-user tokens and roles, served by
`farm web` under /api/v1 with its OpenAPI document at /openapi.json. The routes are one table
(routes), served by FarmAPI (app) and described from the same table (openapi)."""

from farm.web.api.app import FarmAPI

__all__ = ["FarmAPI"]

"""Flower for this farm (`farm flower`), run in this process with every route behind its basic
auth: Flower asks for credentials on its pages and API but serves /metrics, /healthcheck and its
static files to anyone, and its route table, read when its app is made, is the one place to say
otherwise (it has no setting for it)."""

from __future__ import annotations

from typing import Any

import flower.urls  # type: ignore[import-untyped]  # Flower ships no types
from flower.views import BaseHandler  # type: ignore[import-untyped]
from tornado import web
from tornado.routing import URLSpec


class _Lock:
    """Marks a route's handler as locked (lock_routes leaves it as it is)."""


def _locked(handler: type[web.RequestHandler]) -> type[web.RequestHandler]:
    """`handler`, answering 401 before it runs unless the request carries Flower's credentials."""

    class Locked(_Lock, handler):  # type: ignore[valid-type,misc]
        def prepare(self) -> Any:
            # Flower's own check (basic auth: it raises 401 for wrong or missing credentials),
            # for its static files' handler too, which has none.
            if not BaseHandler.get_current_user(self):
                raise web.HTTPError(401)
            return super().prepare()

        def write_error(self, status_code: int, **kwargs: Any) -> None:
            if status_code == 401:
                self.set_header("WWW-Authenticate", 'Basic realm="flower"')
                self.finish("Access denied")
                return
            super().write_error(status_code, **kwargs)

    Locked.__name__ = Locked.__qualname__ = f"Locked{handler.__name__}"
    return Locked


def lock_routes() -> None:
    """Put each of Flower's routes behind its credentials, its static files' too (tornado adds
    that route itself); call before Flower makes its app."""
    settings: dict[str, Any] = flower.urls.settings
    if not issubclass(settings.get("static_handler_class", web.StaticFileHandler), _Lock):
        settings["static_handler_class"] = _locked(web.StaticFileHandler)
    routes: list[Any] = flower.urls.handlers
    for i, route in enumerate(routes):
        spec = route if isinstance(route, URLSpec) else web.url(*route)
        if not issubclass(spec.handler_class, _Lock):
            routes[i] = web.url(
                spec.regex.pattern, _locked(spec.handler_class), spec.kwargs, spec.name
            )

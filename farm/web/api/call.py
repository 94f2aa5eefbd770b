"""What a handler is given: the farm it works on, and the request as the API read it (the user
its token names, the route's path parameters, its query and its JSON body)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from farm.adapters.settings import Settings
from farm.adapters.store import Store
from farm.control.users import User, Users
from farm.ledger import Ledger
from farm.web.api.answers import Answer, bad_request
from farm.web.api.routes import Route


@dataclass(frozen=True, slots=True, kw_only=True)
class Farm:
    """The parts of the farm the API works on, made once for the web process."""

    settings: Settings
    ledger: Ledger
    store: Store
    users: Users


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    route: Route
    user: User | None
    """None only on the routes answered without a token."""
    params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    job: dict[str, str] = field(default_factory=dict)
    """The job's record, for a route on a job (it exists: the API answered 404 otherwise)."""
    server_url: str = ""

    @property
    def job_id(self) -> str:
        return self.params["id"]

    @property
    def who(self) -> str:
        return self.user.name if self.user else ""

    def int_query(self, name: str, default: int, low: int, high: int) -> int:
        """A whole-number query parameter within [low, high]; 400 naming it otherwise."""
        text = self.query.get(name, "")
        if not text:
            return default
        if not text.isdigit() or not low <= int(text) <= high:
            raise bad_request(f"{name} must be a whole number from {low} to {high}")
        return int(text)

    def only(self, *names: str) -> None:
        """400 for a body field the route does not take."""
        extra = sorted(set(self.body) - set(names))
        if extra:
            raise bad_request(f"this request takes no {', '.join(extra)}")


Handler = Callable[[Farm, Call], Answer]

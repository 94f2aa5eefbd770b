"""Fixtures for the static deployment checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .tfdoc import parse_all


@pytest.fixture(scope="session")
def tf() -> dict[Path, dict[str, Any]]:
    """Every .tf file under infra/terraform, parsed, keyed by path relative to it."""
    return parse_all()

"""A local farm for the benchmark tests, started as `python -m bench` starts it: one one-thread
worker per core, benchmark-only tasks registered (the workers' Celery include,
settings.worker_include = bench.tasks)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import LocalFarm, start_farm
from tests.conftest import require_tools


@pytest.fixture(scope="module")
def bench_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    require_tools()
    farm = start_farm(
        workers=os.cpu_count() or 1, threads=1, base=Path(tmp_path_factory.mktemp("bench"))
    )
    try:
        yield farm
    finally:
        farm.close()

"""CPU lists as taskset writes them, and the shares `farm up` gives its workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.adapters import cpus
from farm.core.errors import ConfigError


def test_a_cpu_list_reads_and_writes_as_taskset_does() -> None:
    assert cpus.parse("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert cpus.parse(" 5 , 1-2 ") == (1, 2, 5)
    assert cpus.format_list((11, 0, 1, 2, 3, 8, 10)) == "0-3,8,10-11"
    assert cpus.format_list(cpus.parse("7")) == "7"


@pytest.mark.parametrize("text", ["", "a", "3-1", "-2", "1,,2", "0-x"])
def test_a_bad_cpu_list_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ConfigError, match="CPU"):
        cpus.parse(text)


def _sysfs(tmp_path: Path, cores: dict[int, tuple[int, str]]) -> Path:
    """A fake /sys/devices/system/cpu: cpu -> (socket, its core's sibling list)."""
    for cpu, (package, siblings) in cores.items():
        top = tmp_path / f"cpu{cpu}" / "topology"
        top.mkdir(parents=True)
        (top / "physical_package_id").write_text(f"{package}\n")
        (top / "thread_siblings_list").write_text(f"{siblings}\n")
    return tmp_path


def test_shares_are_disjoint_even_and_cover_every_cpu() -> None:
    shares = cpus.split(tuple(range(10)), 3, sysfs=Path("/nonexistent"))
    assert shares == [(0, 1, 2, 3), (4, 5, 6), (7, 8, 9)]
    assert cpus.split((4, 9), 2, sysfs=Path("/nonexistent")) == [(4,), (9,)]


def test_hyperthread_siblings_stay_in_one_share(tmp_path: Path) -> None:
    # Linux numbers one thread of every core first: 0-3, then their siblings 4-7.
    sysfs = _sysfs(tmp_path, {c: (0, f"{c % 4},{c % 4 + 4}") for c in range(8)})
    assert cpus.split(tuple(range(8)), 2, sysfs=sysfs) == [(0, 1, 4, 5), (2, 3, 6, 7)]


def test_one_sockets_cores_go_together(tmp_path: Path) -> None:
    # Two sockets whose CPUs are numbered alternately.
    sysfs = _sysfs(tmp_path, {c: (c % 2, str(c)) for c in range(8)})
    assert cpus.split(tuple(range(8)), 2, sysfs=sysfs) == [(0, 2, 4, 6), (1, 3, 5, 7)]


def test_more_workers_than_cpus_is_refused() -> None:
    with pytest.raises(ValueError, match="3 workers"):
        cpus.split((0, 1), 3)


def test_pinning_to_a_cpu_this_process_may_not_use_is_a_clear_error() -> None:
    beyond = max(cpus.available()) + 1
    with pytest.raises(ConfigError, match=f"CPUs {beyond} are not available"):
        cpus.pin((beyond,))

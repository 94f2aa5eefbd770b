"""Which addresses webhooks may reach (pure: no lookup, no connection)."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from farm.control.webhooks import allowed_ranges, refusal
from farm.core.errors import ConfigError


@pytest.mark.parametrize(
    ("address", "why"),
    [("127.0.0.1", "loopback"), ("::1", "loopback"), ("0.0.0.0", "unspecified"),
     ("169.254.169.254", "a cloud metadata address"), ("fd00:ec2::254", "a cloud metadata address"),
     ("100.100.100.200", "a cloud metadata address"), ("192.0.0.192", "a cloud metadata address"),
     ("169.254.1.1", "link-local"), ("fe80::1", "link-local"), ("224.0.0.1", "multicast"),
     ("ff02::1", "multicast"), ("100.64.0.1", "carrier-grade NAT"), ("10.1.2.3", "private"),
     ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("fc00::1", "private"),
     ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::a9fe:a9fe", "a cloud metadata address"),
     ("2002:0a00:0001::", "private"), ("198.18.0.1", "private"), ("240.0.0.1", "private")],
)  # fmt: skip
def test_an_inside_address_is_refused_saying_what_it_is(address: str, why: str) -> None:
    assert refusal(ip_address(address)) == why


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_a_public_address_is_taken(address: str) -> None:
    assert refusal(ip_address(address)) is None


def test_allowed_ranges_read_cidrs_and_refuse_anything_else() -> None:
    assert [str(r) for r in allowed_ranges(" 10.0.5.0/24, 127.0.0.1 ,,")] == [
        "10.0.5.0/24", "127.0.0.1/32"
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="FARM_WEBHOOK_ALLOW: 'intranet' is not an address range"):
        allowed_ranges("10.0.0.0/8,intranet")

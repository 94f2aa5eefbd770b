"""A worker prices its attempts from instance metadata (IMDSv2 on a loopback stand-in), or as the
chosen local instance type when no metadata service answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from farm.adapters.settings import Settings
from farm.core import cost
from workers.__main__ import meter_fields
from workers.host.spot import read_identity

TOKEN = "t0ken"
METADATA = {
    "/latest/meta-data/instance-type": "g6.xlarge",
    "/latest/meta-data/instance-life-cycle": "spot",
    "/latest/meta-data/placement/region": "us-west-2",
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *_: object) -> None:
        pass

    def _reply(self, code: int, body: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_PUT(self) -> None:
        self._reply(200, TOKEN)

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._reply(401)
        elif self.path in METADATA:
            self._reply(200, METADATA[self.path])
        else:
            self._reply(404)


@pytest.fixture
def imds() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_identity_comes_from_imdsv2(imds: str) -> None:
    assert read_identity(imds) == {
        "instance_type": "g6.xlarge",
        "lifecycle": "spot",
        "region": "us-west-2",
    }


def test_a_spot_worker_records_its_spot_price(imds: str) -> None:
    fields = meter_fields(Settings(imds_url=imds))
    spot_h = cost.load_prices().price("us-west-2", "g6.xlarge").spot_h
    assert fields["instance_type"] == "g6.xlarge" and fields["lifecycle"] == "spot"
    assert float(fields["price_per_s"]) == pytest.approx(spot_h / 3600)


def test_off_ec2_a_worker_is_priced_as_the_local_instance_type_on_demand() -> None:
    fields = meter_fields(Settings(imds_url="", local_instance_type="g4dn.xlarge"))
    on_demand_h = cost.load_prices().price("us-east-1", "g4dn.xlarge").on_demand_h
    assert fields["lifecycle"] == "local"
    assert float(fields["price_per_s"]) == pytest.approx(on_demand_h / 3600)

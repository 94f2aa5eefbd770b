"""A stand-in for EC2's instance metadata service (IMDSv2) on loopback, driven by the test."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "test-imds-token"


class FakeIMDS:
    def __init__(self) -> None:
        self.instance_action: dict[str, str] | None = None
        self.rebalance: dict[str, str] | None = None
        self.tokenless_requests = 0
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def _reply(self, code: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                if self.path == "/latest/api/token" and self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    self._reply(200, TOKEN)
                else:
                    self._reply(400)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                    imds.tokenless_requests += 1
                    self._reply(401)
                    return
                body = {
                    "/latest/meta-data/spot/instance-action": imds.instance_action,
                    "/latest/meta-data/events/recommendations/rebalance": imds.rebalance,
                }.get(self.path)
                self._reply(200, json.dumps(body)) if body else self._reply(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def interrupt_in(self, seconds: float) -> None:
        self.instance_action = {"action": "terminate", "time": self._iso(time.time() + seconds)}

    def recommend_rebalance(self) -> None:
        self.rebalance = {"noticeTime": self._iso(time.time())}

    def close(self) -> None:
        self.server.shutdown()

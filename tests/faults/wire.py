"""HTTP/1.1 as the fault proxy reads it off a socket: a message's head up to its blank line, and
its body by its framing (Content-Length, chunked, or up to the close), kept as the raw bytes sent.
"""

from __future__ import annotations

import socket
import struct
from contextlib import suppress
from dataclasses import dataclass
from http import HTTPStatus

HEAD_LIMIT = 64 * 1024
"""The most a head may take: S3's requests and answers keep theirs to a few KiB."""
LINGER_0 = struct.pack("ii", 1, 0)
"""SO_LINGER on with 0 s: close() then sends an RST and drops what is unsent."""


class WireError(Exception):
    """The peer sent something that is not HTTP/1.1, or stopped in the middle of a message."""


class Wire:
    """A socket read in HTTP's units, with what was read past the last one kept for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self._buf += data
        return bool(data)

    def head(self) -> bytes | None:
        """The next message's head, blank line included; None when the peer closed between
        messages."""
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > HEAD_LIMIT:
                raise WireError(f"a head longer than {HEAD_LIMIT} bytes")
            if not self._fill():
                if self._buf:
                    raise WireError("the peer closed in the middle of a head")
                return None
        return self._take(end + 4)

    def exact(self, size: int) -> bytes:
        while len(self._buf) < size:
            if not self._fill():
                raise WireError(f"the peer closed {size - len(self._buf)} bytes short")
        return self._take(size)

    def line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > HEAD_LIMIT or not self._fill():
                raise WireError("no end of line")
        return self._take(end + 2)

    def rest(self) -> bytes:
        """Everything up to the peer's close."""
        while self._fill():
            pass
        return self._take(len(self._buf))

    def _take(self, size: int) -> bytes:
        out = bytes(self._buf[:size])
        del self._buf[:size]
        return out

    def chunked(self) -> bytes:
        """A chunked body as sent: each chunk's size line and data, the last chunk, trailers."""
        out = bytearray()
        while True:
            line = self.line()
            out += line
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise WireError(f"a chunk size of {line[:40]!r}") from None
            if size == 0:
                break
            out += self.exact(size + 2)
        while (trailer := self.line()) != b"\r\n":
            out += trailer
        return bytes(out + b"\r\n")


@dataclass(frozen=True, slots=True)
class Head:
    """A request's or a response's first line and headers, in the order sent."""

    start: str
    headers: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, raw: bytes) -> Head:
        lines = raw.decode("latin-1").split("\r\n")
        headers = []
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise WireError(f"a header line without a colon: {line[:80]!r}")
            headers.append((name.strip(), value.strip()))
        return cls(lines[0], tuple(headers))

    def get(self, name: str) -> str:
        found = [v for k, v in self.headers if k.lower() == name.lower()]
        return found[-1] if found else ""

    def without(self, name: str) -> Head:
        return Head(self.start, tuple((k, v) for k, v in self.headers if k.lower() != name.lower()))

    def encode(self) -> bytes:
        lines = [self.start, *(f"{k}: {v}" for k, v in self.headers), "", ""]
        return "\r\n".join(lines).encode("latin-1")

    @property
    def method(self) -> str:
        return self.start.split(" ", 1)[0].upper()

    @property
    def path(self) -> str:
        """A request's path, without its query."""
        parts = self.start.split(" ")
        return parts[1].split("?", 1)[0] if len(parts) > 1 else ""

    @property
    def status(self) -> int:
        """A response's status code."""
        parts = self.start.split(" ")
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0

    @property
    def closes(self) -> bool:
        return "close" in self.get("connection").lower()


def request_body(wire: Wire, head: Head) -> bytes:
    if "chunked" in head.get("transfer-encoding").lower():
        return wire.chunked()
    return wire.exact(int(head.get("content-length") or 0))


def response_body(wire: Wire, head: Head, method: str) -> tuple[bytes, bool]:
    """A response's body as sent, and whether it ran to the connection's close (no framing)."""
    if method == "HEAD" or head.status in (204, 304) or 100 <= head.status < 200:
        return b"", False
    if "chunked" in head.get("transfer-encoding").lower():
        return wire.chunked(), False
    if head.get("content-length"):
        return wire.exact(int(head.get("content-length"))), False
    return wire.rest(), True


def s3_error(
    status: int, code: str, message: str, request_id: str, *, head_only: bool, close: bool
) -> bytes:
    """An S3 error answer as AWS sends one: an XML body naming the code (none for a HEAD)."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    head = Head(
        f"HTTP/1.1 {status} {reason}",
        (
            ("Content-Type", "application/xml"),
            ("Content-Length", "0" if head_only else str(len(body))),
            ("x-amz-request-id", request_id),
            ("Connection", "close" if close else "keep-alive"),
        ),
    )
    return head.encode() + (b"" if head_only else body)


def reset(sock: socket.socket) -> None:
    """Close with an RST, not a FIN (SO_LINGER 0): the peer's next read fails with ECONNRESET."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
    sock.close()

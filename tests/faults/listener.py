"""The fault proxies' footing: a listener on a free loopback port that serves each connection on
a thread of its own, keeps every open socket so closing it ends them all, and counts faults."""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Self

from tests.faults.wire import WireError

HOST = "127.0.0.1"


class Listener:
    """A listener on a free loopback port; each connection served on a thread of its own."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._injected: Counter[str] = Counter()
        self._open: set[socket.socket] = set()
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((HOST, 0))
        self._sock.listen(128)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=f"proxy:{self.port}", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        with self._lock:
            live = list(self._open)
        for sock in live:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if self._thread.is_alive():
            self._thread.join(5)

    def injected(self) -> dict[str, int]:
        """How many of each fault this proxy injected so far, by kind."""
        with self._lock:
            return dict(self._injected)

    def forget(self) -> None:
        """Count from nothing again."""
        with self._lock:
            self._injected.clear()

    def _count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._injected[kind] += n

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        # A peer gone, or one not speaking HTTP, ends its connection only.
        with self._tracked(client), suppress(OSError, WireError):
            self._serve(client)

    @contextmanager
    def _tracked(self, sock: socket.socket) -> Iterator[socket.socket]:
        with self._lock:
            self._open.add(sock)
        try:
            yield sock
        finally:
            with self._lock:
                self._open.discard(sock)
            sock.close()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.target, timeout=10)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError

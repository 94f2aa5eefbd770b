"""The fault proxy before a plain TCP server (Redis): bytes relayed both ways as they come, but
for the faults it is told to inject: every connection cut and new ones refused for a while, or
each piece of data delayed."""

from __future__ import annotations

import re
import socket
import threading
import time
from contextlib import suppress
from dataclasses import dataclass

from tests.faults.listener import HOST, Listener
from tests.faults.wire import LINGER_0, reset


@dataclass(eq=False, slots=True)
class _Pair:
    """A client's connection and the one the proxy opened for it to the target."""

    client: socket.socket
    upstream: socket.socket
    cut: bool = False


class TcpFaultProxy(Listener):
    """Before a plain TCP server (Redis): bytes relayed both ways as they come, but for the
    faults: `cut` (every connection reset and new ones refused for a while) and `delay`."""

    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(target)
        self._refuse_until = 0.0
        self._delay_s = 0.0
        self._delay_until = 0.0
        self._pairs: set[_Pair] = set()

    def url_for(self, url: str) -> str:
        """`url` (redis://user:password@HOST:PORT/0) aimed at this proxy instead."""
        return re.sub(r"@[^@/]+:\d+/", f"@{HOST}:{self.port}/", url, count=1)

    def cut(self, for_s: float) -> int:
        """Reset every open connection now (the client gets an RST; the target sees it close)
        and refuse new ones (accepted, then reset at once) for `for_s`; returns how many
        connections were cut."""
        with self._lock:
            self._refuse_until = time.monotonic() + for_s
            pairs = list(self._pairs)
            self._injected["cut"] += len(pairs)
            for pair in pairs:
                pair.cut = True
        for pair in pairs:
            with suppress(OSError):  # linger 0: the close, once both pumps are out, is an RST
                pair.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
            with suppress(OSError):  # wakes the pump reading the client, sending nothing
                pair.client.shutdown(socket.SHUT_RD)
            with suppress(OSError):
                pair.upstream.shutdown(socket.SHUT_RDWR)
        return len(pairs)

    def connections(self) -> int:
        """How many connections are open through the proxy now."""
        with self._lock:
            return len(self._pairs)

    def delay(self, latency_s: float, *, for_s: float = 3600.0) -> None:
        """Hold each piece of data `latency_s` before relaying it, for the next `for_s`."""
        with self._lock:
            self._delay_s, self._delay_until = latency_s, time.monotonic() + for_s

    def restore(self) -> None:
        """End the faults now: new connections are taken again, and nothing is delayed."""
        with self._lock:
            self._refuse_until = self._delay_until = 0.0

    def refusing(self) -> bool:
        with self._lock:
            return time.monotonic() < self._refuse_until

    def _serve(self, client: socket.socket) -> None:
        if self.refusing():
            self._count("refused")
            reset(client)
            return
        with self._tracked(self._connect()) as upstream:
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.add(pair)
            back = threading.Thread(target=self._pump, args=(upstream, client, pair), daemon=True)
            back.start()
            try:
                self._pump(client, upstream, pair)
            finally:
                back.join(10)
                with self._lock:
                    self._pairs.discard(pair)

    def _pump(self, src: socket.socket, dst: socket.socket, pair: _Pair) -> None:
        """Relay `src` to `dst` until `src` ends, then end `dst`'s side too (unless cut: the
        client's is then closed with an RST, not a FIN)."""
        try:
            while data := src.recv(65536):
                with self._lock:
                    wait = self._delay_s if time.monotonic() < self._delay_until else 0.0
                    if wait:
                        self._injected["delay"] += 1
                if wait and self._stop.wait(wait):
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                cut = pair.cut
            if not cut or dst is pair.upstream:
                with suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)

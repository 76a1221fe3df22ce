"""A TCP proxy for the tests that misbehaves on purpose, switched at runtime.

    proxy = FaultProxy("127.0.0.1", 5432).start()   # listens on 127.0.0.1:proxy.port
    proxy.set("reset")                              # every connection reset (RST), new ones too
    proxy.clear()                                   # back to forwarding

Placed between the app and a dependency (Postgres, a model server), it injects the faults a
network and a restarting server give:

- ``pass``: bytes forwarded both ways.
- ``refuse``: a new connection is reset as soon as it is accepted (the server is not there);
  connections already open go on.
- ``drop``: every connection closed (FIN), open ones and new ones: the server went away.
- ``reset``: every connection reset (RST), open ones and new ones: the server crashed.
- ``stall``: nothing forwarded either way and new connections held, never closed: a partition.
- ``slow``: each chunk waits ``latency`` seconds and at most ``bandwidth`` bytes a second pass.
- ``cut``: each connection forwards ``after`` more bytes from the server, then is reset
  (a stream cut mid-answer).

It runs in threads of its own (one accept thread, two pumps per connection), so it serves a sync
client in a worker thread and an async one alike. ``bytes_down`` counts what the server sent
through it; ``connections`` how many clients it accepted. Nothing here sleeps to wait for the
machine: pumps wake on the sockets and on a condition the mode changes notify.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from typing import Any

MODES = ("pass", "refuse", "drop", "reset", "stall", "slow", "cut")
TICK = 0.05  # seconds a pump waits on its socket before looking at the mode again


def _rst(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (SO_LINGER 0), not a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _fin(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class _Link:
    """One client's connection and its upstream one, with a pump each way."""

    def __init__(self, proxy: FaultProxy, client: socket.socket):
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.closed = False
        self.cut_left: int | None = None  # bytes the server may still send in ``cut`` mode

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="faultproxy-link").start()

    def _run(self) -> None:
        if not self.proxy._wait_unstalled(self):
            return
        try:
            self.upstream = socket.create_connection(self.proxy.target, timeout=10)
        except OSError:
            self.close(reset=True)
            return
        if self.closed:  # reset (or dropped) while it connected: ``close`` saw no upstream to close
            _rst(self.upstream)
            return
        self.upstream.settimeout(None)
        threading.Thread(target=self._pump, args=(self.upstream, self.client, True), daemon=True).start()
        self._pump(self.client, self.upstream, False)

    def _pump(self, source: socket.socket, target: socket.socket, down: bool) -> None:
        while not self.closed:
            if not self.proxy._wait_unstalled(self):
                return
            data = self._read(source)
            if data is None:
                continue
            if not data or not self._forward(target, data, down):
                return

    def _read(self, source: socket.socket) -> bytes | None:
        """The next chunk (``b""``: the link closed), or ``None`` when there is none yet or the mode stalls."""
        try:
            readable, _, _ = select.select([source], [], [], TICK)
        except (OSError, ValueError):
            self.close(reset=True)
            return b""
        if not readable or self.proxy.mode == "stall":
            return None  # a stall reads nothing: the bytes wait in the kernel
        try:
            data = source.recv(65536)
        except OSError:
            self.close(reset=True)
            return b""
        if not data:
            self.close(reset=False)
        return data

    def _forward(self, target: socket.socket, data: bytes, down: bool) -> bool:
        """Send ``data`` on as the mode says; ``False`` when the link is closed."""
        proxy = self.proxy
        mode = proxy.mode
        if mode == "slow":
            time.sleep(proxy.options.get("latency", 0.0))
            bandwidth = proxy.options.get("bandwidth")
            if bandwidth:
                time.sleep(len(data) / float(bandwidth))
        if not (down and mode == "cut"):
            return self._send(target, data, down)
        left = self.cut_left if self.cut_left is not None else int(proxy.options.get("after", 0))
        data = data[: max(left, 0)]
        self.cut_left = left - len(data)
        if data and not self._send(target, data, down):
            return False
        if self.cut_left <= 0:
            self.close(reset=True)
            return False
        return True

    def _send(self, target: socket.socket, data: bytes, down: bool) -> bool:
        try:
            target.sendall(data)
        except OSError:
            self.close(reset=True)
            return False
        if down:
            with self.proxy._lock:
                self.proxy.bytes_down += len(data)
        return True

    def close(self, reset: bool) -> None:
        if self.closed:
            return
        self.closed = True
        for sock in (self.client, self.upstream):
            if sock is not None:
                (_rst if reset else _fin)(sock)
        self.proxy._forget(self)


class FaultProxy:
    """A loopback TCP proxy to ``host:port`` whose faults are switched with ``set`` (see the module)."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.mode = "pass"
        self.options: dict[str, Any] = {}
        self.bytes_down = 0
        self.connections = 0
        self._lock = threading.Condition()
        self._links: set[_Link] = set()
        self._listener: socket.socket | None = None
        self.port = 0

    def start(self) -> FaultProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self.port = int(listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True, name="faultproxy-accept").start()
        return self

    def __enter__(self) -> FaultProxy:
        return self.start() if self._listener is None else self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def set(self, mode: str, **options: Any) -> None:
        """Switch to ``mode`` (one of ``MODES``) with its options (``latency``, ``bandwidth``, ``after``)."""
        if mode not in MODES:
            raise ValueError(f"FaultProxy mode must be one of {MODES}, got {mode!r}")
        with self._lock:
            self.mode, self.options = mode, options
            links = list(self._links)
            for link in links:
                link.cut_left = None
            self._lock.notify_all()
        if mode in ("drop", "reset"):
            for link in links:
                link.close(reset=mode == "reset")

    def clear(self) -> None:
        """Forward again (what was closed stays closed; clients reconnect)."""
        self.set("pass")

    def reset_all(self) -> None:
        """Reset every open connection once, then go on forwarding (a server restart, as clients see it)."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close(reset=True)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._links)

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.close()
        with self._lock:
            links = list(self._links)
            self._lock.notify_all()
        for link in links:
            link.close(reset=True)

    # -- threads -------------------------------------------------------------------------------

    def _accept(self) -> None:
        while self._listener is not None:
            listener = self._listener
            try:
                client, _ = listener.accept()
            except OSError:
                return
            mode = self.mode
            if mode in ("refuse", "reset"):
                _rst(client)
                continue
            if mode == "drop":
                _fin(client)
                continue
            link = _Link(self, client)
            with self._lock:
                self.connections += 1
                self._links.add(link)
            link.start()

    def _wait_unstalled(self, link: _Link) -> bool:
        """Wait while the mode is ``stall``; ``False`` if the link closed meanwhile."""
        with self._lock:
            while self.mode == "stall" and not link.closed and self._listener is not None:
                self._lock.wait(TICK)
        return not link.closed and self._listener is not None

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

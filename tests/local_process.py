"""A server the tests start as a child process on a free port of 127.0.0.1, written once."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

STARTING = 60  # seconds: a hang guard while it starts, never a timing assertion


@contextlib.contextmanager
def listening(
    argv: Callable[[int], Sequence[str]], env: Callable[[int], Mapping[str, str]] | None = None
) -> Iterator[int]:
    """Run ``argv(port)`` (in ``env(port)``, else this environment) until it accepts connections on
    ``port``; the port while it runs; then terminate it (killed if it has not exited 30 s later: a
    connection it still waits on)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    process = subprocess.Popen(
        list(argv(port)),
        env=dict(env(port)) if env is not None else None,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + STARTING
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except OSError:
                if time.monotonic() > end or process.poll() is not None:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()

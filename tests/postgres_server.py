"""A throwaway Postgres server on 127.0.0.1 for the durable tests and benchmark.

Uses the Debian ``postgresql`` package's binaries (``.ci/run`` installs it): ``initdb`` into a
temporary directory, ``pg_ctl start`` on a free loopback port, trust authentication, no socket
outside the directory. Run as root, the server runs as the ``postgres`` user (Postgres refuses
root). ``start()`` returns ``None`` and a reason when the server cannot be started.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass


@dataclass
class Server:
    url: str
    folder: str
    _bin: str
    _user: str | None
    _options: str = ""

    def database(self, name: str) -> str:
        """The URL of a fresh database ``name`` on this server."""
        _run([os.path.join(self._bin, "psql"), "-h", "127.0.0.1", "-p", self._port, "-U", "postgres", "-d", "postgres",
              "-c", f'DROP DATABASE IF EXISTS "{name}"', "-c", f'CREATE DATABASE "{name}"'], self._user)  # fmt: skip
        return f"postgresql://postgres@127.0.0.1:{self._port}/{name}"

    @property
    def _port(self) -> str:
        return self.url.rsplit(":", 1)[1].split("/")[0]

    def crash(self) -> None:
        """Stop the server as a crash does (``immediate``: every connection dropped, no checkpoint)."""
        _run([os.path.join(self._bin, "pg_ctl"), "-D", os.path.join(self.folder, "data"), "-m", "immediate", "-w",
              "stop"], self._user)  # fmt: skip

    def start_again(self) -> None:
        """Start the stopped server on its port, waiting until it accepts connections (it recovers first)."""
        _run([os.path.join(self._bin, "pg_ctl"), "-D", os.path.join(self.folder, "data"), "-o", self._options,
              "-l", os.path.join(self.folder, "log"), "-w", "start"], self._user)  # fmt: skip

    def stop(self) -> None:
        _run([os.path.join(self._bin, "pg_ctl"), "-D", os.path.join(self.folder, "data"), "-m", "immediate", "stop"],
             self._user, check=False)  # fmt: skip
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> tuple[Server | None, str]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or (
        [shutil.which("initdb")] if shutil.which("initdb") else []
    )
    if not found:
        return None, "Postgres is not installed (no initdb; `.ci/run` installs the Debian postgresql package)"
    bindir = os.path.dirname(found[-1])
    user = "postgres" if os.geteuid() == 0 else None
    if user is not None:
        try:
            pwd.getpwnam(user)
        except KeyError:
            return None, "running as root and there is no `postgres` user to run the server as"
    folder = tempfile.mkdtemp(prefix="dspy-imp-pg-")
    os.chmod(folder, 0o777)
    if user is not None:
        shutil.chown(folder, user)
    port = _free_port()
    data = os.path.join(folder, "data")
    try:
        _run([os.path.join(bindir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"], user)
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        log = os.path.join(folder, "log")
        _run([os.path.join(bindir, "pg_ctl"), "-D", data, "-o", options, "-l", log, "-w", "start"], user)
    except (OSError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        return None, f"Postgres could not be started: {exc}"
    return Server(f"postgresql://postgres@127.0.0.1:{port}/postgres", folder, bindir, user, options), ""


def _run(command: list[str], user: str | None, check: bool = True) -> None:
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    subprocess.run(command, check=check, capture_output=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

"""What an MCP server says while it works: progress and log messages, bounded, told to the turn.

A call's progress notifications and the server's log messages (``notifications/message``) reach the
turn that made the call, two ways at once:

- as **status lines** of a ``dspy.streamify`` stream, in its status provider's words
  (``mcp_progress_status_message``, ``mcp_log_status_message``; by default ``crunch: 1/2 first
  half``, ``crunch: [warning] disk: almost full``), sent from the caller's loop;
- as **events** of the turn's observer (``_watch.events``: ``ToolProgress``, ``ToolLog``), which the
  web app tells as AG-UI activity and AI SDK data parts.

A log message is not tied to a request by the protocol: it goes to the oldest call of the server's
in flight (as a sampling request does), and to the ``dspy_imp.mcp`` logger, at its level. One that
arrives while no call runs goes to the logger only.

Everything here is the server's text, so it is bounded before it costs anything: a message is put
on one line and cut at ``MAX_NOTICE_CHARS``; a call tells at most ``MAX_LOGS`` log messages (the
rest are counted, and one line says how many were left out when the call ends) and
``MAX_PROGRESS`` progress notifications (past that only the latest is kept, told when the call
ends). The counting happens where the notifications arrive, on the MCP layer's loop, so a server
that floods costs a counter per message past the bounds: nothing queues, nothing grows. Between
calls at most ``MAX_IDLE_LOGS`` log messages reach the logger, until the next call starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal, cast

from dspy.streaming import StatusMessage

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._watch.events import Calling, ToolLog, ToolProgress
from dspy_imp._watch.status import progress_line as progress_line
from dspy_imp._watch.status import status_for
from dspy_imp._watch.streaming import stream_provider

logger = logging.getLogger("dspy_imp.mcp")

Level = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LEVELS: tuple[Level, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""MCP's log levels (RFC 5424's), least severe first: what ``log_level=`` takes."""
MAX_NOTICE_CHARS = 500
"""The longest text of one log message or progress message told (the rest is cut)."""
MAX_LOGS = 100
"""The most log messages one call tells; the rest are counted, and left out."""
MAX_PROGRESS = 100
"""The most progress notifications one call tells as they come; past that only the latest is kept."""
MAX_IDLE_LOGS = 100
"""The most log messages that reach the logger while no call runs (counted again from each call)."""

_PYTHON_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
                  "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
                  "alert": logging.CRITICAL, "emergency": logging.CRITICAL}  # fmt: skip


def check_level(value: Any) -> Level | None:
    """``log_level=``: ``None`` or one of ``LEVELS`` (a ``ConfigurationError`` naming the option)."""
    if value is None or value in LEVELS:
        return cast("Level | None", value)
    raise ConfigurationError(f"MCP server `log_level` must be None or one of {LEVELS!r}, got {value!r}")


def at_least(level: str, floor: Level | None) -> bool:
    """Whether a message at ``level`` passes ``floor`` (an unknown level passes: the server's word)."""
    if floor is None or level not in LEVELS:
        return True
    return LEVELS.index(cast("Level", level)) >= LEVELS.index(floor)


def one_line(text: Any, limit: int = MAX_NOTICE_CHARS) -> str:
    """The server's text (a log message's ``data``: any JSON) on one line, at most ``limit`` characters."""
    if not isinstance(text, str):
        try:
            text = json.dumps(text, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            text = str(text)
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else f"{flat[: limit - 1]}…"


class Notices:
    """One call's progress and log messages, from the MCP layer's loop to the caller's (see the module).

    ``tool``: the server's name of the tool (the status lines'); ``stream``: the ``dspy.streamify``
    stream, if any, whose status provider writes the lines (``mcp_progress_status_message``,
    ``mcp_log_status_message``; our words for a provider without them, none for ``None``);
    ``call``: the observed call (``_watch.events.calling``), if any; ``floor``: the server's
    ``log_level=``, below which the call's own lines (a task's status) are dropped too.
    """

    TASK_STATUS_LEVEL: Level = "info"
    """The level of a task's status lines: under ``log_level="notice"`` or above they are not shown."""

    def __init__(self, tool: str, stream: Any, call: Calling | None, floor: Level | None = None):
        self.tool = tool
        self.floor = floor
        self.stream = stream
        self.provider = stream_provider() if stream is not None else None
        self.call = call
        self.live = stream is not None or call is not None
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.logs = 0
        self.left_out = 0
        self.progresses = 0
        self.latest: tuple[float, float | None, str | None] | None = None
        self.closed = False

    # -- on the MCP layer's loop ----------------------------------------------------------------

    async def progress(self, done: float, total: float | None, message: str | None) -> None:
        """The SDK's progress callback for the call."""
        if self.closed:
            return
        text = one_line(message) if message else None
        if self.progresses >= MAX_PROGRESS:
            self.latest = (done, total, text)  # told when the call ends
            return
        self.progresses += 1
        self._put(("progress", done, total, text))

    def log(self, level: str, source: str | None, text: str) -> bool:
        """A log message for the call; ``False`` when it is past the call's bound (left out)."""
        if self.closed:
            return False
        if self.logs >= MAX_LOGS:
            self.left_out += 1
            return False
        self.logs += 1
        if self.live:
            self._put(("log", level, source, text))
        return True

    def task_status(self, status: str, message: str | None) -> None:
        """A change of status of the task the server runs the call as (``_tasks.Told``), told as one of
        the call's log lines of our own (``crunch: [info] dspy_imp: task working: half done``),
        within the call's bound of log lines; at ``info``, so dropped below the server's
        ``log_level=`` as a log message at that level is (``Logs``)."""
        if not at_least(self.TASK_STATUS_LEVEL, self.floor):
            return
        text = one_line(message) if message else ""
        self.log(self.TASK_STATUS_LEVEL, "dspy_imp", f"task {status}: {text}" if text else f"task {status}")

    def _put(self, item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the caller's loop closed: nobody reads any more
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    # -- on the caller's loop -------------------------------------------------------------------

    @asynccontextmanager
    async def relaying(self) -> AsyncIterator[None]:
        """Around the call: what arrives is told as it comes; at the end, what the bounds kept back."""
        relay = asyncio.ensure_future(self._relay()) if self.live else None
        try:
            yield
        finally:
            self.closed = True
            if self.latest is not None:
                self.queue.put_nowait(("progress", *self.latest))
            if self.left_out:
                text = f"{self.left_out} more log messages of this call were left out"
                self.queue.put_nowait(("log", "warning", "dspy_imp", text))
            self.queue.put_nowait(None)
            if relay is not None:
                await asyncio.shield(relay)

    async def _relay(self) -> None:
        while (item := await self.queue.get()) is not None:
            kind, *rest = item
            if kind == "progress":
                event: Any = ToolProgress(*self._whose(), *rest)
            else:
                event = ToolLog(*self._whose(), *rest)
            if self.call is not None:
                with contextlib.suppress(Exception):  # an observer's failure is not the call's
                    self.call.observe(event)
            if self.stream is not None:
                line = self._line(f"mcp_{kind}", rest)
                if line:
                    with contextlib.suppress(Exception):  # a stream its consumer closed: the turn notices itself
                        await self.stream.send(StatusMessage(line))

    def _line(self, event: str, rest: list[Any]) -> str | None:
        """The stream's provider's line (``_watch.status``); a provider that raises is no failure of
        the call's: the line is not sent, and the error is logged."""
        try:
            return status_for(self.provider, event, self.tool, *rest)
        except Exception:
            logger.exception("dspy_imp.mcp: the status message provider's %s_status_message raised", event)
            return None

    def _whose(self) -> tuple[str, str | None]:
        call = self.call
        return (call.call_id, call.name) if call is not None else ("", self.tool)


class Logs:
    """A server's log messages (``notifications/message``), read on the MCP layer's loop: each to the
    oldest call in flight (``calls``) and the logger, bounded (see the module)."""

    def __init__(self, label: str, floor: Level | None):
        self.label = label
        self.floor = floor
        self.calls: list[Notices] = []
        self.idle = 0

    def started(self, notices: Notices) -> None:
        self.calls.append(notices)
        self.idle = 0

    def ended(self, notices: Notices) -> None:
        with contextlib.suppress(ValueError):
            self.calls.remove(notices)

    async def __call__(self, params: Any) -> None:
        """The SDK's ``logging_callback``."""
        level = str(getattr(params, "level", "info"))
        if not at_least(level, self.floor):
            return
        source = getattr(params, "logger", None)
        source = one_line(source, 100) if source else None
        text = one_line(getattr(params, "data", ""))
        oldest = next(iter(self.calls), None)  # the list changes from the callers' threads: read once
        if oldest is not None:
            if not oldest.log(level, source, text):
                return
        elif self.idle >= MAX_IDLE_LOGS:
            return
        else:
            self.idle += 1
        where = f"{source}: " if source else ""
        logger.log(_PYTHON_LEVELS.get(level, logging.INFO), "%s: [%s] %s%s", self.label, level, where, text)

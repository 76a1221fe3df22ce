"""A stdio MCP server's transport: the ``mcp`` SDK's ``stdio_client`` with a bound on one message.

Why our own reader: the SDK reads the server's stdout line by line with no bound, so a server that
writes one 2 GB line (or bytes that never end in a newline) makes this process hold all of it. Here
the server's stdout is read as bytes and cut at each newline, and a line that grows past ``limit``
bytes, with its newline or without, ends the session before any more of it is kept: nothing over
``limit`` bytes is ever held. The rest of that output is read and dropped, so the server is not
stuck on a full pipe while it is stopped.

Everything else is the SDK's, taken as it is (its private helpers, imported in one place below):
the process started in its own process group with the SDK's environment rule, each line parsed by
the SDK into a JSON-RPC message (framing is all that is done here), messages written as the SDK
writes them, and its shutdown (stdin closed, a grace period, the process tree terminated), shielded
from cancellation so no server process outlives its session.

Over the limit, the reader notes why (``fault``, which the session reads to name the limit in the
call's error), closes the stream to the session (every request waiting on the server fails as a
closed connection), and the transport raises ``MessageTooLarge``: the session's owner ends, the
process is stopped, and the next use starts the server again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.lowlevel
from mcp import StdioServerParameters

# The SDK's own pieces of ``stdio_client`` (``mcp.client.stdio``; the underscored ones are private,
# ``mcp>=2.3,<3``): kept as they are so the process handling is the SDK's, only the stdout reader is
# ours. When the SDK changes these, this is the list to check.
from mcp.client.stdio import (
    _WRITER_FLUSH_TIMEOUT,
    _aclose_all,
    _create_platform_compatible_process,
    _drain_stdout,
    _get_executable_command,
    _parse_line,
    _stop_server_process,
    get_default_environment,
)
from mcp.shared.message import SessionMessage

logger = logging.getLogger("dspy_imp")

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""The longest line (one JSON-RPC message) read from a stdio server by default: 32 MiB, room for the
largest medium a result keeps (``_results.MAX_MEDIA_CHARS``, 20 MB of base64) and its envelope."""


class MessageTooLarge(Exception):
    """A stdio server wrote a message (a line) longer than the transport's limit."""


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, *, errlog: TextIO, limit: int, fault: Callable[[str], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's ``stdio_client(server, errlog)``, reading at most ``limit`` bytes of one message;
    ``fault(text)`` is told why the session ends when a message is longer."""
    command = await _get_executable_command(server.command)
    process = await _create_platform_compatible_process(
        command=command, args=server.args, env=get_default_environment() | (server.env or {}),
        errlog=errlog, cwd=server.cwd,
    )  # fmt: skip
    # As in the SDK: no awaits until the task group is entered, or a cancellation in the gap would
    # leak the live process.
    read_stream_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()
    too_large = anyio.Event()
    why: list[str] = []

    async def stdout_reader() -> None:
        assert process.stdout, "the server's process is started with pipes"
        try:
            async with read_stream_writer:
                over = await _read_lines(process.stdout, read_stream_writer, limit, server)
                if over is not None:  # noted before the session sees its stream end (and its calls fail)
                    why.append(over)
                    fault(over)
            if over is not None:  # now the session's owner ends it
                too_large.set()
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed the stdout stream under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("dspy_imp.mcp: reading from the MCP server's stdout failed mid-session")
        finally:
            await _drain_stdout(process)  # the rest dropped until the pipe closes (shielded)

    async def stdin_writer() -> None:
        assert process.stdin, "the server's process is started with pipes"
        try:
            async with write_stream_reader:
                async for session_message in write_stream_reader:
                    json = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((json + "\n").encode(server.encoding, server.encoding_error_handler))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()  # the session sees the connection end, not a hang
        finally:
            writer_done.set()

    async def ender() -> None:
        await too_large.wait()
        raise MessageTooLarge(why[0])

    async def shutdown() -> None:
        """The SDK's wind-down: stop traffic, flush, stop the server, release the streams."""
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await _stop_server_process(process)
        await _aclose_all(read_stream, write_stream, read_stream_writer, write_stream_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        group.start_soon(ender)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # the process must be stopped even under cancellation
                await shutdown()
            group.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


async def _read_lines(stdout: Any, to_session: Any, limit: int, server: StdioServerParameters) -> str | None:
    """Each line of ``stdout`` parsed and sent to the session, until the stream ends (``None``) or a
    line passes ``limit`` bytes (what to say about it). At most ``limit`` bytes are ever kept."""
    kept = bytearray()
    while True:
        try:
            chunk = await stdout.receive()
        except anyio.EndOfStream:
            return None
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if len(kept) + end - start > limit:
                return _over(limit)
            kept += chunk[start:end]
            line, start = bytes(kept), end + 1
            kept.clear()
            try:
                await to_session.send(_parsed(line, server))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return None  # the session is gone; only the drain remains
        if len(kept) + len(chunk) - start > limit:
            return _over(limit)
        kept += chunk[start:]


def _parsed(line: bytes, server: StdioServerParameters) -> SessionMessage | Exception:
    """One line as the SDK parses it; a parse error is a value the session logs and skips."""
    try:
        text = line.decode(server.encoding, server.encoding_error_handler)
    except UnicodeDecodeError as error:
        return error
    return _parse_line(text)


def _over(limit: int) -> str:
    return (
        f"wrote a message longer than {limit:,} bytes (`max_message_bytes`); the session was ended and "
        "the server's process stopped"
    )

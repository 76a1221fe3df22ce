"""A booking server whose tool asks for input, and a program pausing on it, for
``test_mcp_elicit_pause.py``; also run as ``python -m mcp_elicit_program pause|resume MODE PATH``
(each side in its own process: the paused history goes through ``dump_history`` to a file, a new
process loads it and resumes the turn against a new server).

The server seals its 2026-07-28 ``requestState`` with a fixed key (``RequestStateSecurity(keys=)``),
as a server run by several workers shares one: a state minted by one process is read by another.
What it received is recorded (``RECEIVED``: each ``tools/call``'s params, a sealed state shown as
``"<sealed>"``; ``RAN``: each run of its tool, with the answer it got).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import dspy
from mcp.server.mcpserver import AcceptedElicitation, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

KEY = b"0123456789abcdef0123456789abcdef"
RECEIVED: list[dict[str, Any]] = []
RAN: list[str] = []


class Seat(BaseModel):
    row: int
    window: bool = True


def ask_seat() -> Elicit[Seat]:
    return Elicit("Which row?", Seat)


async def book(flight: str, seat: Annotated[ElicitationResult[Seat], Resolve(ask_seat)]) -> str:
    """Book a seat on a flight, asking which."""
    if not isinstance(seat, AcceptedElicitation):
        RAN.append(f"{flight}: {seat.action}")
        return f"not booked: {seat.action}"
    RAN.append(f"{flight}: row {seat.data.row}, window {seat.data.window}")
    return f"{flight}: row {seat.data.row}, window {seat.data.window}"


def add(a: int, b: int) -> int:
    """Add two numbers."""
    RAN.append(f"add {a} {b}")
    return a + b


async def _received(ctx: Any, call_next: Any) -> Any:
    if ctx.method == "tools/call":
        params = dict(ctx.params or {})
        if "requestState" in params:
            params["requestState"] = "<sealed>"
        params.pop("_meta", None)
        RECEIVED.append(params)
    return await call_next(ctx)


def booking() -> MCPServer:
    server = MCPServer("booking", request_state_security=RequestStateSecurity(keys=[KEY]))
    server.tool()(book)
    server.tool()(add)
    server._lowlevel_server.middleware.insert(0, _received)  # sees each request as it arrived
    return server


def agent(mode: str, parallel: bool = False) -> tuple[dspy_imp.ReActV2, mcp.Server]:
    server = mcp.memory(booking(), mode=mode, elicit="pause")
    return dspy_imp.ReActV2("question -> answer", tools=[server], parallel_tools=parallel), server


def answer(text: str) -> Any:
    return reply(f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]")


def calling_book() -> ScriptedLM:
    return ScriptedLM([reply("booking", calls=[call("book", {"flight": "LH1"}, id="c1")])])


def main(action: str, mode: str, path: str) -> None:
    program, server = agent(mode)
    if action == "pause":
        with dspy.context(lm=calling_book()):
            pred = program(question="Book me a seat")
        Path(path).write_text(json.dumps(dspy_imp.dump_history(pred.metadata.history)))
        print(json.dumps({"reason": pred.metadata.termination_reason, "pending": list(pred.metadata.pending_calls)}))
    else:
        history = dspy_imp.load_history(json.loads(Path(path).read_text()))
        lm = ScriptedLM([answer("booked")])
        with dspy.context(lm=lm):
            pred = program(history=history, approvals={"c1": {"row": 12, "window": False}})
        tool = [m for m in lm.requests[0].messages if m["role"] == "tool"]
        print(json.dumps({"reason": pred.metadata.termination_reason, "answer": pred.answer, "tool": tool,
                          "received": RECEIVED, "ran": RAN}))  # fmt: skip
    server.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""An in-process MCP server that runs tool calls as tasks (MCP 2025-11-25, experimental), for the tests.

The ``mcp`` SDK (2.3) defines the task types only, serving none of the task methods: this server
serves them in a middleware, ahead of the SDK's ``tools/call`` handler (which would refuse a
``CreateTaskResult`` as a ``tools/call`` answer). Every request it receives is kept, whole, in
``received`` (method and params), for the tests to assert.

Tools (``execution.taskSupport``):

- ``crunch`` (required): ``working`` for the first ``tasks/get``, ``completed`` at the second; its
  result is ``"crunched <n>"``.
- ``flaky`` (required): ``failed`` at the first ``tasks/get``; ``tasks/result`` is an ``isError``
  result ``"disk full"``.
- ``forever`` (required): ``working`` until ``tasks/cancel``, which sets ``cancelled`` (an event a
  test waits on).
- ``ask`` (required): ``input_required``; its ``tasks/result`` asks the client (``elicitation/create``,
  related to the task) which colour, and completes with the answer.
- ``maybe`` (optional): called plainly, ``"plain"``; as a task, completed at the first ``tasks/get``,
  ``"as a task"``.
- ``shaped`` (required, an ``outputSchema``): completed at the first ``tasks/get``; its structured
  result is ``{"total": n}``, a string for a negative ``n`` (which the schema refuses).
- ``watched`` (required): ``working`` at every ``tasks/get``, suggesting a ``pollInterval`` of an
  hour; once it is created the server sends ``notifications/tasks/status``: ``updates`` of
  ``working`` (``step 0``, ``step 1``, ...), ``ghosts`` for task ids it never created, then its end
  (``end``: ``completed`` by default, or ``failed``/``cancelled``, with the ``statusMessage``
  ``"done"``), which its ``tasks/result`` then answers (``"watched <n>"``; a failed one's is an
  error). With ``first``, the end is sent before the answer to the ``tools/call``.
- ``plain`` (no ``execution``): ``"plain"``.

``tasks/list`` lists every task it created, ``page_size`` a page (the cursor: the next index).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import mcp_types as types
from mcp.server import Server as LowLevelServer

POLL_MS = 10
HOUR_MS = 3_600_000
"""The ``pollInterval`` the server suggests (the client keeps to its own minimum)."""
RELATED = "io.modelcontextprotocol/related-task"
STAMP = "2026-01-01T00:00:00Z"

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}
SUPPORT = {"crunch": "required", "flaky": "required", "forever": "required", "ask": "required", "maybe": "optional",
           "shaped": "required", "watched": "required"}  # fmt: skip
SHAPE = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}


class TaskServer:
    """The server (``.server``, give it to ``dspy_imp.mcp.memory(..., mode="legacy")``) and what it saw."""

    def __init__(self, tasks_capability: bool = True, list_capability: bool = True, page_size: int = 1) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.cancelled = threading.Event()
        self._tasks: dict[str, dict[str, Any]] = {}
        self._capability = tasks_capability
        self._list_capability = list_capability
        self._page_size = page_size
        self._background: set[asyncio.Task[None]] = set()
        outer = self

        class Served(LowLevelServer[Any]):
            def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
                found = super().get_capabilities(*args, **kwargs)
                if outer._capability:
                    found.tasks = types.ServerTasksCapability(
                        list=types.TasksListCapability() if outer._list_capability else None,
                        cancel=types.TasksCancelCapability(),
                        requests=types.ServerTasksRequestsCapability(
                            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
                        ),
                    )
                return found

        self.server = Served("tasks", on_list_tools=self._list, on_call_tool=self._plain)
        self.server.middleware.insert(0, self._middleware)

    def requests(self, *methods: str) -> list[tuple[str, dict[str, Any]]]:
        """What it received of ``methods`` (by default: the tool calls and task methods), in order."""
        kept = methods or ("tools/call", "tasks/get", "tasks/result", "tasks/cancel", "tasks/list")
        return [(method, params) for method, params in self.received if method in kept]

    async def _list(self, ctx: Any, params: Any) -> types.ListToolsResult:
        tools = [
            types.Tool(
                name=name, description=f"The {name} tool.", input_schema=SCHEMA,
                execution=types.ToolExecution(task_support=SUPPORT[name]) if name in SUPPORT else None,  # type: ignore[arg-type]
                output_schema=SHAPE if name == "shaped" else None,
            )
            for name in ("crunch", "flaky", "forever", "ask", "maybe", "shaped", "watched", "plain")
        ]  # fmt: skip
        return types.ListToolsResult(tools=tools)

    async def _plain(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if SUPPORT.get(params.name) == "required":  # the spec: a required-task tool called plainly is refused
            raise_not_found = types.ErrorData(code=types.METHOD_NOT_FOUND, message=f"{params.name} runs only as a task")
            from mcp.shared.exceptions import MCPError

            raise MCPError.from_error_data(raise_not_found)
        return types.CallToolResult(content=[types.TextContent(text="plain")])

    async def _middleware(self, ctx: Any, call_next: Any) -> Any:
        params = dict(ctx.params or {})
        if ctx.request_id is not None and ctx.method != "initialize":
            self.received.append((ctx.method, params))
        if ctx.method == "tools/call" and params.get("task") is not None:
            created = self._create(params)
            task = self._tasks[created["task"]["taskId"]]
            if task["tool"] == "watched":
                told = self._tell(ctx.session, task)
                if task["arguments"].get("first"):
                    await told
                else:
                    background = asyncio.ensure_future(told)
                    self._background.add(background)
                    background.add_done_callback(self._background.discard)
            return created
        if ctx.method == "tasks/list":
            start = int(params.get("cursor") or 0)
            listed = list(self._tasks.values())
            page = [self._wire(task) for task in listed[start : start + self._page_size]]
            more = start + self._page_size < len(listed)
            return {"tasks": page, **({"nextCursor": str(start + self._page_size)} if more else {})}
        if ctx.method in ("tasks/get", "tasks/cancel"):
            task = self._tasks[params["taskId"]]
            if ctx.method == "tasks/cancel":
                task["status"] = "cancelled"
                self.cancelled.set()
            else:
                self._advance(task)
            return self._wire(task)
        if ctx.method == "tasks/result":
            return await self._result(ctx, self._tasks[params["taskId"]])
        return await call_next(ctx)

    def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        task_id = f"task-{len(self._tasks) + 1}"
        ttl = params["task"].get("ttl")
        task = {"id": task_id, "tool": params["name"], "arguments": params.get("arguments") or {}, "gets": 0,
                "status": "working", "ttl": ttl}  # fmt: skip
        self._tasks[task_id] = task
        return {"task": self._wire(task)}

    def _advance(self, task: dict[str, Any]) -> None:
        task["gets"] += 1
        if task["status"] != "working":
            return
        tool = task["tool"]
        if (tool == "crunch" and task["gets"] >= 2) or tool in ("maybe", "shaped"):
            task["status"] = "completed"
        elif tool == "flaky":
            task["status"] = "failed"
        elif tool == "ask":
            task["status"] = "input_required"

    def _wire(self, task: dict[str, Any]) -> dict[str, Any]:
        poll = HOUR_MS if task["tool"] == "watched" else POLL_MS
        found = {"taskId": task["id"], "status": task["status"], "createdAt": STAMP, "lastUpdatedAt": STAMP,
                 "ttl": task["ttl"], "pollInterval": poll}  # fmt: skip
        if task["status"] == "failed":
            found["statusMessage"] = "disk full" if task["tool"] != "watched" else "done"
        return found

    async def _tell(self, session: Any, task: dict[str, Any]) -> None:
        """``watched``'s status notifications (see the module)."""
        arguments = task["arguments"]

        async def send(task_id: str, status: str, message: str | None) -> None:
            params = types.TaskStatusNotificationParams(
                task_id=task_id, status=status, status_message=message, created_at=STAMP,  # type: ignore[arg-type]
                last_updated_at=STAMP, ttl=task["ttl"], poll_interval=HOUR_MS,
            )  # fmt: skip
            await session.send_notification(types.TaskStatusNotification(params=params))  # type: ignore[arg-type]

        for index in range(arguments.get("updates", 0)):
            await send(task["id"], "working", f"step {index}")
        for index in range(arguments.get("ghosts", 0)):
            await send(f"ghost-{index}", "completed", None)
        task["status"] = arguments.get("end", "completed")
        await send(task["id"], task["status"], "done")

    async def _result(self, ctx: Any, task: dict[str, Any]) -> dict[str, Any]:
        meta = {RELATED: {"taskId": task["id"]}}
        tool = task["tool"]
        if tool == "flaky":
            return {"content": [{"type": "text", "text": "disk full"}], "isError": True, "_meta": meta}
        if tool == "watched":
            n = task["arguments"].get("n")
            error = task["status"] == "failed"
            return {"content": [{"type": "text", "text": f"watched {n}"}], "isError": error, "_meta": meta}
        if tool == "ask":
            answer = await ctx.session.send_request(
                types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message="Which colour?",
                        requested_schema={"type": "object", "properties": {"colour": {"type": "string"}}},
                        _meta=meta,
                    )
                ),
                types.ElicitResult,
            )
            task["status"] = "completed"
            colour = (answer.content or {}).get("colour") if answer.action == "accept" else answer.action
            return {"content": [{"type": "text", "text": f"painted {colour}"}], "_meta": meta}
        if tool == "shaped":
            n = task["arguments"].get("n", 0)
            total = n if n >= 0 else "negative"
            content = [{"type": "text", "text": f'{{"total": {total!r}}}'}]
            return {"content": content, "structuredContent": {"total": total}, "_meta": meta}
        text = "as a task" if tool == "maybe" else f"crunched {task['arguments'].get('n')}"
        return {"content": [{"type": "text", "text": text}], "_meta": meta}

"""An MCP server's tools as ``dspy.Tool``s: names every provider accepts, untrusted schemas gated.

A tool's name is the server's, after ``prefix_`` when the server has a prefix, made valid for every
provider: at most 64 characters of ``[a-zA-Z0-9_-]`` (any other character becomes ``_``; a longer
name is cut and ends in a hash of the whole, so two long names stay apart; of two tools whose names
meet so, the second is left out with a warning). The tool keeps the server's own name
(``remote_name``), which is what the call sends.

Its input schema is text someone else wrote: checked once per listing by the one gate for such
schemas (``_records.untrusted_schema``: local refs only, no cycles, bounded, RE2 patterns), and
at most ``MAX_SCHEMA_CHARS`` long. The model is shown the whole schema, and a call's arguments are
checked against all of it (``parameters_schema``, as for a web client's tools) before the call is
sent. A tool whose schema is refused is left out of the listing, with a warning naming it; so is
one past ``MAX_TOOLS``. A description is cut at ``MAX_DESCRIPTION_CHARS``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import dspy
import mcp_types as types
import pydantic
from dspy.utils.callback import with_callbacks

from dspy_imp._records.untrusted_schema import UntrustedSchema, gate, sized

logger = logging.getLogger("dspy_imp")

MAX_NAME = 64
MAX_TOOLS = 512
"""The most tools one server's listing may offer (the rest are left out)."""
MAX_SCHEMA_CHARS = 64_000
"""The longest input schema a tool may have, as compact JSON."""
MAX_DESCRIPTION_CHARS = 8_000
"""The longest description a model is shown of one tool."""

_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def provider_name(name: str) -> str:
    """``name`` made valid for every provider (see the module)."""
    valid = _INVALID.sub("_", name) or "_"
    if len(valid) <= MAX_NAME:
        return valid
    return f"{valid[: MAX_NAME - 9]}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


class McpTool(dspy.Tool):
    """One tool of an MCP server, as a turn calls it: its call goes to the server by ``remote_name``."""

    any_loop: ClassVar[bool] = True
    """Its call is a request on the MCP layer's own loop, so any loop (a sync turn's too) may await it."""

    remote_name: str = ""
    server_label: str = ""
    parameters_schema: dict[str, Any] = pydantic.Field(default_factory=dict)
    parameters_validator: Any = pydantic.Field(default=None, exclude=True)
    remote: Any = pydantic.Field(default=None, exclude=True)
    """The server's ``mcp.types.Tool`` (its annotations, ``outputSchema``, ``_meta``)."""
    describe: Any = pydantic.Field(default=None, exclude=True)
    server_call: Any = pydantic.Field(default=None, exclude=True)
    """``server_call(remote, arguments, resume=None)``: its server's call (``answered`` finishes one with an answer)."""
    counts_model_calls: bool = False
    """Whether its server answers sampling requests with an LM: the driver then counts the model
    calls made during its call in the turn's usage and bounds them by its limits."""
    """``describe()``: the server's trace attributes now (its transport, its session's protocol)."""

    def __init__(
        self,
        name: str,
        remote: types.Tool,
        schema: dict[str, Any],
        validator: Any,
        call: Callable[..., Awaitable[Any]],
        label: str,
        describe: Callable[[], dict[str, Any]] | None = None,
    ):
        async def run(**arguments: Any) -> Any:
            return await call(remote, arguments)

        description = (remote.description or remote.title or "").strip()[:MAX_DESCRIPTION_CHARS]
        properties = schema.get("properties") or {}
        super().__init__(run, name=name, desc=description, args=dict(properties), arg_types={})
        self.remote_name = remote.name
        self.server_label = label
        self.parameters_schema = schema
        self.parameters_validator = validator
        self.remote = remote
        self.describe = describe
        self.server_call = call
        self.has_kwargs = False  # the whole schema decides what is accepted (``_turn.arguments``)

    def answered(self, asked: Mapping[str, Any], answer: Mapping[str, Any]) -> McpTool:
        """This tool, its next call finishing a call that paused on the server's question (``asked``,
        ``elicit="pause"``) with ``answer`` (``{"action": ..., "content": ...}``, ``_turn.elicitation``)."""
        calls = self.server_call

        async def finish(remote: types.Tool, arguments: dict[str, Any]) -> Any:
            return await calls(remote, arguments, (asked, answer))

        tool = McpTool(self.name, self.remote, self.parameters_schema, self.parameters_validator, finish,
                       self.server_label, self.describe)  # fmt: skip
        tool.counts_model_calls = self.counts_model_calls
        return tool

    @with_callbacks
    async def acall(self, **kwargs: Any) -> Any:
        """The call, its arguments already checked against the whole schema by the turn (DSPy's own
        per-argument check cannot resolve a schema's local ``$ref``s)."""
        return await self.func(**kwargs)

    def trace_attributes(self) -> dict[str, Any]:
        """Attributes of its ``execute_tool`` span, in OpenTelemetry's MCP conventions (and the server's
        own name of the tool)."""
        described = self.describe() if callable(self.describe) else {}
        return {"mcp.method.name": "tools/call", "dspy_imp.mcp.tool": self.remote_name, **described}

    def format_as_litellm_function_call(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.desc, "parameters": self.parameters_schema},
        }

    def __deepcopy__(self, memo: dict[int, Any]) -> McpTool:
        return self  # bound to its server's session, like the server itself


def gated_schema(remote: types.Tool, where: str) -> tuple[dict[str, Any], Any]:
    """The tool's input schema as an object schema, and its validator (``UntrustedSchema`` if refused)."""
    schema = remote.input_schema
    if not isinstance(schema, dict):
        raise UntrustedSchema(where, "must be a JSON schema (an object)")
    sized(schema, where, MAX_SCHEMA_CHARS)
    if schema.get("type", "object") != "object":
        raise UntrustedSchema(where, "must be the schema of an object (`type: object`)")
    if not isinstance(schema.get("properties", {}), dict):
        raise UntrustedSchema(f"{where}.properties", "must be an object")
    whole = {"type": "object", "properties": {}, **schema}
    return whole, gate(whole, where)


def build(
    remotes: list[types.Tool],
    prefix: str | None,
    keep: Callable[[str], bool],
    call: Callable[..., Awaitable[Any]],
    label: str,
    describe: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, McpTool]:
    """A listing's tools by the name the model calls them (see the module)."""
    tools: dict[str, McpTool] = {}
    for remote in remotes:
        if not keep(remote.name):
            continue
        if len(tools) >= MAX_TOOLS:
            logger.warning("dspy_imp.mcp: %s offers more than %d tools; the rest are left out", label, MAX_TOOLS)
            break
        name = provider_name(f"{prefix}_{remote.name}" if prefix else remote.name)
        try:
            schema, validator = gated_schema(remote, f"{remote.name}.inputSchema")
        except UntrustedSchema as refused:
            logger.warning("dspy_imp.mcp: %s: tool %r left out: %s", label, remote.name, refused)
            continue
        if name in tools:
            logger.warning(
                "dspy_imp.mcp: %s: tool %r left out: its name %r is taken by %r",
                label, remote.name, name, tools[name].remote_name,
            )  # fmt: skip
            continue
        tools[name] = McpTool(name, remote, schema, validator, call, label, describe)
    return tools

"""A server's ``sampling/createMessage`` as one model call, and the model's answer as its result.

The request is text and schemas someone else wrote, so it is checked before the model is called,
and a request refused is an MCP error the server reads (``Refused``: ``-32602``, as the
specification asks for a tool result missing or mixed with other content), never an error of the
turn. What is sent is a ``dspy.lm15.Request``, which DSPy's engine puts in the provider's shapes:

- **Messages**: a user message's text (an image or audio block becomes a line naming it); an
  assistant message's text and its ``tool_use`` blocks (the assistant's tool calls); a user message
  of ``tool_result`` blocks (2025-11-25, SEP-1577) is a tool message, each result's text with its
  ``toolUseId`` (the provider's tool role, or its tool-result blocks). The specification's balance is
  checked: the tool uses of an assistant message are answered, every one and only them, by the next
  message, which holds tool results alone; a tool result nowhere else.
- **Tools** (``tools``): each a function tool, its name one every provider accepts (at most 64 of
  ``[A-Za-z0-9_-]``: another is refused, not renamed, since the server reads the name back), its
  ``inputSchema`` checked and completed by the rule for a listed tool's (``_tools.gated_schema``:
  the one gate for untrusted schemas, ``MAX_SCHEMA_CHARS``), its description cut as a listed tool's.
- **toolChoice**: ``auto`` and ``required`` go as the model's ``tool_choice``; ``none`` sends the
  tools with ``tool_choice: none`` (a conversation holding tool calls keeps its tool definitions,
  which some providers require); absent, no ``tool_choice`` (the provider's default, ``auto``).
- **The answer**: tool calls are ``tool_use`` blocks (after the answer's text, when there is some)
  with ``stopReason: "toolUse"``; a model that calls a tool the request did not offer, or any under
  ``none``, is refused. Text alone is a text result, ``stopReason`` ``endTurn`` (``maxTokens``
  when the model ran out of tokens).

Sizes are bounded as a listed tool's and a tool result's are: at most ``MAX_MESSAGES`` messages,
``_results.MAX_BLOCKS`` blocks each, a text cut at ``_results.MAX_TEXT_CHARS``, ``_tools.MAX_TOOLS``
tools, and a tool use's ``input`` at most ``MAX_INPUT_CHARS`` as JSON and ``MAX_DEPTH`` deep.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dspy
import mcp_types as types
from dspy import lm15

from dspy_imp._records.untrusted_schema import MAX_DEPTH, UntrustedSchema
from dspy_imp.mcp._results import MAX_BLOCKS, MAX_TEXT_CHARS
from dspy_imp.mcp._tools import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME,
    MAX_SCHEMA_CHARS,
    MAX_TOOLS,
    gated_schema,
    provider_name,
)

MAX_MESSAGES = 1_000
"""The most messages one sampling request may hold."""
MAX_INPUT_CHARS = MAX_SCHEMA_CHARS
"""The longest ``input`` of a ``tool_use`` block in a request's messages, as compact JSON."""


class Refused(Exception):
    """A sampling request the client will not send to the model (``INVALID_PARAMS``), or an answer
    of the model's it will not pass on (``INTERNAL_ERROR``): the server reads ``error``."""

    def __init__(self, message: str, code: int = types.INVALID_PARAMS):
        super().__init__(message)
        lead = "the sampling request is refused" if code == types.INVALID_PARAMS else "the sampling failed"
        self.error = types.ErrorData(code=code, message=f"{lead}: {message}")


@dataclass(frozen=True)
class Asked:
    """A sampling request as the model gets it, and what its answer may hold."""

    request: lm15.Request
    offered: frozenset[str]
    """The names of the tools the model may call (none under ``toolChoice: none``)."""


def asked(model: str, params: types.CreateMessageRequestParams) -> Asked:
    """The model call answering ``params`` (``Refused`` when the request breaks a rule of the module's)."""
    tools = _tools(params.tools or [])
    mode = params.tool_choice.mode if params.tool_choice is not None else None
    if mode == "required" and not tools:
        raise Refused('`toolChoice` is "required" but the request offers no `tools`')
    choice = lm15.ToolChoice(mode=mode) if mode is not None and tools else None
    try:
        config = lm15.Config(
            max_tokens=params.max_tokens, temperature=params.temperature, stop=tuple(params.stop_sequences or ()),
            tool_choice=choice,
        )  # fmt: skip
        request = lm15.Request(
            model=model, messages=_messages(params.messages), system=params.system_prompt or None, tools=tools,
            config=config,
        )  # fmt: skip
    except (ValueError, TypeError) as error:  # lm15's own checks (a temperature past 2, no messages, ...)
        raise Refused(" ".join(str(error).split()) or type(error).__name__) from None
    offered = frozenset(tool.name for tool in tools) if mode != "none" else frozenset()
    return Asked(request, offered)


def answered(response: Any, asked: Asked, model: str) -> types.CreateMessageResult | types.CreateMessageResultWithTools:
    """The model's ``response`` to ``asked`` as the request's result (``Refused`` for a call it may not make)."""
    if not isinstance(response, lm15.Response):  # an LM that answers text only (a legacy ``BaseLM``)
        return _text_result(str(getattr(response, "text", None) or ""), model, "endTurn")
    text = "\n".join(part.text for part in response.message.parts_of(lm15.TextPart))
    calls = response.tool_calls
    if not calls:
        return _text_result(text, model, "maxTokens" if response.finish_reason == "length" else "endTurn")
    content: list[types.SamplingMessageContentBlock] = [types.TextContent(text=text)] if text.strip() else []
    taken: set[str] = set()
    for index, call in enumerate(calls):
        if call.name not in asked.offered:
            if asked.offered:
                why = f"offered only {sorted(asked.offered)}"
            else:
                why = "said `toolChoice: none`" if asked.request.tools else "offered no tools"
            raise Refused(f"the model called the tool {call.name!r}, but the request {why}", types.INTERNAL_ERROR)
        identifier = call.id if call.id and call.id not in taken else f"call_{index}"
        taken.add(identifier)
        content.append(types.ToolUseContent(id=identifier, name=call.name, input=dict(call.input)))
    return types.CreateMessageResultWithTools(role="assistant", content=content, model=model, stop_reason="toolUse")


def _text_result(text: str, model: str, stop: str) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(text=text), model=model,
                                     stop_reason=stop)  # fmt: skip


def _tools(tools: Sequence[types.Tool]) -> tuple[lm15.FunctionTool, ...]:
    if len(tools) > MAX_TOOLS:
        raise Refused(f"`tools` holds {len(tools)} tools, more than {MAX_TOOLS}")
    made: list[lm15.FunctionTool] = []
    names: set[str] = set()
    for index, tool in enumerate(tools):
        if not tool.name or provider_name(tool.name) != tool.name:
            raise Refused(
                f"`tools[{index}].name` {tool.name[:100]!r} is not a name every provider accepts "
                f"(1 to {MAX_NAME} characters of A-Z, a-z, 0-9, _ and -)"
            )
        if tool.name in names:
            raise Refused(f"`tools[{index}].name` {tool.name!r} names two tools")
        names.add(tool.name)
        try:
            schema, _ = gated_schema(tool, f"tools[{index}].inputSchema")
        except UntrustedSchema as refused:
            raise Refused(str(refused)) from None
        description = (tool.description or tool.title or "").strip()[:MAX_DESCRIPTION_CHARS] or None
        made.append(lm15.FunctionTool(name=tool.name, description=description, parameters=schema))
    return tuple(made)


def _messages(messages: Sequence[types.SamplingMessage]) -> tuple[lm15.Message, ...]:
    if len(messages) > MAX_MESSAGES:
        raise Refused(f"`messages` holds {len(messages)} messages, more than {MAX_MESSAGES}")
    made: list[lm15.Message] = []
    awaited: list[str] = []  # the ids of the previous message's tool uses, answered by this one
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        blocks = message.content_as_list
        if len(blocks) > MAX_BLOCKS:
            raise Refused(f"`{where}` holds {len(blocks)} content blocks, more than {MAX_BLOCKS}")
        results = [block for block in blocks if isinstance(block, types.ToolResultContent)]
        if awaited:
            made.append(_answers(results, blocks, awaited, message.role, where))
            awaited = []
        elif results:
            raise Refused(f"`{where}` holds a tool result, but the message before it holds no tool use")
        elif message.role == "assistant":
            parts, awaited = _assistant(blocks, where)
            made.append(lm15.Message.assistant(parts))
        else:
            made.append(lm15.Message.user("\n".join(_user_text(block, f"{where}.content") for block in blocks)))
    if awaited:
        raise Refused(f"tool result missing in request: the tool uses of the last message ({awaited!r}) have none")
    return tuple(made)


def _answers(results: list[types.ToolResultContent], blocks: Sequence[Any], awaited: list[str], role: str,
             where: str) -> lm15.Message:  # fmt: skip
    """The message after an assistant's tool uses: their results, a tool message."""
    if role != "user" or not results:
        raise Refused(f"tool result missing in request: `{where}` must hold the results of the tool uses before it")
    if len(results) != len(blocks):
        raise Refused(f"`{where}` mixes tool results with other content")
    ids = [result.tool_use_id for result in results]
    if sorted(ids) != sorted(awaited):
        raise Refused(
            f"tool result missing in request: `{where}` answers the tool uses {ids!r}, the message before it "
            f"made {awaited!r}"
        )
    parts = [lm15.tool_result(r.tool_use_id, _result_text(r, where), is_error=bool(r.is_error)) for r in results]
    return lm15.Message.tool(parts)


def _assistant(blocks: Sequence[Any], where: str) -> tuple[list[Any], list[str]]:
    """An assistant message's parts (its text, its tool calls) and the ids of its tool uses."""
    parts: list[Any] = []
    ids: list[str] = []
    for number, block in enumerate(blocks):
        at = f"{where}.content[{number}]"
        if isinstance(block, types.ToolUseContent):
            if not block.name or provider_name(block.name) != block.name:
                raise Refused(f"`{at}.name` {block.name[:100]!r} is not a name every provider accepts")
            if not block.id or block.id in ids:
                raise Refused(f"`{at}.id` {block.id[:100]!r} is empty or names two tool uses")
            parts.append(lm15.ToolCallPart(id=block.id, name=block.name, input=_input(block.input, f"{at}.input")))
            ids.append(block.id)
        else:
            parts.append(lm15.TextPart(_user_text(block, at)))
    return parts, ids


def _user_text(block: Any, where: str) -> str:
    if isinstance(block, types.TextContent):
        return _cut(block.text)
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type} left out]"
    kind = getattr(block, "type", type(block).__name__)
    if isinstance(block, types.ToolUseContent):
        raise Refused(f"`{where}` holds a tool use, which only an assistant message may")
    raise Refused(f"`{where}` holds content of type {str(kind)[:100]!r}, which a sampling message may not")


def _result_text(result: types.ToolResultContent, where: str) -> str:
    """A tool result's text: its text blocks (other media a line naming them), else its structured content."""
    blocks = list(result.content)
    lines = [_content_line(block) for block in blocks[:MAX_BLOCKS]]
    if len(blocks) > MAX_BLOCKS:
        lines.append(f"[{len(blocks) - MAX_BLOCKS} more content blocks left out]")
    if not lines and result.structured_content is not None:
        try:
            lines = [_cut(json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":")))]
        except (TypeError, ValueError, RecursionError):
            raise Refused(f"`{where}` holds structured content that is not JSON") from None
    return "\n".join(lines)


def _content_line(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return _cut(block.text)
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
        return _cut(f"{block.resource.uri}:\n{block.resource.text}")
    if isinstance(block, types.ResourceLink):
        return f"[resource link {str(block.uri)[:2_000]}]"
    return f"[{getattr(block, 'type', 'content')} left out]"


def _input(value: dict[str, Any], where: str) -> dict[str, Any]:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise Refused(f"`{where}` nests deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)
    try:
        size = len(json.dumps(value, separators=(",", ":")))
    except (TypeError, ValueError):
        raise Refused(f"`{where}` is not JSON") from None
    if size > MAX_INPUT_CHARS:
        raise Refused(f"`{where}` is longer than {MAX_INPUT_CHARS} characters as JSON")
    return value


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return f"{text[:MAX_TEXT_CHARS]}\n[{len(text) - MAX_TEXT_CHARS:,} more characters left out]"


def sample(lm: dspy.BaseLM, params: types.CreateMessageRequestParams) -> Any:
    """``lm``'s answer to the sampling request ``params``: its result (``Refused`` before any model
    call when the request breaks a rule; the LM's own failure raised as it is)."""
    model = str(lm.model)
    request = asked(model, params)
    return answered(lm(request.request), request, model)

"""Sampling with tools (MCP 2025-11-25, SEP-1577): a server's ``sampling/createMessage`` carrying
``tools`` and ``toolChoice``, answered by the ``sampling=`` LM with ``tool_use`` blocks, and the
follow-up carrying ``tool_result`` blocks.

The servers are in-process ``MCPServer``s over JSON-RPC on memory streams (``mode="legacy"``: a
2025-11-25 session, where sampling is a request mid-call). A server's tool runs its own loop: it
asks the client's model with its tools, runs the tools the model calls, and asks again with their
results; it keeps what it was answered (``received``) for the test to read whole. Hostile requests
are sent with ``send_request`` (the SDK's ``create_message`` checks the balance itself), so the
client's checks are the ones at work.
"""

from __future__ import annotations

import json
import warnings
from typing import Annotated, Any

import dspy
import mcp_types as types
import pytest
from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

import dspy_imp
from dspy_imp import mcp
from dspy_imp.mcp._sampling import MAX_MESSAGES
from dspy_imp.mcp._tools import MAX_SCHEMA_CHARS, MAX_TOOLS
from dspy_imp.testing import ScriptedLM, call, reply

WEATHER = types.Tool(
    name="get_weather",
    description="Get the weather of a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
FORECASTS = {"Paris": "18C, cloudy", "London": "15C, rainy"}


def answer(text: str) -> Any:
    return reply(f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]")


def calling(name: str, args: dict[str, Any]) -> list[Any]:
    return [reply("calling", calls=[call(name, args, id="c1")]), answer("done")]


def user(text: str) -> types.SamplingMessage:
    return types.SamplingMessage(role="user", content=types.TextContent(text=text))


def dumped(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


class Agentic(MCPServer):
    """A server whose ``forecast`` tool runs a loop on the client's model (at most three requests)."""

    def __init__(self) -> None:
        super().__init__("weather")
        self.received: list[dict[str, Any]] = []
        self.refused: list[tuple[int, str]] = []

        @self.tool()
        async def forecast(question: str, choice: str, ctx: Context) -> str:
            """Answer a weather question with the client's model and the server's weather tool."""
            messages = [user(question)]
            tool_choice = types.ToolChoice(mode=choice) if choice != "absent" else None  # type: ignore[arg-type]
            for _ in range(3):
                try:
                    with warnings.catch_warnings():  # deprecated on 2026-07-28 sessions, still in the protocol
                        warnings.simplefilter("ignore", MCPDeprecationWarning)
                        result = await ctx.session.create_message(
                            messages=messages, max_tokens=200, system_prompt="Answer with the tools.",
                            tools=[WEATHER], tool_choice=tool_choice,
                        )  # fmt: skip
                except MCPError as error:
                    self.refused.append((error.code, error.message))
                    return f"refused: {error.message}"
                self.received.append(dumped(result))
                uses = [b for b in result.content_as_list if isinstance(b, types.ToolUseContent)]
                if result.stop_reason != "toolUse":
                    return " ".join(b.text for b in result.content_as_list if isinstance(b, types.TextContent))
                messages.append(types.SamplingMessage(role="assistant", content=result.content_as_list))
                results = [
                    types.ToolResultContent(
                        tool_use_id=use.id, content=[types.TextContent(text=f"{use.input['city']}: " +
                                                                        FORECASTS[use.input["city"]])]
                    )
                    for use in uses
                ]  # fmt: skip
                messages.append(types.SamplingMessage(role="user", content=results))
            return "too many rounds"


def ask(server: MCPServer, choice: str, sampler: ScriptedLM, run: Any, **options: Any) -> Any:
    toolset = mcp.memory(server, mode="legacy", sampling=sampler)
    agent = dspy_imp.ReActV2("question -> answer", tools=[toolset], **options)
    lm = ScriptedLM(calling("forecast", {"question": "Weather in Paris and London?", "choice": choice}))
    try:
        with dspy.context(lm=lm):
            pred = run(agent, question="q")
    finally:
        toolset.close()
    (observed,) = pred.metadata.history.messages[0]["tool_call_results"]
    return pred, observed["result"]


def test_the_model_calls_the_servers_tools_and_answers_with_their_results(run: Any) -> None:
    sampler = ScriptedLM([
        reply("", calls=[call("get_weather", {"city": "Paris"}, id="w1"), call("get_weather", {"city": "London"},
                                                                                 id="w2")], usage=(20, 5)),
        reply("Paris is warmer.", usage=(40, 4)),
    ])  # fmt: skip
    server = Agentic()
    pred, observed = ask(server, "auto", sampler, run)
    assert observed == "Paris is warmer."
    first, second = sampler.requests
    assert first.messages == [
        {"role": "system", "content": "Answer with the tools."},
        {"role": "user", "content": "Weather in Paris and London?"},
    ]
    assert first.tools == [WEATHER_FUNCTION]
    assert first.tool_choice == "auto"
    assert first.options == {"max_tokens": 200}
    assert second.messages == [
        {"role": "system", "content": "Answer with the tools."},
        {"role": "user", "content": "Weather in Paris and London?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "w1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
            {"id": "w2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"London"}'}},
        ]},
        {"role": "tool", "tool_call_id": "w1", "content": "Paris: 18C, cloudy"},
        {"role": "tool", "tool_call_id": "w2", "content": "London: 15C, rainy"},
    ]  # fmt: skip
    assert (second.tools, second.tool_choice, second.options) == ([WEATHER_FUNCTION], "auto", {"max_tokens": 200})
    assert server.received == [
        {"role": "assistant", "model": "openai/scripted", "stopReason": "toolUse", "content": [
            {"type": "tool_use", "id": "w1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "w2", "name": "get_weather", "input": {"city": "London"}},
        ]},
        {"role": "assistant", "model": "openai/scripted", "stopReason": "endTurn",
         "content": {"type": "text", "text": "Paris is warmer."}},
    ]  # fmt: skip
    usage = pred.metadata.usage
    assert usage.requests["sampling"] == 2  # both of the server's requests are the turn's
    sampled = [c for c in usage.calls if c.kind == "sampling"]
    assert [(c.input_tokens, c.output_tokens) for c in sampled] == [(20, 5), (40, 4)]


def test_required_goes_as_the_models_tool_choice_and_the_answers_text_comes_first(run: Any) -> None:
    sampler = ScriptedLM([
        reply("Looking it up.", calls=[call("get_weather", {"city": "Paris"}, id="w1")]),
        reply("Cloudy."),
    ])  # fmt: skip
    server = Agentic()
    _, observed = ask(server, "required", sampler, run)
    assert observed == "Cloudy."
    assert [r.tool_choice for r in sampler.requests] == ["required", "required"]
    assert sampler.requests[1].messages[2] == {
        "role": "assistant", "content": "Looking it up.",
        "tool_calls": [{"id": "w1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}],
    }  # fmt: skip
    assert server.received[0]["content"] == [
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "w1", "name": "get_weather", "input": {"city": "Paris"}},
    ]


def test_none_sends_the_tools_with_tool_choice_none_and_an_absent_choice_sends_none_at_all(run: Any) -> None:
    sampler = ScriptedLM([reply("No tools needed.")])
    server = Agentic()
    _, observed = ask(server, "none", sampler, run)
    assert observed == "No tools needed."
    (asked,) = sampler.requests
    assert (asked.tools, asked.tool_choice) == ([WEATHER_FUNCTION], "none")
    assert server.received == [
        {"role": "assistant", "model": "openai/scripted", "stopReason": "endTurn",
         "content": {"type": "text", "text": "No tools needed."}},
    ]  # fmt: skip
    sampler = ScriptedLM([reply("Fine.", finish_reason="length")])
    server = Agentic()
    ask(server, "absent", sampler, run)
    (asked,) = sampler.requests
    assert (asked.tools, asked.tool_choice) == ([WEATHER_FUNCTION], None)  # the provider's default: auto
    assert server.received[0]["stopReason"] == "maxTokens"


@pytest.mark.parametrize(
    ("choice", "called", "why"),
    [
        ("none", "get_weather", "the model called the tool 'get_weather', but the request said `toolChoice: none`"),
        ("auto", "send_email", "the model called the tool 'send_email', but the request offered only ['get_weather']"),
    ],
)
def test_a_call_the_request_did_not_allow_is_refused_to_the_server(
    run: Any, choice: str, called: str, why: str
) -> None:
    sampler = ScriptedLM([reply("", calls=[call(called, {"city": "Paris"}, id="w1")])])
    server = Agentic()
    _, observed = ask(server, choice, sampler, run)
    message = f"the sampling failed: {why}"
    assert server.refused == [(types.INTERNAL_ERROR, message)]
    assert observed == f"refused: {message}"
    assert len(sampler.requests) == 1


def test_the_sampling_requests_stay_bounded_by_the_turns_usage_limits(run: Any) -> None:
    sampler = ScriptedLM([reply("", calls=[call("get_weather", {"city": "Paris"}, id="w1")]), reply("unsent")])
    server = Agentic()
    limits = dspy_imp.UsageLimits(requests=2)  # the turn's first step and the first sampling request
    pred, _ = ask(server, "auto", sampler, run, usage_limits=limits)
    assert len(sampler.requests) == 1  # the follow-up may not leave
    ((code, message),) = server.refused
    assert code == types.INTERNAL_ERROR and message.startswith("the sampling failed:")
    assert "usage_limit_exceeded" in message, message
    assert pred.metadata.usage.requests["sampling"] == 1


class Hostile(MCPServer):
    """A server whose ``ask`` tool sends one sampling request as given (no check of the SDK's), and
    returns the error it got (or the result)."""

    def __init__(self, params: types.CreateMessageRequestParams) -> None:
        super().__init__("hostile")
        self.refused: list[tuple[int, str]] = []

        @self.tool()
        async def ask(ctx: Context) -> str:
            """Ask the client's model."""
            request = types.CreateMessageRequest(params=params)
            try:
                result = await ctx.session.send_request(request, types.CreateMessageResultWithTools)
            except MCPError as error:
                self.refused.append((error.code, error.message))
                return "refused"
            return json.dumps(dumped(result))


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def tool(name: str = "get_weather", schema: Any = None) -> types.Tool:
    return types.Tool(name=name, input_schema=schema if schema is not None else WEATHER.input_schema)


USE = types.ToolUseContent(id="w1", name="get_weather", input={"city": "Paris"})
RESULT = types.ToolResultContent(tool_use_id="w1", content=[types.TextContent(text="18C")])


def params(messages: list[Any] | None = None, **fields: Any) -> types.CreateMessageRequestParams:
    return types.CreateMessageRequestParams(messages=messages or [user("hi")], max_tokens=50, **fields)


HOSTILE = [
    pytest.param(params(tools=[tool("get weather")]),
                 "`tools[0].name` 'get weather' is not a name every provider accepts (1 to 64 characters of "
                 "A-Z, a-z, 0-9, _ and -)", id="name-not-valid"),
    pytest.param(params(tools=[tool(), tool()]), "`tools[1].name` 'get_weather' names two tools", id="name-twice"),
    pytest.param(params(tools=[tool(schema=deep_schema(40))]),
                 "`tools[0].inputSchema" + ".properties.x" * 33 + "` nests deeper than 32 levels "
                 "(its $refs expanded)", id="schema-too-deep"),
    pytest.param(params(tools=[tool(schema={"type": "object", "properties": {"x": {"$ref": "https://e.x/s"}}})]),
                 "`tools[0].inputSchema.properties.x.$ref` must be a local reference (`#/...`); nothing is fetched, "
                 "got 'https://e.x/s'", id="schema-fetches"),
    pytest.param(params(tools=[tool(schema={"type": "object", "$id": "https://e.x/s"})]),
                 "`tools[0].inputSchema.$id` is not accepted (only local `$ref`s to `#/...`)", id="schema-moves-base"),
    pytest.param(params(tools=[tool(schema={"type": "object", "description": "x" * MAX_SCHEMA_CHARS})]),
                 f"`tools[0].inputSchema` is longer than {MAX_SCHEMA_CHARS} characters", id="schema-too-long"),
    pytest.param(params(tools=[tool(f"t{i}") for i in range(MAX_TOOLS + 1)]),
                 f"`tools` holds {MAX_TOOLS + 1} tools, more than {MAX_TOOLS}", id="too-many-tools"),
    pytest.param(params([user("hi")] * (MAX_MESSAGES + 1)),
                 f"`messages` holds {MAX_MESSAGES + 1} messages, more than {MAX_MESSAGES}", id="too-many-messages"),
    pytest.param(params(tool_choice=types.ToolChoice(mode="required")),
                 '`toolChoice` is "required" but the request offers no `tools`', id="required-without-tools"),
    pytest.param(params([user("hi"), types.SamplingMessage(role="assistant", content=USE), user("and?")],
                        tools=[tool()]),
                 "tool result missing in request: `messages[2]` must hold the results of the tool uses before it",
                 id="result-missing"),
    pytest.param(params([user("hi"), types.SamplingMessage(role="assistant", content=USE)], tools=[tool()]),
                 "tool result missing in request: the tool uses of the last message (['w1']) have none",
                 id="last-use-unanswered"),
    pytest.param(params([user("hi"), types.SamplingMessage(role="assistant", content=USE),
                         types.SamplingMessage(role="user", content=[RESULT, types.TextContent(text="also")])],
                        tools=[tool()]),
                 "`messages[2]` mixes tool results with other content", id="results-mixed"),
    pytest.param(params([user("hi"), types.SamplingMessage(role="assistant", content=USE),
                         types.SamplingMessage(role="user", content=types.ToolResultContent(tool_use_id="w9"))],
                        tools=[tool()]),
                 "tool result missing in request: `messages[2]` answers the tool uses ['w9'], the message before "
                 "it made ['w1']", id="results-other-ids"),
    pytest.param(params([types.SamplingMessage(role="user", content=RESULT)], tools=[tool()]),
                 "`messages[0]` holds a tool result, but the message before it holds no tool use",
                 id="result-without-use"),
    pytest.param(params([types.SamplingMessage(role="user", content=USE)], tools=[tool()]),
                 "`messages[0].content` holds a tool use, which only an assistant message may", id="use-from-user"),
    pytest.param(params([user("hi"), types.SamplingMessage(role="assistant", content=types.ToolUseContent(
                     id="w1", name="get_weather", input=deep_schema(40)))], tools=[tool()]),
                 "`messages[1].content[0].input` nests deeper than 32 levels", id="use-input-too-deep"),
    pytest.param(params(temperature=5.0), "temperature must be in [0, 2]", id="temperature-out-of-range"),
]  # fmt: skip


@pytest.mark.parametrize(("asked", "why"), HOSTILE)
def test_a_hostile_request_is_refused_to_the_server_and_never_reaches_the_model(
    run: Any, asked: types.CreateMessageRequestParams, why: str
) -> None:
    sampler = ScriptedLM([reply("unsent")])
    server = Hostile(asked)
    toolset = mcp.memory(server, mode="legacy", sampling=sampler)
    lm = ScriptedLM(calling("ask", {}))
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2("question -> answer", tools=[toolset]), question="q")
    toolset.close()
    assert server.refused == [(types.INVALID_PARAMS, f"the sampling request is refused: {why}")]
    assert sampler.requests == []
    assert pred.answer == "done"  # the turn goes on: the server read the refusal, and its tool answered
    assert pred.metadata.usage.requests.get("sampling", 0) == 0


def test_content_of_a_type_sampling_has_not_is_an_error_the_server_reads(run: Any) -> None:
    video = {"role": "user", "content": {"type": "video", "data": "AAAA", "mimeType": "video/mp4"}}
    asked = types.CreateMessageRequestParams.model_construct(messages=[video], max_tokens=50)
    sampler = ScriptedLM([reply("unsent")])
    server = Hostile(asked)
    toolset = mcp.memory(server, mode="legacy", sampling=sampler)
    lm = ScriptedLM(calling("ask", {}))
    with dspy.context(lm=lm), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pydantic: the raw dict is serialized as it is
        run(dspy_imp.ReActV2("question -> answer", tools=[toolset]), question="q")
    toolset.close()
    assert server.refused == [(types.INVALID_PARAMS, "Invalid request parameters")]  # the SDK's own parse
    assert sampler.requests == []


def test_tool_results_of_every_kind_reach_the_model_as_text() -> None:
    from dspy_imp.mcp._sampling import asked

    results = [
        types.ToolResultContent(tool_use_id="a", content=[types.TextContent(text="one"), types.ImageContent(
            data="AAAA", mime_type="image/png")], is_error=True),
        types.ToolResultContent(tool_use_id="b", structured_content={"temp": 18}),
        types.ToolResultContent(tool_use_id="c", content=[types.ResourceLink(name="r", uri="file:///r.txt")]),
    ]  # fmt: skip
    uses = [types.ToolUseContent(id=i, name="get_weather", input={"city": "Paris"}) for i in "abc"]
    made = asked("m", params([user("hi"), types.SamplingMessage(role="assistant", content=uses),
                              types.SamplingMessage(role="user", content=results)], tools=[tool()]))  # fmt: skip
    (answers,) = [m for m in made.request.messages if m.role == "tool"]
    assert [(p.id, [c.text for c in p.content], p.is_error) for p in answers.parts] == [
        ("a", ["one\n[image left out]"], True),
        ("b", ['{"temp":18}'], False),
        ("c", ["[resource link file:///r.txt]"], False),
    ]


@pytest.mark.parametrize("sampling", [True, False])
def test_the_tools_capability_is_declared_only_with_sampling(run: Any, sampling: bool) -> None:
    server = MCPServer("ads")

    @server.tool()
    async def capabilities(ctx: Context) -> str:
        """The client's capabilities."""
        assert ctx.session.client_params is not None
        ad = ctx.session.client_params.capabilities
        return json.dumps(ad.model_dump(mode="json", by_alias=True, exclude_none=True))

    toolset = mcp.memory(server, mode="legacy", sampling=ScriptedLM([]) if sampling else None)
    lm = ScriptedLM(calling("capabilities", {}))
    with dspy.context(lm=lm):
        run(dspy_imp.ReActV2("question -> answer", tools=[toolset]), question="q")
    toolset.close()
    ad = json.loads([m["content"] for m in lm.requests[1].messages if m["role"] == "tool"][-1])
    assert ad.get("sampling") == ({"tools": {}} if sampling else None)


def sample_weather() -> Sample:
    return Sample([user("Weather in Paris?")], max_tokens=30, tools=[WEATHER],
                  tool_choice=types.ToolChoice(mode="required"))  # fmt: skip


async def weather_of(sampled: Annotated[types.CreateMessageResultWithTools, Resolve(sample_weather)]) -> str:
    """Ask the client's model which city to look up."""
    return json.dumps(dumped(sampled))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_resolvers_sampling_with_tools_in_input_required_rounds_and_mid_call(run: Any, mode: str) -> None:
    """On a 2026-07-28 session (``auto``) the request rides an input-required round, and the SDK's
    resolver checks the ``sampling.tools`` capability the request's ``_meta`` declares; on a
    2025-11-25 one (``legacy``) it is a request mid-call."""
    server = MCPServer("resolving")
    server.tool()(weather_of)
    sampler = ScriptedLM([reply("", calls=[call("get_weather", {"city": "Paris"}, id="w1")])])
    toolset = mcp.memory(server, mode=mode, sampling=sampler)
    lm = ScriptedLM(calling("weather_of", {}))
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2("question -> answer", tools=[toolset]), question="q")
    toolset.close()
    (asked,) = sampler.requests
    assert (asked.messages, asked.tools, asked.tool_choice, asked.options) == (
        [{"role": "user", "content": "Weather in Paris?"}],
        [WEATHER_FUNCTION],
        "required",
        {"max_tokens": 30},
    )
    (observed,) = pred.metadata.history.messages[0]["tool_call_results"]
    assert json.loads(observed["result"]) == {
        "role": "assistant", "model": "openai/scripted", "stopReason": "toolUse",
        "content": [{"type": "tool_use", "id": "w1", "name": "get_weather", "input": {"city": "Paris"}}],
    }  # fmt: skip
    assert pred.metadata.usage.requests["sampling"] == 1


def test_the_tool_uses_ids_are_unique_and_a_call_with_no_tools_offered_is_refused() -> None:
    from dspy import lm15

    from dspy_imp.mcp._sampling import Refused, answered, asked

    def response(*calls: tuple[str, str]) -> lm15.Response:
        parts = [lm15.ToolCallPart(id=i, name=n, input={"city": "Paris"}) for i, n in calls]
        usage = lm15.Usage(input_tokens=1, output_tokens=1, total_tokens=2)
        return lm15.Response(id="r", model="m", message=lm15.Message.assistant(parts), finish_reason="tool_call",
                             usage=usage)  # fmt: skip

    offered = asked("m", params(tools=[tool()]))
    result = answered(response(("w1", "get_weather"), ("w1", "get_weather")), offered, "m")
    assert [block.id for block in result.content_as_list] == ["w1", "call_1"]  # type: ignore[union-attr]
    with pytest.raises(Refused) as refused:
        answered(response(("w1", "get_weather")), asked("m", params()), "m")
    assert refused.value.error == types.ErrorData(
        code=types.INTERNAL_ERROR,
        message="the sampling failed: the model called the tool 'get_weather', but the request offered no tools",
    )

"""What a step request on DSPy's native engine pays once, not per request: counted in calls, never timed.

With ``engine="auto"`` (``dspy.LM``'s default) DSPy checked and converted every message of the
history into lm15's types for every request; it plans each request before sending it, and lm15
plans by building the whole wire request and dropping it, so every request's body (its whole
history) and its JSON were written twice; lm15's transport read the proxy settings from the whole
environment for every request; DSPy looked the model up in its price table (a deep copy of the
entry) for every reply; and the loop copied every reply's message through JSON twice to look for
search citations it did not have. ``dspy_private`` says why each saving sends the same bytes; here
each is counted with a spy, and the requests and the prices are compared whole with the savings
undone (``_undone``), sync and async, against the loopback emulator.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import json
import os
from typing import Any

import dspy
import pytest
from emulator import Emulator
from responses import anthropic, chat, chat_server_error, gemini, thinking

import dspy_imp
from dspy_imp._drivers import driver
from dspy_imp._routes import dspy_private, hosted_openai_chat

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

STEPS = 3
SIGNATURE = "question -> answer"
QUESTION = "Where is the thing?"

CHAT: Any = importlib.import_module("dspy._vendor.lm15.providers.openai_chat")
COMMON: Any = importlib.import_module("dspy._vendor.lm15.providers.common")
PROXY: Any = importlib.import_module("dspy._vendor.lm15.transports._proxy")
COSTS: Any = importlib.import_module("dspy.clients.costs")
METADATA: Any = importlib.import_module("dspy.clients.model_metadata")
SELECTION: Any = importlib.import_module("dspy.clients.backend_selection")
CAPABILITIES: Any = importlib.import_module("dspy.clients.capabilities")
ENGINES: Any = importlib.import_module("dspy.clients.engines.lm15_engine")
URL: Any = importlib.import_module("dspy._vendor.lm15.transports._url")
ROUTER: Any = importlib.import_module("dspy._vendor.lm15.router")
EXECUTION: Any = importlib.import_module("dspy.clients.execution")
ANTHROPIC: Any = importlib.import_module("dspy._vendor.lm15.providers.anthropic")
GEMINI: Any = importlib.import_module("dspy._vendor.lm15.providers.gemini")
TYPES: Any = importlib.import_module("dspy._vendor.lm15.types")
SAVINGS = (
    (ANTHROPIC.AnthropicLM, "_payload"),
    (GEMINI.GeminiLM, "_payload"),
    (CHAT, "_ingest_messages"),
    (EXECUTION, "_check_encodable"),
    (CHAT.OpenAIChatLM, "_payload"),
    (COMMON, "json_dumps"),
    (PROXY, "getproxies"),
    (COSTS, "model_info"),
    (CAPABILITIES, "resolve"),
    (ENGINES._Routing, "resolve"),
    (TYPES.Request, "__post_init__"),
)
INSTALLS = (
    "install_built_messages_reuse",
    "install_validated_messages_once",
    "install_planned_body_reuse",
    "install_proxy_lookup_once",
    "install_model_info_once",
    "install_offline_routes_once",
    "install_engine_routes_once",
    "install_converted_rows_reuse",
)


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def _script(steps: int = STEPS) -> list[Any]:
    looks = [chat(None, [(f"call_{i}", "look", {"where": f"place {i}"})]) for i in range(steps)]
    return [*looks, chat("found")]


def _turn(steps: int = STEPS, *, run_async: bool = False) -> tuple[dspy.Prediction, list[str], list[Any]]:
    """One turn of ``steps`` looks then the answer: the prediction, each request's body as JSON text
    (key order kept) and the price DSPy put on each reply."""
    with Emulator(_script(steps)) as emulator:
        lm = dspy.LM("openai/gpt-4o-mini", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False)
        program = dspy_imp.ReActV2(SIGNATURE, tools=[look], max_iters=steps + 2)
        with dspy.context(lm=lm):
            prediction = asyncio.run(program.acall(question=QUESTION)) if run_async else program(question=QUESTION)
    assert prediction.answer == "found"
    assert len(emulator.requests) == steps + 1
    return prediction, [json.dumps(r.body) for r in emulator.requests], [h["cost"] for h in lm.history]


def _undone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every saving of this file undone: lm15's and DSPy's functions as they are (each patch is
    installed once per process, by the first turn, and keeps the original as ``__wrapped__``)."""
    for owner, name in SAVINGS:
        patched = getattr(owner, name)
        assert patched.dspy_imp_wrapped
        monkeypatch.setattr(owner, name, patched.__wrapped__)
    assert SELECTION.LM15Engine.dspy_imp_offline
    monkeypatch.setattr(SELECTION, "LM15Engine", ENGINES.LM15Engine)
    # The wire messages and their JSON kept per turn: lm15's writer and encoder under the patches that stay
    # (``chat_extras``'s, the planned body's) find no memo, and write and encode every request whole.
    monkeypatch.setattr(dspy_private, "_built_memo", lambda memo_of: None)
    for install in INSTALLS:
        monkeypatch.setattr(driver, install, lambda *args: None)  # each turn would install them again
    monkeypatch.setattr(hosted_openai_chat, "_unannotated", lambda response: False)


def _counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, when: Any = None) -> list[int]:
    seen = [0]
    original = getattr(owner, name)

    @functools.wraps(original)  # keeps the marks of the patches installed on it
    def counting(*args: Any, **kwargs: Any) -> Any:
        if when is None or when(*args, **kwargs):
            seen[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return seen


def _bodies_encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """lm15's encodings of a whole Chat Completions body (``common.json_dumps`` calls ``json.dumps`` so)."""

    def body(value: Any, *args: Any, **kwargs: Any) -> bool:
        return kwargs.get("separators") == (",", ":") and isinstance(value, dict) and "messages" in value

    return _counted(monkeypatch, json, "dumps", body)


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_the_requests_and_their_prices_are_the_ones_sent_without_the_savings(monkeypatch, run_async):
    _turn(1, run_async=run_async)  # installs the patches
    _, saved, saved_costs = _turn(run_async=run_async)
    with monkeypatch.context() as undone:
        _undone(undone)
        _, plain, plain_costs = _turn(run_async=run_async)
    assert saved == plain  # every request, whole, key order included
    assert saved_costs == plain_costs
    assert all(isinstance(cost, float) and cost > 0 for cost in saved_costs)
    last = json.loads(saved[-1])
    assert [m["role"] for m in last["messages"]] == ["system", "user", *["assistant", "tool"] * STEPS]
    assert [m["content"] for m in last["messages"] if m["role"] == "tool"] == [
        f"nothing at place {i}" for i in range(STEPS)
    ]


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_each_request_is_written_once_though_dspy_plans_it_first(monkeypatch, run_async):
    _turn(1, run_async=run_async)
    planned = _counted(monkeypatch, CHAT.OpenAIChatLM, "plan")
    written = _counted(monkeypatch, CHAT.OpenAIChatLM, "_build_messages")
    encoded = _bodies_encoded(monkeypatch)
    _turn(run_async=run_async)
    # Each turn here has a new ``dspy.LM``: its first request is planned on a dialect object lm15 makes
    # for planning only (it has sent nothing yet), so that one is written twice; every later one once.
    assert (planned[0], written[0], encoded[0]) == (STEPS + 1, STEPS + 2, STEPS + 2)
    with monkeypatch.context() as undone:  # the count is the saving's: DSPy's own path writes each twice
        _undone(undone)
        written[0] = encoded[0] = 0
        _turn(run_async=run_async)
        assert (written[0], encoded[0]) == (2 * (STEPS + 1), 2 * (STEPS + 1))


def test_a_body_is_reused_only_by_the_send_of_the_request_it_was_planned_for():
    built: list[Any] = []

    class Scope:
        def __init__(self, planning: bool, policy: str = "note") -> None:
            self.planning, self.policy, self.records = planning, policy, []

    def payload(self: Any, request: Any, stream: bool) -> dict[str, Any]:
        built.append(request)
        body = {"model": request, "messages": []}
        scope = scopes.get()
        scope.records.append(("adapted", request))
        return body

    scopes: Any = contextvars.ContextVar("scope", default=None)
    written = dspy_private._planned_payload(lambda: True, scopes, payload)
    owner, other = object(), object()

    def run(scope: Scope, who: Any, request: str, stream: bool = False) -> Any:
        token = scopes.set(scope)
        try:
            return written(who, request, stream), scope.records
        finally:
            scopes.reset(token)

    plan_body, plan_records = run(Scope(True), owner, "a")
    send_body, send_records = run(Scope(False), owner, "a")
    assert send_body is plan_body and send_records == plan_records == [("adapted", "a")]
    assert built == ["a"]
    again, _ = run(Scope(False), owner, "a")  # taken once: a second send builds
    assert again is not plan_body and built == ["a", "a"]
    run(Scope(True), owner, "b")
    for scope, who, request, stream in [
        (Scope(False), other, "b", False),  # another dialect object
        (Scope(False), owner, "c", False),  # another request
        (Scope(False), owner, "b", True),  # streamed
        (Scope(False, "refuse"), owner, "b", False),  # another adaptation policy
    ]:
        body, _ = run(scope, who, request, stream)
        assert body["model"] == request
    assert built == ["a", "a", "b", "b", "c", "b", "b"]


def test_the_environment_is_read_for_proxies_once_and_again_when_it_changes(monkeypatch):
    _turn(1)
    iterated = _counted(monkeypatch, type(os.environ), "__iter__")
    _turn()
    assert iterated[0] == 0  # urllib's getproxies walks the whole environment: twice per request before
    target = URL.parse_url("http://api.example.test/v1/chat/completions")
    assert PROXY.proxy_route_for(target, proxy=None, trust_env=True) is None
    monkeypatch.setenv("HTTP_PROXY", "http://user:pw@proxy.example.test:3128")
    assert PROXY.proxy_route_for(target, proxy=None, trust_env=True) == PROXY.ProxyRoute(
        host="proxy.example.test", port=3128, basic_auth="Basic dXNlcjpwdw=="
    )
    monkeypatch.setenv("NO_PROXY", "api.example.test")
    assert PROXY.proxy_route_for(target, proxy=None, trust_env=True) is None
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.delenv("HTTP_PROXY")
    assert PROXY.proxy_route_for(target, proxy=None, trust_env=True) is None


def test_the_proxy_settings_are_read_again_whenever_the_environment_differs():
    environ: dict[bytes, bytes] = {b"PATH": b"/bin"}
    reads: list[dict[str, str]] = []

    def getproxies() -> dict[str, str]:
        found = {"http": environ[b"HTTP_PROXY"].decode()} if b"HTTP_PROXY" in environ else {}
        reads.append(found)
        return found

    proxies = dspy_private._proxies_per_environment(environ, getproxies)
    assert [proxies(), proxies(), proxies()] == [{}, {}, {}]
    assert len(reads) == 1
    environ[b"HTTP_PROXY"] = b"http://proxy:1"
    first = proxies()
    first["http"] = "changed by a caller"  # each caller gets its own copy
    assert [first, proxies()] == [{"http": "changed by a caller"}, {"http": "http://proxy:1"}]
    assert len(reads) == 2
    del environ[b"HTTP_PROXY"]
    assert proxies() == {} and len(reads) == 3


def test_a_model_is_looked_up_in_the_price_table_once(monkeypatch):
    _turn(1)
    looked_up = _counted(monkeypatch, METADATA, "_provider_names")  # what every lookup of DSPy's asks first
    _, _, costs = _turn()
    with monkeypatch.context() as undone:
        _undone(undone)
        kept = looked_up[0]
        _turn()
    # One lookup per turn is DSPy's capability check of the turn's new LM (``dspy.clients.capabilities``);
    # the price of each reply was one more.
    assert (kept, looked_up[0] - kept) == (1, 1 + STEPS + 1)
    info = COSTS.model_info("openai-chat", "gpt-4o-2024-08-06")
    assert info == COSTS.model_info.__wrapped__("openai-chat", "gpt-4o-2024-08-06") and info["input_cost_per_token"] > 0
    info["input_cost_per_token"] = -1.0  # a caller's copy: the kept entry is untouched
    assert COSTS.model_info("openai-chat", "gpt-4o-2024-08-06")["input_cost_per_token"] > 0
    assert costs == [costs[0]] * len(costs) and costs[0] > 0


def test_a_reply_without_citations_is_not_copied_to_look_for_them(monkeypatch):
    _turn(1)
    copied = _counted(monkeypatch, hosted_openai_chat, "message_of")
    _turn()
    assert copied[0] == 0


def test_the_model_is_routed_offline_once_not_twice_per_request(monkeypatch):
    _turn(1)
    built = _counted(monkeypatch, ENGINES.LM15Engine, "__init__")
    routed = _counted(monkeypatch, ENGINES.LM15Engine, "resolve")
    _turn()
    kept = (built[0], routed[0])
    with monkeypatch.context() as undone:
        _undone(undone)
        _turn()
    # Kept: the engine the turn's new LM sends with, built once, routing each request it plans and
    # sends. Before, engines built to route the model again: two per request (the engine choice and
    # the price) and two for the new LM's capabilities (its engine choice and its catalogue entry).
    assert kept == (1, 2 * (STEPS + 1))
    extra = 2 * (STEPS + 1) + 2
    assert (built[0] - kept[0], routed[0] - kept[1]) == (1 + extra, 2 * (STEPS + 1) + extra)


def test_an_offline_route_is_the_one_lm15_finds_and_a_refusal_is_raised_each_time():
    routes = dspy_private._OfflineRoutes(ENGINES.LM15Engine, SELECTION.RouterConfig)
    config = SELECTION.RouterConfig(env={}, providers=())
    engine = routes.engine(config, model_type="chat")
    found = engine.resolve("openai/gpt-4o-mini")
    assert found == ENGINES.LM15Engine(config, model_type="chat").resolve("openai/gpt-4o-mini")
    assert (found.provider, found.model) == ("openai-chat", "gpt-4o-mini")
    assert routes.engine(config, model_type="chat").resolve("openai/gpt-4o-mini") is found
    assert list(routes.kept) == [((), "chat", "openai/gpt-4o-mini")]
    for _ in range(2):
        with pytest.raises(Exception) as refused:
            routes.engine(config, model_type="chat").resolve("nowhere/some-model")
        assert type(refused.value).__name__ == "UnknownModelError"
    keyed = SELECTION.RouterConfig(env={}, providers=(), api_keys={"openai-chat": "sk-test"})
    other = routes.engine(keyed, model_type="chat").resolve("openai/gpt-4o")
    assert other == ENGINES.LM15Engine(keyed, model_type="chat").resolve("openai/gpt-4o")
    assert other.model == "gpt-4o"
    assert list(routes.kept) == [((), "chat", "openai/gpt-4o-mini")]  # another configuration: not kept


def test_the_engine_routes_each_model_once_per_environment(monkeypatch):
    _turn(1)
    routed = _counted(monkeypatch, ROUTER, "_resolve")  # lm15's router, wherever it is asked
    _turn()
    kept = routed[0]
    with monkeypatch.context() as undone:
        _undone(undone)
        _turn()
    # Kept: the turn's new LM's engine routes its model once and its router once more when it makes the
    # dialect that sends; lm15's router routes each planned request itself. Before, per request: the
    # engine twice (planning, sending) and the two routers built to route it again; per turn, the new
    # LM's capabilities twice.
    assert (kept, routed[0] - kept) == (2 + (STEPS + 1), 3 + 5 * (STEPS + 1))


def test_an_engine_route_is_found_again_when_the_environment_differs(monkeypatch):
    environ: dict[bytes, bytes] = {b"PATH": b"/bin"}
    found: list[str] = []

    def resolve(engine: Any, model: str) -> tuple[str, bytes | None]:
        found.append(model)
        return (model, environ.get(b"OPENAI_API_KEY"))

    class Engine:
        pass

    routed = dspy_private._routes_per_environment(environ, resolve)
    one, two = Engine(), Engine()
    assert [routed(one, "m"), routed(one, "m"), routed(two, "m")] == [("m", None)] * 3
    assert found == ["m", "m"]  # once per engine
    environ[b"OPENAI_API_KEY"] = b"sk"
    assert routed(one, "m") == ("m", b"sk") and found == ["m", "m", "m"]
    assert routed(one, "other") == ("other", b"sk") and routed(one, "m") == ("m", b"sk")
    assert found == ["m", "m", "m", "other"]


def _converted(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int], list[int]]:
    """lm15's conversions of an assistant row's calls and of a row's content, and DSPy's checks of a string."""
    calls = _counted(monkeypatch, CHAT, "_ingest_tool_calls")
    contents = _counted(monkeypatch, CHAT, "_ingest_content_blocks")
    strings = _counted(monkeypatch, EXECUTION, "_check_encodable", lambda value, where: isinstance(value, str))
    return calls, contents, strings


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_each_history_row_is_checked_and_converted_once_not_per_request(monkeypatch, run_async):
    _turn(1, run_async=run_async)
    with monkeypatch.context() as spied:  # taken off before the savings are undone (they spy on the savings)
        saved = _converted(spied)
        _turn(run_async=run_async)
        kept = tuple(count[0] for count in saved)
    with monkeypatch.context() as undone:
        _undone(undone)
        plain = _converted(undone)
        _turn(run_async=run_async)
        before = tuple(count[0] for count in plain)
    # Request k (k = 0..STEPS) holds the system and question rows and k steps, an assistant row with
    # its call and a tool row each. DSPy's own path converts and checks every row in every request;
    # kept, each row once: a settled step is written again (and the system row for every request),
    # equal to what the request before held at the same place, so it is neither converted nor checked
    # again. Both counts also hold one one-row conversion outside the history, the same either way.
    requests, rows = STEPS + 1, STEPS * (STEPS + 1) // 2
    assert before[:2] == (rows, 2 * requests + rows + 1)
    assert kept[:2] == (STEPS, 2 + STEPS + 1)
    # The strings DSPy checks (keys too): 8 in the system and question rows, 19 in a step's two rows.
    assert (before[2], kept[2]) == (sum(8 + 19 * k for k in range(requests)), 8 + 19 * STEPS)


def _plain(function: Any) -> Any:
    """lm15's or DSPy's own function (the patch keeps it as ``__wrapped__`` once a turn installed it)."""
    return getattr(function, "__wrapped__", function)


class _Holder:
    converted: Any = None


def _rows(*tail: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        *tail,
    ]


def _call(i: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "look", "arguments": json.dumps({"n": i})}}
        ],
    }


def _result(i: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": f"r{i}"}


def _ingest_spied() -> tuple[Any, list[list[Any]]]:
    original = _plain(CHAT._ingest_messages)
    runs: list[list[Any]] = []

    def ingest(provider: Any, rows: Any, compat: Any) -> Any:
        runs.append([r.get("role") for r in rows])
        return original(provider, rows, compat)

    holder = _Holder()
    return dspy_private._ingested_once(lambda: holder, ingest), runs


COMPAT: Any = importlib.import_module("dspy._vendor.lm15.compat").resolve_openai_chat_compat(
    importlib.import_module("dspy._vendor.lm15.compat").OpenAIChatCompat()
)


def test_a_run_of_rows_is_converted_again_when_it_changed_and_the_answer_is_lm15s():
    ingested, runs = _ingest_spied()
    original = _plain(CHAT._ingest_messages)
    first = _rows(_call(0), _result(0), _result(1))
    assert ingested("openai-chat", first, COMPAT) == original("openai-chat", first, COMPAT)
    assert runs == [["system"], ["user"], ["assistant"], ["tool", "tool"]]
    second = [*first[:2], _call(0), _result(0), _result(1), _call(2), _result(2)]  # equal copies and a new step
    runs.clear()
    assert ingested("openai-chat", second, COMPAT) == original("openai-chat", second, COMPAT)
    assert runs == [["assistant"], ["tool"]]  # new dicts equal to the rows before at their places: not converted
    second[3]["content"] = "changed in place"  # the very same row, holding something else
    second[1]["content"][0]["text"] = "look again"
    runs.clear()
    assert ingested("openai-chat", second, COMPAT) == original("openai-chat", second, COMPAT)
    assert runs == [["user"], ["tool", "tool"]]
    grown = [*second[:5], _result(3), *second[5:]]  # a run that grew is another run
    runs.clear()
    assert ingested("openai-chat", grown, COMPAT) == original("openai-chat", grown, COMPAT)
    assert runs == [["tool", "tool", "tool"], ["assistant"], ["tool"]]
    ending = [*grown[:3], _result(0), {"role": "user", "content": "seen"}]
    ingested("openai-chat", ending, COMPAT)
    longer = [*ending[:4], _result(1)]  # the tool run before the last run goes on: it is another run
    runs.clear()
    assert ingested("openai-chat", longer, COMPAT) == original("openai-chat", longer, COMPAT)
    assert runs == [["tool", "tool"]]


def test_what_depends_on_more_than_one_run_is_converted_whole_by_lm15():
    ingested, runs = _ingest_spied()
    original = _plain(CHAT._ingest_messages)
    marked = {"type": "text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit"}}
    one_mark = _rows(_call(0), _result(0), {"role": "user", "content": [marked]})
    found = ingested("openai-chat", one_mark, COMPAT)
    assert found == original("openai-chat", one_mark, COMPAT) and found[3] == 3
    assert runs == [["system"], ["user"], ["assistant"], ["tool"], ["user"]]  # one breakpoint: by runs
    developer = _rows({"role": "developer", "content": "later"}, {"role": "user", "content": "hi"})
    assert ingested("openai-chat", developer, COMPAT) == original("openai-chat", developer, COMPAT)
    assert ingested("openai-chat", developer, COMPAT)[1][1].role == "developer"
    system_marked = [{"role": "system", "content": [marked]}, {"role": "user", "content": [dict(marked)]}]
    for rows in (system_marked, _rows({"role": "user", "content": [marked]}, {"role": "user", "content": [marked]})):
        with pytest.raises(ValueError) as saved:
            ingested("openai-chat", rows, COMPAT)
        with pytest.raises(ValueError) as plain:
            original("openai-chat", rows, COMPAT)
        assert str(saved.value) == str(plain.value) and "at most one" in str(saved.value)
    bad = _rows(_call(0), {"role": "tool", "tool_call_id": "c0", "content": 7})
    with pytest.raises(TypeError) as saved_error:
        ingested("openai-chat", bad, COMPAT)
    with pytest.raises(TypeError) as plain_error:
        original("openai-chat", bad, COMPAT)
    assert str(saved_error.value) == str(plain_error.value) and "messages[3]" in str(saved_error.value)
    numbers = _rows({"role": "user", "content": [{"type": "text", "text": "x"}], "extra": 1})
    with pytest.raises(Exception) as refused:
        ingested("openai-chat", numbers, COMPAT)
    assert "messages[2]" in str(refused.value)


def test_a_row_is_checked_again_when_it_changed_and_refused_with_dspys_error():
    calls: list[Any] = []
    original = _plain(EXECUTION._check_encodable)

    def check(value: Any, where: str) -> None:
        calls.append(value)
        original(value, where)

    holder = _Holder()
    checked = dspy_private._checked_once(lambda: holder, check)
    rows = _rows(_call(0), _result(0))
    checked(rows, "messages")
    assert calls == rows
    calls.clear()
    checked([*rows, _result(1)], "messages")
    assert calls == [_result(1)]
    calls.clear()
    rows[3]["content"] = "bad \ud800 text"
    with pytest.raises(ValueError) as saved:
        checked(rows, "messages")
    with pytest.raises(ValueError) as plain:
        original(rows, "messages")
    assert str(saved.value) == str(plain.value) and "U+D800" in str(saved.value)
    assert calls == [rows[3]]
    checked(["a prompt"], "prompt")  # anything but a message list: DSPy's function, as it is


def _provider_turn(provider: str, *, run_async: bool = False) -> list[str]:
    """A turn of ``STEPS`` looks then the answer on Claude (with signed thinking: its requests after the
    first carry reasoning, so they go out as typed requests DSPy plans) or on Gemini: each request's
    body as JSON text."""
    if provider == "anthropic":
        model, base = "anthropic/claude-sonnet-4-5-20250929", "/v1"
        script = [
            anthropic([thinking("Look there.", f"sig{i}")], calls=[(f"toolu_{i}", "look", {"where": f"place {i}"})])
            for i in range(STEPS)
        ] + [anthropic(text="found")]
    else:
        model, base = "gemini/gemini-3-flash-preview", "/v1beta"
        script = [
            gemini(calls=[(f"call_{i}", "look", {"where": f"place {i}"})], signatures=[f"sig{i}"]) for i in range(STEPS)
        ] + [gemini(text="found")]
    with Emulator(script) as emulator:
        lm = dspy.LM(model, api_base=emulator.base_url + base, api_key="sk-test", cache=False, num_retries=0)
        program = dspy_imp.ReActV2(SIGNATURE, tools=[look], max_iters=STEPS + 2)
        with dspy.context(lm=lm):
            prediction = asyncio.run(program.acall(question=QUESTION)) if run_async else program(question=QUESTION)
    assert prediction.answer == "found"
    assert len(emulator.requests) == STEPS + 1
    return [json.dumps(r.body) for r in emulator.requests]


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_an_anthropic_or_gemini_request_dspy_plans_is_written_once(monkeypatch, provider, run_async):
    dialect = ANTHROPIC.AnthropicLM if provider == "anthropic" else GEMINI.GeminiLM
    _provider_turn(provider, run_async=run_async)
    with monkeypatch.context() as spied:
        planned = _counted(spied, dialect, "plan")
        written = _counted(spied, dialect, "_message")  # one call per message of the body
        saved = _provider_turn(provider, run_async=run_async)
        kept = (planned[0], written[0])
    with monkeypatch.context() as undone:
        _undone(undone)
        written = _counted(undone, dialect, "_message")
        plain = _provider_turn(provider, run_async=run_async)
    assert saved == plain  # every request, whole, key order included
    # Request k holds 2k + 1 messages (the question, then a call and its results per step). Claude's first
    # request carries no reasoning and DSPy sends it with the prompt cache unplanned; Gemini's first is
    # planned on a dialect object lm15 makes for planning only (the new LM has sent nothing yet), so it
    # is written twice; every other planned request is written once.
    messages = sum(2 * k + 1 for k in range(STEPS + 1))
    if provider == "anthropic":
        assert kept == (STEPS, messages) and written[0] == 2 * messages - 1
    else:
        assert kept == (STEPS + 1, messages + 1) and written[0] == 2 * messages


# -- The history's wire messages and their JSON, written once per turn ------------------------------------

LONG = 8  # steps of the turns below: enough for every request to hold settled steps


def _tool_rows_written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """lm15's writes of a tool result into a wire message (``_build_messages`` calls it per tool result)."""
    return _counted(monkeypatch, CHAT, "_tool_row_content")


def _result_encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """JSON encodings holding the first tool result's text (lm15 encodes with ``json.dumps``)."""
    return _counted(monkeypatch, json, "dumps", lambda value, *args, **kwargs: "nothing at place 0" in repr(value))


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_each_history_message_is_written_and_encoded_once_per_turn(monkeypatch, run_async):
    _turn(1, run_async=run_async)
    with monkeypatch.context() as spied:
        written, encoded = _tool_rows_written(spied), _result_encoded(spied)
        _, saved, _ = _turn(LONG, run_async=run_async)
        kept = (written[0], encoded[0])
    with monkeypatch.context() as undone:
        _undone(undone)
        written, encoded = _tool_rows_written(undone), _result_encoded(undone)
        _, plain, _ = _turn(LONG, run_async=run_async)
        before = (written[0], encoded[0])
    assert saved == plain
    # Request k (k = 0..LONG) holds k tool results: DSPy's own path writes and encodes each request twice
    # (planned, then sent), so each result into every later request twice; kept, each is written and
    # encoded once. (The loop's own records encode the first result too, as many times either way.)
    assert (before[0], kept[0]) == (LONG * (LONG + 1), LONG)
    assert before[1] - kept[1] == 2 * LONG - 1


def _reads(where: str) -> str:
    """Read somewhere (forty words, so that a context policy clears old results)."""
    return f"read at {where}: " + " ".join(["word"] * 40)


def _policy_turn(*, run_async: bool) -> list[str]:
    """A turn whose context policy clears old tool results mid-turn: the history a request holds changes."""
    script = [chat(None, [(f"call_{i}", "_reads", {"where": f"place {i}"})]) for i in range(LONG)]
    counter = lambda messages, tools, model: sum(len(str(m.get("content") or "").split()) for m in messages)  # noqa: E731
    context = dspy_imp.Context(trigger=150, target=100, window=4000, keep_results=1, counter=counter)
    with Emulator([*script, chat("found")]) as emulator:
        lm = dspy.LM("openai/gpt-4o-mini", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False)
        program = dspy_imp.ReActV2(SIGNATURE, tools=[_reads], max_iters=LONG + 2, context=context)
        with dspy.context(lm=lm):
            call = program.acall(question=QUESTION) if run_async else None
            prediction = asyncio.run(call) if call is not None else program(question=QUESTION)
    assert prediction.answer == "found"
    return [json.dumps(r.body) for r in emulator.requests]


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_a_history_a_context_policy_changes_mid_turn_is_sent_as_without_the_reuse(monkeypatch, run_async):
    _turn(1, run_async=run_async)
    saved = _policy_turn(run_async=run_async)
    with monkeypatch.context() as undone:
        _undone(undone)
        plain = _policy_turn(run_async=run_async)
    assert saved == plain
    cleared = [[m["content"] for m in json.loads(body)["messages"] if m["role"] == "tool"] for body in saved]
    assert any(r.startswith("[The result of _reads") for r in cleared[-1])  # old results cleared by the end
    assert cleared[-1][-1] == _reads(f"place {LONG - 1}")


def _fallback_turn(*, run_async: bool) -> tuple[list[str], list[str]]:
    """A turn whose second request fails on its LM and goes to a fallback LM (another engine, another writer);
    every later request starts at the first LM again. Each server's bodies."""
    first = [chat(None, [("call_0", "look", {"where": "place 0"})]), chat_server_error()]
    first += [chat(None, [(f"call_{i}", "look", {"where": f"place {i}"})]) for i in range(2, LONG)]
    with (
        Emulator([*first, chat("found")]) as one,
        Emulator([chat(None, [("call_1", "look", {"where": "place 1"})])]) as two,
    ):
        lm = dspy.LM("openai/gpt-4o-mini", api_base=one.base_url + "/v1", api_key="sk-test", cache=False, num_retries=0)
        spare = dspy.LM("openai/gpt-4o", api_base=two.base_url + "/v1", api_key="sk-test", cache=False)
        program = dspy_imp.ReActV2(SIGNATURE, tools=[look], max_iters=LONG + 2, fallback=[spare])
        with dspy.context(lm=lm):
            prediction = asyncio.run(program.acall(question=QUESTION)) if run_async else program(question=QUESTION)
    assert prediction.answer == "found"
    assert len(two.requests) == 1
    return [json.dumps(r.body) for r in one.requests], [json.dumps(r.body) for r in two.requests]


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_a_turn_that_switches_models_mid_turn_sends_what_it_sent_without_the_reuse(monkeypatch, run_async):
    _turn(1, run_async=run_async)
    saved = _fallback_turn(run_async=run_async)
    with monkeypatch.context() as undone:
        _undone(undone)
        plain = _fallback_turn(run_async=run_async)
    assert saved == plain
    assert json.loads(saved[1][0])["model"] == "gpt-4o"


def _two_turns(*, run_async: bool) -> list[str]:
    """Two turns of one conversation on one program (the second continues the first's history)."""
    script = [*_script(LONG)[:-1], chat("found"), *_script(2)]
    with Emulator(script) as emulator:
        lm = dspy.LM("openai/gpt-4o-mini", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False)
        program = dspy_imp.ReActV2(SIGNATURE, tools=[look], max_iters=LONG + 2)
        history = None
        with dspy.context(lm=lm):
            for _ in range(2):
                run = program.acall(question=QUESTION, history=history) if run_async else None
                prediction = asyncio.run(run) if run is not None else program(question=QUESTION, history=history)
                history = prediction.metadata.history
    assert len(emulator.requests) == LONG + 1 + 3
    return [json.dumps(r.body) for r in emulator.requests]


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_a_second_turn_on_the_same_program_sends_what_it_sent_without_the_reuse(monkeypatch, run_async):
    _turn(1, run_async=run_async)
    saved = _two_turns(run_async=run_async)
    with monkeypatch.context() as undone:
        _undone(undone)
        plain = _two_turns(run_async=run_async)
    assert saved == plain
    assert json.loads(saved[-1])["messages"][2 : 2 + 2 * LONG] == json.loads(saved[LONG])["messages"][2:]


def test_two_programs_in_threads_each_send_what_they_send_alone(monkeypatch):
    import threading

    _turn(1)
    barrier = threading.Barrier(2)
    found: dict[int, list[str]] = {}

    def one(index: int) -> None:
        barrier.wait()
        found[index] = _turn(LONG + index)[1]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with monkeypatch.context() as undone:
        _undone(undone)
        alone = {i: _turn(LONG + i)[1] for i in range(2)}
    assert found == alone


class _Turn:
    built: Any = None


def _messages(steps: int) -> tuple[Any, ...]:
    m = TYPES.Message
    out = [m.user("look")]
    for i in range(steps):
        out.append(m(role="assistant", parts=(TYPES.ToolCallPart(id=f"c{i}", name="look", input={"n": i}),)))
        out.append(m(role="tool", parts=(TYPES.ToolResultPart(id=f"c{i}", content=(TYPES.TextPart(f"r{i}"),)),)))
    return tuple(out)


def _writer() -> tuple[Any, list[int]]:
    """``_build_messages`` with the memo of one turn, over lm15's own, counting the messages lm15 writes."""
    original = _plain(CHAT.OpenAIChatLM._build_messages)
    wrote: list[int] = []

    def build(self: Any, request: Any, compat: Any, **kwargs: Any) -> Any:
        wrote.append(len(request.messages))
        return original(self, request, compat, **kwargs)

    holder = _Turn()
    return dspy_private._built_once(lambda: holder, contextvars.ContextVar("scope", default=None), CHAT, build), wrote


DIALECT = type("Dialect", (), {"provider": "openai"})()


def _request(messages: tuple[Any, ...], system: str = "be brief") -> Any:
    return TYPES.Request(model="gpt-4o-mini", messages=messages, system=system)


def test_the_messages_of_the_request_before_are_written_again_only_when_they_are_those_objects():
    built, wrote = _writer()
    original = _plain(CHAT.OpenAIChatLM._build_messages)
    history = _messages(4)
    first = built(DIALECT, _request(history[:3]), COMPAT)
    grown = built(DIALECT, _request(history), COMPAT)
    assert grown == original(DIALECT, _request(history), COMPAT)
    assert all(a is b for a, b in zip(first, grown[:4], strict=False))  # the same wire messages
    assert wrote == [3, 6]  # the first request whole, then only the messages after it
    copies = tuple(TYPES.Message(role=m.role, parts=m.parts) for m in history)  # equal, not the same objects
    assert built(DIALECT, _request(copies), COMPAT) == original(DIALECT, _request(copies), COMPAT)
    assert wrote[-1] == 9
    other = built(DIALECT, _request(copies, system="be long"), COMPAT)
    assert other == original(DIALECT, _request(copies, system="be long"), COMPAT) and wrote[-1] == 9
    again = built(type("Dialect", (), {"provider": "openai"})(), _request(copies, system="be long"), COMPAT)
    assert again == other and wrote[-1] == 9  # another dialect object: written whole


def test_a_message_holding_media_and_the_breakpoint_s_message_are_written_each_time():
    built, wrote = _writer()
    original = _plain(CHAT.OpenAIChatLM._build_messages)
    image = TYPES.Message.user(
        [TYPES.TextPart("see"), TYPES.ImagePart(url="https://example.test/a.png", media_type="image/png")]
    )
    history = (image, *_messages(3)[1:])
    built(DIALECT, _request(history[:3]), COMPAT)
    assert built(DIALECT, _request(history), COMPAT) == original(DIALECT, _request(history), COMPAT)
    assert wrote == [3, 7]  # the image's message first: nothing after it is kept
    plain = _messages(3)
    built(DIALECT, _request(plain), COMPAT)
    marked = (*plain, TYPES.Message.user("more"))
    for at in (None, 7, None, 0):  # no breakpoint, then on the last message, none again, then on the first
        assert built(DIALECT, _request(marked), COMPAT, breakpoint_index=at) == original(
            DIALECT, _request(marked), COMPAT, breakpoint_index=at
        )
    # The new message; the message at the breakpoint; that message again, without it; and at the first
    # message, nothing before it to keep.
    assert wrote[-4:] == [1, 1, 1, 8]
    with pytest.raises(Exception) as ours:
        built(DIALECT, _request(marked), COMPAT, breakpoint_index=2)
    with pytest.raises(Exception) as theirs:
        original(DIALECT, _request(marked), COMPAT, breakpoint_index=2)
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))  # lm15's, naming index 2


def test_a_body_s_json_is_lm15_s_whole_and_a_messages_array_not_the_writer_s_is_encoded_whole():
    holder = _Turn()
    original = _plain(COMMON.json_dumps)
    encoded: list[Any] = []

    def dumps(value: Any) -> bytes:
        encoded.append(value)
        return original(value)

    built = dspy_private._built_once(
        lambda: holder, contextvars.ContextVar("scope", default=None), CHAT, _plain(CHAT.OpenAIChatLM._build_messages)
    )
    encode = dspy_private._encoded_once(lambda: holder, dumps)
    history = _messages(3)
    for end in (3, 5, 7):
        items = built(DIALECT, _request(history[:end]), COMPAT)
        body = {"model": "gpt-4o-mini", "messages": items, "tools": [{"type": "function"}], "text": "é\u2028"}
        encoded.clear()
        assert encode(body) == original(body)
    assert [e for e in encoded if isinstance(e, dict) and "role" in e] == items[-2:]  # only the new ones
    copy = {**body, "messages": [dict(m) for m in body["messages"]]}  # equal wire messages, not the writer's
    encoded.clear()
    assert encode(copy) == original(copy) and encoded == [copy]
    reordered = {**body, "messages": [{**dict(reversed(list(items[0].items())))}, *items[1:]]}
    assert encode(reordered) == original(reordered)


# -- LiteLLM: DSPy's copy of each attempt's request -----------------------------------------------------

COPY: Any = importlib.import_module("copy")


def _litellm_turn(steps: int = LONG, *, run_async: bool = False) -> list[str]:
    """One turn on ``engine="litellm"``: each request's body as JSON text (key order kept)."""
    with Emulator(_script(steps)) as emulator:
        lm = dspy.LM(
            "openai/gpt-4o-mini", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False, engine="litellm"
        )
        program = dspy_imp.ReActV2(SIGNATURE, tools=[look], max_iters=steps + 2)
        with dspy.context(lm=lm):
            prediction = asyncio.run(program.acall(question=QUESTION)) if run_async else program(question=QUESTION)
    assert prediction.answer == "found"
    assert len(emulator.requests) == steps + 1
    return [json.dumps(r.body) for r in emulator.requests]


@pytest.mark.parametrize("run_async", [False, True], ids=["call", "acall"])
def test_litellm_gets_each_attempt_s_request_copied_in_c_and_sends_the_same_bytes(monkeypatch, run_async):
    _litellm_turn(1, run_async=run_async)
    assert isinstance(EXECUTION.copy, dspy_private._LegacyCopies)
    with monkeypatch.context() as spied:
        walked = _counted(spied, COPY, "_keep_alive")  # one call per dict, list or tuple ``copy.deepcopy`` copies
        saved = _litellm_turn(run_async=run_async)
        kept = walked[0]
    with monkeypatch.context() as undone:
        _undone(undone)
        undone.setattr(EXECUTION, "copy", COPY)
        undone.setattr(driver, "install_legacy_copies", lambda *args: None)
        walked = _counted(undone, COPY, "_keep_alive")
        plain = _litellm_turn(run_async=run_async)
        before = walked[0]
    assert saved == plain  # every request, whole, key order included
    # DSPy's own copy copies every dict and list of every request (at least the two rows of each step the
    # request holds, and its system and question rows); the copies made in C, none of them. (What is
    # left, as many either way, is LiteLLM's and pydantic's own small copies.)
    rows = sum(2 + 2 * k for k in range(LONG + 1))
    assert before - kept >= rows
    last = json.loads(saved[-1])
    assert [m["role"] for m in last["messages"]] == ["system", "user", *["assistant", "tool"] * LONG]


def _legacy_copies() -> tuple[Any, Any, list[Any]]:
    holder = _Holder()
    checked = dspy_private._checked_once(lambda: holder, _plain(EXECUTION._check_encodable))
    copies = dspy_private._LegacyCopies(lambda: holder, COPY)
    return copies, checked, [*_rows(_call(0), _result(0))]


def test_a_request_is_copied_in_c_only_when_its_rows_were_just_checked_and_all_of_it_is_plain_data():
    copies, check, rows = _legacy_copies()
    shared = {"type": "object"}
    legacy = {"model": "openai/gpt-4o-mini", "messages": rows, "temperature": 0.5, "n": 1, "tools": [shared, shared]}
    made = copies.deepcopy(legacy)
    assert made == COPY.deepcopy(legacy)  # nothing checked yet: DSPy's own copy
    check(rows, "messages")
    made = copies.deepcopy(legacy)
    assert made == legacy and json.dumps(made) == json.dumps(legacy)  # the same values, keys in the same order
    assert made["tools"][0] is made["tools"][1]  # held twice, as ``deepcopy`` keeps it

    def objects(value: Any) -> list[int]:
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        return [id(value), *(i for item in inner for i in objects(item))] if isinstance(value, (dict, list)) else []

    assert not set(objects(made)) & set(objects(legacy))  # no dict or list of the request in the copy
    odd = {**legacy, "extra_body": bytearray(b"x")}  # marshal would make it bytes
    assert type(copies.deepcopy(odd)["extra_body"]) is bytearray
    other = {**legacy, "messages": list(rows)}  # not the list DSPy checked
    made = copies.deepcopy(other)
    assert made == other and made["messages"] is not other["messages"]
    numbered = [*rows, {"role": "user", "content": [{"type": "text", "text": "x", "n": 1}]}]
    check(numbered, "messages")  # a row holding a number: not known to be plain
    made = copies.deepcopy({**legacy, "messages": numbered})
    assert made["messages"] == numbered and type(made["messages"][-1]["content"][0]["n"]) is int
    assert copies.copy is COPY.copy and copies.deepcopy(rows, {}) == rows

"""What a step request on DSPy's native engine pays once, not per request: counted in calls, never timed.

With ``engine="auto"`` (``dspy.LM``'s default) DSPy plans each request before sending it, and lm15
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
from responses import chat

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
SAVINGS = (
    (CHAT.OpenAIChatLM, "_payload"),
    (COMMON, "json_dumps"),
    (PROXY, "getproxies"),
    (COSTS, "model_info"),
    (CAPABILITIES, "resolve"),
    (ENGINES._Routing, "resolve"),
)
INSTALLS = (
    "install_planned_body_reuse",
    "install_proxy_lookup_once",
    "install_model_info_once",
    "install_offline_routes_once",
    "install_engine_routes_once",
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

"""Every use of DSPy 3.4's private API, in one place (the import contracts allow it nowhere else).

Each function names the private piece it reaches and why no public one does the job. They
import lazily: DSPy's execution modules load LiteLLM-facing code that a program without a
request never needs, and ``_routes.warmup`` decides when LiteLLM's cold import is paid.
When DSPy changes one of these, this module is the list to check.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any

import dspy
import pydantic

# Eager, as before: the adapter wraps every step's LM call in DSPy's capability planner.
from dspy.clients.capabilities import with_capability_planning as with_capability_planning

from dspy_imp._routes.state_loading import load_except
from dspy_imp._routes.sync_streams import closing_sync_stream


def select_backend(lm: Any, lm_kwargs: dict[str, Any]) -> Any:
    """DSPy's own engine choice for an LM and options (``dspy.clients.backend_selection``).

    Why: which engine sends a request decides what reasoning state can be replayed, and
    ``dspy.LM`` exposes no public "which engine would you use" query.
    """
    from dspy.clients.backend_selection import select_backend as select

    return select(lm, lm_kwargs)


@functools.cache
def client_keys() -> frozenset[str]:
    """The option names DSPy treats as client settings, not request options (``CLIENT_KEYS``; read once:
    a module constant, asked for on every request)."""
    from dspy.clients.backend_selection import CLIENT_KEYS

    return frozenset(CLIENT_KEYS)


def canonical(lm: Any, messages: list[dict[str, Any]], lm_kwargs: dict[str, Any], compat: Any = None) -> Any:
    """DSPy's messages -> ``dspy.lm15.Request`` conversion (``dspy.clients.execution``).

    Why: a request that carries signed reasoning must go out as a typed ``Request`` built
    exactly as DSPy would build it from the same messages, plus the state DSPy's messages
    path drops; the conversion itself is private.
    Returns the prepared call (``.legacy`` holds its options) and a function of ``compat``
    that builds the request.
    """
    from dspy.clients.execution import _canonical, prepare

    with _typed():  # its rows are copies made for this request: nothing to reuse (``install_converted_rows_reuse``)
        call = prepare(lm, None, messages, lm_kwargs)

    def build(compat: Any) -> Any:
        with _typed():
            return _canonical(call, compat=compat)

    return call, build


@contextlib.contextmanager
def _typed() -> Iterator[None]:
    token = _TYPED.set(True)
    try:
        yield
    finally:
        _TYPED.reset(token)


def legacy_output(response: Any) -> dict[str, Any]:
    """The adapter outputs DSPy makes of a native response (``dspy.clients.call_result``)."""
    from dspy.clients.call_result import legacy_output as output

    return output(response)


def provider_tool_call(provider_call: Any) -> dict[str, Any]:
    """A provider's tool call as DSPy's ``ToolCalls`` dict (``dspy.adapters.base``).

    Why: the adapter reads native calls exactly as DSPy's own adapters do, ids and all.
    """
    from dspy.adapters.base import _provider_tool_call_to_tool_call_dict

    return _provider_tool_call_to_tool_call_dict(provider_call)


def resolve_json_schema_reference(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool schema with its ``$ref``s resolved as ``dspy.Tool`` resolves them (``dspy.adapters.types.tool``)."""
    from dspy.adapters.types.tool import _resolve_json_schema_reference

    return _resolve_json_schema_reference(schema)


def litellm() -> Any:
    """DSPy's one cached LiteLLM import (``dspy.clients._litellm``), paid for on purpose."""
    from dspy.clients._litellm import get_litellm

    return get_litellm(feature="dspy.LM")


def lm15_openai_responses() -> Any:
    """lm15's Responses API provider module (``dspy._vendor.lm15.providers.openai``).

    Why: its input writer sends a replayed reasoning item with its id, encrypted content and one
    joined summary part only; ``_routes.responses_bridge`` wraps it to send the summary parts and the
    ``reasoning_text`` content as served, and ``_routes.hosted_openai`` wraps it to send an assistant
    message that ran hosted tools back as the output items it was served with. Imported by name: lm15
    ships its own types.
    """
    import importlib

    return importlib.import_module("dspy._vendor.lm15.providers.openai")


def lm15_anthropic() -> Any:
    """lm15's Anthropic Messages provider module (``dspy._vendor.lm15.providers.anthropic``).

    Why: DSPy's ``CacheConfig`` marks one message; ``_routes.caching`` wraps the body writer
    (``AnthropicLM._payload``) to add the second moving breakpoint. Imported by name.
    """
    import importlib

    return importlib.import_module("dspy._vendor.lm15.providers.anthropic")


def lm15_gemini() -> Any:
    """lm15's Gemini generateContent provider module (``dspy._vendor.lm15.providers.gemini``).

    Why: lm15 skips the parts Gemini's built-in tools serve (``executableCode``, ``toolCall``...)
    and writes a model turn from its own parts; ``_routes.hosted_gemini`` wraps ``GeminiLM._message``
    to send such a turn back as served, and ``GeminiLM._payload`` to ask for the tool-combination flag.
    And lm15's stream reader (``GeminiLM.parse_stream_events``) places a streamed part by its place in
    its chunk, so parallel function calls that each come first in their chunk are assembled as one
    call; ``_routes.hosted_streams`` wraps it to give each call its own place, on every Gemini stream.
    Imported by name.
    """
    import importlib

    return importlib.import_module("dspy._vendor.lm15.providers.gemini")


def lm15_async_providers() -> Any:
    """lm15's async provider module (``dspy._vendor.lm15.providers.async_base``).

    Why: a streamed reply's raw frames reach only the provider's frame reader, and lm15's stream
    events drop the server-tool blocks Anthropic and Gemini serve; ``_routes.hosted_streams`` wraps
    the sync and async ``_stream_raw`` of those providers (the async ones live here) to assemble the
    reply's body from the frames. Imported by name.
    """
    import importlib

    return importlib.import_module("dspy._vendor.lm15.providers.async_base")


def lm15_openai_chat() -> Any:
    """lm15's Chat Completions provider module (``dspy._vendor.lm15.providers.openai_chat``).

    Why: its body reader refuses a whole reply over one call without a name; ``_routes.nameless``
    wraps that reader so the valid sibling calls survive. Its tool writer refuses every builtin tool on
    Chat Completions; ``_routes.hosted_openrouter`` wraps it to write OpenRouter's ``openrouter:web_search``
    server tool (a ``tools`` entry lm15 has no spelling for). Imported by name: lm15 ships its own types.
    """
    import importlib

    return importlib.import_module("dspy._vendor.lm15.providers.openai_chat")


def dspy_lm_module() -> Any:
    """DSPy's ``dspy.clients.lm`` module, whose ``_convert_chat_request_to_responses_request`` turns a
    chat request into a Responses API one on the LiteLLM engine.

    Why: that conversion drops every message key it does not know, so the Responses API's reasoning
    items cannot reach LiteLLM; ``_routes.responses_bridge`` wraps it to put them back.
    """
    import importlib

    return importlib.import_module("dspy.clients.lm")


def checked_tool(func: Any, validator: Any) -> Any:
    """``dspy.Tool(func)`` whose own argument check builds its validators once (``Tool._validate_and_parse_args``).

    Why: ``dspy.Tool.__call__`` checks every call's arguments again, with ``jsonschema.validate``
    (which re-checks the schema against its meta-schema each time) and a pydantic model built per
    argument (``create_model("Wrapper", ...)``): about 0.4 ms a call, a fifth of a short turn's
    per-request cost, and no public option caches or skips it. The override keeps DSPy's checks,
    values and messages, with each argument's validator (``validator(schema)``, the loop's own
    cached one) and wrapper model built once. Tools given as ``dspy.Tool`` are left as they are.

    The validator is the tool's own (a private attribute, pickled with it), not its class's: a
    program saved with ``save_program=True`` and loaded in a fresh process builds no tool, so
    nothing set on the class at construction would be there (issue 47).
    """
    tool = CheckedTool(func)
    tool._validator = validator
    return tool


class CheckedTool(dspy.Tool):
    """A ``dspy.Tool`` for a function the loop wrapped itself (see ``checked_tool``)."""

    _validator: Any = pydantic.PrivateAttr(default=None)

    def _validate_and_parse_args(self, **kwargs: Any) -> dict[str, Any]:
        from jsonschema.exceptions import best_match

        for key, value in kwargs.items():  # DSPy 3.4's checks and messages, in its order
            if key not in self.args:
                if self.has_kwargs:
                    continue
                raise ValueError(f"Arg {key} is not in the tool's args.")
            instance = value.model_dump() if hasattr(value, "model_dump") else value
            spec = self.args[key]
            if spec.get("type") not in (None, "Any"):
                error = best_match(self._validator(spec).iter_errors(instance))
                if error is not None:
                    raise ValueError(f"Arg {key} is invalid: {error.message}")
        parsed = {}
        for key, value in kwargs.items():
            kind = self.arg_types.get(key, Any)
            parsed[key] = value if kind == Any else _wrapper(kind).model_validate({"value": value}).value
        return parsed


_WRAPPERS: dict[Any, Any] = {}


def _wrapper(annotation: Any) -> Any:
    """DSPy's one-field pydantic model for parsing an argument, built once per annotation."""
    from pydantic import create_model

    try:
        model = _WRAPPERS.get(annotation)
    except TypeError:  # an unhashable annotation: built per call, as DSPy does
        return create_model("Wrapper", value=(annotation, ...))
    if model is None:
        model = _WRAPPERS[annotation] = create_model("Wrapper", value=(annotation, ...))
    return model


@contextlib.contextmanager
def capabilities_known(lm: Any, lm_kwargs: dict[str, Any], known: dict[Any, Any], key: Any) -> Iterator[None]:
    """DSPy's per-call capability scope (``dspy.clients.capabilities._planning``), filled from ``known``.

    Why: DSPy works out an LM's capabilities (its engine choice, then the model catalogue) once
    per adapter call, about 0.4 ms, the largest fixed cost of a short request, and keeps the
    answer only for that call. The scope opened here is the one DSPy's adapter then reuses (same
    LM, same options object); it starts with the answer an earlier request of this LM computed
    under the same ``key`` (the route's: the answer depends on which options are set, as the
    route does), and leaves its answer there for the next.
    """
    from dspy.clients.capabilities import _planning, planning_scope

    with planning_scope(lm, lm_kwargs):
        scope = _planning.get()
        if scope is not None and scope.lm is lm and scope.value is None and key in known:
            scope.value = known[key]
        try:
            yield
        finally:
            if scope is not None and scope.lm is lm and scope.value is not None:
                known[key] = scope.value


def wrap_once(owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
    """Replace ``owner.<name>`` (a private DSPy or lm15 function) with ``wrap(original)``, once per process.

    The wrapper takes the original's name and docstring (``functools.wraps``) and a mark naming
    the patch (``wrap``'s module and qualified name) that makes a second call with the same patch a
    no-op: each patch is installed once, however many programs ask for it. Two different patches of
    one attribute stack (the later one wraps the earlier): ``_routes.responses_bridge`` and
    ``_routes.hosted_openai`` both wrap lm15's Responses input writer.
    """
    original = getattr(owner, name)
    patch = f"{wrap.__module__}.{wrap.__qualname__}"
    installed: frozenset[str] = getattr(original, "dspy_imp_patches", frozenset())
    if patch in installed:
        return
    wrapper: Any = functools.wraps(original)(wrap(original))
    wrapper.dspy_imp_wrapped = True
    wrapper.dspy_imp_patches = installed | {patch}
    setattr(owner, name, wrapper)


_REQUEST_SECONDS: ContextVar[float | None] = ContextVar("dspy_imp_request_seconds", default=None)


@contextlib.contextmanager
def request_seconds(seconds: float | None) -> Iterator[None]:
    """The native engine's HTTP requests sent in this block wait at most ``seconds`` for each read and write.

    Why: DSPy keys its native engine store on the LM's client settings, ``timeout`` included
    (``dspy.clients.execution._select_engine``), so a deadline's ``timeout`` option (the time left,
    a new number at each request) built an engine, with its own connection pool and socket, per
    request, and kept it for the LM's lifetime. lm15's transport takes a read and a write timeout
    per request (``TransportRequest.read_timeout``/``write_timeout``), but nothing public sets
    them; every dialect builds its HTTP requests with ``dspy._vendor.lm15.providers.common.
    make_json_request``, looked up in its module at each call, so that attribute is the one hook.
    The wrapper fills the two timeouts a dialect left unset from this block's ``seconds``; outside
    such a block, or with ``None``, it changes nothing. Installed once.
    """
    if seconds is None:
        yield
        return
    import importlib

    wrap_once(importlib.import_module("dspy._vendor.lm15.providers.common"), "make_json_request", _bounded_request)
    token = _REQUEST_SECONDS.set(seconds)
    try:
        yield
    finally:
        _REQUEST_SECONDS.reset(token)


def _bounded_request(make: Callable[..., Any]) -> Callable[..., Any]:
    def make_json_request(*args: Any, **kwargs: Any) -> Any:
        seconds = _REQUEST_SECONDS.get()
        if seconds is not None:
            for name in ("read_timeout", "write_timeout"):
                if kwargs.get(name) is None:
                    kwargs[name] = seconds
        return make(*args, **kwargs)

    return make_json_request


def install_closing_sync_streams() -> None:
    """A sync ``dspy.streamify`` stream whose consumer closes it stops the program it streams.

    Why: DSPy 3.4's sync streaming (``dspy.streaming.streamify.apply_sync_streaming``) runs the
    program's async stream in a daemon thread and never tells it that the consumer stopped:
    after ``close()`` (or a ``break`` that drops the generator) the turn goes on, every request
    and tool of it, for nobody. ``streamify`` offers no option for this, and its sync streamer
    looks the function up in its module at each call, so the module attribute is the one hook.
    The replacement hands the consumer the same items and errors; on ``close()`` it cancels the
    producer's task on its own loop (``call_soon_threadsafe``) and waits, bounded, for it to end,
    so the stream is closed when ``close()`` returns and a ``dspy_imp`` turn, which checks its
    stream before each effect (``_watch.streaming.Watch``), stops at the next one. Idempotent.
    """
    import importlib

    module: Any = importlib.import_module("dspy.streaming.streamify")  # the package's name is the function's
    if not getattr(module.apply_sync_streaming, "dspy_imp_closing", False):
        module.apply_sync_streaming = closing_sync_stream


def install_loop_finetune_data(data_for: Any) -> None:
    """``BootstrapFinetune`` writes a traced loop step as the request the loop sent, whatever adapter it uses.

    Why: ``BootstrapFinetune._prepare_finetune_data`` formats each traced step through
    ``dspy.teleprompt.bootstrap_finetune.build_call_data_from_trace`` with the optimizer's
    adapter, else ``dspy.settings.adapter``, else a ``ChatAdapter``: only ``ReActAdapter`` knows a
    loop step's real request, and any other adapter silently re-renders the step as text-written
    calls without their tool results. The adapter DSPy picks is not ours to choose, and
    ``_prepare_finetune_data`` looks the function up in its module at each call, so the module
    attribute is the one hook. The replacement asks ``data_for(outputs)`` (the step's request
    pinned on its traced prediction, ``_drivers.finetune``) first and hands every other trace
    entry to DSPy's function unchanged. Idempotent.
    """
    import importlib

    module: Any = importlib.import_module("dspy.teleprompt.bootstrap_finetune")
    dspy_own = module.build_call_data_from_trace
    if getattr(dspy_own, "dspy_imp_loop_data", False):
        return

    def build_call_data_from_trace(
        trace: list[Any], pred_ind: int, adapter: Any, exclude_demos: bool = False
    ) -> dict[str, Any]:
        data = data_for(trace[pred_ind][2])
        return data if data is not None else dspy_own(trace, pred_ind, adapter, exclude_demos)

    build_call_data_from_trace.dspy_imp_loop_data = True  # type: ignore[attr-defined]
    module.build_call_data_from_trace = build_call_data_from_trace


def freeze(module: Any) -> Any:
    """Mark a module compiled (``Module._compiled``), so optimizers leave its parameters alone.

    Why: ``named_parameters`` skips a compiled sub-module, and DSPy has no public "frozen" flag; a
    conversation program freezes its simulated user this way (``dspy_imp.evals.Conversing``).
    """
    module._compiled = True
    return module


def install_part_tolerant_loading(optional: Callable[[Any], frozenset[int]]) -> None:
    """A DSPy module holding a ``dspy_imp`` program loads a file saved without some of its parts.

    Why: ``BaseModule.load_state`` (a wrapper module's: one holding agents as attributes) reads
    ``state[name]`` for every parameter its walk finds, so a file saved before a sub-agent, a
    guardrail module or a context policy's summarizer existed raises ``KeyError``; the program's
    own ``load_state`` is never asked. The wrapped method skips a missing key whose parameter is
    one ``optional(module)`` names (the ids of such parts of the programs it holds) and leaves that
    part as it is; anything else missing still raises DSPy's ``KeyError``. As DSPy's, it runs on
    a copy first, so a file that fails applies nothing. Idempotent.
    """
    import dspy

    def wrap(original: Any) -> Any:
        def load_state(self: Any, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> Any:
            skip = optional(self)
            missing = {n for n, p in self.named_parameters() if n not in state and id(p) in skip}
            if not missing:
                return original(self, state, allow_unsafe_lm_state=allow_unsafe_lm_state)
            load_except(self, state, missing.__contains__, allow_unsafe_lm_state)
            return None

        return load_state

    wrap_once(dspy.BaseModule, "load_state", wrap)


@contextlib.contextmanager
def adapter_call_to(lm: Any, sender: Any) -> Iterator[None]:
    """The adapter's message call to ``lm`` sent through ``sender`` (a copy made after the adapter
    chose ``lm``): DSPy's deprecation check knows the adapter's call by its LM (``_adapter_call``)."""
    from dspy.clients import _deprecation

    origin = _deprecation._adapter_call.get()
    same = sender is lm or origin is None or origin[0] is not lm
    with contextlib.nullcontext() if same else _deprecation.adapter_message_call(sender, origin[1]):
        yield


def native_thinking(model: str, effort: str) -> tuple[int, int] | None:
    """What DSPy's native engine sends to Anthropic for ``reasoning_effort=effort`` on ``model``:
    ``(budget_tokens, visible max_tokens when none is set)``, or ``None`` for a model of the
    adaptive class (``thinking: {"type": "adaptive"}``, no budget).

    Why: lm15's effort-to-budget table (``EFFORT_THINKING_BUDGETS``), its class test and its
    default output ceiling are private; LiteLLM maps the same effort to another budget and
    ceiling, and the loop makes that engine send what DSPy's default engine sends.
    """
    import importlib  # by name: the vendored modules are not for the type checker to follow

    anthropic = importlib.import_module("dspy._vendor.lm15.providers.anthropic")
    budgets = importlib.import_module("dspy._vendor.lm15.providers.common").EFFORT_THINKING_BUDGETS
    if anthropic.anthropic_adaptive_class(model) or effort not in budgets:
        return None
    return int(budgets[effort]), int(anthropic._default_max_tokens(model))


def native_max_tokens(model: str) -> int:
    """The ``max_tokens`` DSPy's native engine sends to Anthropic for ``model`` when none is set.

    Why: lm15's default output ceiling (``_default_max_tokens``) is private; LiteLLM sends the
    model's whole output limit instead (128,000 on the adaptive-class models), and the loop makes
    that engine send what DSPy's default engine sends.
    """
    import importlib  # by name: the vendored modules are not for the type checker to follow

    anthropic = importlib.import_module("dspy._vendor.lm15.providers.anthropic")
    return int(anthropic._default_max_tokens(model))


def set_model_connections(limit: int) -> None:
    """DSPy's native engine (lm15) built from now on keeps up to ``limit`` connections, so up to
    ``limit`` model requests, in flight per pool (``RouterConfig(max_connections=)``).

    Why: ``dspy.clients.execution._select_engine`` builds the native engine's ``RouterConfig``
    itself with no ``max_connections``, so lm15's transport holds a process at its default
    (``DEFAULT_MAX_CONNECTIONS``, 100) model requests at once, the rest queued inside it with no
    sign, and ``dspy.LM`` has no setting for it. ``_select_engine`` looks ``RouterConfig`` up in
    its module at each engine it builds, so that attribute is the one hook: the replacement adds
    ``max_connections`` when the call names none. Engines built before keep their pools; a later
    call replaces the limit (the last app made in a process sets it).
    """
    import importlib

    execution: Any = importlib.import_module("dspy.clients.execution")
    original = getattr(execution.RouterConfig, "dspy_imp_original", execution.RouterConfig)

    def router_config(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("max_connections", limit)
        return original(*args, **kwargs)

    router_config.dspy_imp_original = original  # type: ignore[attr-defined]
    execution.RouterConfig = router_config


_JSON_KINDS = (str, int, float, bool, type(None), list, dict, tuple)
_JSON_ADAPTERS: dict[type, pydantic.TypeAdapter[Any]] = {}


def install_reused_json_adapters() -> None:
    """DSPy's ``dspy.adapters.utils.serialize_for_json`` with one ``TypeAdapter`` per builtin type, reused.

    Why: DSPy builds a new ``pydantic.TypeAdapter(type(value))`` for every value it writes into a
    prompt (``format_field_value``: every input field of every user message, the history's too, on
    every request), about 40 µs each, where the dump itself takes 1 µs: a tenth of a web turn's CPU
    under load. An adapter of a builtin type (``str``, ``int``, ``list``, ...) never changes, so one
    made once dumps the same; any other type (a pydantic model, a user's class) goes to DSPy's own
    function as before. ``format_field_value`` looks the name up in its module at each call, so
    that attribute is the one hook. Installed once.
    """
    from dspy.adapters import utils

    def wrap(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def serialize_for_json(value: Any) -> Any:
            kind = type(value)
            if kind not in _JSON_KINDS:
                return original(value)
            adapter = _JSON_ADAPTERS.get(kind)
            if adapter is None:
                adapter = _JSON_ADAPTERS[kind] = pydantic.TypeAdapter(kind)
            try:
                return adapter.dump_python(value, mode="json", fallback=str)
            except Exception:  # as DSPy falls back: the value's text
                return str(value)

        return serialize_for_json

    wrap_once(utils, "serialize_for_json", wrap)


def install_engine_client_options(lm: Any) -> None:
    """A ``LiteLLMEngine`` given to ``dspy.LM(engine=...)`` sends the client options it was built with.

    Why: DSPy 3.4's ``LiteLLMEngine.complete_legacy`` (and ``AsyncLiteLLMEngine``'s; dspy/clients/
    engines/litellm_engine.py), the path every adapter call to a custom engine takes (the legacy
    shortcut of ``dspy.clients.execution._select_engine``: a call with no typed request and no
    ``prompt_cache``), adds the engine's ``client_options`` (``api_base``, ``api_key``, ``headers``,
    ``extra_headers``, ``timeout``, ...) to the request only when ``wire_model`` is set, which only
    DSPy's own fallback for a declared provider does. An engine the user built,
    ``LiteLLMEngine(api_base=..., timeout=30)``, has none: its requests went to LiteLLM's default
    address (or an ambient ``OPENAI_API_BASE``) with the ambient key, without its headers, under
    LiteLLM's 600 s timeout, while its typed path (``complete``, ``stream``) sends them all. The
    loop drops its own ``timeout`` for a custom engine ("the engine owns its connection"), so that
    engine's turns had no timeout of theirs at all. The wrapper adds the options as DSPy's
    ``wire_model`` branch does (the engine's over the request's). DSPy's check that keeps its
    deprecation warning off its own engines compares with the class attribute, which is then the
    wrapper. Installed once per class, when a turn first sends to an LM with such an engine.
    """
    from dspy.clients.engines import AsyncLiteLLMEngine, LiteLLMEngine

    engines = (getattr(lm, "_engine_spec", None), getattr(lm, "_async_engine_spec", None))
    if any(isinstance(engine, LiteLLMEngine) for engine in engines):
        wrap_once(LiteLLMEngine, "complete_legacy", _with_client_options)
    if any(isinstance(engine, AsyncLiteLLMEngine) for engine in engines):
        wrap_once(AsyncLiteLLMEngine, "complete_legacy", _with_client_options_async)


def _with_client_options(complete_legacy: Callable[..., Any]) -> Callable[..., Any]:
    def with_options(self: Any, lm: Any, request: Any, **context: Any) -> Any:
        if self.wire_model is None and self.client_options:
            request = {**request, **self.client_options}
        return complete_legacy(self, lm, request, **context)

    return with_options


def _with_client_options_async(complete_legacy: Callable[..., Any]) -> Callable[..., Any]:
    async def with_options(self: Any, lm: Any, request: Any, **context: Any) -> Any:
        if self.wire_model is None and self.client_options:
            request = {**request, **self.client_options}
        return await complete_legacy(self, lm, request, **context)

    return with_options


def install_proxy_lookup_once() -> None:
    """lm15's transports read the proxy settings from the environment once per environment, not once per request.

    Why: lm15's sync and async transports find each request's proxy with
    ``dspy._vendor.lm15.transports._proxy.proxy_route_for``, which calls ``urllib.request.getproxies()``
    for every request; on Linux that is ``getproxies_environment``, which decodes and scans every
    environment variable twice: about 50 µs a request with 40 variables set. Its answer is a
    function of ``os.environ`` alone, so it is kept with a copy of the environment it was read from
    (``os.environ``'s own mapping, compared in one step) and read again whenever the environment
    differs: a proxy set or removed at any time is seen by the next request, as before. Where
    ``getproxies`` also reads the system's settings (macOS, Windows) nothing is installed.
    ``proxy_route_for`` looks ``getproxies`` up in its module at each call, so that attribute is the
    one hook. Installed once.
    """
    import importlib
    import os
    import urllib.request

    module: Any = importlib.import_module("dspy._vendor.lm15.transports._proxy")
    environ = getattr(os.environ, "_data", None)  # CPython's mapping behind os.environ (bytes on POSIX)
    original = getattr(module.getproxies, "__wrapped__", module.getproxies)
    if original is not urllib.request.getproxies_environment or not isinstance(environ, dict):
        return

    def wrap(getproxies: Callable[[], dict[str, str]]) -> Callable[[], dict[str, str]]:
        return _proxies_per_environment(environ, getproxies)

    wrap_once(module, "getproxies", wrap)


def _proxies_per_environment(environ: dict[Any, Any], getproxies: Callable[[], dict[str, str]]) -> Callable[[], Any]:
    read: list[Any] = [None, {}]  # a copy of the environment the proxies were read from, and what was read

    def proxies() -> dict[str, str]:
        if environ != read[0]:
            seen = dict(environ)
            read[1] = getproxies()
            read[0] = seen
        return dict(read[1])

    return proxies


def install_model_info_once() -> None:
    """DSPy prices each reply from its model's catalogue entry, looked up once per model.

    Why: ``dspy.clients.costs._estimate_cost`` (run for every native reply, by
    ``dspy.clients.execution._price_result``) asks ``dspy.clients.model_metadata.model_info`` for
    the model's entry each time, which deep-copies it and runs the catalogue's fallback rules (a
    regular expression each): about 50 µs a request, for an answer that depends on the provider,
    the model, the namespaces and the catalogue DSPy loaded (``model_metadata._load()``, loaded once
    per process). It is kept per (provider, model, namespaces) with the catalogue it was read from,
    read again if DSPy ever loads another; ``_estimate_cost`` only reads it, and each call still gets
    its own copy (a shallow one). ``costs`` imports the name at its top, so
    ``dspy.clients.costs.model_info`` is the one hook. Installed once.
    """
    import importlib

    costs: Any = importlib.import_module("dspy.clients.costs")
    metadata: Any = importlib.import_module("dspy.clients.model_metadata")

    def wrap(model_info: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        return _model_info_kept(metadata._load, model_info)

    wrap_once(costs, "model_info", wrap)


def _model_info_kept(load: Callable[[], Any], model_info: Callable[..., dict[str, Any]]) -> Callable[..., Any]:
    kept: dict[Any, tuple[Any, dict[str, Any]]] = {}

    def info(provider: Any, model: Any, *, namespaces: Any = None) -> dict[str, Any]:
        try:
            key = (provider, model, None if namespaces is None else tuple(namespaces))
            hash(key)
        except TypeError:  # not a name DSPy's table could hold: looked up as DSPy does
            return model_info(provider, model, namespaces=namespaces)
        catalogue = load()
        found = kept.get(key)
        if found is None or found[0] is not catalogue:
            found = kept[key] = (catalogue, model_info(provider, model, namespaces=namespaces))
        return dict(found[1])

    return info


class _Planned:
    """A body lm15 built to plan a request (``LM15Engine.plan``), for the send that follows."""

    __slots__ = ("body", "owner", "payload", "policy", "records", "request", "stream")

    def __init__(self, owner: Any, request: Any, stream: bool, policy: Any, payload: Any, records: tuple[Any, ...]):
        self.owner, self.request, self.stream, self.policy = owner, request, stream, policy
        self.payload, self.records = payload, records
        self.body: bytes | None = None


_PLANNED: ContextVar[_Planned | None] = ContextVar("dspy_imp_planned_payload", default=None)
_SENDING: ContextVar[_Planned | None] = ContextVar("dspy_imp_sending_payload", default=None)


def install_planned_body_reuse(in_step: Callable[[], bool]) -> None:
    """A step request DSPy plans before sending it is written once, not twice (native engine: Chat
    Completions, Anthropic Messages, Gemini generateContent).

    Why: with ``engine="auto"`` (``dspy.LM``'s default) ``dspy.clients.execution._select_engine``
    asks the native engine to plan each request (``LM15Engine.plan``: would the route refuse it?)
    before sending it, and lm15 plans by building the whole wire request and dropping it
    (``BaseProviderLM._build(planning=True)``); the send then builds it again: the body (every
    message of the history converted, ``OpenAIChatLM._payload``) and its JSON, twice per request. The
    body is a function of the dialect object, the request (a frozen ``Request``: the send's is an
    equal copy, sharing the plan's messages) and the build's adaptation policy; credentials and
    signing, the only parts planning skips, are added around it (``_emit``). So, only while
    ``in_step()`` (a ``dspy_imp`` step request in flight): the body the plan built is kept with the
    adaptations recorded while building it, and the send that follows, on the same dialect object
    with an equal request, stream flag and policy, takes it (once) and records the same adaptations
    into its own scope instead of building it again; the JSON lm15 made of that very body while
    planning is reused the same way (``common.json_dumps``, looked up in its module by
    ``make_json_request`` at each call). Anything else (another request, another dialect, a
    request outside a step, a body a host rewrote into a copy) is built as before, so every byte
    sent is the same. Anthropic's and Gemini's body writers (``AnthropicLM._payload``,
    ``GeminiLM._payload``) are kept the same way, outside our own patches of them (``_routes.caching``'s
    second breakpoint, ``_routes.hosted_anthropic``'s paused reply, ``_routes.hosted_gemini``'s tool
    flag: the driver installs them first, and each is a function of the request and of the step's
    context, which the plan and the send share), so the body kept is the one those patches
    finished; Gemini's takes no stream flag (the flag picks its endpoint, not its body). DSPy plans a
    request only when it carries no ``prompt_cache`` of DSPy's or is a typed request (one replaying
    signed reasoning), so on Claude with the prompt cache on, only requests that replay thinking
    were written twice. Installed once.
    """
    import importlib

    adaptation: Any = importlib.import_module("dspy._vendor.lm15.adaptation")
    common: Any = importlib.import_module("dspy._vendor.lm15.providers.common")

    def wrap(payload: Callable[..., Any]) -> Callable[..., Any]:
        return _planned_payload(in_step, adaptation._scope, payload)

    def wrap_unstreamed(payload: Callable[..., Any]) -> Callable[..., Any]:
        return _planned_payload(in_step, adaptation._scope, payload, streamed=False)

    wrap_once(lm15_openai_chat().OpenAIChatLM, "_payload", wrap)
    wrap_once(lm15_anthropic().AnthropicLM, "_payload", wrap)
    wrap_once(lm15_gemini().GeminiLM, "_payload", wrap_unstreamed)
    wrap_once(common, "json_dumps", _planned_json)


def _planned_payload(
    in_step: Callable[[], bool], scopes: ContextVar[Any], payload: Callable[..., Any], streamed: bool = True
) -> Callable[..., Any]:
    """``streamed``: ``payload`` takes the stream flag (Chat Completions, Anthropic: ``_payload(request, stream)``);
    Gemini's takes the request alone (the flag picks its endpoint, not its body)."""

    def build(self: Any, request: Any, stream: Any) -> Any:
        return payload(self, request, stream) if streamed else payload(self, request)

    def written(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        scope = scopes.get()
        if streamed and len(args) + len(kwargs) == 1 and (args or "stream" in kwargs):
            stream = args[0] if args else kwargs["stream"]
        elif not streamed and not args and not kwargs:
            stream = None
        else:
            return payload(self, request, *args, **kwargs)
        if scope is None or not in_step():
            return build(self, request, stream)
        if scope.planning:
            _SENDING.set(None)  # a body a host copied was never taken: not kept past the next plan
            start = len(scope.records)
            body = build(self, request, stream)
            _PLANNED.set(_Planned(self, request, stream, scope.policy, body, tuple(scope.records[start:])))
            return body
        planned = _PLANNED.get()
        if (
            planned is not None
            and planned.owner is self
            and planned.stream == stream
            and planned.policy == scope.policy
            and planned.request == request
        ):
            _PLANNED.set(None)
            _SENDING.set(planned)
            scope.records.extend(planned.records)
            return planned.payload
        return build(self, request, stream)

    return written


def _planned_json(json_dumps: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def dumps(value: Any) -> bytes:
        sending = _SENDING.get()
        if sending is not None and value is sending.payload and sending.body is not None:
            _SENDING.set(None)
            return sending.body
        planned = _PLANNED.get()
        body = json_dumps(value)
        if planned is not None and value is planned.payload:
            planned.body = body
        return body

    return dumps


def install_offline_routes_once() -> None:
    """DSPy's offline routing of an LM's model (no environment, no network) worked out once per model.

    Why: for every request DSPy routes the LM's model string twice more with a router it builds
    and drops each time, ``LM15Engine(RouterConfig(env={}, providers=...))``: to choose the engine
    (``dspy.clients.backend_selection.select_backend``) and to price the reply
    (``dspy.clients.capabilities.resolve``, from ``execution._price_result``); about 12 µs each.
    With ``env={}`` that router reads nothing from the environment and consults no
    catalogue (lm15's ``RouterConfig``: "All explicit, nothing discovered behind your back"), so the
    answer, a frozen ``Resolution``, is a function of the LM's declared providers, its model type
    and its model string: it is kept per those three (a model string of ``str`` itself: lm15 reads a
    provider off a ``str`` subclass). A refusal is not kept: it is raised again each time, as
    before; any other router configuration is routed as before. ``select_backend`` looks
    ``LM15Engine`` up in its module at each call and ``_price_result`` imports ``resolve`` from
    its module at each call, so those two attributes are the hooks. Installed once.
    """
    import importlib

    selection: Any = importlib.import_module("dspy.clients.backend_selection")
    capabilities: Any = importlib.import_module("dspy.clients.capabilities")
    if getattr(selection.LM15Engine, "dspy_imp_offline", False):
        return
    engine, config = selection.LM15Engine, selection.RouterConfig
    routes = _OfflineRoutes(engine, config)
    selection.LM15Engine = routes.engine
    wrap_once(capabilities, "resolve", routes.wrap_resolve)


class _OfflineRoutes:
    """The kept answers of ``LM15Engine(RouterConfig(env={}, providers=...), model_type=...).resolve(model)``."""

    def __init__(self, engine: Any, config: Any):
        self.kept: dict[Any, Any] = {}
        self.real, self.config = engine, config
        routes = self

        class OfflineEngine:
            """``select_backend``'s throwaway engine: routes as ``LM15Engine`` does, kept when offline."""

            dspy_imp_offline = True

            def __init__(self, config: Any = None, *, model_type: str = "chat"):
                self.router_config, self.model_type = config, model_type

            def resolve(self, model: str) -> Any:
                return routes.resolve(self.router_config, self.model_type, model)

        self.engine = OfflineEngine

    def resolve(self, config: Any, model_type: str, model: Any, offline: bool = False) -> Any:
        """``offline``: ``config`` is known to be ``RouterConfig(env={}, providers=config.providers)``."""
        providers = getattr(config, "providers", None)
        key = (providers, model_type, model)
        try:
            kept = (
                type(model) is str
                and isinstance(providers, tuple)
                and (offline or config == self.config(env={}, providers=providers))
            )
            found = self.kept.get(key) if kept else None
        except TypeError:  # a declared provider that cannot be hashed: routed each time
            kept, found = False, None
        if found is None:
            found = self.real(config, model_type=model_type).resolve(model)
            if kept:
                self.kept[key] = found
        return found

    def wrap_resolve(self, resolve: Callable[[Any], Any]) -> Callable[[Any], Any]:
        from dspy.lm15 import _definitions

        def routed(lm: Any) -> Any:
            providers = _definitions(getattr(lm, "_providers", ()))
            return self.resolve(self.config(env={}, providers=providers), lm.model_type, lm.model, offline=True)

        return routed


def install_engine_routes_once() -> None:
    """DSPy's native engine routes its model once per environment, not twice per request.

    Why: ``LM15Engine`` routes each request's model again when DSPy plans it (``_Routing.plan``)
    and when it sends it (``_Routing._target``), each time through lm15's router
    (``resolve_openai_chat``, which may route twice): about 10 µs each. An engine's router is
    fixed when the engine is built (a frozen ``RouterConfig``, its table of dialects), and routing is
    offline; the one thing it reads besides is which of a provider's key variables the environment
    sets (``Resolution.env_key``, when the config has no key for it). So the answer, a frozen
    ``Resolution``, is kept per engine and model string (of ``str`` itself) with a copy of the
    environment it was found in (``os.environ``'s own mapping, compared in one step), and found again
    whenever the environment differs; a refusal is raised again each time. ``LM15Engine`` and
    ``AsyncLM15Engine`` inherit ``resolve`` from ``_Routing``, so that attribute is the one hook.
    Installed once.
    """
    import importlib
    import os

    engines: Any = importlib.import_module("dspy.clients.engines.lm15_engine")
    environ = getattr(os.environ, "_data", None)
    if not isinstance(environ, dict):
        return

    def wrap(resolve: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
        return _routes_per_environment(environ, resolve)

    wrap_once(engines._Routing, "resolve", wrap)


def _routes_per_environment(environ: dict[Any, Any], resolve: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    def routed(self: Any, model: str) -> Any:
        if type(model) is not str:  # a str subclass may carry its own provider (lm15's rung 0)
            return resolve(self, model)
        kept: tuple[dict[Any, Any], dict[str, Any]] | None = vars(self).get("_dspy_imp_routes")
        if kept is None or kept[0] != environ:
            kept = (dict(environ), {})
            vars(self)["_dspy_imp_routes"] = kept
        found = kept[1].get(model)
        if found is None:
            found = kept[1][model] = resolve(self, model)
        return found

    return routed


_TYPED: ContextVar[bool] = ContextVar("dspy_imp_typed_canonical", default=False)
_CHECKING: ContextVar[bool] = ContextVar("dspy_imp_checking_rows", default=False)
_UNKEPT: Any = object()  # a row holding anything but dicts, lists, strings and None: converted each time


def _kept_copy(value: Any) -> Any:
    """A deep copy of a message row made only of exact ``dict`` (string keys), ``list``, ``str`` and
    ``None``, or ``_UNKEPT``. Equality with such a copy is exact: no ``1 == True == 1.0``."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is list:
        items = [_kept_copy(item) for item in value]
        return _UNKEPT if any(item is _UNKEPT for item in items) else items
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                return _UNKEPT
            copied = out[key] = _kept_copy(item)
            if copied is _UNKEPT:
                return _UNKEPT
        return out
    return _UNKEPT


class _RowMemo:
    """One turn's message rows as DSPy last checked and converted them (see ``install_converted_rows_reuse``).

    ``checked``: a copy of each row of the last request DSPy checked, in order; ``rows``: a copy of each
    row of the last request lm15 converted, and ``runs`` its runs in order, each ``(start, end, answer,
    kept, before, mark, marks)``: where it starts and ends, what lm15 made of it, whether its rows were
    all copied, and the state before it (how many messages, the breakpoint, how many breakpoints);
    ``messages``: the messages made of them all. Each is replaced by the next request's, so the memo
    holds one request's rows at most, and it lives as long as its turn.
    """

    __slots__ = ("checked", "compat", "listed", "messages", "provider", "pure", "rows", "runs", "verified")

    def __init__(self) -> None:
        self.checked: list[Any] = []
        self.rows: list[Any] = []
        self.runs: list[tuple[Any, ...]] = []
        self.messages: list[Any] = []
        self.provider: Any = None
        self.compat: Any = _UNKEPT
        self.verified: Any = None  # the message list DSPy's check just found equal to ``checked``, row by row
        self.listed: Any = None  # the same, kept for the request's copies (``install_legacy_copies``)
        self.pure = False  # whether every one of ``checked`` is a copy (no row held anything else)

    def copy_of(self, index: int, row: Any) -> Any:
        """A copy of ``row``, the one made when it was checked if it still holds the same."""
        checked = self.checked[index] if index < len(self.checked) else _UNKEPT
        return checked if checked is not _UNKEPT and row == checked else _kept_copy(row)


def install_converted_rows_reuse(memo_of: Callable[[], Any]) -> None:
    """A step request's message history is checked and converted into lm15's types once per row, not
    once per request (DSPy's messages path, the native engine).

    Why: for every request DSPy checks every string of every message (``dspy.clients.execution.
    _check_encodable``, from ``prepare``) and converts the whole message list into an lm15 ``Request``
    (``_canonical`` -> ``request_from_openai_chat`` -> ``openai_chat._ingest_messages``: each row read,
    its keys checked, its parts built and validated): at 100 steps about 40% of a profiled turn, and
    growing with the history. Within a turn the rows of the settled steps are the very same dicts from
    request to request (``_prompt.memo.RenderMemo`` hands them out again), so ``memo_of()`` (the turn's
    ``RenderMemo``, or None outside a step) holds ``_RowMemo``: each row of the last request with a copy
    of what it held, and what lm15 made of each run of rows. A row is taken as checked and converted only
    when it is that very object and equal to its copy (made only of ``dict``, ``list``, ``str`` and
    ``None``, so equality is exact); any other row is checked and converted by DSPy's and lm15's own
    functions. The conversion is run per run of rows, the unit ``_ingest_messages`` itself builds a
    ``Message`` from: one user or assistant row, or consecutive tool rows (one tool ``Message``), and the
    first row on its own (the system prompt); what lm15 returns for the run is what it builds for it
    inside the whole list, and lm15's ``Message`` and parts are frozen. Anything that depends on more
    than one run goes to lm15's function on the whole list: a system or developer row after the first,
    more than one cache breakpoint, a row that is not a dict, and any error (so every error is lm15's,
    naming its row). Off on the typed path (``canonical``: its rows are copied per request, and its
    ``Request`` is kept in ``lm.history``). ``prepare`` and ``_ingest_openai_chat`` look the two
    functions up in their modules at each call, so those attributes are the hooks. Installed once.
    """
    import importlib

    execution: Any = importlib.import_module("dspy.clients.execution")

    def wrap_ingest(ingest: Callable[..., Any]) -> Callable[..., Any]:
        return _ingested_once(memo_of, ingest)

    def wrap_check(check: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
        return _checked_once(memo_of, check)

    wrap_once(lm15_openai_chat(), "_ingest_messages", wrap_ingest)
    wrap_once(execution, "_check_encodable", wrap_check)


def _row_memo(memo_of: Callable[[], Any]) -> _RowMemo | None:
    if _TYPED.get():
        return None
    holder = memo_of()
    if holder is None:
        return None
    memo = getattr(holder, "converted", None)
    if not isinstance(memo, _RowMemo):
        memo = _RowMemo()
        holder.converted = memo
    return memo


def _checked_once(memo_of: Callable[[], Any], check: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    def checked(value: Any, where: str) -> None:
        if where != "messages" or type(value) is not list or _CHECKING.get():
            return check(value, where)
        memo = _row_memo(memo_of)
        if memo is None:
            return check(value, where)
        token = _CHECKING.set(True)  # DSPy's function calls itself for what a row holds: those calls pass
        try:
            known = memo.checked
            shared = min(len(known), len(value))
            if shared and value[:shared] == known[:shared]:  # the usual request: the last one's rows, then more
                fresh, start = known[:shared], shared
            else:
                fresh, start = [], 0
            for index in range(start, len(value)):
                row = value[index]
                copy = known[index] if index < len(known) else _UNKEPT
                if copy is _UNKEPT or row != copy:
                    check(row, where)  # DSPy's check and error, row by row in the same order
                    copy = _kept_copy(row)
                fresh.append(copy)
            memo.checked, memo.verified, memo.listed = fresh, value, value
            memo.pure = _UNKEPT not in fresh  # every row made only of dicts, lists, strings and None
        finally:
            _CHECKING.reset(token)
        return None

    return checked


def _ingested_once(memo_of: Callable[[], Any], ingest: Callable[..., Any]) -> Callable[..., Any]:
    def ingested(provider: Any, rows: Any, compat: Any) -> Any:
        memo = _row_memo(memo_of) if type(rows) is list and rows else None
        if memo is None:
            return ingest(provider, rows, compat)
        try:
            if memo.provider != provider or memo.compat != compat:
                memo.provider, memo.compat, memo.rows, memo.runs, memo.messages = provider, compat, [], [], []
            found = _by_runs(memo, ingest, provider, rows, compat)
        except Exception:  # lm15 raises it again on the whole list, naming the row
            found = None
        return ingest(provider, rows, compat) if found is None else found

    return ingested


def _is_tool(row: Any) -> bool:
    return type(row) is dict and row.get("role") == "tool"


def _shared_prefix(memo: _RowMemo, rows: list[Any]) -> int:
    """Where the last run of the request before starts, if every row before it is equal to its copy
    (and the run before it still ends there); else 0."""
    if not memo.runs:
        return 0
    cut = memo.runs[-1][0]
    verified, memo.verified = memo.verified, None
    if verified is rows and len(memo.checked) == len(rows):
        # The rows were just found equal to ``checked`` (this request's check in DSPy's ``prepare``, with
        # only DSPy's own code since); ``copy_of`` made ``rows``' copies of those very objects, so the two
        # lists compare by identity, at once, and say what comparing the rows themselves would.
        differs = memo.checked[:cut] != memo.rows[:cut]
    else:
        differs = rows[:cut] != memo.rows[:cut]
    if not 0 < cut <= len(rows) or differs:
        return 0
    return 0 if cut < len(rows) and _is_tool(rows[cut - 1]) and _is_tool(rows[cut]) else cut


def _run_end(rows: list[Any], index: int) -> int | None:
    """Where the run starting at ``index`` ends: one row, or consecutive tool rows; None: a row that is
    not a dict, or a system or developer row after the first (it reads as the system prompt when first)."""
    row = rows[index]
    if type(row) is not dict:
        return None
    role = row.get("role")
    end = index + 1
    if role == "tool":
        while end < len(rows) and _is_tool(rows[end]):
            end += 1
    elif index and role not in ("user", "assistant"):
        return None
    return end


def _by_runs(memo: _RowMemo, ingest: Callable[..., Any], provider: Any, rows: list[Any], compat: Any) -> Any:
    """``_ingest_messages(provider, rows, compat)`` run by run, each run's answer kept; None: not by runs.

    The runs before the last run of the request before are taken at once when its rows are equal to
    the copies of that request's (one comparison of the two lists): the usual request, the last one's
    rows and more. Then run by run: a run equal to the one at its place before keeps its answer.
    """
    count, known_rows, known_runs = len(rows), memo.rows, memo.runs
    runs: list[tuple[Any, ...]] = []
    copies: list[Any] = []
    messages: list[Any] = []
    system, system_mark, mark, marks = None, False, None, 0
    index = _shared_prefix(memo, rows)
    if index:
        runs, copies = known_runs[:-1], known_rows[:index]
        system, system_mark = known_runs[0][2][0], known_runs[0][2][2]
        before, mark, marks = known_runs[-1][4:]
        messages = memo.messages[:before]
    by_start = {run[0]: run for run in known_runs[len(runs) :]}
    while index < count:
        end = _run_end(rows, index)
        if end is None:
            return None
        run = rows[index:end]
        known = by_start.get(index)
        if known is not None and known[1] == end and known[3] and run == known_rows[index:end]:
            run_copies, answer = known_rows[index:end], known[2]
        else:
            run_copies = [memo.copy_of(index + offset, r) for offset, r in enumerate(run)]
            answer = ingest(provider, run, compat)
        runs.append((index, end, answer, _UNKEPT not in run_copies, len(messages), mark, marks))
        copies.extend(run_copies)
        run_system, run_messages, run_system_mark, run_mark = answer
        if index == 0:
            system, system_mark = run_system, run_system_mark
        elif run_system is not None or run_system_mark or len(run_messages) != 1:
            return None
        marks += bool(run_system_mark) + (run_mark is not None)
        if run_mark is not None:
            mark = len(messages) + run_mark
        messages.extend(run_messages)
        index = end
    if marks > 1:
        return None  # which breakpoint wins (or that two are refused) is lm15's to say
    memo.rows, memo.runs, memo.messages = copies, runs, messages
    return system, list(messages), system_mark, mark


class _BuiltMemo:
    """One turn's Chat Completions wire messages as lm15 last wrote them (see ``install_built_messages_reuse``).

    ``owner``, ``compat``, ``system``, ``stable``: the dialect object, its compat policy, the system prompt
    and whether it carried the stable-prefix mark; ``messages``: the request's lm15 messages; ``items``: the
    wire messages written of them (the system's first, when there is one); ``ends``: where each message's
    wire messages end in ``items``; ``plain``: how many messages from the first hold no media;
    ``breakpoint``: the message that carried the cache breakpoint. And the JSON lm15 made of the last
    messages array: ``encoded`` (its wire messages), ``blob`` (their JSON, joined by commas) and
    ``offsets`` (where each one's JSON ends in ``blob``). Each is replaced by the next request's.
    """

    __slots__ = (
        "blob", "breakpoint", "compat", "encoded", "ends", "items", "messages", "offsets", "owner", "plain", "stable",
        "system",
    )  # fmt: skip

    def __init__(self) -> None:
        self.owner: Any = None
        self.compat: Any = None
        self.system: Any = None
        self.stable: Any = None
        self.messages: tuple[Any, ...] = ()
        self.items: list[Any] = []
        self.ends: list[int] = []
        self.plain = 0
        self.breakpoint: int | None = None
        self.encoded: list[Any] = []
        self.blob = b""
        self.offsets: list[int] = []


_MARKER = "\x00dspy_imp_messages_" + secrets.token_hex(8)  # never in a request: the array's place


def install_built_messages_reuse(memo_of: Callable[[], Any]) -> None:
    """A step request's wire messages (Chat Completions, the native engine) are written, and written as
    JSON, once per message, not once per request.

    Why: for every request lm15 writes every message of the history into the body again
    (``OpenAIChatLM._build_messages``: each tool call's arguments through ``json.dumps``, each tool
    result's text checked and joined) and then the whole body as JSON (``common.json_dumps``): at 1,000
    steps about half of the loop's own time per request, and growing with the history. Within a turn a
    request's lm15 messages are the previous request's very objects, then the new ones
    (``install_converted_rows_reuse`` hands them out again, and lm15's ``Message`` and parts are frozen);
    what ``_build_messages`` writes for a message is a function of that message, the dialect object, its
    compat policy and whether the message carries the cache breakpoint (its loop over the messages keeps
    nothing from one message to the next but that index), and the system prompt's of the system prompt
    and the stable-prefix flag. So ``memo_of()`` (the turn's ``RenderMemo``, or None outside a step) keeps
    ``_BuiltMemo``: the request's messages and the wire messages written of them, and a request whose
    leading messages are those very objects (compared by identity), on the same dialect object, compat
    policy and system prompt, takes their wire messages again and has lm15 write only the rest (its own
    function, on a request of those messages alone). A message holding media (whose bytes lm15 reads at
    each build, and leaves out while planning), the message at the breakpoint (this request's or the last
    one's), a build that recorded an adaptation, and a count of wire messages that does not match the
    messages (one per assistant message, one per tool result, at most one for any other) are written
    whole by lm15 as before, and a breakpoint on an assistant or tool message (which lm15 refuses, naming
    its index) too. The wire messages handed out again are the same dicts: only the body writer sees them,
    and the one patch that writes into them (``_routes.chat_extras``: a replayed reasoning's fields, from
    the message) writes the same keys and values each time. Installed innermost (before
    ``chat_extras``'s patch, which marks positions on the whole list), or not at all.

    Then the body's JSON: the messages array is the previous request's wire messages (the same dicts, in
    the same order) and then new ones, so their JSON is kept (lm15's ``json_dumps`` of each message,
    joined by commas: ``json.dumps`` of a list is exactly that with these separators) and only the new
    ones are encoded; the rest of the body is encoded by lm15's function with a marker in the array's
    place, and the array put there. Any body whose messages are not this memo's (another dialect, a
    marked copy), any error (lm15 raises it again on the whole body), and anything outside a step is
    encoded whole, as before. ``make_json_request`` looks ``json_dumps`` up in its module at each call,
    and ``_payload`` calls ``_build_messages`` on the dialect, so those attributes are the hooks.
    Installed once.
    """
    import importlib

    chat = lm15_openai_chat()
    common: Any = importlib.import_module("dspy._vendor.lm15.providers.common")
    adaptation: Any = importlib.import_module("dspy._vendor.lm15.adaptation")

    def wrap_build(build: Callable[..., Any]) -> Callable[..., Any]:
        return _built_once(memo_of, adaptation._scope, chat, build)

    def wrap_dumps(dumps: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
        return _encoded_once(memo_of, dumps)

    wrap_innermost(chat.OpenAIChatLM, "_build_messages", wrap_build)
    wrap_innermost(common, "json_dumps", wrap_dumps)


def wrap_innermost(owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
    """``wrap_once``, only while no other patch holds ``owner.<name>`` (a patch that must see the
    original function itself; once another is there, it is never installed)."""
    original = getattr(owner, name)
    patch = f"{wrap.__module__}.{wrap.__qualname__}"
    installed: frozenset[str] = getattr(original, "dspy_imp_patches", frozenset())
    if installed and patch not in installed:
        return
    wrap_once(owner, name, wrap)


def _built_memo(memo_of: Callable[[], Any]) -> _BuiltMemo | None:
    if _TYPED.get():
        return None
    holder = memo_of()
    if holder is None:
        return None
    memo = getattr(holder, "built", None)
    if not isinstance(memo, _BuiltMemo):
        memo = _BuiltMemo()
        holder.built = memo
    return memo


_MEDIA = frozenset({"image", "audio", "video", "document", "binary"})  # lm15's ``MEDIA_KINDS``


def _is_plain(message: Any) -> bool:
    for part in message.parts:
        kind = part.type
        if kind in _MEDIA:
            return False
        if kind == "tool_result" and any(inner.type in _MEDIA for inner in part.content):
            return False
    return True


def _written_count(message: Any) -> int:
    """How many wire messages lm15 writes for ``message``: one per tool result of a tool message, one for an
    assistant message, at most one for any other (none when it holds nothing to write)."""
    if message.role == "tool":
        return sum(part.type == "tool_result" for part in message.parts)
    return 1


def _same_objects(known: Any, messages: Any) -> int:
    """How many leading entries of ``messages`` are the very objects of ``known`` (in C: no call per entry)."""
    import itertools
    import operator

    count = min(len(known), len(messages))
    return next(itertools.compress(itertools.count(), map(operator.is_not, known, messages)), count)


def _built_once(memo_of: Callable[[], Any], scopes: ContextVar[Any], chat: Any, build: Callable[..., Any]) -> Any:
    def built(self: Any, request: Any, compat: Any, *, breakpoint_index: int | None = None) -> list[dict[str, Any]]:
        memo = _built_memo(memo_of)
        messages, at = request.messages, breakpoint_index
        _AGAIN.set(None)
        if memo is None or type(messages) is not tuple:
            return build(self, request, compat, breakpoint_index=at)
        if at is not None and not (
            type(at) is int and 0 <= at < len(messages) and messages[at].role not in ("assistant", "tool")
        ):
            memo.owner = None  # lm15 refuses it, naming the index: its own function on the whole list
            return build(self, request, compat, breakpoint_index=at)
        scope = scopes.get()
        recorded = len(scope.records) if scope is not None else 0
        stable = chat._cache_stable_prefix(request, compat.cache_control)
        reuse = _reusable(memo, self, compat, stable, request, at)
        memo.owner = None  # kept again below, once this request's messages are written and counted
        if reuse:
            tail, start = messages[reuse:], memo.ends[reuse - 1]
            try:
                alone = _replace(request, messages=tail, system=None) if tail else None
                written = (
                    []
                    if alone is None
                    else build(self, alone, compat, breakpoint_index=None if at is None else at - reuse)
                )
            except Exception:  # lm15 raises it again on the whole list, naming the message
                if scope is not None:
                    del scope.records[recorded:]
                return build(self, request, compat, breakpoint_index=at)
            items = memo.items[:start] + written
            ends, plain = memo.ends[:reuse], reuse
        else:
            tail, start = messages, 1 if request.system else 0
            items = build(self, request, compat, breakpoint_index=at)
            ends, plain = [], 0
        if scope is not None and len(scope.records) != recorded:
            return items  # what lm15 recorded while writing is recorded again only by writing again
        plain = _counted_ends(tail, start, ends, plain)
        if (ends[-1] if ends else start) != len(items):  # a message written as nothing: not kept
            return items
        memo.owner, memo.compat, memo.stable, memo.system = self, compat, stable, request.system
        memo.messages, memo.items, memo.ends, memo.plain, memo.breakpoint = messages, list(items), ends, plain, at
        if reuse:
            _AGAIN.set((messages, reuse, start))
        return items

    return built


_AGAIN: ContextVar[tuple[Any, int, int] | None] = ContextVar("dspy_imp_written_again", default=None)


def written_again(messages: Any) -> tuple[int, int]:
    """How many leading ``messages`` (a request's lm15 messages, just written by ``_build_messages``) had
    their wire messages handed out again from the request before (``install_built_messages_reuse``), and
    how many wire messages those are; ``(0, 0)``: none. Asked once: the answer is for that write only."""
    again = _AGAIN.get()
    if again is None:
        return 0, 0
    _AGAIN.set(None)
    return (again[1], again[2]) if again[0] is messages else (0, 0)


def _reusable(memo: _BuiltMemo, owner: Any, compat: Any, stable: Any, request: Any, at: int | None) -> int:
    """How many leading messages of ``request`` keep the wire messages ``memo`` holds for them."""
    if not (memo.owner is owner and memo.compat == compat and memo.stable == stable and memo.system == request.system):
        return 0
    reuse = min(_same_objects(memo.messages, request.messages), memo.plain)
    for mark in (memo.breakpoint, at):
        if mark is not None:
            reuse = min(reuse, mark)
    return reuse


def _counted_ends(tail: Any, start: int, ends: list[int], plain: int) -> int:
    """``ends`` (where each message's wire messages end) extended by ``tail``'s, from ``start``; the count of
    leading plain messages, ``plain`` before ``tail`` (all plain), counted on."""
    end, clean = start, plain == len(ends)
    for message in tail:
        end += _written_count(message)
        ends.append(end)
        clean = clean and _is_plain(message)
        plain += clean
    return plain


def _replace(request: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(request, **changes)


def _encoded_once(memo_of: Callable[[], Any], dumps: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def json_dumps(value: Any) -> bytes:
        items = value.get("messages") if type(value) is dict else None
        memo = _built_memo(memo_of) if type(items) is list and items else None
        if memo is None or items is None or memo.owner is None or not memo.items or items[0] is not memo.items[0]:
            return dumps(value)
        try:
            return _spliced(memo, dumps, value, items)
        except Exception:  # lm15 raises it again on the whole body
            memo.encoded, memo.blob, memo.offsets = [], b"", []
            return dumps(value)

    return json_dumps


def _spliced(memo: _BuiltMemo, dumps: Callable[[Any], bytes], value: dict[str, Any], items: list[Any]) -> bytes:
    """``dumps(value)``, with the JSON of the leading wire messages the last body held taken as it was."""
    kept = _same_objects(memo.encoded, items)
    shell = dict(value)
    shell["messages"] = _MARKER
    around = dumps(shell)
    marker = dumps(_MARKER)
    at = around.find(marker)
    if at < 0 or around.find(marker, at + 1) >= 0:
        raise ValueError("the marker is not in the body once")
    blob = memo.blob[: memo.offsets[kept - 1]] if kept else b""
    offsets = memo.offsets[:kept]
    pieces = [blob] if kept else []
    end = len(blob)
    for item in items[kept:]:
        text = dumps(item)
        end += len(text) + (1 if pieces else 0)
        pieces.append(text)
        offsets.append(end)
    blob = b",".join(pieces)
    memo.encoded, memo.blob, memo.offsets = list(items), blob, offsets
    return b"".join((around[:at], b"[", blob, b"]", around[at + len(marker) :]))


_VALIDATED: ContextVar[tuple[Any, ...] | None] = ContextVar("dspy_imp_validated_messages", default=None)


def install_validated_messages_once() -> None:
    """An lm15 ``Request`` remade from another (``dataclasses.replace``) checks its messages once, not at
    every copy.

    Why: ``Request.__post_init__`` checks that every message is a ``Message`` (a Python generator over the
    whole history), and DSPy remakes each request three more times on its way to the wire (its engine's
    ``plan`` and ``_target``, lm15's router's ``_routed_request``), each a new ``Request`` holding the very
    same tuple of messages: at 1,000 steps about a tenth of the loop's own time per request. A tuple's
    entries cannot change, so a tuple that passed the check passes it again; the last such tuple is kept
    (per context), and a request holding that very tuple is checked by lm15's own ``__post_init__`` with
    its first message only, then given the whole tuple back: every other field is normalised and checked
    as before, and any other request is checked whole. The generated ``__init__`` calls
    ``__post_init__`` on the class, so that attribute is the one hook. Installed once.
    """
    import importlib

    lm15_types: Any = importlib.import_module("dspy._vendor.lm15.types")
    wrap_once(lm15_types.Request, "__post_init__", _validated_once)


def _validated_once(post_init: Callable[[Any], None]) -> Callable[[Any], None]:
    def checked(self: Any) -> None:
        messages = self.messages
        if type(messages) is tuple and len(messages) > 1 and messages is _VALIDATED.get():
            object.__setattr__(self, "messages", messages[:1])
            try:
                post_init(self)
            finally:
                object.__setattr__(self, "messages", messages)
            return
        post_init(self)
        if type(self.messages) is tuple:
            _VALIDATED.set(self.messages)

    return checked


def install_legacy_copies(memo_of: Callable[[], Any]) -> None:
    """The copy DSPy makes of a step request for each attempt on LiteLLM is made in C when its rows are
    plain data (``dspy.clients.execution._attempt``: ``copy.deepcopy(call.legacy)``).

    Why: DSPy hands LiteLLM a deep copy of the request (LiteLLM may change what it is given) at every
    attempt, and ``copy.deepcopy`` walks the whole history in Python: at 1,000 steps about 10 ms a
    request, a third of the loop's own time on that engine. ``marshal`` copies exact ``dict``, ``list``,
    ``tuple``, ``str``, ``int``, ``float``, ``bool`` and ``None`` in C into the same values of the same
    types, keys in the same order and an object held twice held twice by the copy, as ``deepcopy``
    does; it refuses any subclass, and would turn a buffer (``bytearray``, ``memoryview``) into
    ``bytes``. So the copy is ``marshal``'s only when the request's messages are the very list DSPy's
    check found equal, row by row, to copies made only of dicts, lists, strings and None (this
    request's, in ``prepare``: ``install_converted_rows_reuse``'s memo, so no row holds a buffer or a
    number) and everything else in the request is one of those exact types (looked at, it is small);
    any other request, any value ``marshal`` refuses and any ``memo`` argument go to ``copy.deepcopy``
    as before. ``_attempt`` looks ``copy`` up in its module at each call, so that attribute is the one
    hook: a module object whose ``deepcopy`` does this and whose every other name is ``copy``'s.
    Installed once.
    """
    import importlib

    execution: Any = importlib.import_module("dspy.clients.execution")
    if not isinstance(execution.copy, _LegacyCopies):
        execution.copy = _LegacyCopies(memo_of, execution.copy)


class _LegacyCopies(ModuleType):
    """``copy`` as ``dspy.clients.execution`` sees it (see ``install_legacy_copies``)."""

    def __init__(self, memo_of: Callable[[], Any], original: Any):
        super().__init__(original.__name__, original.__doc__)
        self._memo_of, self._original = memo_of, original

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def deepcopy(self, value: Any, memo: Any = None, *rest: Any) -> Any:
        original = self._original
        if memo is not None or rest or type(value) is not dict:
            return original.deepcopy(value, memo, *rest)
        rows = _row_memo(self._memo_of)
        messages = value.get("messages")
        if rows is None or not rows.pure or messages is not rows.listed or len(messages) != len(rows.checked):
            return original.deepcopy(value)
        if not all(_marshalled(item) for key, item in value.items() if key != "messages"):
            return original.deepcopy(value)
        import marshal

        try:
            return marshal.loads(marshal.dumps(value))
        except (ValueError, TypeError):  # a subclass (marshal writes exact types only)
            return original.deepcopy(value)


_MARSHALLED = (str, int, float, bool, type(None))


def _marshalled(value: Any) -> bool:
    """Whether ``value`` is made only of exact ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``,
    ``bool`` and ``None`` (what ``marshal`` copies as ``deepcopy`` does)."""
    kind = type(value)
    if kind in _MARSHALLED:
        return True
    if kind is dict:
        return all(type(key) in _MARSHALLED and _marshalled(item) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_marshalled(item) for item in value)
    return False

"""The ASGI app: both streams and the chat page, for one agent.

    GET  /healthz     alive (200); GET /readyz: accepting turns (200) or not (503), and why
    GET  /            the chat page (static HTML, JS and CSS shipped in the package: no CDN, no build)
    GET  /api/info    the agent: its title, signature, inputs, outputs and tools
    GET  /api/conversations/<id>   a conversation as AG-UI messages, and the interrupts it waits on
    POST /api/conversations/<id>/stop   stop its running turn, cancelling what it awaits (history kept)
    POST /ag-ui       AG-UI: a ``RunAgentInput`` in, AG-UI events out (``agui``)
    POST /api/chat    the AI SDK UI message stream for ``useChat`` (``vercel``)
    GET  /openapi.json   the OpenAPI 3.1 description of all of these (``_openapi``)
    /api/conversations  a user's conversations: list, read, rename, delete (``_conversations``)

Conversations are kept by id (AG-UI's ``threadId``, ``useChat``'s chat ``id``) in the store,
each owned by the user ``auth`` named when it started. What may reach the routes (``Host``,
``Origin``, content type, body bounds) is ``_guard``'s.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy
import pydantic
from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._routes.dspy_private import set_model_connections
from dspy_imp._routes.hosted_types import HOSTED_CALL_NAMES
from dspy_imp.web import _openapi, agui, vercel
from dspy_imp.web._admission import DEFAULT_MAX_TURNS
from dspy_imp.web._client_tools import Offered, declared
from dspy_imp.web._conversations import Conversations
from dspy_imp.web._guard import BeforeStream, Guard, Guarded, Refused, conversation_id, encodable, read_json, scrubbed
from dspy_imp.web._inputs import Call, paused_calls
from dspy_imp.web._migrations import SchemaTooNew
from dspy_imp.web._narration import Narration
from dspy_imp.web._turns import Calls, Ended, MemoryStore, ModelSlots, Runner, Store, Turn
from dspy_imp.web.messages import to_messages

STATIC = Path(__file__).parent / "static"
_NO_STORE = {"cache-control": "no-store"}
MODEL_REQUESTS = 1024
"""``model_requests``' default: the model requests a process keeps in flight at once."""
DRAIN_SECONDS = 30.0
"""``drain_seconds``' default: how long a shutdown lets running turns end before stopping them."""


class _AnyText(Convertor[str]):
    """A path's conversation id, any text: one with a newline or a NUL reaches the route, which refuses
    it naming the field (422), instead of matching no route (a plain-text 404)."""

    regex = "[\\s\\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("conversation", _AnyText())


def app(
    agent: Any,
    *,
    store: Store | None = None,
    sync: bool = False,
    auth: Callable[[Request], Any] | None = None,
    hosts: Sequence[str] = (),
    origins: Sequence[str] = (),
    client_tools: bool = False,
    auth_scheme: Mapping[str, Any] | None = None,
    max_turns: int | None = None,
    drain_seconds: float = DRAIN_SECONDS,
    model_requests: int = MODEL_REQUESTS,
    max_loop_lag: float | None = 0.015,  # MAX_LOOP_LAG written out: the API page shows the value
) -> App:
    """An ASGI app serving ``agent`` to a browser: the chat page, AG-UI and the AI SDK stream.

    Args:
        agent: A ``dspy_imp.ReActV2``, or a ``dspy_imp.durable.DurableAgent`` (each turn a DBOS
            workflow; a paused one waits in it, across restarts). Its LM is the one set on it
            (``agent.set_lm``) or the one ``dspy.configure`` set.
        store: Where conversations are kept between requests (``load``/``save`` by id); a
            ``MemoryStore`` by default.
        sync: Run each turn with the sync call in a worker thread (for tools that must run in a
            thread of their own); by default turns run ``agent.acall`` on the event loop. A
            ``DurableAgent``'s turns always run its async workflow (``astart``).
        auth: A function of the request (a Starlette ``Request``; sync or async) returning the
            user's id, or ``None`` to refuse it (401). A conversation belongs to the user who
            started it: another user's request on its id is refused. Without it, anyone who can
            reach the server may use any conversation whose id they know.
        hosts: Host names the app answers for besides the address it is served on (behind a
            proxy: the public name). A request with another ``Host`` is refused (403).
        origins: Origins (``"https://app.example.com"``) whose pages may call the app besides its
            own page; CORS is on for them and off otherwise. A ``POST`` from another origin is
            refused (403).
        client_tools: Honour the tools a client declares and runs itself (AG-UI's
            ``RunAgentInput.tools``; the AI SDK request's ``tools``): each becomes an external tool
            of that turn, which pauses on its calls until the client sends their results. Off by
            default: declared tools are then not offered to the model. A ``DurableAgent`` cannot
            offer them (its workflows run the program it was made with).
        auth_scheme: The OpenAPI security scheme that says what ``auth`` reads, for the API's
            description (``GET /openapi.json``): ``{"type": "apiKey", "in": "header", "name":
            "x-forwarded-user"}``. With ``auth`` and no ``auth_scheme``, a bearer token.
        max_turns: The most turns this instance runs at once (200 by default, whatever the
            machine's cores: an instance runs its turns on one event loop, one core). A turn asked
            for beyond it is refused before any event with 429 and ``Retry-After`` (a refused
            approval leaves the turn waiting for it: the client sends it again), the instance's
            guess of when a place frees up (from the rate its turns end; 1 to 30 s). ``/readyz``
            answers 503 while the instance is full.
        drain_seconds: At shutdown (the ASGI lifespan's end; SIGTERM under ``python -m
            dspy_imp.web``), how long running turns may go on ending by themselves; then those
            left are stopped, their history so far saved, and their leases released. New turns
            are refused meanwhile with 503 and ``Retry-After``.
        model_requests: The most model requests the process keeps in flight at once on DSPy's
            native engine (its connection pool, ``max_connections``; 1024 by default, where DSPy
            alone stops at 100 and queues the rest unseen). It applies to the engines built after
            the app is made, for the whole process. LiteLLM's engine has its own pool
            (``AIOHTTP_CONNECTOR_LIMIT`` and ``AIOHTTP_CONNECTOR_LIMIT_PER_HOST`` in the
            environment before LiteLLM is imported: 1000 and 500 by default). The app bounds its
            turns' requests to it too (the loop's, a guardrail's, an MCP server's sampling
            requests, on any engine): a request over it waits for a slot, and the wait shows in
            the turn's log line (``waited=``), ``/readyz`` (``model_requests_waiting``) and, with
            GenAI metrics on, the ``dspy_imp.model_request.wait_duration`` histogram.
        max_loop_lag: Seconds (0.015 by default; ``None``: no such bound): while the app serves
            (its lifespan), it measures its event loop's own lag (a timer every 10 ms, how late it
            runs, less the time the loop's thread waited for a core, where Linux tells it), and
            while the median over the last second is above this, new turns are refused as beyond
            ``max_turns`` (429, ``Retry-After``, ``/readyz`` 503): a loop that stays late is busy
            all the time, and a turn more would slow every running one.

    The app also answers ``GET /healthz`` (200 while it serves) and ``GET /readyz`` (200 when it
    accepts turns, else 503: draining, at ``max_turns`` or ``max_loop_lag``, or its store
    unreachable or of a newer schema; the body tells which, with the running turns, the loop's
    lag and the limits), behind the ``Host``
    check but without ``auth``, for a load balancer. ``await app.drain()`` is the shutdown's
    drain, for a server that calls it itself. While the app serves (its lifespan, startup to
    shutdown), what the process held at startup is frozen out of the garbage collector's walks
    and full collections are rarer (``gc.freeze``, a third threshold of 100; both undone at
    shutdown), so that no full collection holds the event loop for long.

    Example:
        ```python
        import uvicorn
        uvicorn.run(dspy_imp.web.app(agent), host="127.0.0.1", port=8000)
        ```
    """
    guard = Guard(hosts, origins, auth)
    if not isinstance(client_tools, bool):
        raise ConfigurationError(f"`client_tools` must be True or False, got {client_tools!r}")
    scheme = _openapi.checked_scheme(auth, auth_scheme)
    _check_bounds(max_turns, drain_seconds, model_requests, max_loop_lag)
    program, runner = _runner(agent, store or MemoryStore(), sync)
    runner.max_turns = DEFAULT_MAX_TURNS if max_turns is None else max_turns
    runner.admission.max_loop_lag = None if max_loop_lag is None else float(max_loop_lag)
    runner.model_requests = model_requests
    runner.slots = ModelSlots(model_requests)  # the app's own bound: a request that waits is seen waiting
    set_model_connections(model_requests)  # DSPy's native engine: no hidden ceiling of 100
    if client_tools and not isinstance(runner.turns, Calls):
        raise ConfigurationError(
            "`client_tools=True` needs a dspy_imp.ReActV2: a DurableAgent's workflows run the program it was "
            "made with, which cannot take a client's tools"
        )
    server = _Server(program, runner, guard, client_tools)
    conversations = Conversations(runner, guard, program.signature)

    async def conversation(request: Request) -> Response:
        if _stop_path(request):  # ``.../a/stop`` as sent: the stop route's path, which takes POST only
            return _not_allowed("POST")
        return await (server.conversation if request.method in ("GET", "HEAD") else conversations.one)(request)

    async def stop(request: Request) -> Response:
        if not _stop_path(request):  # ``.../a%2Fstop``: the conversation ``a/stop``, which takes no POST
            return _not_allowed("GET, HEAD, PATCH, DELETE")
        return await server.stop(request)

    routes = [
        Route("/healthz", server.healthz),
        Route("/readyz", server.readyz),
        Route("/", server.page),
        Route("/api/info", server.info),
        Route("/api/conversations/{key:conversation}/stop", stop, methods=["POST"]),
        Route("/api/conversations/{key:conversation}", conversation, methods=["GET", "PATCH", "DELETE"]),
        Route("/ag-ui", server.agui, methods=["POST"]),
        Route("/api/chat", server.chat, methods=["POST"]),
        *conversations.routes(),
        Mount("/static", StaticFiles(directory=STATIC)),
        _openapi.route(scheme, runner.store, client_tools),
    ]
    handlers = {SchemaTooNew: _schema_too_new}

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        runner.draining = False  # served again (a server, or a test client, that starts the app anew)
        runner.admission.lag.start()  # the loop's lag, which ``max_loop_lag`` bounds
        try:
            with _collector_settled():
                yield
                await runner.drain(float(drain_seconds))  # the server shutting down: turns end, leases go back
        finally:
            runner.admission.lag.stop()

    routes_app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    guarded: ASGIApp = Guarded(routes_app, guard, routes)
    if origins:
        allowed = [o.rstrip("/") for o in origins]
        guarded = CORSMiddleware(guarded, allow_origins=allowed, allow_methods=["GET", "POST"], allow_headers=["*"])
    return App(guarded, runner, float(drain_seconds))


def _check_bounds(max_turns: Any, drain_seconds: Any, model_requests: Any, max_loop_lag: Any) -> None:
    """``app``'s bounds, each refused naming itself."""
    if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1):
        raise ConfigurationError(f"`max_turns` must be a whole number of turns >= 1, got {max_turns!r}")
    if not isinstance(drain_seconds, int | float) or isinstance(drain_seconds, bool) or not drain_seconds >= 0:
        raise ConfigurationError(f"`drain_seconds` must be a number of seconds >= 0, got {drain_seconds!r}")
    if not isinstance(model_requests, int) or isinstance(model_requests, bool) or model_requests < 1:
        raise ConfigurationError(f"`model_requests` must be a whole number of requests >= 1, got {model_requests!r}")
    if max_loop_lag is not None and (
        not isinstance(max_loop_lag, int | float) or isinstance(max_loop_lag, bool) or not max_loop_lag > 0
    ):
        raise ConfigurationError(f"`max_loop_lag` must be a number of seconds > 0 or None, got {max_loop_lag!r}")


class App:
    """The ASGI app ``app`` returns; ``drain`` is its graceful shutdown (the lifespan's end runs it)."""

    def __init__(self, asgi: ASGIApp, runner: Runner, drain_seconds: float):
        self.asgi = asgi
        self.runner = runner
        self.drain_seconds = drain_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.asgi(scope, receive, send)

    async def drain(self, seconds: float | None = None) -> None:
        """Start no new turn (503 and ``Retry-After``; ``/readyz`` 503), let running ones end for up
        to ``seconds`` (``drain_seconds``), stop those left (history saved), leases released."""
        await self.runner.drain(self.drain_seconds if seconds is None else seconds)


_FULL_COLLECTION_EVERY = 100
"""While the app serves, the collector's third threshold is at least this (``_collector_settled``)."""


@contextlib.contextmanager
def _collector_settled() -> Iterator[None]:
    """The cyclic garbage collector while the app serves (its lifespan): what the process held when
    it started serving is never walked again, and full collections come a tenth as often.

    Every full (generation 2) collection walks every container object the process holds, with the
    event loop waiting: under 200 concurrent conversations these were the loop's worst lags (100 to
    300 ms of CPU each, several a second; docs/performance.md). Most of those objects are the
    process's own, made before it serves (the modules, DSPy, LiteLLM, pydantic's validators, the
    agent: over 100,000), and live as long as it does: they are frozen (``gc.freeze``: moved to the
    permanent generation, which no collection walks), and given back to the collector
    (``gc.unfreeze``) when the app stops serving. What is garbage among them stays until then:
    freezing is O(1), where a collection first would cost every start (a test client's too) a full
    walk. And a full collection is considered after ``_FULL_COLLECTION_EVERY`` collections of
    generation 1 instead of Python's 10 (the third threshold; a higher one already set is kept,
    and the one it was is put back at the end): a turn's objects live for its seconds, long enough
    to reach generation 2, and Python's own rule (a full collection only once a quarter more
    objects reached it than it held after the last one) still bounds what waits there.
    """
    first, second, third = gc.get_threshold()
    raised = third < _FULL_COLLECTION_EVERY
    if raised:
        gc.set_threshold(first, second, _FULL_COLLECTION_EVERY)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if raised and gc.get_threshold() == (first, second, _FULL_COLLECTION_EVERY):
            gc.set_threshold(first, second, third)


def _runner(agent: Any, store: Store, sync: bool) -> tuple[Any, Any]:
    """The program (for its signature and tools) and what runs its turns."""
    from dspy_imp._program.module import ReActV2

    if isinstance(agent, ReActV2):
        return agent, Runner(Calls(agent, sync), store)
    durable = sys.modules.get("dspy_imp.durable")  # imported already by whoever made a DurableAgent
    if durable is not None and isinstance(agent, durable.DurableAgent):
        from dspy_imp.web._durable import Workflows

        return agent.program, Runner(Workflows(agent), store)
    raise ConfigurationError(f"dspy_imp.web.app takes a dspy_imp.ReActV2 or a DurableAgent, got {agent!r}")


class _Server:
    def __init__(self, agent: Any, runner: Any, guard: Guard, client_tools: bool):
        self.agent = agent
        self.runner = runner
        self.guard = guard
        self.signature = agent.signature
        self.client_tools = client_tools
        # the names hosted calls are shown by are the agent's too: no client tool may take one
        hosted = HOSTED_CALL_NAMES if getattr(agent, "hosted_tools", ()) else ()
        self.own = frozenset({*agent.tools, SUBMIT, *hosted})

    def _offered(self, declared_tools: Any, field: str, schema_key: str) -> Offered:
        """The client tools a request declares, checked (``Refused`` naming the field), when the app
        honours them; none otherwise (the declaration is not read)."""
        if not self.client_tools:
            return Offered(self.own)
        return Offered(self.own, declared(declared_tools, self.own, field, schema_key))

    async def healthz(self, request: Request) -> Response:
        """Alive: the process serves requests (no ``auth``: a load balancer asks)."""
        return JSONResponse({"alive": True}, headers=_NO_STORE)

    async def readyz(self, request: Request) -> Response:
        """Ready for turns (200), or not (503): draining, at ``max_turns`` or ``max_loop_lag``, or the
        store unreachable or of a newer schema; the body tells which, with the running turns and the limits."""
        body: dict[str, Any] = self.runner.readiness()
        admitting = body.pop("admitting")
        try:
            await self._check_store(reach=True)
            body["store"] = "ok"
        except SchemaTooNew as error:
            body["store"] = f"too new: {error}"
        except Exception as error:  # unreachable: told, never raised to the balancer
            body["store"] = f"unreachable: {type(error).__name__}: {error}"
        ready = admitting and body["store"] == "ok"
        return JSONResponse(scrubbed({"ready": ready, **body}), status_code=200 if ready else 503, headers=_NO_STORE)

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    async def info(self, request: Request) -> Response:
        try:
            await self.guard.user(request)
        except Refused as refused:
            return refused.response()
        await self._check_store()
        signature = self.signature
        named = signature.__name__ not in ("StringSignature", "Signature")
        return JSONResponse(
            {
                "title": signature.__name__ if named else "dspy-imp agent",
                "signature": signature.signature,
                "instructions": signature.instructions,
                "inputs": list(signature.input_fields),
                "outputs": list(signature.output_fields),
                "output_types": {name: _type_name(f.annotation) for name, f in signature.output_fields.items()},
                "tools": [{"name": t.name, "description": t.desc} for t in self.agent.tools.values()],
                "lists_conversations": callable(getattr(self.runner.store, "conversations", None)),
            }
        )

    async def _check_store(self, reach: bool = False) -> None:
        """Reach the store's database (``SchemaTooNew``, told as a 503: a newer dspy-imp wrote it);
        ``reach``: with a statement, every time (``ping``), not only until the schema is known."""
        check = getattr(self.runner.store, "ping" if reach else "check", None) or getattr(
            self.runner.store, "check", None
        )
        if check is not None:
            await check()

    async def conversation(self, request: Request) -> Response:
        """The conversation the page reopens (a reload, a second tab): its messages and interrupts."""
        key, _, stored = await self._owned(request)
        if isinstance(stored, Response) or stored is None:  # another user's is as absent as a missing one
            return stored or _no_conversation(key)
        messages = to_messages(stored.history, self.signature)
        interrupts = [agui.interrupt(call) for call in paused_calls(stored.history)]
        body = {
            "messages": [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in messages],
            "interrupts": [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in interrupts],
            "running": key in self.runner.busy,
            "turns": _turns_shown(stored, self.signature),
        }
        return JSONResponse(scrubbed(body))

    async def _owned(self, request: Request) -> tuple[str, str | None, Any]:
        """The path's conversation id, the user, and the stored conversation if it is theirs: ``None``
        when there is none, a refusal (a ``Response``) when the user is refused or it is another's."""
        key = encodable(request.path_params["key"])
        try:
            conversation_id(key, "id")
            user = await self.guard.user(request)
        except Refused as refused:
            return key, None, refused.response()
        stored = await self.runner.store.load(key)
        if stored is not None and stored.owner != user:
            return key, user, _no_conversation(key)
        return key, user, stored

    async def stop(self, request: Request) -> Response:
        """Stop the conversation's running turn (the page's Stop): ``Runner.stop``; 409 when too late."""
        key, user, stored = await self._owned(request)
        if isinstance(stored, Response):
            return stored
        if not self.runner.stop(key, user):
            return JSONResponse({"error": f"conversation {key!r} runs no turn that can be stopped"}, status_code=409)
        return JSONResponse({"stopping": key})

    async def _user_and(
        self, request: Request, read: Callable[[Any], Any], turned_away: Callable[[Any, BeforeStream], Response | None]
    ) -> tuple[str | None, Any] | Response:
        """The request's user, then its body (bounded) as ``read`` reads it; ``Refused`` as a refusal.

        An instance that starts no new turn now (``Runner.refusal``: draining, full, its loop late)
        answers once the user is known, before anything else is read: the JSON refusal without the
        body, the streamed one (``_streamed_refusal``) with the few fields of the raw JSON it names
        (``turned_away``; a body without them gets the JSON refusal). No validation of the
        conversation sent, no store: a refused client that comes back often costs the running
        turns little."""
        user = await self.guard.user(request)
        refused = self.runner.refusal()
        if refused is not None:
            if not _streamed_refusal(refused, request):
                return refused.response()
            return turned_away(await read_json(request), refused) or refused.response()
        return user, read(await read_json(request))

    async def agui(self, request: Request) -> Response:
        def turned_away(raw: Any, refused: BeforeStream) -> Response | None:
            thread_id, run_id = (raw.get("threadId"), raw.get("runId")) if isinstance(raw, dict) else (None, None)
            if not isinstance(thread_id, str) or not isinstance(run_id, str) or not _an_id(thread_id, "threadId"):
                return None
            return self._agui_turned_away(refused, request, thread_id, run_id)

        try:
            read_input = await self._user_and(request, RunAgentInput.model_validate, turned_away)
            if isinstance(read_input, Response):
                return read_input
            user, run_input = read_input
            tools = [t.model_dump(mode="json") for t in run_input.tools] if run_input.tools is not None else None
            offered = self._offered(tools, "tools", "parameters")
            conversation_id(run_input.thread_id, "threadId")
        except Refused as refused:
            return refused.response()
        except pydantic.ValidationError as error:
            return JSONResponse({"error": f"not an AG-UI RunAgentInput: {error}"}, status_code=422)
        await self._check_store()  # a database of a newer schema: 503 before any event, as on every route
        encoder = EventEncoder(accept=request.headers.get("accept", "text/event-stream"))
        narration = Narration(agui.AGUIEncoder(run_input.thread_id, run_input.run_id, self.signature), run_input.run_id)

        def read(stored: Any) -> Call:
            return agui.read_run_input(run_input, self.signature, stored, offered)

        try:  # the conversation taken and read before the stream: another user's is a 404, as on REST
            turn = await self.runner.begin(run_input.thread_id, user, read)
        except BeforeStream as refused:
            if not _streamed_refusal(refused, request):
                return refused.response()
            return self._agui_turned_away(refused, request, run_input.thread_id, run_input.run_id)
        events = self._narrate(narration, turn)
        return StreamingResponse(_lines(events, encoder.encode), media_type=encoder.get_content_type())

    def _agui_turned_away(self, refused: BeforeStream, request: Request, thread_id: str, run_id: str) -> Response:
        """A refusal told as an AG-UI stream: ``RUN_STARTED``, then ``RUN_ERROR`` naming the limit."""
        encoder = EventEncoder(accept=request.headers.get("accept", "text/event-stream"))
        narration = Narration(agui.AGUIEncoder(thread_id, run_id, self.signature), run_id)
        events_told = narration.turned_away(refused.message, str(refused.details["limit"]))
        told = "".join(encoder.encode(event) for event in events_told)
        return _refusal_stream(refused, told, encoder.get_content_type())

    async def chat(self, request: Request) -> Response:
        def turned_away(raw: Any, refused: BeforeStream) -> Response | None:
            fits = isinstance(raw, dict) and _an_id(raw.get("id"), "id") and isinstance(raw.get("messages"), list)
            return self._chat_turned_away(refused, raw) if fits else None

        try:
            read_body = await self._user_and(request, vercel.checked_request, turned_away)
            if isinstance(read_body, Response):
                return read_body
            user, body = read_body
            offered = self._offered(body.get("tools"), "tools", "inputSchema")
            conversation_id(body["id"], "id")
        except Refused as refused:
            return refused.response()
        await self._check_store()  # a database of a newer schema: 503 before any part, as on every route
        key = body["id"]

        def read(stored: Any) -> Call:
            return vercel.read_request(body, self.signature, stored, offered)

        try:  # the conversation taken and read before the stream: another user's is a 404, as on REST
            turn = await self.runner.begin(key, user, read)
        except BeforeStream as refused:
            if not _streamed_refusal(refused, request):
                return refused.response()
            return self._chat_turned_away(refused, body)
        narration = Narration(vercel.VercelEncoder(_message_id(body)), _run_id(body))
        parts = self._narrate(narration, turn)
        return StreamingResponse(_vercel_lines(parts), media_type="text/event-stream", headers=vercel.HEADERS)

    def _chat_turned_away(self, refused: BeforeStream, body: dict[str, Any]) -> Response:
        """A refusal told as an AI SDK stream: ``start``, an ``error`` part naming the limit, ``[DONE]``."""
        narration = Narration(vercel.VercelEncoder(_message_id(body)), _run_id(body))
        told_parts = narration.turned_away(refused.message, str(refused.details["limit"]))
        told = "".join(encodable(vercel.encode(part)) for part in told_parts) + vercel.DONE
        return _refusal_stream(refused, told, "text/event-stream", vercel.HEADERS)

    async def _narrate(self, narration: Narration, turn: Turn) -> AsyncIterator[tuple[list[Any], bool]]:
        """The stream's events, a list at a time (what the turn had ready at once: ``Turn.batches``),
        each list written in one piece; with whether it is the last (the turn's end told)."""
        out = narration.start()
        async for batch in turn.batches():
            ended = False
            for event in batch:
                if isinstance(event, Call):
                    narration.shown, narration.refused = event.shown, event.refused
                elif isinstance(event, Ended):
                    ended = True
                    error = event.error
                    out += narration.finished(event.prediction) if error is None else narration.failed(error)
                else:
                    out += narration.event(event)
            if out or ended:
                yield out, ended
                out = []


def _turns_shown(stored: Any, signature: Any) -> list[dict[str, Any]]:
    """How each turn ended, placed in the conversation's messages: ``messages``, how many of them
    the turn's end follows (the page shows its "Turn ended" line and its decisions there)."""
    entries = stored.history.messages
    counts = [0]
    for entry in entries:  # each entry's messages, as ``to_messages`` writes them
        counts.append(counts[-1] + len(to_messages(dspy.History(messages=[entry]), signature)))
    shown = []
    for turn in stored.turns:
        record = {k: v for k, v in turn.items() if k != "entries"}
        shown.append({"messages": counts[min(max(turn["entries"], 0), len(entries))], **record})
    return shown


def _an_id(value: Any, field: str) -> bool:
    """Whether ``value`` is a conversation id the routes take (``conversation_id``)."""
    try:
        conversation_id(value, field)
    except Refused:
        return False
    return True


def _run_id(body: dict[str, Any]) -> str:
    """The AI SDK stream's parts' ids: new on every request."""
    return f"{body['id']}-{len(body['messages'])}"


def _message_id(body: dict[str, Any]) -> str:
    """The assistant message this stream writes: the last one when it resumes it, else a new one."""
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if last.get("role") == "assistant" and isinstance(last.get("id"), str):
        return last["id"]
    return f"{body.get('id')}-{len(messages)}"


def _streamed_refusal(refused: BeforeStream, request: Request) -> bool:
    """Whether a refusal before the stream is told as a stream too: a full instance's 429
    (``max_turns``, ``max_loop_lag``) to a request that asks for ``text/event-stream``, for a client
    that reads only the stream. Every other refusal before the stream keeps REST's JSON body (a
    409's, a 404's), whatever it asks for."""
    return refused.status == 429 and "limit" in refused.details and _SSE in request.headers.get("accept", "")


def _refusal_stream(refused: BeforeStream, told: str, media_type: str, headers: Any = None) -> Response:
    """The refusal's status and ``Retry-After``, its body the stream's start and its error."""
    answer = {"retry-after": str(refused.retry_after), **(headers or {})}
    return Response(told, status_code=refused.status, media_type=media_type, headers=answer)


_SSE = "text/event-stream"


async def _lines(batches: AsyncIterator[tuple[list[Any], bool]], encode: Callable[[Any], str]) -> AsyncIterator[str]:
    async for events, _ in batches:
        if events:
            yield "".join(_encoded(event, encode) for event in events)


def _encoded(event: Any, encode: Callable[[Any], str]) -> str:
    try:
        return encode(event)
    except ValueError:  # a lone surrogate (a tool's non-UTF-8 file name): the event with U+FFFD
        return encode(type(event).model_validate(scrubbed(event.model_dump())))


async def _vercel_lines(batches: AsyncIterator[tuple[list[Any], bool]]) -> AsyncIterator[str]:
    async for parts, last in batches:
        told = "".join(encodable(vercel.encode(part)) for part in parts)
        yield told + vercel.DONE if last else told


def _type_name(annotation: Any) -> str:
    """An output field's type as a reader writes it: ``str``, ``bool``, ``list[str]``."""
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


async def _schema_too_new(request: Request, error: Exception) -> Response:
    """A database a newer dspy-imp wrote: the service is unavailable until this one is upgraded."""
    assert isinstance(error, SchemaTooNew)
    body = {"error": str(error), "schema": error.found, "supported": error.known}
    return JSONResponse(body, status_code=503)


def _stop_path(request: Request) -> bool:
    """Whether the path as sent ends with the ``stop`` segment. The router reads the decoded path, where
    an id's own ``/`` (sent as ``%2F``, as the page does) looks like a segment's: the raw path tells."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
    return path.split("?", 1)[0].endswith("/stop")


def _not_allowed(allow: str) -> Response:
    return PlainTextResponse("Method Not Allowed", status_code=405, headers={"Allow": allow})


def _no_conversation(key: str) -> Response:
    return JSONResponse({"error": f"no conversation {key!r}"}, status_code=404)

"""``elicit="pause"``: a server's question pauses the turn, and the answer finishes the call.

Theory of operation. A ``Server`` built with ``elicit="pause"`` holds one ``Pauses``: its calls go
through ``Pauses.call`` (not the SDK's ``Client.call_tool``), and the questions its session asks
mid-call reach ``Pauses.answer`` (from the server's ``_on_elicit``). A question becomes
``AsksInput`` (the turn pauses: ``_turn.elicitation``), carrying what the resumed call needs to
finish (``resume``); the caller's answer comes back with it as a ``Resume``.

- **A 2026-07-28 session**: a question is an input-required round (``InputRequiredResult``). The
  pause holds the round's ``requestState``, its key and the round's other responses (``_saved``);
  the resumed call is that round's retry carrying the answer (stateless on the server's side).
- **An older session**: a question is an ``elicitation/create`` request mid-call. The call is
  cancelled at the pause; the resumed call is the tool called again, the server's questions
  answered in order with the answers saved (``_Paused.answers``), while they are the ones it asked
  before (``_digest``). Such a request does not say which call asks, so on an older session the
  server's calls under ``elicit="pause"`` run one at a time (per loop), the question taken as the
  oldest call's.

What it needs of its server is given, not reached for: the server's ``name`` and ``label`` (for
the question and its errors), the session's ``Client``, and, for a call the server runs as a task
(``_tasks``), a function making that call (``as_task``): a task has no rounds, its questions come
mid-call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError

from dspy_imp._records.errors import AsksInput
from dspy_imp._turn import elicitation

MAX_ROUNDS = 10
"""The most input-required rounds one call of a 2026-07-28 session may take (the SDK's default)."""
STATE_ONLY_SECONDS = 0.25
"""The wait before retrying a round that sent only a ``requestState`` (the SDK's driver waits 0.05-0.25 s)."""

Resume = tuple[Mapping[str, Any], Mapping[str, Any]]
"""A paused call's question (``AsksInput.elicitation``) and the answer to send (``_turn.elicitation.answer``)."""

URL_REQUIRED = "url_required"
"""The ``resume`` era of a call refused with ``URLElicitationRequiredError`` (-32042): made again on resume."""

Elicited = types.ElicitRequestFormParams | types.ElicitRequestURLParams
"""A server's question: a form, or a URL to open (``mode: "url"``, 2025-11-25)."""

AsTask = Callable[[], Awaitable[types.CallToolResult]]
"""The call made as a task (``_tasks.call_as_task``), given when the server runs it as one."""


class Pauses:
    """The calls of one server under ``elicit="pause"``, and the questions its session asks."""

    def __init__(self, name: str, label: str):
        self.name = name
        self.label = label
        self._one_call: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )  # on an older session: one call at a time, per loop
        self._in_flight: list[_Paused] = []
        """The calls in flight, oldest first: a question an older session asks mid-call is taken as
        the oldest's (``answer``)."""

    async def call(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        progress: Any,
        resume: Resume | None,
        as_task: AsTask | None = None,
    ) -> types.CallToolResult:
        """The call, its questions pausing the turn (``AsksInput``). A 2026-07-28 session's question
        is an input-required round: the pause holds its ``requestState``, and the resumed call is that
        round's retry carrying the answer (stateless). An older session's question is a request
        mid-call: the call is cancelled at the pause, and the resumed call is the tool called again,
        the server's questions answered in order with the answers saved, while they are the ones it
        asked before (the tool's work before its question is done again). Such a request does not
        say which call asks, so on an older session this server's calls run one at a time."""
        if client.session.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return await self._call(client, name, arguments, progress, resume, as_task)
        loop = asyncio.get_running_loop()
        alone = self._one_call.get(loop)
        if alone is None:
            alone = self._one_call[loop] = asyncio.Lock()
        async with alone:
            return await self._call(client, name, arguments, progress, resume, as_task)

    async def _call(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        progress: Any,
        resume: Resume | None,
        as_task: AsTask | None,
    ) -> types.CallToolResult:
        asked, answer = resume if resume is not None else ({}, {})
        kept = asked.get("resume")
        saved: Mapping[str, Any] = kept if isinstance(kept, Mapping) else {}
        answers = [dict(a) for a in saved.get("answered") or () if isinstance(a, Mapping)]
        if resume is not None and saved.get("era") == URL_REQUIRED and answer.get("action") != "accept":
            raise RuntimeError(f"{self.label} needs a URL opened to make this call, and the person did not")
        if resume is not None and saved.get("era") != "input_required":
            answers.append({"question": _asked_digest(asked), "answer": answer})
        paused = _Paused(answers)
        self._in_flight.append(paused)
        call = asyncio.ensure_future(self._rounds(client, name, arguments, progress, saved, answer, as_task))
        try:
            waiting: list[asyncio.Future[Any]] = [call, paused.asked]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if call.done():
                return call.result()
            call.cancel()  # asked mid-call (an older session): the SDK tells the server the call is cancelled
            await asyncio.gather(call, return_exceptions=True)
            raise AsksInput(paused.asked.result())
        except BaseException:
            call.cancel()
            raise
        finally:
            paused.stopped.set()
            self._in_flight.remove(paused)

    async def _rounds(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        progress: Any,
        saved: Mapping[str, Any],
        answer: Any,
        as_task: AsTask | None,
    ) -> types.CallToolResult:
        """The call's input-required rounds (2026-07-28), driven here rather than by the SDK's
        ``Client.call_tool`` (whose driver keeps no ``requestState`` for later): requests other than a
        form elicitation are answered as the SDK answers them; a form pauses the turn, one question
        at a time. Not done here as the SDK's ``call_tool`` does: the re-listing after a
        ``HEADER_MISMATCH`` and claimed extension results. A call sent as a task (an older session's:
        ``_tasks``) has no rounds: its questions come mid-call."""
        try:
            return await self._sent(client, name, arguments, progress, saved, answer, as_task)
        except MCPError as error:
            if error.code != types.URL_ELICITATION_REQUIRED:
                raise
            answered = [dict(a) for a in saved.get("answered") or () if isinstance(a, Mapping)]
            if saved.get("era") == URL_REQUIRED:
                answered.append({"question": _asked_digest(saved), "answer": dict(answer)})
            raise AsksInput(self._url_required(error, answered)) from None

    def _url_required(self, error: MCPError, answered: list[dict[str, Any]]) -> dict[str, Any]:
        """The question of a call refused with ``URLElicitationRequiredError`` (-32042, 2025-11-25): its
        first URL not opened yet; the resumed call is the call made again (once it was opened). Every
        one opened already, or none given: the call's error."""
        done = {a.get("question") for a in answered}
        for params in required_urls(error, self.label):
            if _digest(params.message, None, params.url) in done:
                continue
            kept = {"era": URL_REQUIRED, "answered": answered, "message": params.message, "url": params.url}
            return self.question(params, kept)
        raise RuntimeError(f"{self.label} still requires the URL(s) it asked to be opened: {_message(error)}")

    async def _sent(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        progress: Any,
        saved: Mapping[str, Any],
        answer: Any,
        as_task: AsTask | None,
    ) -> types.CallToolResult:
        if as_task is not None:
            return await as_task()
        responses: dict[str, Any] | None = None
        state: str | None = None
        if saved.get("era") == "input_required":  # the round the turn paused at, retried with the answer
            responses = {**_responses(saved.get("responses")), str(saved.get("key")): types.ElicitResult(**answer)}
            state = saved.get("request_state") if isinstance(saved.get("request_state"), str) else None
        for _ in range(MAX_ROUNDS + 1):
            result = await client.session.call_tool(
                name, arguments, progress_callback=progress, input_responses=responses, request_state=state,
                allow_input_required=True,
            )  # fmt: skip
            if not isinstance(result, types.InputRequiredResult):
                return result
            state, responses, forms = result.request_state, {}, []
            for key, request in (result.input_requests or {}).items():
                params = getattr(request, "params", None)
                if isinstance(params, types.ElicitRequestFormParams | types.ElicitRequestURLParams):
                    forms.append((key, params))
                    continue
                context = ClientRequestContext(session=client.session, request_id=key)
                response = await client.session.dispatch_input_request(context, request)
                if isinstance(response, types.ErrorData):
                    raise MCPError.from_error_data(response)
                responses[key] = response
            if forms:  # the first question pauses the turn; the server asks again for any others
                key, params = forms[0]
                kept = {"era": "input_required", "key": key, "request_state": state, "responses": _saved(responses)}
                raise AsksInput(self.question(params, kept))
            if not result.input_requests:  # only a state: retried after a pause, as the SDK's driver does
                await asyncio.sleep(STATE_ONLY_SECONDS)
        raise RuntimeError(f"{self.label} asked for input more than {MAX_ROUNDS} rounds in one call")

    def question(self, params: Elicited, resume: dict[str, Any]) -> dict[str, Any]:
        """What a paused call carries (``AsksInput.elicitation``); a question that cannot pause a turn
        (too long, a form schema the gate refuses, a URL not ``http``/``https``) is the call's error."""
        if isinstance(params, types.ElicitRequestURLParams):
            problem = elicitation.url_question_problem(params.message, params.url)
            if problem is not None:
                raise RuntimeError(f"{self.label} asked to open a URL that cannot be shown: {problem}")
            return {"server": self.name, "mode": "url", "message": params.message, "url": params.url,
                    "elicitation_id": params.elicitation_id, "resume": resume}  # fmt: skip
        schema = plain(params.requested_schema)
        problem = elicitation.problem(params.message, schema)
        if problem is not None:
            raise RuntimeError(f"{self.label} asked for input that cannot be shown: {problem}")
        return {"server": self.name, "message": params.message, "schema": schema, "resume": resume}

    async def answer(self, params: Elicited) -> types.ElicitResult | types.ErrorData:
        """An older session's question mid-call: answered with the saved answer when it is the
        question asked before, else the call pauses (its request is cancelled)."""
        if not self._in_flight:
            return types.ErrorData(code=types.INVALID_REQUEST, message="input is asked only during a tool call")
        paused = self._in_flight[0]
        digest = _params_digest(params)
        if paused.answers and paused.answers[0].get("question") == digest:
            given = paused.answers.pop(0)
            paused.answered.append(given)
            try:
                return types.ElicitResult.model_validate(given.get("answer"))
            except ValidationError:  # a saved answer the history's editor broke: the server reads a refusal
                return types.ErrorData(code=types.INVALID_PARAMS, message="the saved answer is not an answer")
        if not paused.asked.done():
            try:
                question = self.question(params, {"era": "mid_call", "answered": list(paused.answered)})
            except RuntimeError as refused:
                return types.ErrorData(code=types.INVALID_REQUEST, message=str(refused))
            paused.asked.set_result(question)
        await paused.stopped.wait()  # the call is cancelled first: the server reads no answer before that
        return types.ElicitResult(action="cancel")


class _Paused:
    """A call in flight under ``elicit="pause"``: the answers saved for the questions an older session
    asks again (in order), those given so far, and the question that pauses it."""

    def __init__(self, answers: list[dict[str, Any]]):
        self.answers = answers
        self.answered: list[dict[str, Any]] = []
        self.asked: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.stopped = asyncio.Event()


def _digest(message: Any, schema: Any, url: Any = None) -> str:
    """A question as a short text: the same message and form (or URL) are the same question."""
    asked = {"message": message, "schema": schema} if url is None else {"message": message, "url": url}
    text = json.dumps(asked, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _asked_digest(asked: Mapping[str, Any]) -> str:
    """The digest of a recorded question (a form's, or a URL elicitation's: ``mode`` ``"url"``, or a
    -32042 one's ``resume``)."""
    if asked.get("mode") == "url" or asked.get("era") == URL_REQUIRED:
        return _digest(asked.get("message"), None, asked.get("url"))
    return _digest(asked.get("message"), asked.get("schema"))


def _params_digest(params: Elicited) -> str:
    if isinstance(params, types.ElicitRequestURLParams):
        return _digest(params.message, None, params.url)
    return _digest(params.message, plain(params.requested_schema))


def required_urls(error: MCPError, label: str) -> list[types.ElicitRequestURLParams]:
    """The URL elicitations a ``URLElicitationRequiredError`` (-32042) carries (``data.elicitations``);
    an error that carries none readable is the call's error."""
    try:
        found = UrlElicitationRequiredError.from_error(error.error).elicitations
    except (ValidationError, ValueError, TypeError, AttributeError):
        found = []
    if not found:
        raise RuntimeError(f"{label} requires URL elicitation but named no URL: {_message(error)}") from None
    return found


def _message(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


_RESPONSES: dict[str, type[Any]] = {
    "sampling": types.CreateMessageResult,
    "sampling_tools": types.CreateMessageResultWithTools,
    "roots": types.ListRootsResult,
    "elicitation": types.ElicitResult,
}


def _saved(responses: Mapping[str, Any]) -> dict[str, Any]:
    """A round's other responses (sampling, roots), JSON, kept with the pause for its retry."""
    kinds = {cls: kind for kind, cls in _RESPONSES.items()}
    return {
        key: {"kind": kinds[type(r)], "data": r.model_dump(mode="json", by_alias=True, exclude_none=True)}
        for key, r in responses.items()
        if type(r) in kinds
    }


def _responses(saved: Any) -> dict[str, Any]:
    if not isinstance(saved, Mapping):
        return {}
    return {
        str(key): _RESPONSES[item["kind"]].model_validate(item["data"])
        for key, item in saved.items()
        if isinstance(item, Mapping) and item.get("kind") in _RESPONSES
    }


def plain(schema: Any) -> dict[str, Any]:
    """A form's requested schema as a plain dict (the SDK gives a dict or a model)."""
    if isinstance(schema, Mapping):
        return dict(schema)
    dumped = schema.model_dump(by_alias=True, exclude_none=True)
    return dumped if isinstance(dumped, dict) else {}

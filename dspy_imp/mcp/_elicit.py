"""A server's requests for input, answered by the host's callbacks: forms (``elicit=``) and URLs to
open (``elicit_url=``: MCP 2025-11-25 URL mode, SEP-1036), or paused under ``elicit="pause"``.

Theory of operation. A ``Server`` holds one ``Questions``: its session's elicitation callback is
``Questions.answer``, and a call the server refused with ``URLElicitationRequiredError`` (-32042)
has its URLs asked by ``Questions.urls_opened`` before the call is made once more. Under
``elicit="pause"`` a question goes to the server's ``Pauses`` (``_pausing``) instead, which pauses
the turn. What the client declares follows what can answer (``modes``): ``form`` with ``elicit=``,
``url`` with ``elicit_url=`` or ``elicit="pause"`` (which pauses on both).

The callbacks are host code: a sync one runs in a worker thread, never on the MCP layer's loop
(``host``); what one answers is checked before anything is sent (a value a form cannot hold, an
answer that is not one), and what one raises is a refusal the server reads. A URL is the server's
untrusted text: one that may not be shown (``_turn.elicitation.url_question_problem``) never
reaches the callback.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Literal

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._turn import elicitation
from dspy_imp.mcp._pausing import Pauses, plain, required_urls

PAUSE = "pause"
"""``elicit="pause"``: a server's request for input pauses the turn (``docs/mcp.md#elicitation``)."""

_Elicit = Callable[[str, dict[str, Any]], Any] | Literal["pause"] | None
"""What ``elicit=`` takes (its public name and words: ``_servers.Elicit``)."""
_ElicitUrl = Callable[[str, str], Any] | None
"""What ``elicit_url=`` takes (its public name and words: ``_servers.ElicitUrl``)."""


def check(elicit: Any, elicit_url: Any) -> None:
    """``elicit=`` and ``elicit_url=``, checked together (a ``ConfigurationError`` naming the option)."""
    if elicit is not None and not callable(elicit) and elicit != PAUSE:
        raise ConfigurationError(
            f'MCP server `elicit` must be callable(message, schema) -> dict or None, or "pause", got {elicit!r}'
        )
    if elicit_url is not None and not callable(elicit_url):
        raise ConfigurationError(
            f"MCP server `elicit_url` must be callable(message, url) -> True, False or 'cancel', got {elicit_url!r}"
        )
    if elicit_url is not None and elicit == PAUSE:
        raise ConfigurationError(
            'MCP server `elicit_url` is not taken with `elicit="pause"`: the pause takes the requests to open '
            "a URL too (answered through `approvals`)"
        )


def modes(elicit: _Elicit, elicit_url: _ElicitUrl) -> tuple[str, ...]:
    """The elicitation modes a client declares: ``"form"`` with ``elicit=``, ``"url"`` with
    ``elicit_url=`` or ``elicit="pause"`` (which pauses on both)."""
    found = ("form",) if elicit is not None else ()
    return (*found, "url") if elicit == PAUSE or elicit_url is not None else found


class Questions:
    """How one server's requests for input are answered (see the module)."""

    def __init__(self, label: str, elicit: _Elicit, elicit_url: _ElicitUrl, pauses: Pauses):
        self.label = label
        self.elicit = elicit
        self.elicit_url = elicit_url
        self.pauses = pauses

    async def answer(self, context: Any, params: Any) -> types.ElicitResult | types.ErrorData:
        """A server's ``elicitation/create``, answered by the ``elicit`` callback (a sync one in a worker
        thread, never on this loop): a mapping accepts (the schema's defaults filled in for what it
        leaves out or answers ``None``, SEP-1034), ``None`` declines. A value a form cannot hold (a
        dict, say) is refused with an error the server reads, not sent. A request to open a URL
        goes to ``elicit_url`` (``open_url``)."""
        if self.elicit == PAUSE and isinstance(params, types.ElicitRequestFormParams | types.ElicitRequestURLParams):
            return await self.pauses.answer(params)
        if isinstance(params, types.ElicitRequestURLParams):
            return await self.open_url(params)
        if not isinstance(params, types.ElicitRequestFormParams) or self.elicit is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="form elicitation is not supported")
        schema = plain(params.requested_schema)
        callback = self.elicit
        assert callable(callback)
        try:
            answer = await host(callback, params.message, schema)
        except Exception as error:  # the callback is host code: the server reads a refusal
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the elicitation failed: {message(error)}")
        if answer is None:
            return types.ElicitResult(action="decline")
        if not isinstance(answer, Mapping):
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message="the elicitation answered neither a dict nor None"
            )
        given = {key: value for key, value in answer.items() if value is not None}
        try:
            return types.ElicitResult(action="accept", content={**elicitation.defaults(schema), **given})
        except ValidationError:
            kept = sorted(str(k) for k, v in given.items() if not elicitation.form_value(v))
            return types.ErrorData(
                code=types.INTERNAL_ERROR,
                message=f"the elicitation answered field(s) {kept!r} with a value that is not a string, number, "
                "boolean or list of strings",
            )

    async def open_url(self, params: types.ElicitRequestURLParams) -> types.ElicitResult | types.ErrorData:
        """A request to open a URL, answered by ``elicit_url(message, url)``: ``True`` accepts, ``False``
        or ``None`` declines, ``"cancel"`` cancels. A URL that may not be shown (``elicitation.url_problem``)
        never reaches the callback: the server reads a refusal."""
        callback = self.elicit_url
        if callback is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="URL elicitation is not supported")
        problem = elicitation.url_question_problem(params.message, params.url)
        if problem is not None:
            return types.ErrorData(code=types.INVALID_PARAMS, message=f"the URL elicitation is refused: {problem}")
        try:
            answer = await host(callback, params.message, params.url)
        except Exception as error:  # host code: the server reads a refusal
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the elicitation failed: {message(error)}")
        if answer is True:
            return types.ElicitResult(action="accept")
        if answer is False or answer is None:
            return types.ElicitResult(action="decline")
        if answer == "cancel":
            return types.ElicitResult(action="cancel")
        return types.ErrorData(
            code=types.INTERNAL_ERROR, message="the URL elicitation answered neither True, False, None nor 'cancel'"
        )

    async def urls_opened(self, error: MCPError) -> None:
        """A call refused with ``URLElicitationRequiredError`` (-32042): each URL it names asked of
        ``elicit_url`` in turn; all accepted returns (the call is made once more), else the call's error."""
        for params in required_urls(error, self.label):
            answered = await self.open_url(params)
            if isinstance(answered, types.ErrorData):
                raise RuntimeError(f"{self.label} requires a URL opened to make this call: {answered.message}")
            if answered.action != "accept":
                raise RuntimeError(
                    f"{self.label} needs a URL opened to make this call, and the person did not ({answered.action})"
                )


async def host(callback: Callable[..., Any], *args: Any) -> Any:
    """A host's callback called: an async one awaited, a sync one in a worker thread (never on this loop)."""
    if inspect.iscoroutinefunction(callback):
        return await callback(*args)
    answer = await asyncio.to_thread(callback, *args)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


def message(error: BaseException) -> str:
    """An error on one line, for the text a server or a caller reads (an exception group's, joined)."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(message(e) for e in error.exceptions)
    return " ".join(str(error).split()) or type(error).__name__

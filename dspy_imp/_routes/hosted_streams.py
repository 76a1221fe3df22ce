"""Hosted tools on streamed replies: the reply's body, assembled from the provider's raw frames.

A request streams when DSPy's ``send_stream`` is set (a turn under ``dspy.streamify``, the web app's
streams, live progress). lm15 then reads the server-sent frames into its stream events, which carry
text, thinking, function calls and signatures but none of the blocks a provider's own tools serve,
and keeps as ``Response.provider_data`` only the frame that ended the stream:

- Anthropic: the ``message_delta`` frame (the stop reason and the usage). The ``server_tool_use``
  block (its input in ``input_json_delta`` fragments), the ``*_tool_result`` blocks (whole in their
  ``content_block_start``), the text blocks' ``citations_delta`` frames and the thinking blocks'
  ``signature_delta`` frames are read for lm15's events or not at all.
- Gemini: the last chunk. Each chunk carries its own parts (``executableCode``, ``toolCall``,
  ``toolResponse``, text, each with its ``thoughtSignature``); the grounding metadata may come on any
  chunk (URL context's on the first, search grounding on the last).
- OpenAI Chat Completions (a search model's request, carrying ``web_search_options``, or OpenRouter's
  carrying its ``web`` plugin): the frame that supplied the usage. The message's ``annotations`` come on a
  delta lm15's reader does not read (OpenRouter's one to a chunk, before the text).
- OpenAI Responses needs nothing here: its ``response.completed`` frame carries the whole response
  (its ``output`` list as served) and lm15 keeps that response as ``provider_data``.

So for a request carrying hosted tools (lm15 ``builtin`` tools) on Anthropic or Gemini, the wrappers
below collect the stream's raw frames and put, in the stream's end event, the body the non-streamed
reply would have held instead of the last frame:

- Anthropic: the ``message_start`` message with its ``content`` list assembled from the frames as
  Anthropic's SDK assembles a streamed message (``anthropic.lib.streaming``: each block as its
  ``content_block_start`` served it; text, thinking and signatures from their deltas; a tool block's
  ``input`` parsed from its joined ``input_json_delta`` fragments; each citation appended to its text
  block's ``citations``), and the ``message_delta`` fields (stop reason, container, usage with
  ``server_tool_use``) laid over it;
- Gemini: one ``GenerateContentResponse``: every part of every chunk, in order, as served (none
  merged, no signature moved: Google's guidance is to send signed parts back as they came), and the
  candidate's and response's other fields, a later non-empty value replacing an earlier one (so an
  empty ``groundingMetadata`` on a middle chunk does not erase the first chunk's URL context, and the
  last chunk's usage is the reply's);
- Chat Completions: one ``chat.completion`` body, its message's content joined from the deltas and
  every delta's ``annotations`` appended in order (``ChatFrames``).

``hosted_anthropic.served`` and ``hosted_gemini.served`` then record that body exactly as they record a
non-streamed one. A frame the assembler cannot read (a delta type Anthropic adds later, input JSON that
does not parse) is named under ``UNREAD`` in the body, and a route refuses to record such a reply when
it holds a served block (``RefusedOption``), rather than recording it without what it could not read.

Every Gemini stream, hosted tools or not, also has its parts placed apart (``GeminiPlaces``): lm15's
Gemini reader gives each part's delta its place *in its chunk* (``part_index``), and lm15's stream assembler
(like DSPy's listener bridge) joins every delta of one place into one part. That is right for text, which
Gemini streams in pieces at the same place of successive chunks, and wrong for a function call, which Gemini
serves whole: parallel calls often come one to a chunk, each first in its chunk, and were read as one call
whose input is both arguments joined (``{"a":1}{"a":2}``, so the tool got no valid arguments and the next
request sent one broken call back), and a call's signature was laid on a text part at the same place. Here
each function call gets a place of its own in the stream, and every other part keeps lm15's join by place.

The collectors are keyed by the lm15 ``Request`` object one stream reads (the same object reaches
``_stream_raw`` and each ``parse_stream_events`` call of that stream), for the stream's lifetime only.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from dspy_imp._routes import dspy_private
from dspy_imp._routes.failures import RefusedOption

ASSEMBLED = "dspy_imp_streamed"  # a body assembled here (the number of frames it read); not a provider field
UNREAD = "dspy_imp_unread"  # the frame or delta types the assembler could not read, when there were any


class AnthropicFrames:
    """A streamed Messages reply's frames, assembled as the non-streamed body holds them."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.inputs: dict[int, str] = {}
        self.unread: list[str] = []
        self.frames = 0

    def feed(self, payload: Any) -> None:
        if not isinstance(payload, Mapping):
            return
        self.frames += 1
        kind = payload.get("type")
        if kind == "message_start" and isinstance(payload.get("message"), Mapping):
            self.message = copy.deepcopy(dict(payload["message"]))
            self.blocks, self.inputs = {}, {}
        elif kind == "content_block_start" and isinstance(payload.get("content_block"), Mapping):
            self.blocks[_index(payload)] = copy.deepcopy(dict(payload["content_block"]))
        elif kind == "content_block_delta":
            self._delta(_index(payload), payload.get("delta"))
        elif kind == "content_block_stop":
            self._stop(_index(payload))
        elif kind == "message_delta":
            self._message_delta(payload)
        elif kind not in ("message_stop", "ping", "error"):
            self.unread.append(str(kind))

    def read_by_lm15(self, payload: Any) -> bool:
        """Whether lm15 may read this frame: not a server tool's input fragment. lm15 skips a
        ``server_tool_use`` block's start but reads its ``input_json_delta`` frames as a function call's,
        which then has no name, and the stream fails to assemble (``StreamAssemblyError``)."""
        if not isinstance(payload, Mapping) or payload.get("type") != "content_block_delta":
            return True
        delta = payload.get("delta")
        if not isinstance(delta, Mapping) or delta.get("type") != "input_json_delta":
            return True
        block = self.blocks.get(_index(payload))
        return block is None or block.get("type") == "tool_use"

    def _delta(self, index: int, delta: Any) -> None:
        block = self.blocks.get(index)
        kind = delta.get("type") if isinstance(delta, Mapping) else None
        if block is None or not isinstance(delta, Mapping):
            self.unread.append(f"{kind} before its block")
        elif kind == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "input_json_delta":
            self.inputs[index] = self.inputs.get(index, "") + str(delta.get("partial_json") or "")
        elif kind == "citations_delta":
            if not isinstance(block.get("citations"), list):
                block["citations"] = []
            block["citations"].append(copy.deepcopy(delta.get("citation")))
        else:
            self.unread.append(str(kind))

    def _stop(self, index: int) -> None:
        fragments = self.inputs.pop(index, "")
        if not fragments or index not in self.blocks:
            return  # no input fragments: the input is the one the block opened with
        try:
            self.blocks[index]["input"] = json.loads(fragments)
        except ValueError:
            self.unread.append("input_json_delta (the joined input is not JSON)")

    def _message_delta(self, payload: Mapping[str, Any]) -> None:
        if self.message is None:
            self.unread.append("message_delta before message_start")
            return
        delta = payload.get("delta")
        if isinstance(delta, Mapping):
            self.message.update(copy.deepcopy(dict(delta)))
        usage = payload.get("usage")
        if isinstance(usage, Mapping):  # cumulative counts: a later one replaces, an absent one keeps
            earlier = self.message.get("usage")
            known: dict[str, Any] = dict(earlier) if isinstance(earlier, Mapping) else {}
            self.message["usage"] = {**known, **{k: copy.deepcopy(v) for k, v in usage.items() if v is not None}}

    def body(self) -> dict[str, Any] | None:
        if self.message is None:
            return None
        body = {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}
        if "content" in self.message:  # keep the message's own key order
            body = {k: (body["content"] if k == "content" else v) for k, v in body.items()}
        return _marked(copy.deepcopy(body), self.frames, self.unread)


class GeminiFrames:
    """A streamed ``streamGenerateContent`` reply's chunks, as one ``GenerateContentResponse``."""

    def __init__(self) -> None:
        self.top: dict[str, Any] = {}
        self.candidate: dict[str, Any] = {}
        self.content: dict[str, Any] = {}
        self.parts: list[Any] = []
        self.frames = 0

    def feed(self, payload: Any) -> None:
        if not isinstance(payload, Mapping) or "error" in payload:
            return
        self.frames += 1
        candidates = payload.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        _lay_over(self.top, payload, held="candidates")
        if not isinstance(candidate, Mapping):
            return
        _lay_over(self.candidate, candidate, held="content")
        content = candidate.get("content")
        if isinstance(content, Mapping):
            _lay_over(self.content, content, held="parts")
            if isinstance(content.get("parts"), list):
                self.parts.extend(copy.deepcopy(content["parts"]))

    def read_by_lm15(self, payload: Any) -> bool:
        return True

    def body(self) -> dict[str, Any] | None:
        if not self.frames:
            return None
        content = {k: (list(self.parts) if k == "parts" else v) for k, v in self.content.items()}
        candidate = {k: (content if k == "content" else v) for k, v in self.candidate.items()}
        body = {k: ([candidate] if k == "candidates" else v) for k, v in self.top.items()}
        return _marked(copy.deepcopy(body), self.frames, [])


class ChatFrames:
    """A streamed Chat Completions reply's chunks, as the ``chat.completion`` body a reply not streamed holds.

    Only a search's stream is collected (a request carrying ``web_search_options``, or OpenRouter's ``web``
    plugin): its message's
    ``url_citation`` annotations come on a delta of their own, which lm15's reader does not read. The
    chunk's own fields (``id``, ``created``, ``model``, ``usage``...) are laid over one another, a later
    non-null value replacing an earlier one; the message's ``content`` (and a ``refusal``) is joined from
    its deltas and each delta's ``annotations`` appended, in order. Function calls (and OpenRouter's
    reasoning) are not assembled here: lm15 reads them from the stream's events, as on any stream."""

    MESSAGE = ("role", "content", "refusal", "annotations")

    def __init__(self) -> None:
        self.top: dict[str, Any] = {}
        self.choice: dict[str, Any] = {}
        self.message: dict[str, Any] = {}
        self.frames = 0

    def feed(self, payload: Any) -> None:
        if not isinstance(payload, Mapping) or "error" in payload:
            return
        self.frames += 1
        for key, value in payload.items():
            if key not in ("choices", "object") and (value is not None or key not in self.top):
                self.top[key] = copy.deepcopy(value)
        choices = payload.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else None
        if choice is None:
            return
        for key in ("index", "logprobs", "finish_reason"):
            if key in choice and (choice[key] is not None or key not in self.choice):
                self.choice[key] = copy.deepcopy(choice[key])
        delta = choice.get("delta")
        if isinstance(delta, Mapping):
            self._delta(delta)

    def _delta(self, delta: Mapping[str, Any]) -> None:
        for key, value in delta.items():
            if key not in self.MESSAGE:
                continue
            if key in ("content", "refusal") and isinstance(value, str):
                self.message[key] = str(self.message.get(key) or "") + value
            elif key == "annotations" and isinstance(value, list):
                if not isinstance(self.message.get(key), list):
                    self.message[key] = []
                self.message[key].extend(copy.deepcopy(value))
            elif key not in self.message or value is not None:
                self.message[key] = copy.deepcopy(value)

    def read_by_lm15(self, payload: Any) -> bool:
        return True

    def body(self) -> dict[str, Any] | None:
        if not self.frames:
            return None
        choice = {"index": self.choice.get("index", 0), "message": dict(self.message)}
        choice.update({k: v for k, v in self.choice.items() if k != "index"})
        return _marked(copy.deepcopy({"object": "chat.completion", **self.top, "choices": [choice]}), self.frames, [])


class GeminiPlaces:
    """Each streamed Gemini part's place in the reply (lm15's ``part_index``), across the stream's chunks.

    A function call takes a new place (Gemini serves each call whole, so no two chunks hold pieces of one
    call); its signature, which lm15 yields after it at the same place in the chunk, goes with it. Any other
    part keeps lm15's rule, one place for each place in a chunk, so text streamed in pieces at place 0 of
    successive chunks is still joined. Places are numbered in the order they first come, so the parts are
    assembled in the order served, and lm15's correlator for a call without id (``tool_call_<place>``) is the
    one a reply not streamed gets (``tool_call_<its index among the parts>``) when the calls follow the text."""

    def __init__(self) -> None:
        self.count = 0
        self.joined: dict[int, int] = {}  # a part's place in its chunk → its place in the stream (not a call)

    def _new(self) -> int:
        self.count += 1
        return self.count - 1

    def placed(self, events: Any) -> Iterator[Any]:
        """lm15's events for one chunk, each delta at its place in the stream."""
        here: dict[int, int] = {}  # this chunk's places: a call's signature follows the call at its place
        for event in events:
            delta: Any = getattr(event, "delta", None)
            index = getattr(delta, "part_index", None)
            if not isinstance(index, int) or isinstance(index, bool) or not _a_dataclass(delta):
                yield event
                continue
            if index not in here:
                if getattr(delta, "type", None) == "tool_call":
                    here[index] = self._new()
                else:
                    if index not in self.joined:
                        self.joined[index] = self._new()
                    here[index] = self.joined[index]
            yield dataclasses.replace(event, delta=dataclasses.replace(delta, part_index=here[index]))


def _a_dataclass(value: Any) -> bool:
    """Whether ``value`` is a dataclass instance (lm15's stream deltas are), which ``dataclasses.replace`` takes."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _lay_over(into: dict[str, Any], fields: Mapping[str, Any], held: str) -> None:
    """``fields`` over ``into``: a later non-empty value replaces an earlier one, an empty one (``{}``,
    ``[]``, null) erases none; ``held`` keeps only its place (its value is assembled apart)."""
    for key, value in fields.items():
        if key == held:
            into.setdefault(key, None)
        elif key not in into or value not in (None, {}, []):
            into[key] = copy.deepcopy(value)


def _index(payload: Mapping[str, Any]) -> int:
    index = payload.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _marked(body: dict[str, Any], frames: int, unread: list[str]) -> dict[str, Any]:
    body[ASSEMBLED] = frames
    if unread:
        body[UNREAD] = list(dict.fromkeys(unread))
    return body


Frames = AnthropicFrames | GeminiFrames | ChatFrames


@dataclasses.dataclass
class _Stream:
    """What one stream keeps: its raw frames (a request carrying hosted tools) and its Gemini part places."""

    frames: Frames | None
    places: GeminiPlaces | None


_LIVE: dict[int, tuple[Any, _Stream]] = {}
_LOCK = threading.Lock()


def _carries_hosted_tools(request: Any) -> bool:
    return any(getattr(t, "type", None) == "builtin" for t in getattr(request, "tools", None) or ())


def _searches_on_chat(request: Any) -> bool:
    """A Chat Completions request for a search model's search (``hosted_openai_chat``: no tool, the options),
    OpenRouter's web plugin (``hosted_openrouter``: ``plugins`` naming ``web``) or its server tool (a builtin
    tool named ``openrouter:web_search``)."""
    if any(getattr(t, "name", None) == "openrouter:web_search" for t in getattr(request, "tools", None) or ()):
        return True
    extensions = getattr(getattr(request, "config", None), "extensions", None)
    if not isinstance(extensions, Mapping):
        return False
    plugins = extensions.get("plugins")
    web = isinstance(plugins, list) and any(isinstance(p, Mapping) and p.get("id") == "web" for p in plugins)
    return "web_search_options" in extensions or web


@contextlib.contextmanager
def _streaming(
    request: Any, make: Callable[[], Frames], placed: bool, wanted: Callable[[Any], bool]
) -> Iterator[Frames | None]:
    """The stream of ``request``, kept while the block runs: its frame collector (None: ``wanted`` says the
    request has no hosted tool), and with ``placed`` its part places (``GeminiPlaces``)."""
    frames = make() if wanted(request) else None
    places = GeminiPlaces() if placed else None
    if frames is None and places is None:
        yield None
        return
    key, stream = id(request), _Stream(frames, places)
    with _LOCK:
        earlier = _LIVE.get(key)
        _LIVE[key] = (request, stream)
    try:
        yield frames
    finally:
        with _LOCK:
            if _LIVE.get(key, (None, None))[1] is stream:
                if earlier is not None:
                    _LIVE[key] = earlier
                else:
                    del _LIVE[key]


def _stream_of(request: Any) -> _Stream | None:
    with _LOCK:
        found = _LIVE.get(id(request))
    return found[1] if found is not None and found[0] is request else None


def _ended(event: Any, frames: Frames | None) -> Any:
    """The end event carrying the assembled body in place of the last frame (a frame-less end stays)."""
    if frames is None or getattr(event, "type", None) != "end" or getattr(event, "provider_data", None) is None:
        return event
    body = frames.body()
    return event if body is None else dataclasses.replace(event, provider_data=body)


def _wrap_parse(original: Any) -> Any:
    def parse_stream_events(self: Any, request: Any, raw_event: Any) -> Any:
        stream = _stream_of(request)
        frames = stream.frames if stream is not None else None
        data = getattr(raw_event, "data", None)
        if frames is not None and data and data != "[DONE]":
            try:
                payload = json.loads(data)
            except ValueError:  # lm15's own reader names a frame that is not JSON
                return original(self, request, raw_event)
            frames.feed(payload)
            if not frames.read_by_lm15(payload):
                return iter(())
        events = original(self, request, raw_event)
        return events if stream is None or stream.places is None else stream.places.placed(events)

    return parse_stream_events


def _wrap_stream(
    make: Callable[[], Frames], placed: bool, wanted: Callable[[Any], bool] = _carries_hosted_tools
) -> Callable[[Any], Any]:
    def wrap(original: Any) -> Any:
        def stream_raw(self: Any, request: Any, req: Any = None) -> Iterator[Any]:
            with (
                _streaming(request, make, placed, wanted) as frames,
                contextlib.closing(original(self, request, req)) as events,
            ):
                for event in events:
                    yield _ended(event, frames)

        return stream_raw

    return wrap


def _wrap_astream(
    make: Callable[[], Frames], placed: bool, wanted: Callable[[Any], bool] = _carries_hosted_tools
) -> Callable[[Any], Any]:
    def wrap(original: Any) -> Any:
        async def stream_raw(self: Any, request: Any, req: Any = None) -> AsyncIterator[Any]:
            with _streaming(request, make, placed, wanted) as frames:
                async with contextlib.aclosing(original(self, request, req)) as events:
                    async for event in events:
                        yield _ended(event, frames)

        return stream_raw

    return wrap


_wrap_anthropic_stream = _wrap_stream(AnthropicFrames, placed=False)
_wrap_anthropic_astream = _wrap_astream(AnthropicFrames, placed=False)
_wrap_gemini_stream = _wrap_stream(GeminiFrames, placed=True)  # every Gemini stream: its calls placed apart
_wrap_gemini_astream = _wrap_astream(GeminiFrames, placed=True)
_wrap_chat_stream = _wrap_stream(ChatFrames, placed=False, wanted=_searches_on_chat)
_wrap_chat_astream = _wrap_astream(ChatFrames, placed=False, wanted=_searches_on_chat)


def install() -> None:
    """Wrap the frame readers and raw streams of lm15's Anthropic, Gemini and Chat Completions providers,
    sync and async, once per process (idempotent)."""
    asynchronous = dspy_private.lm15_async_providers()
    for sync, asyncs, stream, astream in (
        (
            dspy_private.lm15_anthropic().AnthropicLM,
            asynchronous.AsyncAnthropicLM,
            _wrap_anthropic_stream,
            _wrap_anthropic_astream,
        ),
        (dspy_private.lm15_gemini().GeminiLM, asynchronous.AsyncGeminiLM, _wrap_gemini_stream, _wrap_gemini_astream),
        (
            dspy_private.lm15_openai_chat().OpenAIChatLM,
            asynchronous.AsyncOpenAIChatLM,
            _wrap_chat_stream,
            _wrap_chat_astream,
        ),
    ):
        dspy_private.wrap_once(sync, "parse_stream_events", _wrap_parse)
        dspy_private.wrap_once(sync, "_stream_raw", stream)
        dspy_private.wrap_once(asyncs, "_stream_raw", astream)


def check_read(data: Any, provider: str) -> None:
    """Refuse to record a streamed reply holding served blocks when its assembled body missed a frame
    (``RefusedOption``, a ``ConfigurationError``): recorded without it, the blocks would go back changed."""
    found = data.get(UNREAD) if isinstance(data, Mapping) else None
    if isinstance(found, list) and found:
        raise RefusedOption(
            f"a streamed {provider} reply holding hosted tool blocks carried frames this version cannot assemble "
            f"({', '.join(str(u) for u in found)}); its blocks cannot be kept as served. Run this program without "
            "streaming (no dspy.streamify, no live progress) until it can, or leave the hosted tools out"
        )


def assembled(data: Any) -> bool:
    """Whether a response's raw body was assembled here from a streamed reply's frames."""
    return isinstance(data, Mapping) and isinstance(data.get(ASSEMBLED), int)

"""Media (images, audio, files): from values to the provider's content parts, and through dumps.

A *media value* is a ``dspy.Type`` whose ``format()`` gives content parts (``dspy.Image``,
``dspy.Audio``, ``dspy.File``, and any user type doing the same). DSPy's own adapters
serialize such a value as marker text (``<<CUSTOM-TYPE-START-IDENTIFIER>>...``) and split
the markers back into parts when they build a user message; the loop renders its messages
itself, so it does the same here, with two differences:

- Values are *lifted* before their text is written: each media value is replaced by a token,
  the adapter formats the text as it always does, and the tokens are then swapped for the
  value's own parts. The text around the media is the text DSPy writes (so the prompt-cache
  prefix holds), and the parts reference the value's strings: a large base64 payload is
  not copied (nor JSON-encoded and decoded) for every request.
- Tool results: a tool message carries media inline where the provider takes it there
  (``"inline"``: Anthropic ``tool_result`` image blocks, Gemini function responses with inline
  data; images only), and otherwise (``"after"``: OpenAI Chat Completions and every other
  provider, and audio or files anywhere) the tool message keeps its text, each media item
  replaced by a placeholder such as ``[image 1]``, and one user message right after the
  step's results carries the media, each after its placeholder.

Media come only from media values, never from text: a tool result (a fetched web page) or an input
that holds DSPy's marker text, or text shaped like a token, stays text. Media nested in a pydantic
model are lifted like those in dicts and lists; a token carries a random nonce of its message
(``Attachments``), so no text can name one.

Dumps: ``dump_media`` writes a media value as ``{"__imp_type__": "media", "class": ..., "fields":
{...}}`` with its fields as given (no re-encoding); ``revive`` restores it without running
validators, looking the class up among the ``dspy.Type`` subclasses already imported (a
saved history never imports code).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

import pydantic

from dspy_imp._prompt import sentences
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.media import Part, kind_of, media_parts

Content = str | list[Part]


ToolMedia = Literal["inline", "after"]


"""Where a tool result's media goes: in the tool message, or in a user message after the results."""


_TOKEN = "@@dspy-imp-media-{}-{}@@"


_INLINE_PROVIDERS = frozenset({"anthropic", "gemini"})


class Attachments:
    """Media taken out of values while their text is written, put back as content parts.

    One instance serves one message: ``lift`` (values) or ``keep`` (a renderer's output) give
    text with tokens; ``content`` turns that text into the message's content.
    """

    def __init__(self) -> None:
        self.media: list[tuple[Part, ...]] = []
        self.nonce = secrets.token_hex(8)  # text cannot name a token it has never seen

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """The tokens of this message (compiled only for a message with media: a pattern per nonce
        misses ``re``'s cache, and most messages hold none)."""
        return re.compile(rf"@@dspy-imp-media-{self.nonce}-(\d+)@@")

    def _token(self, parts: tuple[Part, ...]) -> str:
        self.media.append(parts)
        return _TOKEN.format(self.nonce, len(self.media) - 1)

    def lift(self, value: Any) -> Any:
        """``value`` with each media value (in lists, tuples and dicts too) replaced by a token."""
        parts = media_parts(value)
        if parts is not None:
            return self._token(parts)
        before = len(self.media)
        if isinstance(value, list | tuple):
            lifted: Any = [self.lift(v) for v in value]
        elif isinstance(value, Mapping):
            lifted = {k: self.lift(v) for k, v in value.items()}
        elif isinstance(value, pydantic.BaseModel):  # written as DSPy writes the model: its fields as JSON
            lifted = {k: self.lift(getattr(value, k)) for k in type(value).model_fields}
        else:
            return value
        return lifted if len(self.media) > before else value  # no media: the value itself, untouched

    def keep(self, rendered: Any) -> str:
        """What a result renderer returned, as text with tokens: a str (kept as text, whatever it
        holds), a media value, or a list of those, concatenated in order."""
        if isinstance(rendered, str):
            return rendered
        parts = media_parts(rendered)
        if parts is not None:
            return self._token(parts)
        if isinstance(rendered, list | tuple):
            return "".join(self.keep(item) for item in rendered)
        raise TypeError(
            "`tool_result_renderer` must return a str, a media value (dspy.Image, dspy.Audio, dspy.File) "
            f"or a list of those; got {type(rendered).__name__}"
        )

    def content(self, text: str) -> Content:
        """``text`` as it is when it holds no media, else its parts (empty text between media left out)."""
        if not self.media:
            return text
        parts: list[Part] = []
        for piece in split_tokens(text, self.media, self.pattern):
            if isinstance(piece, str):
                if piece:
                    parts.append({"type": "text", "text": piece})
            else:
                parts.extend(piece)
        return parts


def split_tokens(
    text: str, media: Sequence[tuple[Part, ...]], pattern: re.Pattern[str]
) -> Iterator[str | tuple[Part, ...]]:
    last = 0
    for match in pattern.finditer(text):
        index = int(match.group(1))
        if index >= len(media):
            continue  # text that merely looks like a token
        yield text[last : match.start()]
        yield media[index]
        last = match.end()
    yield text[last:]


def with_media(write: Callable[[Any], str], value: Any) -> Content:
    """``write(value)`` with the media in ``value`` sent as content parts."""
    attachments = Attachments()
    return attachments.content(attachments.keep(write(attachments.lift(value))))


def has_media(content: Any) -> bool:
    return isinstance(content, list) and any(p.get("type") != "text" for p in content)


def family_of(lm: Any) -> str:
    """``"anthropic"``, ``"gemini"`` or ``"other"``, from the model string (``vertex_ai/gemini-...`` too)."""
    provider, _, name = str(getattr(lm, "model", "") or "").partition("/")
    if provider == "vertex_ai":
        provider = "anthropic" if "claude" in name else "gemini" if "gemini" in name else provider
    return provider if provider in _INLINE_PROVIDERS else "other"


def tool_media_for(family: str) -> ToolMedia:
    """``"inline"`` for families whose tool results carry images (Anthropic, Gemini), else ``"after"``."""
    return "inline" if family in _INLINE_PROVIDERS else "after"


def refuse_unsendable(messages: Sequence[dict[str, Any]], family: str) -> None:
    """Anthropic takes no audio: both engines would drop it (one leaving a block the API refuses)."""
    if family != "anthropic":
        return
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(p.get("type") == "input_audio" for p in content):
            raise ConfigurationError(
                "this request holds audio (a dspy.Audio input or tool result), and Anthropic models take no audio "
                "input; use a model that does (OpenAI audio models, Gemini) or pass a transcript"
            )


def place_results(messages: Sequence[dict[str, Any]], form: ToolMedia) -> list[dict[str, Any]]:
    """A step's tool messages, with their media placed as the provider takes it.

    ``"inline"`` keeps images in the tool message; everything else (and every media item under
    ``"after"``) is replaced in the tool message by a placeholder and carried, after it, by one
    user message following the last result, each item under its placeholder.
    """
    placed: list[dict[str, Any]] = []
    attached: list[Part] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and has_media(content):
            message = {**message, "content": _tool_content(_keep_or_attach(content, form, attached))}
        placed.append(message)
    if attached:
        placed.append({"role": "user", "content": [{"type": "text", "text": sentences.ATTACHED_MEDIA}, *attached]})
    return placed


def _keep_or_attach(content: list[Part], form: ToolMedia, attached: list[Part]) -> list[Part]:
    kept: list[Part] = []
    for part in content:
        if part.get("type") == "text" or (form == "inline" and kind_of(part) == "image"):
            kept.append(part)
            continue
        number = sum(1 for p in attached if p.get("type") != "text") + 1
        label = {"type": "text", "text": sentences.media_placeholder(kind_of(part), number)}
        kept.append(label)
        attached += [label, part]
    return kept


def _tool_content(parts: list[Part]) -> Content:
    """Text-only content as one string (what every provider's tool message takes)."""
    if all(p.get("type") == "text" for p in parts):
        return "".join(str(p.get("text", "")) for p in parts)
    return parts

"""What a failed request means for the turn: classification of errors, no decisions.

The machine asks these questions of a request's error; the answers come from the error's
class (and, for operational refusals, the classes anywhere in its cause chain).
"""

from __future__ import annotations

import json
import re

from dspy.utils.exceptions import (
    AdapterParseError,
    ContextWindowExceededError,
    LMAuthError,
    LMBillingError,
    LMConfigurationError,
    LMError,
    LMInvalidRequestError,
    LMNotConfiguredError,
    LMTimeoutError,
    LMUnsupportedFeatureError,
    is_retryable_lm_error,
)

from dspy_imp._records import clock
from dspy_imp._records.errors import ConfigurationError, error_text
from dspy_imp._records.kinds import TerminationCause
from dspy_imp._records.outcomes import RawCall
from dspy_imp._records.redact import redact_text


class ContentFiltered(Exception):
    """The provider's content filter stopped a reply (it arrived as an empty 200 answer)."""


# ConfigurationError: our own refusal of a request's options before it is sent (``route.settle_options``).
_FATAL = (
    LMAuthError,
    LMBillingError,
    LMConfigurationError,
    LMUnsupportedFeatureError,
    ContentFiltered,
    ConfigurationError,
)


def is_missing_credentials(error: BaseException) -> bool:
    """No API key for the LM's provider: DSPy refused before anything was sent, and its message
    names the variable to set (``Set OPENAI_API_KEY in the environment, ...``)."""
    return isinstance(error, LMNotConfiguredError)


class RefusedOption(ConfigurationError):
    """The route's refusal of an LM's options before the request is sent (``route.settle_options``:
    LiteLLM's Responses spelling, manual thinking on an adaptive-only model)."""


def refused_option(error: BaseException) -> RefusedOption | None:
    """A ``RefusedOption`` anywhere in the chain."""
    found = in_chain(error, RefusedOption)
    return found if isinstance(found, RefusedOption) else None


def in_chain(error: BaseException, kinds: type | tuple[type, ...]) -> BaseException | None:
    """The first exception of ``kinds`` in ``error``'s chain (its causes and contexts), or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def is_blocked_reply(error: BaseException) -> bool:
    """A reply the provider's filter blocked, raised as an error instead of an empty answer
    (DSPy's native engine: Gemini's ``finishReason: SAFETY`` with no content is
    ``LMInvalidRequestError("Candidate blocked: SAFETY")``)."""
    return isinstance(error, LMInvalidRequestError) and "candidate blocked" in error_text(error).lower()


def cause_of(error: BaseException) -> TerminationCause:
    """The interruption a failed ordinary step is: unreadable reply, or no reply."""
    return "parse_error" if isinstance(error, AdapterParseError) else "prediction_error"


def is_fatal(error: BaseException) -> bool:
    """An operational refusal (auth, billing, configuration, unsupported feature) anywhere in the chain.

    No further request could succeed, so the turn fails at once with no last request.
    """
    return in_chain(error, _FATAL) is not None


# How OpenAI-compatible servers word a context-length refusal when their error ``code`` is not
# OpenAI's ``context_length_exceeded`` (DeepSeek: a 400 with ``code: "invalid_request_error"``,
# which DSPy's native engine raises as a plain ``LMInvalidRequestError``; LiteLLM matches the text).
_CONTEXT_WINDOW_TEXT = ("maximum context length",)


def is_context_window(error: BaseException) -> bool:
    if isinstance(error, ContextWindowExceededError):
        return True
    if not isinstance(error, LMInvalidRequestError):
        return False
    text = error_text(error).lower()
    return any(phrase in text for phrase in _CONTEXT_WINDOW_TEXT)


def is_provider_error(error: BaseException) -> bool:
    """A request the provider or the LM client failed, which another model might serve
    (``_turn.fallback``): any DSPy LM error but a content filter's block and a context-window refusal."""
    if isinstance(error, ContentFiltered) or is_blocked_reply(error) or is_context_window(error):
        return False
    return isinstance(error, LMError)


def is_unreadable(error: BaseException) -> bool:
    return isinstance(error, AdapterParseError)


def refuses_named_choice(error: BaseException) -> bool:
    """A provider that cannot honour a named ``tool_choice`` (reference §3.4 step 4)."""
    if not isinstance(error, LMInvalidRequestError) or is_context_window(error):
        return False
    text = error_text(error).lower()
    return (
        "tool_choice" in text
        and ("invalid" in text or "unsupported" in text)
        and ("required" in text or "supported string" in text)
    )


def is_timeout(error: BaseException) -> bool:
    """The provider request timed out (either engine's timeout, as DSPy names it)."""
    return in_chain(error, LMTimeoutError) is not None


def retry_delay(error: BaseException, attempt: int, retries: int) -> float | None:
    """Seconds before the loop's own retry while a deadline is set (DSPy's are off then), or None."""
    left = clock.time_left()
    if left is None or attempt >= retries or not isinstance(error, Exception):
        return None
    if not is_retryable_lm_error(error):
        return None
    retry_after = getattr(error, "retry_after", None)  # 0 means "now", not "absent"
    delay = float(retry_after) if isinstance(retry_after, int | float) and retry_after >= 0 else min(2**attempt, 60)
    return delay if delay < left else None


def describe(error: BaseException) -> str:
    """``"Type: message"``, with credential-shaped text hidden (for ``termination_error``)."""
    text = error_text(error)
    return redact_text(f"{type(error).__name__}: {text}" if text else type(error).__name__)


# -- a refusal of the model's own call --------------------------------------------------------

REFUSED_CALL = "provider_refused"  # the key of a refused call's ``received`` payload
_FAILED_GENERATION = re.compile(r'"failed_generation"\s*:\s*("(?:[^"\\]|\\.)*")')


def refused_call(error: BaseException) -> RawCall | None:
    """The model's own call, when the provider refused the reply for it (Groq's 400 ``tool_use_failed``).

    Groq validates the model's tool call server-side and answers a malformed one with a 400
    (``code: "tool_use_failed"``, the model's text in ``failed_generation``). That is the model's
    mistake, not the request's: the step is a malformed call (an observation the model reads,
    with what it wrote when the error says), and the turn goes on. LiteLLM keeps the whole body
    in the message; DSPy's native engine keeps only the code (``provider_code`` on the cause).
    """
    if not isinstance(error, LMInvalidRequestError) or not _says_tool_use_failed(error):
        return None
    found = _FAILED_GENERATION.search(error_text(error))
    written = json.loads(found.group(1)) if found else None
    return RawCall(None, None, {}, received={REFUSED_CALL: "tool_use_failed", "failed_generation": written})


def _says_tool_use_failed(error: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if getattr(current, "provider_code", None) == "tool_use_failed" or "tool_use_failed" in error_text(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False

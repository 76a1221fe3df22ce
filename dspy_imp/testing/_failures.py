"""The failures a script can hold (``fail.server_error()``, ...): OpenAI error replies, read by
DSPy's native engine and projected to DSPy's public error classes."""

from __future__ import annotations

import json
from typing import Any

from dspy_imp.testing._script import Failure
from dspy_imp.testing._wire import dialect


def http_error(
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    retry_after: float | None = None,
    delay: float = 0.0,
    **extra: Any,
) -> Failure:
    """An error exactly as lm15 builds it from an OpenAI error body; DSPy projects it to its public class."""
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code, **extra}})

    def make() -> BaseException:
        error = dialect().normalize_error(status, body)
        error.retry_after = retry_after
        return error

    return Failure(make, delay)


_SERVER = "The server had an error while processing your request. Sorry about that!"


_CONTEXT = "This model's maximum context length is 128000 tokens. Please reduce the length of the messages."


_TOOL_USE = "Failed to call a function. Please adjust your prompt. See 'failed_generation' for more details."


_TOOL_CHOICE = "Invalid tool_choice type: 'object'. Supported string values: none, auto, required"


class Fail:
    """The failures a script can hold: use the instance ``fail`` (``fail.server_error()``, ...).

    Each is DSPy's native engine's reading of an OpenAI error reply, projected by DSPy to its
    public error classes, exactly as a real provider's error would arrive.
    """

    def server_error(self, status: int = 500, message: str | None = None, *, delay: float = 0.0) -> Failure:
        """HTTP 5xx -> `LMServerError` (DSPy retries it when `num_retries` > 0); `message`: OpenAI's own by default."""
        return http_error(status, _SERVER if message is None else message, "server_error", delay=delay)

    def rate_limit(
        self, message: str = "Rate limit reached for requests", *, retry_after: float | None = None, delay: float = 0.0
    ) -> Failure:
        """HTTP 429 -> `LMRateLimitError`; `retry_after` as a Retry-After header would set it."""
        return http_error(429, message, "requests", "rate_limit_exceeded", retry_after, delay)

    def context_window(self, message: str | None = None, *, delay: float = 0.0) -> Failure:
        """HTTP 400 `context_length_exceeded` -> `ContextWindowExceededError`; `message`: OpenAI's own by default."""
        text = _CONTEXT if message is None else message
        return http_error(400, text, "invalid_request_error", "context_length_exceeded", delay=delay)

    def invalid_request(self, message: str, *, delay: float = 0.0) -> Failure:
        """HTTP 400 -> `LMInvalidRequestError` with `message`."""
        return http_error(400, message, "invalid_request_error", delay=delay)

    def tool_choice_refused(self, *, delay: float = 0.0) -> Failure:
        """The 400 of a server that takes no named `tool_choice` -> `LMInvalidRequestError`."""
        return self.invalid_request(_TOOL_CHOICE, delay=delay)

    def tool_use_failed(self, failed_generation: str = "", *, delay: float = 0.0) -> Failure:
        """Groq's 400 `tool_use_failed`: the provider refused the model's own malformed tool call
        (`failed_generation`: what the model wrote) -> `LMInvalidRequestError`."""
        return http_error(
            400, _TOOL_USE, "invalid_request_error", "tool_use_failed", delay=delay, failed_generation=failed_generation
        )

    def raises(self, error: BaseException, *, delay: float = 0.0) -> Failure:
        """The engine raises exactly `error`. DSPy passes LMErrors through, maps `dspy.lm15` errors
        and wraps anything else in `LMUnexpectedError` (with `error` as its cause)."""
        return Failure(lambda: error, delay)


fail = Fail()

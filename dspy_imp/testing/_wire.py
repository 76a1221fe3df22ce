"""The wire the doubles speak: DSPy's native OpenAI Chat Completions dialect, which never sends,
reads error bodies for ``fail`` and turns a request back into Chat Completions form."""

from __future__ import annotations

import functools
from typing import Any

from dspy import lm15
from dspy.lm15 import Request

from dspy_imp.testing._script import RecordedRequest


class _NoTransport:
    def stream(self, request: Any) -> Any:
        raise RuntimeError("dspy_imp.testing never sends requests")


@functools.cache
def dialect() -> lm15.OpenAIChatLM:
    compat = lm15.OpenAIChatCompat(
        thinking_replay="native", max_tokens_field="max_tokens", tool_result_name="include", tool_result_media="native"
    )
    return lm15.OpenAIChatLM(api_key="scripted", transport=_NoTransport(), compat=compat)


def record(request: Request, asynchronous: bool) -> RecordedRequest:
    payload = dialect()._payload(request, stream=False)
    for key in ("model", "stream", "stream_options"):
        payload.pop(key, None)
    if request.config.top_k is not None:  # no top_k on the Chat Completions wire; DSPy's LiteLLM path adds it
        payload["top_k"] = request.config.top_k
    messages, tools = payload.pop("messages"), payload.pop("tools", None)
    return RecordedRequest(messages, tools, payload.pop("tool_choice", None), payload, asynchronous, request)

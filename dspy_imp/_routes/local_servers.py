"""OpenAI-compatible servers of your own (vLLM, SGLang, Ollama, LM Studio): reasoning goes back.

Such servers render the conversation through the model's chat template, and the templates of
today's reasoning models (Qwen3, gpt-oss, DeepSeek-R1 distills) read an assistant turn's reasoning
back in the turn being continued: vLLM keeps ``reasoning_content`` on the messages it gives the
template (vLLM PR 21655), and LiteLLM sends it as ``reasoning_content``. DSPy's native engine would
write it as visible text (lm15's ``thinking_replay="as_text"`` default) or not at all, so the loop
sends it in its own field: the request goes out as a native ``Request`` carrying it as replay state,
and the ``_routes.chat_extras`` patch writes ``reasoning_content`` on that assistant message.

"Your own" is the ``openai/`` route with an ``api_base`` that is not OpenAI's, Azure's or Google's.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from dspy.lm15 import ContinuationState

PROVIDER, KIND = "openai-chat", "reasoning_content"
_HOSTED = ("openai.com", "azure.com", "googleapis.com")


def reads_reasoning_back(lm: Any) -> bool:
    """The LM talks to an OpenAI-compatible server of your own (see the module docstring)."""
    base = (getattr(lm, "kwargs", None) or {}).get("api_base") or getattr(lm, "api_base", None)
    if not str(getattr(lm, "model", "")).startswith("openai/") or not base:
        return False
    host = (urlparse(str(base)).hostname or "").lower()
    return bool(host) and not any(host == h or host.endswith("." + h) for h in _HOSTED)


def reasoning_state(text: str) -> ContinuationState:
    return ContinuationState(provider=PROVIDER, kind=KIND, data={"text": text})


def reasoning_of(message: Any) -> str | None:
    """The reasoning a ``Message`` carries for the ``chat_extras`` writer, or None."""
    for state in getattr(message, "continuation", ()) or ():
        if state.provider == PROVIDER and state.kind == KIND:
            return str((state.data or {}).get("text") or "") or None
    return None

"""The client options of an LM on LiteLLM reach the wire: ``dspy.LM(..., engine="litellm")`` with
them as the LM's settings, and a ``LiteLLMEngine`` object built with them (``engine=``).

DSPy 3.4's ``LiteLLMEngine.complete_legacy`` (the path of every adapter call to a custom engine)
adds the engine's own options only when it has a ``wire_model``, which a user's engine never has:
its requests went to LiteLLM's default address (here an ambient ``OPENAI_API_BASE``) with the
ambient key, without its headers, under LiteLLM's 600 s timeout. ``dspy_private.
install_engine_client_options`` sends them. Each request goes to ``tests/fake_openai_server.py``
on 127.0.0.1; the ambient address is a second local server that must receive nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from dspy.clients.engines import AsyncLiteLLMEngine, LiteLLMEngine
from fake_openai_server import FakeOpenAIServer, text_completion

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeOpenAIServer, FakeOpenAIServer]]:
    """The configured server, and the ambient one (``OPENAI_API_BASE``, ``OPENAI_API_KEY``)."""
    with FakeOpenAIServer([text_completion("Paris.")] * 4) as good, FakeOpenAIServer([text_completion("?")]) as ambient:
        for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
            monkeypatch.setenv(name, ambient.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")
        yield good, ambient


def sent(request: Any) -> dict[str, Any]:
    """What of a request the options decide: where it went, its key, headers and read timeout."""
    headers = request.headers
    return {
        "path": request.path,
        "authorization": headers.get("authorization"),
        "x-trace": headers.get("x-trace"),
        "read timeout": headers.get("x-stainless-read-timeout"),
        "retry count": headers.get("x-stainless-retry-count"),
        "model": request.body["model"],
    }


def test_an_lm_on_litellm_sends_its_client_options(servers: Any, run: Any) -> None:
    good, ambient = servers
    lm = dspy.LM(
        "openai/gpt-4o-mini",
        engine="litellm",
        api_base=good.base_url,
        api_key="sk-test",
        extra_headers={"X-Trace": "lm"},
        timeout=17,
        num_retries=2,
        cache=False,
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[])
    agent.set_lm(lm)
    assert run(agent, question="Capital of France?").answer == "Paris."
    assert [sent(r) for r in good.requests] == [
        {
            "path": "/v1/chat/completions",
            "authorization": "Bearer sk-test",
            "x-trace": "lm",
            "read timeout": "17.0",
            "retry count": "0",  # LiteLLM's own retries are off: DSPy retries (num_retries) around it
            "model": "gpt-4o-mini",
        }
    ]
    assert ambient.requests == []


def test_a_litellm_engine_object_sends_the_options_it_was_built_with(servers: Any, run: Any) -> None:
    good, ambient = servers
    options: dict[str, Any] = {
        "api_base": good.base_url,
        "api_key": "sk-engine",
        "headers": {"X-Trace": "engine"},
        "timeout": 23,
    }
    lm = dspy.LM(
        "openai/gpt-4o-mini",
        engine=LiteLLMEngine(**options),
        async_engine=AsyncLiteLLMEngine(**options),
        cache=False,
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[])
    agent.set_lm(lm)
    assert run(agent, question="Capital of France?").answer == "Paris."
    assert [sent(r) for r in good.requests] == [
        {
            "path": "/v1/chat/completions",
            "authorization": "Bearer sk-engine",
            "x-trace": "engine",
            "read timeout": "23.0",
            "retry count": "0",
            "model": "gpt-4o-mini",
        }
    ]
    assert ambient.requests == []
    # A plain DSPy call to the same LM is sent the same way (the fix is the engine's, not the loop's).
    assert lm("Capital of France?") == ["Paris."]
    assert sent(good.requests[-1])["authorization"] == "Bearer sk-engine" and ambient.requests == []

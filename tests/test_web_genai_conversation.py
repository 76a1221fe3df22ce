"""A web turn's GenAI spans carry the thread id as ``gen_ai.conversation.id`` (AG-UI and AI SDK, sync and async)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from test_genai_spans import spans  # noqa: F401 (the in-memory exporter fixture, written once)
from web_scenarios import client, run_input, text_agent, text_script, with_lm

import dspy_imp.tracing
import dspy_imp.web

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])


def conversation_ids(exporter: InMemorySpanExporter) -> list[str | None]:
    return [span.attributes.get(ga.GEN_AI_CONVERSATION_ID) for span in exporter.get_finished_spans()]


async def test_an_agui_turn_is_labelled_with_its_thread_id(spans: InMemorySpanExporter, sync: bool) -> None:  # noqa: F811
    agent = text_agent()
    with_lm(agent, text_script())
    async with client(dspy_imp.web.app(agent, sync=sync)) as http:
        response = await http.post("/ag-ui", json=run_input("Hi", thread="thread-7"))
    assert response.status_code == 200
    ids = conversation_ids(spans)
    assert len(ids) == 2  # the agent span and its one request
    assert ids == ["thread-7", "thread-7"]


async def test_an_ai_sdk_turn_is_labelled_with_its_chat_id(spans: InMemorySpanExporter, sync: bool) -> None:  # noqa: F811
    agent = text_agent()
    with_lm(agent, text_script())
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}
    async with client(dspy_imp.web.app(agent, sync=sync)) as http:
        body = {"id": "chat-9", "messages": [message], "trigger": "submit-message"}
        response = await http.post("/api/chat", json=body)
    assert response.status_code == 200
    assert conversation_ids(spans) == ["chat-9", "chat-9"]

"""A context policy on a Claude model that binds thinking to the prefix: never a refused block.

Claude Fable 5.1+, Mythos 5.1 and the 5.5 models bind each thinking block to the prefix before it
(system, tools, every earlier message); a request that replays a block after an edited prefix is
refused with "The block is bound to a different conversation" (issue 22 cites the provider's
preserved-thinking page). ``BindingEmulator`` enforces exactly that, statefully: each thinking block
it hands out is bound to a digest of the request that produced it (its whole prefix), and a later
request that replays the block where the prefix before it differs gets that 400.

Over three calls of the program through the default engine, clearing old tool results (which edits
the prefix after the first cleared result) and summarizing earlier episodes (which edits it at the
top) send nothing the rule refuses, and each later call's requests replay the blocks bound since.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import dspy
import pytest
from emulator import Emulator, Received, Scripted
from provider_rules import assert_accepted, unmarked
from responses import anthropic, anthropic_error, thinking
from turns import BASE_SUFFIX, PARIS, TOOLS

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

BOUND = (
    "messages.{m}.content.{c}: Invalid `signature` in `thinking` block. The block is bound to a different conversation."
)
MODEL = "anthropic/claude-opus-5-5"


def _digest(body: dict[str, Any], messages: list[Any]) -> str:
    """The prefix's content: cache marks say where to cache, not what the prompt is."""
    prefix = {"system": body.get("system"), "tools": body.get("tools"), "messages": messages}
    return hashlib.sha256(json.dumps(unmarked(prefix), sort_keys=True).encode()).hexdigest()


class BindingEmulator(Emulator):
    """Anthropic Messages that binds each thinking block it produces to the request's prefix.

    Answers by what is asked: a summary for a summary request; else, counting the tool results
    since the last question, ``get_weather``, then ``get_time``, then the answer.
    """

    def __init__(self) -> None:
        super().__init__([])
        self.bound: dict[str, str] = {}
        self.refused: list[str] = []

    def answer(self, received: Received) -> Scripted:
        body = received.body or {}
        messages = body.get("messages", [])
        with self._lock:
            self.requests.append(received)
            number = len(self.requests)
        for m, message in enumerate(messages):
            for c, block in enumerate(_blocks(message)):
                signature = block.get("signature") if block.get("type") == "thinking" else None
                if signature in self.bound and self.bound[signature] != _digest(body, messages[:m]):
                    self.refused.append(BOUND.format(m=m, c=c))
                    return anthropic_error(400, "invalid_request_error", self.refused[-1])
        scripted = _respond(messages, number)
        for block in scripted.body.get("content", ()):
            if block.get("type") == "thinking":
                self.bound[block["signature"]] = _digest(body, messages)
        return scripted


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _texts(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else " ".join(str(b.get("text", "")) for b in _blocks(message))


def _respond(messages: list[dict[str, Any]], number: int) -> Scripted:
    last = messages[-1]
    if "Summarize the conversation" in _texts(last):
        return anthropic([thinking("Summary.", f"sig-{number}")], text="Paris: sunny; time asked.")
    question = max(i for i, m in enumerate(messages) if m["role"] == "user" and "question" in _texts(m))
    results = sum(1 for m in messages[question:] for b in _blocks(m) if b.get("type") == "tool_result")
    asked = _texts(messages[question]).rsplit(" ", 1)[-1].rstrip("?")
    if results == 0:
        return anthropic([thinking("Weather.", f"sig-{number}")], calls=[(f"toolu_{number}", "get_weather", PARIS)])
    if results == 1:
        return anthropic([thinking("Time.", f"sig-{number}")], calls=[(f"toolu_{number}", "get_time", PARIS)])
    return anthropic([thinking("Answer.", f"sig-{number}")], text=f"Sunny, call {asked}.")


def _chars(messages: list[Any], tools: Any, model: str) -> int:
    return len(json.dumps(messages)) // 10


@pytest.mark.parametrize("trigger", [250, 230], ids=["at_a_call_start", "mid_turn"])
@pytest.mark.parametrize("summarize", [False, True], ids=["clear", "clear_and_summarize"])
def test_clearing_and_summarizing_send_no_block_whose_prefix_changed(run: Any, summarize: bool, trigger: int) -> None:
    context = dspy_imp.Context(
        trigger=trigger, target=200, window=100_000, keep_results=1, summarize=summarize, counter=_chars
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=TOOLS, context=context)
    with BindingEmulator() as emulator:
        lm = dspy.LM(
            MODEL, api_base=emulator.base_url + BASE_SUFFIX[("anthropic", "native")], api_key="sk-test",
            cache=False, num_retries=0, reasoning_effort="low",
        )  # fmt: skip
        history = None
        with dspy.context(lm=lm):
            for n in (1, 2, 3, 4):
                pred = run(agent, question=f"Weather and time in Paris, call {n}?", history=history)
                assert pred.answer == f"Sunny, call {n}.", (n, pred.metadata.termination_error, emulator.refused)
                history = pred.metadata.history

    assert emulator.refused == []
    for received in emulator.requests:
        assert_accepted("anthropic", received.body, received.path)
    views = [e["prompt_view"] for e in history.messages if e.get("prompt_view")]
    assert views and all(view.get("unbound") for view in views)  # each change unbinds what came before
    assert ("summarized" in views[-1]) is summarize
    last = emulator.requests[-1].body["messages"]
    replayed = [b["signature"] for m in last for b in _blocks(m) if b.get("type") == "thinking"]
    assert len(replayed) >= 2 and set(replayed) <= set(emulator.bound)  # blocks bound since are replayed
    deferred = [r for e in (pred.metadata.context,) for r in e if r.get("deferred")]
    assert all(r["deferred"] == "thinking_bound" and "applied" not in r for r in deferred)

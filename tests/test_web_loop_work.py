"""Less work on the event loop the web app's turns share: a ``DatabaseStore`` encodes and decodes
a history in a worker thread, and a context policy's measuring (the request rendered, its tokens
counted, LiteLLM imported the first time) runs in one too under ``acall``.

Each check records the thread the work ran in and compares it with the loop's: nothing depends on
the machine's speed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web import Conversation, _database


async def test_a_database_store_encodes_and_decodes_histories_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: dict[str, list[int]] = {"dump_history": [], "load_history": []}
    for name in threads:
        original = getattr(_database, name)

        def recorded(*args: Any, _name: str = name, _original: Any = original) -> Any:
            threads[_name].append(threading.get_ident())
            return _original(*args)

        monkeypatch.setattr(_database, name, recorded)
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply("Hello.")]))
    pred = await agent.acall(question="Hi")
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        await store.save("c", Conversation(pred.metadata.history))
        loaded = await store.load("c")
    finally:
        store.close()
    assert loaded is not None and dspy_imp.dump_history(loaded.history) == dspy_imp.dump_history(pred.metadata.history)
    loop = threading.get_ident()
    assert threads["dump_history"] and threads["load_history"]
    assert loop not in threads["dump_history"] + threads["load_history"]  # in worker threads only


async def test_a_context_policy_measures_off_the_event_loop_under_acall() -> None:
    counted: list[int] = []

    def counter(messages: Any, tools: Any, model: str) -> int:
        counted.append(threading.get_ident())
        return 10

    def fetch(key: str) -> str:
        """Fetch a document."""
        return f"document {key}"

    context = dspy_imp.Context(trigger=500, window=1000, counter=counter)
    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch], context=context)
    agent.set_lm(ScriptedLM([reply(calls=[call("fetch", {"key": "a"})]), reply("Done.")]))
    pred = await agent.acall(question="Read a")
    assert pred.answer == "Done."
    assert len(counted) >= 2  # measured before each request
    assert threading.get_ident() not in counted  # never on the loop's thread

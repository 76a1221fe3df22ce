"""The web server's one log line per turn (logger ``dspy_imp.web``): the conversation, how the turn
ended, its requests and duration, and the error of a failed or refused turn; quiet unless logging
is configured. Through both the async turn and the sync one (``app(agent, sync=True)``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from web_scenarios import client, failed_script, run_input, support_agent, text_agent, text_script, tool_script, with_lm

import dspy_imp.web
from dspy_imp._records.errors import ConfigurationError, StreamClosed
from dspy_imp.web import _log
from dspy_imp.web._inputs import Call
from dspy_imp.web._turns import Calls, Ended, MemoryStore, Runner

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The duration's clock: each read returns the next time, 1.25 s apart."""
    times = [100.0 + 1.25 * i for i in range(100)]
    monkeypatch.setattr(_log, "clock", lambda: times.pop(0))
    yield times


def turn(app: Any, body: dict[str, Any]) -> None:
    async def post() -> None:
        async with client(app) as http:
            response = await http.post("/ag-ui", json=body, headers={"accept": "text/event-stream"})
        assert response.status_code == 200

    asyncio.run(post())


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "dspy_imp.web"]


def test_a_turn_that_ends_is_one_info_line(sync: bool, caplog: pytest.LogCaptureFixture) -> None:
    agent = support_agent()
    with_lm(agent, tool_script())
    caplog.set_level(logging.INFO, logger="dspy_imp.web")
    turn(dspy_imp.web.app(agent, sync=sync), run_input("Where is order 42?", thread="c7"))
    assert logged(caplog) == [("INFO", "turn conversation='c7' ended=finished_by_tool requests=2 duration=1.25s")]


def test_each_turn_of_a_conversation_is_its_own_line(sync: bool, caplog: pytest.LogCaptureFixture) -> None:
    agent = text_agent()
    with_lm(agent, text_script() + text_script())
    caplog.set_level(logging.INFO, logger="dspy_imp.web")
    app = dspy_imp.web.app(agent, sync=sync)
    turn(app, run_input("Hi", thread="c1", run="r1"))
    turn(app, run_input("Hi again", thread="c1", run="r2"))
    assert logged(caplog) == [("INFO", "turn conversation='c1' ended=answered requests=1 duration=1.25s")] * 2


def test_a_failed_turn_is_a_warning_with_its_error(sync: bool, caplog: pytest.LogCaptureFixture) -> None:
    agent = support_agent()
    with_lm(agent, failed_script())
    caplog.set_level(logging.INFO, logger="dspy_imp.web")
    turn(dspy_imp.web.app(agent, sync=sync), run_input("Where is order 42?", thread="c9"))
    assert logged(caplog) == [
        (
            "WARNING",
            "turn conversation='c9' ended=failed requests=2 duration=1.25s "
            "error=StepError: ReActV2 turn got no model response: LMAuthError: bad key",
        )
    ]


class Raising:
    """An agent whose every call raises ``error`` before any request: refused as a bad per-call
    option is, or stopped from the page."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __call__(self, **kwargs: Any) -> Any:
        raise self.error

    async def acall(self, **kwargs: Any) -> Any:
        return self(**kwargs)


def played(runner: Runner, key: str) -> list[Any]:
    """The items of one turn of conversation ``key`` (the call read, then the turn's)."""

    async def play() -> list[Any]:
        return [item async for item in runner.run(key, None, lambda stored: Call(kwargs={"question": "hi"}))]

    return asyncio.run(play())


def test_a_refused_turn_is_a_warning_with_its_reason(sync: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dspy_imp.web")
    refused = ConfigurationError("max_iters must be a positive int, got 0")
    items = played(Runner(Calls(Raising(refused), sync), MemoryStore()), "c3")
    [ended] = [item for item in items if not isinstance(item, Call)]
    assert isinstance(ended, Ended) and isinstance(ended.error, ConfigurationError)
    assert logged(caplog) == [
        (
            "WARNING",
            "turn conversation='c3' ended=refused requests=0 duration=1.25s "
            "error=ConfigurationError: max_iters must be a positive int, got 0",
        )
    ]


def test_a_stopped_turn_is_an_info_line_that_says_so(sync: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dspy_imp.web")
    played(Runner(Calls(Raising(StreamClosed("the turn was stopped")), sync), MemoryStore()), "c4")
    assert logged(caplog) == [("INFO", "turn conversation='c4' ended=stopped duration=1.25s")]


def test_nothing_is_printed_unless_logging_is_configured(sync: bool, capsys: pytest.CaptureFixture[str]) -> None:
    agent = support_agent()
    with_lm(agent, failed_script())
    turn(dspy_imp.web.app(agent, sync=sync), run_input("Where is order 42?"))
    assert capsys.readouterr() == ("", "")
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("dspy_imp.web").handlers)

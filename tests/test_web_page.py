"""The chat page in a real browser: Playwright driving Debian's Chromium, headless (``.ci/run``
installs it), against the app served on 127.0.0.1.

A question shows its thought (folded), each tool call with its arguments and result, the streamed
answer, the termination reason and usage; a paused call is approved (or refused with a reason) with
its buttons and the turn finishes; a ``<script>`` in a tool result is shown as text; the page loads
nothing but its own files.

    DSPY_IMP_SCREENSHOTS=1 .venv/bin/pytest tests/test_web_page.py   # rewrites docs/assets/web/*.png
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from web_helpers import LiveServer
from web_scenarios import paused_script, support_agent, tool_script, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ASSETS = Path(__file__).resolve().parent.parent / "docs" / "assets" / "web"
SHOTS = os.environ.get("DSPY_IMP_SCREENSHOTS") == "1"
WAIT = 60_000  # ms: how long the page may take on a loaded machine (a wait, not a timed assertion)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 900, "height": 760})
    opened = context.new_page()
    opened.set_default_timeout(WAIT)
    expect.set_options(timeout=WAIT)
    yield opened
    context.close()


def ask(page: Page, text: str) -> None:
    page.fill("#question", text)
    page.click("#send")


def shot(page: Page, name: str) -> None:
    if SHOTS:
        ASSETS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ASSETS / f"{name}.png"), full_page=True)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_question_shows_the_tool_calls_and_the_streamed_answer(page: Page, sync: bool) -> None:
    agent = support_agent()
    with_lm(agent, tool_script())
    with LiveServer(dspy_imp.web.app(agent, sync=sync)) as server:
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(server.url)
        expect(page.locator("#signature")).to_contain_text("message -> reply, declined")
        ask(page, "Where is order 42?")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: finished_by_tool · 2 requests"))
        lookup = page.locator('.tool-call[data-call-id="c1"]')
        expect(lookup.locator(".name")).to_have_text("lookup_order")
        expect(lookup.locator(".args")).to_contain_text('"order_id": "42"')
        expect(lookup.locator(".result")).to_have_text("shipped <b>Monday</b>")  # markup shown as text
        assert lookup.locator("b").count() == 0
        expect(page.locator('.tool-call[data-call-id="c2"] .result')).to_have_text("delivered")
        expect(page.locator(".answer")).to_have_text("reply: Order 42 shipped Monday.\ndeclined: false")
        thought = page.locator("details.thought")
        expect(thought).to_have_count(1)
        assert thought.get_attribute("open") is None  # folded
        expect(thought.locator("summary")).to_have_text("Thought")
        expect(page.locator(".termination")).to_contain_text("50 tokens in, 10 out")
        if not sync:
            thought.locator("summary").click()
            shot(page, "tool-turn")
    assert requested and all(url.startswith(server.url) for url in requested), requested  # offline: no CDN


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_paused_call_is_approved_with_its_button_and_the_turn_finishes(page: Page, sync: bool) -> None:
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    with LiveServer(dspy_imp.web.app(agent, sync=sync)) as server:
        page.goto(server.url)
        ask(page, "Refund order 42")
        refund = page.locator('.tool-call[data-call-id="c9"]')
        expect(refund.locator("button.approve")).to_be_visible()
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: paused"))
        expect(page.locator("#question")).to_be_disabled()  # the conversation waits for the decision
        if not sync:
            shot(page, "paused")
        refund.locator("button.approve").click()
        expect(refund.locator(".result")).to_have_text("order 42 refunded")
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: finished_by_tool"))
        expect(page.locator(".answer")).to_have_text("reply: Order 42 is refunded.\ndeclined: false")
        expect(page.locator("#question")).to_be_enabled()
        if not sync:
            shot(page, "approved")
    assert lm.remaining == 0


def test_a_refusal_carries_its_reason_to_the_model(page: Page) -> None:
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        ask(page, "Refund order 42")
        refund = page.locator('.tool-call[data-call-id="c9"]')
        refund.locator("input.reason").fill("Not without a receipt.")
        refund.locator("button.refuse").click()
        expect(refund.locator(".decided")).to_have_text("Refused: Not without a receipt.")
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: finished_by_tool"))
        expect(refund.locator(".result")).to_contain_text("Not without a receipt.")
    assert "Not without a receipt." in lm.requests[-1].messages[-1]["content"]


def test_a_script_in_a_tool_result_shows_as_text(page: Page) -> None:
    def lookup(city: str) -> str:
        """Find a city's weather station."""
        return '<script>window.injected = 1</script><img src=x onerror="window.injected = 2">'

    agent = dspy_imp.ReActV2("city -> answer", tools=[lookup])
    agent.set_lm(ScriptedLM([reply(calls=[call("lookup", {"city": "<b>Paris</b>"}, id="c1")]), reply("<i>Done</i>")]))
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        ask(page, "<script>window.injected = 3</script>")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: answered"))
        card = page.locator('.tool-call[data-call-id="c1"]')
        expect(card.locator(".result")).to_have_text(
            '<script>window.injected = 1</script><img src=x onerror="window.injected = 2">'
        )
        expect(card.locator(".args")).to_contain_text("<b>Paris</b>")
        expect(page.locator(".answer")).to_have_text("<i>Done</i>")
        expect(page.locator(".user")).to_have_text("<script>window.injected = 3</script>")
        assert page.locator("#log script, #log img, #log b, #log i").count() == 0
        assert page.evaluate("window.injected") is None


def test_the_example_serves_its_page_with_the_port_printed(page: Page) -> None:
    """``python -m dspy_imp.web examples.support_agent:agent``: offline, with its stand-in model."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "DSPY_IMP_MODEL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "dspy_imp.web", "examples.support_agent:agent"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = _served_url(process)
        page.goto(url)
        ask(page, "Please refund order 43")
        refund = page.locator(".tool-call", has=page.locator(".name", has_text="refund"))
        refund.locator("button.approve").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: finished_by_tool"))
        expect(page.locator(".answer")).to_contain_text("About the refund of order 43: order 43 refunded")
    finally:
        process.terminate()
        process.communicate()


def _served_url(process: subprocess.Popen[Any]) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        if found:
            return found.group()
    raise AssertionError(f"no URL printed; stderr: {process.stderr.read() if process.stderr else ''}")


def test_call_ids_that_name_object_properties_are_ids_like_any_other(page: Page) -> None:
    """``constructor``, ``toString`` and ``__proto__`` as call ids: each has its card, and the
    approval of ``__proto__`` resumes the turn."""

    def lookup(order_id: str) -> str:
        """Look up an order."""
        return f"order {order_id} shipped"

    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"order {order_id} refunded"

    agent = dspy_imp.ReActV2("message -> reply", tools=[lookup, refund], needs_approval=["refund"])
    lookups = [call("lookup", {"order_id": n}, id=i) for n, i in (("1", "constructor"), ("2", "toString"))]
    lm = ScriptedLM(
        [reply(calls=lookups), reply(calls=[call("refund", {"order_id": "2"}, id="__proto__")]), reply("Done.")]
    )
    agent.set_lm(lm)
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        ask(page, "Refund my last order")
        refund_card = page.locator('.tool-call[data-call-id="__proto__"]')
        expect(refund_card.locator("button.approve")).to_be_visible()
        expect(page.locator('.tool-call[data-call-id="constructor"] .result')).to_have_text("order 1 shipped")
        expect(page.locator('.tool-call[data-call-id="toString"] .result')).to_have_text("order 2 shipped")
        refund_card.locator("button.approve").click()
        expect(refund_card.locator(".result")).to_have_text("order 2 refunded")
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(page.locator(".answer")).to_have_text("Done.")
    assert lm.remaining == 0

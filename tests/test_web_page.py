"""The chat page in a real browser: Playwright driving Debian's Chromium, headless (``.ci/run``
installs it), against the app served on 127.0.0.1.

A question shows its thought (folded), each tool call with its arguments and result, the streamed
answer, the termination reason and usage; a paused call is approved (or refused with a reason) with
its buttons and the turn finishes; a ``<script>`` in a tool result is shown as text; the page loads
nothing but its own files, and leaves nothing in the console; the input keeps the focus; an
approval another tab gave first is told; a reload shows each turn's end and decisions again.

    DSPY_IMP_SCREENSHOTS=1 .venv/bin/pytest tests/test_web_page.py   # rewrites docs/assets/web/*.png
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from web_helpers import LiveServer
from web_scenarios import ANSWER, FINDINGS, paused_script, support_agent, team, tool_script, with_lm

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


def expect_fields(answer: Any, fields: dict[str, str]) -> None:
    """Each output field shown by its name and type, its value readable (a string as Markdown)."""
    for name, value in fields.items():
        field = answer.locator(f'.field[data-name="{name}"]')
        expect(field.locator(".label")).to_contain_text(name)
        expect(field.locator(".value")).to_have_text(value)
    expect(answer.locator('.field[data-name="declined"] .type')).to_have_text(" · bool")


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
        expect(lookup.locator(".timing")).to_have_text(re.compile(r"^\d+\.\d s$"))  # how long it ran
        lookup.locator("summary").click()  # folded
        expect(lookup.locator(".args")).to_be_hidden()
        lookup.locator("summary").click()
        expect(lookup.locator(".args")).to_be_visible()
        expect_fields(page.locator(".answer"), {"reply": "Order 42 shipped Monday.", "declined": "false"})
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
        expect_fields(page.locator(".answer").last, {"reply": "Order 42 is refunded.", "declined": "false"})
        expect(page.locator("#question")).to_be_enabled()
        if not sync:
            shot(page, "approved")
    assert lm.remaining == 0


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_sub_agents_work_shows_inside_its_call_and_its_approval_there_live(page: Page, sync: bool) -> None:
    """A triage agent's researcher call: the researcher's text and its paused lookup inside the call's
    card, approved there; the reply shown as the agent's is the triage's, as it streams (no reload)."""
    with LiveServer(dspy_imp.web.app(team(pause=True), sync=sync)) as server:
        page.goto(server.url)
        ask(page, "Where is order 42?")
        researcher = page.locator('.turn > .tool-call[data-call-id="p1"]')
        expect(researcher.locator(".name").first).to_have_text("researcher")
        work = researcher.locator(".agent-work")
        expect(work).to_have_attribute("data-agent", "researcher")
        expect(work.locator(".answer").first).to_have_text("Let me look it up.")
        lookup = work.locator('.tool-call[data-call-id="p1/c1"]')
        expect(lookup.locator(".name")).to_have_text("lookup_order")
        expect(lookup.locator("button.approve")).to_be_visible()
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: paused"))
        expect(page.locator('.tool-call[data-call-id="p1/c1"]')).to_have_count(1)  # one card, in the researcher's
        expect(researcher.locator(":scope > .result")).to_have_text("waiting for a decision…")
        if not sync:
            shot(page, "team-paused")
        lookup.locator("button.approve").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(lookup.locator(".result")).to_have_text("shipped <b>Monday</b>")
        expect(researcher.locator(":scope > .result")).to_have_text(FINDINGS)
        expect(work.locator(".answer").last).to_have_text(FINDINGS)
        own = page.locator(".turn > .answer")  # the agent's own replies, not the researcher's
        expect(own.last).to_have_text(ANSWER)
        assert FINDINGS not in own.all_inner_texts() and "Let me look it up." not in own.all_inner_texts()
        expect(page.locator(".turn > .tool-call")).to_have_count(1)  # the researcher call; its lookup is inside
        if not sync:
            shot(page, "team-answered")
        page.reload()  # reopened from the server: the same story, the lookup inside the researcher's card
        expect(researcher.locator(":scope > .result")).to_have_text(FINDINGS)
        expect(work.locator('.tool-call[data-call-id="p1/c1"] .result')).to_have_text("shipped <b>Monday</b>")
        expect(page.locator(".turn > .tool-call")).to_have_count(1)


def test_a_reopened_paused_team_asks_for_the_sub_agents_call_inside_its_callers_card(page: Page) -> None:
    with LiveServer(dspy_imp.web.app(team(pause=True))) as server:
        page.goto(server.url)
        ask(page, "Where is order 42?")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: paused"))
        page.reload()
        researcher = page.locator('.turn > .tool-call[data-call-id="p1"]')
        lookup = researcher.locator('.agent-work .tool-call[data-call-id="p1/c1"]')
        expect(lookup.locator("button.approve")).to_be_visible()
        expect(page.locator('.tool-call[data-call-id="p1/c1"]')).to_have_count(1)
        lookup.locator("button.approve").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(lookup.locator(".result")).to_have_text("shipped <b>Monday</b>")
        expect(page.locator(".turn > .answer").last).to_have_text(ANSWER)


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
        _, logged = process.communicate()
    # The server's log: one line per turn on standard error, the paused turn and its resume.
    turns = [line.split(" dspy_imp.web: ", 1)[1] for line in logged.splitlines() if " dspy_imp.web: " in line]
    assert [re.sub(r"conversation='[^']*'|duration=\S+", "", line) for line in turns] == [
        "turn  ended=paused requests=2 ",
        "turn  ended=finished_by_tool requests=1 ",
    ]


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


def test_twenty_turns_scroll_and_the_input_stays_in_view(page: Page) -> None:
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply(f"Answer {n}: " + "a long line of text. " * 8) for n in range(1, 21)]))
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        for n in range(1, 21):
            ask(page, f"Question {n}")
            expect(page.locator(".termination")).to_have_count(n)
        expect(page.locator(".answer").last).to_contain_text("Answer 20:")
        expect(page.locator(".answer").last).to_be_in_viewport()
        expect(page.locator("#question")).to_be_in_viewport()
        expect(page.locator("#question")).to_be_enabled()
        assert page.evaluate(
            "document.getElementById('log').scrollHeight > document.getElementById('log').clientHeight"
        )
        assert page.evaluate(
            "document.documentElement.scrollHeight <= window.innerHeight + 1"
        )  # the log scrolls, not the page
        expect(page.locator(".answer").first).not_to_be_in_viewport()
        shot(page, "scrolled")


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_reload_and_a_second_tab_show_the_conversation_and_its_waiting_approval(page: Page, sync: bool) -> None:
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    with LiveServer(dspy_imp.web.app(agent, sync=sync)) as server:
        page.goto(server.url)
        expect(page.locator("#title")).to_have_text("Support")  # the program's name
        assert page.title() == "Support"
        ask(page, "Refund order 42")
        expect(page.locator('.tool-call[data-call-id="c9"] button.approve')).to_be_visible()
        url = page.url
        assert "#c=" in url
        page.reload()
        expect(page.locator(".user")).to_have_text("Refund order 42")
        expect(page.locator('.tool-call[data-call-id="c9"] button.approve')).to_be_visible()
        expect(page.locator('.tool-call[data-call-id="c9"] .args')).to_contain_text('"order_id": "42"')
        expect(page.locator("#question")).to_be_disabled()
        second = page.context.new_page()
        second.goto(url)
        refund = second.locator('.tool-call[data-call-id="c9"]')
        refund.locator("button.approve").click()
        expect(refund.locator(".result")).to_have_text("order 42 refunded")
        expect(second.locator(".termination").last).to_have_text(re.compile(r"Turn ended: finished_by_tool"))
        expect(second.locator("#question")).to_be_enabled()
        page.reload()  # the first tab, reopened: the approved turn, no buttons
        expect(page.locator('.tool-call[data-call-id="c9"] .result')).to_have_text("order 42 refunded")
        expect(page.locator("button.approve")).to_have_count(0)
        expect(page.locator('.tool-call[data-call-id="c10"] .result')).to_have_text("delivered")
        page.click("#new-chat")
        expect(page.locator("#log > *")).to_have_count(0)
        assert page.url != url
    assert lm.remaining == 0


def test_a_phone_sized_screen_shows_everything_without_sideways_scrolling(browser: Browser) -> None:
    agent = support_agent()
    with_lm(agent, tool_script())
    context = browser.new_context(viewport={"width": 375, "height": 700})
    narrow = context.new_page()
    narrow.set_default_timeout(WAIT)
    try:
        with LiveServer(dspy_imp.web.app(agent)) as server:
            narrow.goto(server.url)
            ask(narrow, "Where is order 42? " + "x" * 120)
            expect(narrow.locator(".termination")).to_have_text(re.compile(r"Turn ended: finished_by_tool"))
            expect(narrow.locator("#question")).to_be_in_viewport()
            expect(narrow.locator("#send")).to_be_in_viewport()
            assert narrow.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            shot(narrow, "phone")
    finally:
        context.close()


def test_the_page_follows_dark_mode(browser: Browser) -> None:
    agent = support_agent()
    with_lm(agent, tool_script())
    context = browser.new_context(viewport={"width": 390, "height": 760}, color_scheme="dark")
    phone = context.new_page()
    phone.set_default_timeout(WAIT)
    try:
        with LiveServer(dspy_imp.web.app(agent)) as server:
            phone.goto(server.url)
            ask(phone, "Where is order 42?")
            expect(phone.locator(".termination")).to_have_text(re.compile(r"Turn ended: finished_by_tool"))
            assert phone.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
            expect(phone.locator("#question")).to_be_in_viewport()
            background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == "rgb(17, 20, 24)", background
            shot(phone, "phone-dark")
    finally:
        context.close()


def test_an_answer_is_markdown_rendered_safely(page: Page) -> None:
    """Markdown becomes markup (vendored marked, sanitized by DOMPurify); raw HTML in the answer,
    a ``<script>`` included, is shown as text, and a ``javascript:`` link loses its target."""
    answer = (
        "**Order 42** shipped:\n\n- packed\n- sent\n\n`tracking`\n\n"
        '<script>window.injected = 4</script> <img src=x onerror="window.injected = 5"> '
        "[open](javascript:window.injected=6)"
    )
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply(answer)]))
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        ask(page, "Where is order 42?")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: answered"))
        rendered = page.locator(".answer")
        expect(rendered.locator("strong")).to_have_text("Order 42")
        expect(rendered.locator("li")).to_have_text(["packed", "sent"])
        expect(rendered.locator("code")).to_have_text("tracking")
        expect(rendered).to_contain_text("<script>window.injected = 4</script>")
        expect(rendered).to_contain_text('<img src=x onerror="window.injected = 5">')
        assert page.locator("#log script, #log img").count() == 0
        assert page.locator("#log a[href^='javascript']").count() == 0
        assert page.evaluate("window.injected") is None
        page.reload()  # reopened from the server: rendered the same way
        expect(page.locator(".answer strong")).to_have_text("Order 42")
        assert page.locator("#log script, #log img").count() == 0
        shot(page, "markdown")


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_stop_ends_the_turn_mid_way_and_keeps_its_history(page: Page, sync: bool) -> None:

    running, release = threading.Event(), threading.Event()

    def inventory(item: str) -> str:
        """Count an item in the warehouse (slow)."""
        running.set()
        release.wait(WAIT / 1000)  # bounded: the test releases it once Stop was clicked
        return f"12 {item}"

    agent = dspy_imp.ReActV2("question -> answer", tools=[inventory])
    lm = ScriptedLM([reply(calls=[call("inventory", {"item": "chairs"}, id="c1")]), reply("Never asked.")])
    agent.set_lm(lm)
    with LiveServer(dspy_imp.web.app(agent, sync=sync)) as server:
        page.goto(server.url)
        ask(page, "How many chairs?")
        expect(page.locator("#stop")).to_be_visible()
        running.wait(WAIT / 1000)
        try:
            with page.expect_response(lambda r: r.url.endswith("/stop") and r.request.method == "POST") as stopped:
                page.click("#stop")
            assert stopped.value.ok
            expect(page.locator("#stop")).to_be_disabled()
            # The tool is still blocked: the turn can only end because the stop cut its wait. (Released
            # sooner, a tool that returns before the stop reaches the turn's thread is a finished step
            # and rightly kept: how the race goes would depend on the machine's speed.)
            expect(page.locator(".run-error")).to_have_text("StreamClosed: the turn was stopped")
        finally:
            release.set()
        expect(page.locator("#question")).to_be_enabled()
        expect(page.locator("#stop")).to_be_hidden()
        page.reload()
        # Either way the wait for the tool was cancelled (its thread left behind): the cut step is not kept.
        expect(page.locator(".user").first).to_be_visible()
        expect(page.locator('.tool-call[data-call-id="c1"]')).to_have_count(0)
    assert lm.remaining == 1  # no request after the stop


def test_the_answer_is_seen_to_stream(page: Page) -> None:
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply("The order shipped on Monday and arrives on Thursday.", chunk=6)]))
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        page.evaluate(
            """() => {
              window.seen = [];  // each rendering of the answer: its paragraph, kept by the records
              new MutationObserver((records) => {
                for (const record of records) {
                  for (const node of record.addedNodes) {
                    const answer = record.target.classList.contains("answer");
                    if (node.nodeName === "P" && answer) window.seen.push(node.textContent);
                  }
                }
              }).observe(document.getElementById("log"), { childList: true, subtree: true, characterData: true });
            }"""
        )
        ask(page, "When does it arrive?")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: answered"))
        seen = page.evaluate("window.seen")
    assert seen[-1] == "The order shipped on Monday and arrives on Thursday."
    assert seen[:3] == ["The or", "The order sh", "The order shipped "]  # rendered piece by piece
    assert len(seen) == 9


def test_the_sidebar_lists_a_users_conversations_and_another_user_sees_none(browser: Browser, tmp_path: Path) -> None:
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply("First answer."), reply("Second answer.")]))
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path}/chat.db")
    app = dspy_imp.web.app(agent, store=store, auth=lambda request: request.headers.get("x-user"))
    alice = browser.new_context(viewport={"width": 900, "height": 700}, extra_http_headers={"x-user": "alice"})
    bob = browser.new_context(viewport={"width": 900, "height": 700}, extra_http_headers={"x-user": "bob"})
    try:
        with LiveServer(app) as server:
            page = alice.new_page()
            page.set_default_timeout(WAIT)
            page.goto(server.url)
            ask(page, "Where is my parcel?")
            expect(page.locator(".termination")).to_have_count(1)
            first = page.url
            page.click("#new-chat")
            ask(page, "And my refund?")
            expect(page.locator(".termination")).to_have_count(1)
            page.click("#chats summary")
            links = page.locator("#chat-list a")
            expect(links).to_have_count(2)
            expect(links.first).to_have_text("And my refund?")  # titled by its first message, newest first
            shot(page, "sidebar")
            links.last.click()
            expect(page.locator(".user")).to_have_text("Where is my parcel?")

            intruder = bob.new_page()
            intruder.set_default_timeout(WAIT)
            intruder.goto(first)  # alice's conversation id, in bob's browser
            expect(intruder.locator("#chats")).to_be_hidden()
            expect(intruder.locator("#chat-list a")).to_have_count(0)
            expect(intruder.locator(".user")).to_have_count(0)  # nothing of alice's is shown
            ask(intruder, "Show me")
            expect(intruder.locator(".run-error")).to_contain_text(
                "no conversation"
            )  # as REST says: its existence is not told
    finally:
        alice.close()
        bob.close()
        store.close()


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_client_tool_runs_in_the_browser_and_its_result_resumes_the_turn(page: Page, sync: bool) -> None:
    """A small AG-UI client page (``web_pages/client_tool.html``) declares ``browser_time``; the
    agent calls it, the page runs it and sends its result as a ``ToolMessage``, the answer arrives."""
    agent = dspy_imp.ReActV2("question -> answer", tools=[])
    lm = ScriptedLM([reply(calls=[call("browser_time", {"zone": "UTC"}, id="k1")]), reply("It is 12:00 UTC.")])
    agent.set_lm(lm)
    client_page = (Path(__file__).parent / "web_pages" / "client_tool.html").read_text(encoding="utf-8")

    async def served_page(request: Any) -> HTMLResponse:
        return HTMLResponse(client_page)

    app = Starlette(
        routes=[Route("/client", served_page), Mount("/", dspy_imp.web.app(agent, sync=sync, client_tools=True))]
    )
    with LiveServer(app) as server:
        page.goto(f"{server.url}client")
        page.click("#go")
        expect(page.locator("#answer")).to_have_text("It is 12:00 UTC.")
        ran = page.locator("#log li", has_text="ran ")
        expect(ran).to_have_text('ran browser_time({"zone": "UTC"}) -> 12:00 (the page\'s clock) in UTC')
    assert lm.remaining == 0
    assert [(m["tool_call_id"], m["content"]) for m in lm.requests[1].messages if m["role"] == "tool"] == [
        ("k1", "12:00 (the page's clock) in UTC")
    ]


def test_after_enter_the_input_keeps_the_focus_and_what_is_typed_next(page: Page) -> None:
    """Enter sends the message and the input keeps the focus: what is typed while the turn runs,
    and after it ended, lands in the input (Enter waits for the turn to end)."""
    running, release = threading.Event(), threading.Event()

    def inventory(item: str) -> str:
        """Count an item in the warehouse (slow)."""
        running.set()
        release.wait(WAIT / 1000)  # bounded: the test releases it once it typed
        return f"12 {item}"

    agent = dspy_imp.ReActV2("question -> answer", tools=[inventory])
    lm = ScriptedLM([reply(calls=[call("inventory", {"item": "chairs"}, id="c1")]), reply("Twelve."), reply("Four.")])
    agent.set_lm(lm)
    question = page.locator("#question")
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        question.click()
        page.keyboard.type("How many chairs?")
        page.keyboard.press("Enter")
        assert running.wait(WAIT / 1000)
        expect(question).to_be_focused()
        page.keyboard.type("And tables?")  # while the turn runs
        page.keyboard.press("Enter")  # not sent yet: the turn runs
        release.set()
        expect(page.locator(".termination")).to_have_count(1)
        expect(question).to_have_value("And tables?")
        expect(question).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.locator(".termination")).to_have_count(2)
        expect(page.locator(".user")).to_have_text(["How many chairs?", "And tables?"])
        expect(question).to_be_focused()
        page.keyboard.type("Thanks")  # after the turn: still in the input
        expect(question).to_have_value("Thanks")
    assert lm.remaining == 0


def test_an_approval_another_tab_gave_is_told_and_the_page_shows_the_conversation_as_it_is(page: Page) -> None:
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        ask(page, "Refund order 42")
        expect(page.locator('.tool-call[data-call-id="c9"] button.approve')).to_be_visible()
        second = page.context.new_page()
        second.goto(page.url)
        stale = second.locator('.tool-call[data-call-id="c9"] button.approve')
        expect(stale).to_be_visible()
        page.locator('.tool-call[data-call-id="c9"] button.approve').click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: finished_by_tool"))
        with second.expect_response(lambda r: r.url.endswith("/ag-ui")) as answered:
            stale.click()  # the second tab still shows the button
        assert answered.value.status == 409
        expect(second.locator(".notice")).to_have_text(
            "This was already answered in another tab: the conversation is shown as it is now."
        )
        expect(second.locator('.tool-call[data-call-id="c9"] .result')).to_have_text("order 42 refunded")
        expect(second.locator('.tool-call[data-call-id="c10"] .result')).to_have_text("delivered")
        expect(second.locator("button.approve")).to_have_count(0)
        expect(second.locator(".run-error")).to_have_count(0)
        assert "ConfigurationError" not in second.locator("#log").inner_text()
        expect(second.locator("#question")).to_be_enabled()
    assert lm.remaining == 0


@pytest.mark.parametrize("kind", ["default", "files"])
def test_the_page_loads_and_runs_with_a_clean_console(page: Page, kind: str, tmp_path: Path) -> None:
    """No console message, no failed request: on a first load, a turn, a reload, a new chat, on a
    store that cannot list conversations (the default one)."""
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply("Hello.")]))
    store = dspy_imp.web.FileStore(tmp_path) if kind == "files" else None
    said: list[str] = []
    page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: said.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: said.append(f"failed: {request.url}"))
    page.on("response", lambda answer: said.append(f"{answer.status}: {answer.url}") if answer.status >= 400 else None)
    with LiveServer(dspy_imp.web.app(agent, store=store)) as server:
        page.goto(server.url)
        expect(page.locator("#signature")).to_contain_text("question -> answer")
        page.wait_for_load_state("networkidle")  # what the page asks at load has been answered
        ask(page, "Hi")
        expect(page.locator(".termination")).to_have_count(1)
        page.wait_for_load_state("networkidle")  # and what it asks after a turn
        page.reload()
        expect(page.locator(".user")).to_have_text("Hi")
        page.click("#new-chat")
        page.reload()
        expect(page.locator("#signature")).to_contain_text("question -> answer")
        page.wait_for_load_state("networkidle")
    assert said == []


def test_a_reload_shows_how_each_turn_ended_and_the_decisions_taken(page: Page) -> None:
    agent = support_agent()
    script = [
        *paused_script(),
        reply(calls=[call("refund", {"order_id": "43"}, id="c11")], usage=(30, 4)),
        reply(calls=[call("send", {"text": "Order 43 is not refunded."}, id="c12")], usage=(50, 6)),
    ]
    lm = with_lm(agent, script)
    shown = """() => [...document.querySelectorAll("#log > *")].map((node) => [
        node.className,
        ...[...node.querySelectorAll(".tool-call, .termination, .decided, .run-error")].map((part) =>
          part.dataset.callId || part.textContent),
      ].concat(node.classList.contains("user") ? [node.textContent] : []))"""
    with LiveServer(dspy_imp.web.app(agent)) as server:
        page.goto(server.url)
        ask(page, "Refund order 42")
        page.locator('.tool-call[data-call-id="c9"] button.approve').click()
        expect(page.locator(".termination")).to_have_count(2)
        ask(page, "Refund order 43")
        refund = page.locator('.tool-call[data-call-id="c11"]')
        refund.locator("input.reason").fill("Not without a receipt.")
        refund.locator("button.refuse").click()
        expect(page.locator(".termination")).to_have_count(4)
        lines = page.locator(".termination").all_inner_texts()
        live = page.evaluate(shown)
        page.reload()
        expect(page.locator(".termination")).to_have_text(lines)
        expect(page.locator(".decided")).to_have_text(["Approved", "Refused: Not without a receipt."])
        assert page.evaluate(shown) == live  # each line and label where it was, in its turn
    assert [line.split(" · ")[0] for line in lines] == [
        "Turn ended: paused",
        "Turn ended: finished_by_tool",
        "Turn ended: paused",
        "Turn ended: finished_by_tool",
    ]
    assert lm.remaining == 0

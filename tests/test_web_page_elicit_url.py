"""The chat page answers an MCP server's request to open a URL (URL mode, ``elicit="pause"``), in
a real browser (Playwright driving Debian's Chromium, as ``test_web_page.py``): the card shows the
server's name and message as text, the URL in full and as a link that opens in a new tab with
``rel="noopener noreferrer"`` (the page never opens it itself), and "I opened it" resumes the turn
(the call made again); Decline sends a decline; a reload while it waits asks again.

The server is ``tests/mcp_url_program.py``'s drive server, whose ``files`` tool is refused with
``URLElicitationRequiredError`` (-32042) until the person signed in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import mcp_url_program as served
import pytest
from mcp_url_program import DRIVE
from playwright.sync_api import Browser, Page, expect
from test_web_page import WAIT, ask, browser
from web_helpers import LiveServer
from web_scenarios import with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp import mcp
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

__all__ = ["browser"]  # the module's fixture, used here

FILES = {"name": "files", "arguments": {"folder": "docs"}}


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page told of any dialog or script error; every page its context opens is counted."""
    context = browser.new_context(viewport={"width": 900, "height": 760})
    opened = context.new_page()
    opened.set_default_timeout(WAIT)
    expect.set_options(timeout=WAIT)
    said: list[str] = []
    opened.on("dialog", lambda dialog: (said.append(dialog.message), dialog.dismiss()))
    opened.on("pageerror", lambda error: said.append(f"page error: {error}"))
    yield opened
    pages = len(context.pages)
    context.close()
    assert said == []
    assert pages == 1  # the URL was never opened by the page


@pytest.fixture(autouse=True)
def _fresh() -> None:
    served.clear()


def drive_app(sync: bool, *script: Any) -> tuple[Any, mcp.Server]:
    server = mcp.memory(served.drive(), elicit="pause")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with_lm(agent, [reply("listing", calls=[call("files", {"folder": "docs"}, id="c1")]), *script])
    return dspy_imp.web.app(agent, sync=sync), server


def the_request(page: Page) -> Any:
    card = page.locator('.tool-call[data-call-id="c1"]')
    expect(card.locator(".elicitation .asker")).to_have_text("drive asks you to open a page:")
    expect(card.locator(".elicitation .question")).to_have_text("Sign in to Drive")
    expect(card.locator(".result")).to_have_text("waiting for you to open a page…")
    link = card.locator(".elicitation a.open-url")
    expect(link).to_have_text(DRIVE)  # the URL in full, as text
    expect(link).to_have_attribute("href", DRIVE)
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(card.locator(".elicitation form")).to_have_count(0)  # no form: nothing is typed here
    expect(page.locator("#question")).to_be_disabled()
    return card


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_the_url_is_a_link_and_i_opened_it_makes_the_call_again(page: Page, sync: bool) -> None:
    app, server = drive_app(sync, reply("two files"))
    with LiveServer(app) as live:
        page.goto(live.url)
        ask(page, "List my docs")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: paused"))
        the_request(page)
        page.reload()  # reopened from the server: asked again
        card = the_request(page)
        served.SIGNED_IN[0] = True  # the person signed in at the link (out of band)
        card.locator("button.accept").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(card.locator(".result")).to_have_text("docs: a.txt, b.txt")
        expect(card.locator(".decided")).to_have_text("Opened")
        expect(page.locator(".answer").last).to_have_text("two files")
    assert served.RECEIVED == [FILES, FILES]
    server.close()


def test_decline_sends_a_decline(page: Page) -> None:
    app, server = drive_app(False, reply("no files"))
    with LiveServer(app) as live:
        page.goto(live.url)
        ask(page, "List my docs")
        card = the_request(page)
        card.locator("button.decline").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(card.locator(".decided")).to_have_text("Declined")
        expect(card.locator(".result")).to_have_text(re.compile("needs a URL opened to make this call"))
    assert served.RECEIVED == [FILES]
    server.close()

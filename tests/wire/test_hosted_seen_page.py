"""The chat page shows a call the provider ran (``dspy_imp.hosted``) as a card: Playwright driving
Debian's Chromium (as ``tests/test_web_page.py``), against the app served on 127.0.0.1 and the
recorded Anthropic search (``test_hosted_seen``'s script and the streams it plays whole).

A module of its own: the browser's sync Playwright loop lives for the module, and the other hosted
tests run event loops of their own.
"""

from __future__ import annotations

import re

import pytest
from emulator import Emulator
from playwright.sync_api import Page, expect
from test_hosted_seen import (
    QUESTION,
    SEARCH_ID,
    SEARCH_RESULT_TEXT,
    WEATHER_ID,
    get_weather,
    lm,
    search_script,
    whole_replies_streamed,  # noqa: F401  (a fixture)
)
from test_web_page import ask, browser, page  # noqa: F401  (the browser and its page are fixtures)
from web_helpers import LiveServer

import dspy_imp
import dspy_imp.web
from dspy_imp.hosted import WebSearch

pytestmark = [
    pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"]),
    pytest.mark.usefixtures("whole_replies_streamed"),
]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_the_chat_page_shows_the_hosted_call_as_a_card_live_and_after_a_reload(
    page: Page,  # noqa: F811 (the fixture imported from test_web_page)
    sync: bool,
) -> None:
    """Approval-free: the card of a call the provider ran says who ran it, shows its input and result,
    and has no buttons; a reload shows it again from the conversation the server keeps."""
    served = dspy_imp.ReActV2(
        "question -> answer", tools=[WebSearch(), get_weather], finish="submit", needs_approval=["get_weather"]
    )
    with Emulator(search_script()) as emulator:
        served.set_lm(lm(emulator))
        with LiveServer(dspy_imp.web.app(served, sync=sync)) as server:
            page.goto(server.url)
            ask(page, QUESTION)
            expect(page.locator(f'.tool-call[data-call-id="{WEATHER_ID}"] button.approve')).to_be_visible()
            for _ in ("live", "reloaded"):
                hosted = page.locator(f'.tool-call[data-call-id="{SEARCH_ID}"]')
                expect(hosted).to_have_class("tool-call provider-run")
                expect(hosted.locator(".name")).to_have_text("web_search")
                expect(hosted.locator(".by")).to_have_text("run by anthropic")
                expect(hosted.locator(".args")).to_contain_text('"query": "September 29 history events"')
                expect(hosted.locator(".result")).to_have_text(SEARCH_RESULT_TEXT)
                expect(hosted.locator(".timing")).to_have_text("")
                expect(hosted.locator("button")).to_have_count(0)  # nothing to run or approve
                expect(page.locator(".tool-call button.approve")).to_have_count(1)  # the function tool's only
                page.reload()
                expect(page.locator(".user")).to_have_text(QUESTION)
            weather = page.locator(f'.tool-call[data-call-id="{WEATHER_ID}"]')
            weather.locator("button.approve").click()
            expect(weather.locator(".result")).to_have_text("Sunny in Geneva.")
            expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: submit"))
            expect(page.locator(f'.tool-call[data-call-id="{SEARCH_ID}"]')).to_have_count(1)  # told once

"""The chat page answers an MCP server's request for input (``elicit="pause"``), in a real browser
(Playwright driving Debian's Chromium, as ``test_web_page.py``): the card shows the server's name
and message as text (a hostile one too), a form built from the schema (a number, a checkbox, a
choice, a text, defaults filled in, the required field marked), and Accept resumes the turn with
exactly the answer; Decline sends a decline; a reload while it waits asks again, and after the
answer shows it; an answer the form refuses is told and asked again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import pytest
from mcp.server.mcpserver import AcceptedElicitation, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.request_state import RequestStateSecurity
from mcp_elicit_program import KEY
from playwright.sync_api import Browser, Page, expect
from pydantic import BaseModel, Field, create_model
from test_web_page import WAIT, ask, browser, shot
from web_helpers import LiveServer
from web_scenarios import with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp import mcp
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

__all__ = ["browser"]  # the module's fixture, used here

HOSTILE = "<img src=x onerror=alert(1)> Which seat?"
RAN: list[str] = []


class Seat(BaseModel):
    row: int = Field(title="Row", description="1 to 40", ge=1, le=40)
    window: bool = Field(True, title="Window seat")
    meal: Literal["veg", "fish"] = "fish"
    note: Annotated[str, Field(pattern="^[a-z ]*$")] = "none"


def ask_seat() -> Elicit[Seat]:
    return Elicit(HOSTILE, Seat)


async def book(flight: str, seat: Annotated[ElicitationResult[Seat], Resolve(ask_seat)]) -> str:
    """Book a seat on a flight, asking which."""
    if not isinstance(seat, AcceptedElicitation):
        RAN.append(f"{flight}: {seat.action}")
        return f"not booked: {seat.action}"
    data = seat.data
    RAN.append(f"{flight}: row {data.row}, window {data.window}, {data.meal}, {data.note}")
    return RAN[-1]


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """``test_web_page``'s page, told of any dialog (an alert a message's markup ran) or script error."""
    context = browser.new_context(viewport={"width": 900, "height": 760})
    opened = context.new_page()
    opened.set_default_timeout(WAIT)
    expect.set_options(timeout=WAIT)
    said: list[str] = []
    opened.on("dialog", lambda dialog: (said.append(dialog.message), dialog.dismiss()))
    opened.on("pageerror", lambda error: said.append(f"page error: {error}"))
    yield opened
    context.close()
    assert said == []  # no alert ran, no script failed


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


def booking_app(sync: bool, *script: Any) -> tuple[Any, mcp.Server]:
    served = MCPServer("booking", request_state_security=RequestStateSecurity(keys=[KEY]))
    served.tool()(book)
    server = mcp.memory(served, elicit="pause")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with_lm(agent, [reply("booking", calls=[call("book", {"flight": "LH1"}, id="c1")]), *script])
    return dspy_imp.web.app(agent, sync=sync), server


def the_form(page: Page) -> Any:
    """The waiting card's form, as it is asked: the server's name and message as text, each field."""
    card = page.locator('.tool-call[data-call-id="c1"]')
    expect(card.locator(".elicitation .asker")).to_have_text("booking asks:")
    expect(card.locator(".elicitation .question")).to_have_text(HOSTILE)
    assert page.locator("#log img").count() == 0  # the message is text, never markup
    expect(card.locator(".result")).to_have_text("waiting for your answer…")
    row = card.locator('.field[data-name="row"]')
    expect(row.locator(".label")).to_have_text("Row *")  # required, marked
    expect(row.locator("input")).to_have_attribute("type", "number")
    expect(row.locator("input")).to_have_attribute("required", "")
    expect(row.locator("input")).to_have_attribute("min", "1")
    expect(row.locator("input")).to_have_value("")
    expect(row.locator(".hint")).to_have_text("1 to 40")
    window = card.locator('.field[data-name="window"] input')
    expect(window).to_have_attribute("type", "checkbox")
    expect(window).to_be_checked()  # its default
    meal = card.locator('.field[data-name="meal"] select')
    expect(meal.locator("option")).to_have_text(["—", "veg", "fish"])
    expect(meal).to_have_value("fish")
    note = card.locator('.field[data-name="note"] input')
    expect(note).to_have_attribute("type", "text")
    expect(note).to_have_value("none")
    expect(page.locator("#question")).to_be_disabled()  # the conversation waits for the answer
    return card


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_the_form_from_the_schema_answers_and_the_turn_finishes(page: Page, sync: bool) -> None:
    app, server = booking_app(sync, reply("booked"))
    with LiveServer(app) as live:
        page.goto(live.url)
        ask(page, "Book me a seat")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: paused"))
        the_form(page)
        if not sync:
            shot(page, "elicitation")
        page.reload()  # reopened from the server: asked again, the same form
        card = the_form(page)
        card.locator("button.accept").click()  # `row` is required: the browser asks for it, nothing is sent
        expect(page.locator(".termination")).to_have_count(1)
        card.locator('.field[data-name="row"] input').fill("7")
        card.locator('.field[data-name="window"] input').uncheck()
        card.locator('.field[data-name="meal"] select').select_option("veg")
        card.locator("button.accept").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(card.locator(".result")).to_have_text("LH1: row 7, window False, veg, none")
        expect(card.locator(".decided")).to_have_text("Accepted")
        expect(page.locator(".answer").last).to_have_text("booked")
        expect(page.locator("#question")).to_be_enabled()
        page.reload()  # the answer told again
        expect(page.locator('.tool-call[data-call-id="c1"] .decided')).to_have_text("Accepted")
    assert RAN == ["LH1: row 7, window False, veg, none"]
    server.close()


def test_decline_sends_a_decline(page: Page) -> None:
    app, server = booking_app(False, reply("not booked"))
    with LiveServer(app) as live:
        page.goto(live.url)
        ask(page, "Book me a seat")
        card = the_form(page)
        card.locator("button.decline").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(card.locator(".result")).to_have_text("not booked: decline")
        expect(card.locator(".decided")).to_have_text("Declined")
    assert RAN == ["LH1: decline"]
    server.close()


def test_an_answer_the_form_refuses_is_told_and_asked_again(page: Page) -> None:
    app, server = booking_app(False, reply("booked"))
    with LiveServer(app) as live:
        page.goto(live.url)
        ask(page, "Book me a seat")
        card = the_form(page)
        card.locator('.field[data-name="row"] input').fill("3")
        card.locator('.field[data-name="note"] input').fill("Aisle!")  # the pattern is the server's to check
        card.locator("button.accept").click()
        expect(page.locator(".run-error")).to_have_text(
            re.compile(r"ConfigurationError: `approvals\['c1'\]` field `note`")
        )
        card = the_form(page)  # it still waits: asked again
        card.locator('.field[data-name="row"] input').fill("3")
        card.locator('.field[data-name="note"] input').fill("aisle")
        card.locator("button.accept").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(card.locator(".result")).to_have_text("LH1: row 3, window True, fish, aisle")
    assert RAN == ["LH1: row 3, window True, fish, aisle"]
    server.close()


FIELDS = 25
Survey = create_model(  # a server's long form: each title markup
    "Survey", **{f"q{i:02d}": (str, Field("", title=f"<b>Question {i}</b>")) for i in range(FIELDS)}
)
SURVEYED: list[dict[str, Any]] = []


async def survey(
    topic: str, answers: Annotated[ElicitationResult[Survey], Resolve(lambda: Elicit("Tell us.", Survey))]
) -> str:
    """Ask a long survey."""
    SURVEYED.append(answers.data.model_dump() if isinstance(answers, AcceptedElicitation) else {})
    return "thanks"


def test_a_long_form_shows_its_first_fields_and_its_titles_as_text(page: Page) -> None:
    served = MCPServer("polls", request_state_security=RequestStateSecurity(keys=[KEY]))
    served.tool()(survey)
    server = mcp.memory(served, elicit="pause")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with_lm(agent, [reply(calls=[call("survey", {"topic": "seats"}, id="s1")]), reply("Thanks.")])
    SURVEYED.clear()
    with LiveServer(dspy_imp.web.app(agent)) as live:
        page.goto(live.url)
        ask(page, "Survey me")
        card = page.locator('.tool-call[data-call-id="s1"]')
        expect(card.locator(".elicitation .asker")).to_have_text("polls asks:")
        fields = card.locator(".elicitation .field")
        expect(fields).to_have_count(20)  # at most twenty fields of a server's form
        expect(card.locator(".elicitation .unsupported")).to_have_text("5 more fields not shown")
        expect(fields.first.locator(".label")).to_have_text("<b>Question 0</b>")  # a title is text
        assert card.locator("b").count() == 0
        card.locator('.field[data-name="q03"] input').fill("aisle")
        card.locator("button.accept").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
    assert [{f"q{i:02d}": "aisle" if i == 3 else "" for i in range(FIELDS)}] == SURVEYED
    server.close()

"""The chat page's form for an MCP server's question with choices (MCP 2025-11-25, SEP-1330), in a
real browser (as ``test_web_page_elicit.py``): several choices (``type: array`` of ``items.enum``
or ``items.anyOf`` of ``const``/``title``) are checkboxes, their titles as text, ``minItems`` and
``maxItems`` held by the page (Accept refused, with why, and no more boxes once the most are
checked), and the tool gets the list of the checked values; a titled single choice (``oneOf`` of
``const``/``title``, the legacy ``enumNames``) shows its titles and sends the chosen ``const``. A
list the form refuses, sent by another client, is refused by the app naming the field.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import pytest
from mcp.server.mcpserver import AcceptedElicitation, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.request_state import RequestStateSecurity
from mcp_elicit_program import KEY
from playwright.sync_api import Browser, Page, expect
from pydantic import BaseModel, Field
from test_web_elicit import agui
from test_web_page import WAIT, ask, browser
from web_helpers import LiveServer
from web_scenarios import run_input, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp import mcp
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

__all__ = ["browser"]  # the module's fixture, used here

SHOT = "/tmp/chatform.png"  # the page as it asks, to look at (not an asset of the docs)
RAN: list[dict[str, Any]] = []
EXTRAS = [
    {"const": "bag", "title": "<i>Checked bag</i>"},  # a title is text, never markup
    {"const": "wifi", "title": "Wi-Fi"},
    {"const": "lounge", "title": "Lounge access"},
]
CABINS = [{"const": "eco", "title": "Economy"}, {"const": "biz", "title": "Business"}]


class Trip(BaseModel):
    meals: list[Literal["veg", "fish", "kosher"]] = Field(
        title="Meals", description="One or two", min_length=1, max_length=2
    )
    extras: list[str] = Field(
        ["bag", "wifi", "lounge"], title="Extras", max_length=2, json_schema_extra={"items": {"anyOf": EXTRAS}}
    )  # its default is more than it allows: the page says so
    cabin: str = Field("eco", title="Cabin", json_schema_extra={"oneOf": CABINS})
    side: Literal["a", "w"] = Field("w", title="Side", json_schema_extra={"enumNames": ["Aisle", "Window"]})


def ask_trip() -> Elicit[Trip]:
    return Elicit("Plan the trip.", Trip)


async def plan(city: str, trip: Annotated[ElicitationResult[Trip], Resolve(ask_trip)]) -> str:
    """Plan a trip, asking what to add."""
    if not isinstance(trip, AcceptedElicitation):
        return f"not planned: {trip.action}"
    RAN.append(trip.data.model_dump())
    return f"{city}: {trip.data.meals} {trip.data.extras} {trip.data.cabin} {trip.data.side}"


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """``test_web_page``'s page, told of any dialog (an alert a title's markup ran) or script error."""
    context = browser.new_context(viewport={"width": 900, "height": 760})
    opened = context.new_page()
    opened.set_default_timeout(WAIT)
    expect.set_options(timeout=WAIT)
    said: list[str] = []
    opened.on("dialog", lambda dialog: (said.append(dialog.message), dialog.dismiss()))
    opened.on("pageerror", lambda error: said.append(f"page error: {error}"))
    yield opened
    context.close()
    assert said == []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


def trip_app(sync: bool, *script: Any) -> tuple[Any, mcp.Server]:
    served = MCPServer("travel", request_state_security=RequestStateSecurity(keys=[KEY]))
    served.tool()(plan)
    server = mcp.memory(served, elicit="pause")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with_lm(agent, [reply(calls=[call("plan", {"city": "Oslo"}, id="t1")]), *script])
    return dspy_imp.web.app(agent, sync=sync), server


def the_form(page: Page) -> Any:
    """The waiting card's form as it is asked: each field, its options' titles, its defaults."""
    card = page.locator('.tool-call[data-call-id="t1"]')
    expect(card.locator(".elicitation .asker")).to_have_text("travel asks:")
    meals = card.locator('.field[data-name="meals"]')
    expect(meals).to_have_attribute("role", "group")
    expect(meals.locator(".label")).to_have_text("Meals *")
    expect(meals.locator(".choice")).to_have_text(["veg", "fish", "kosher"])
    expect(meals.locator("input[type=checkbox]")).to_have_count(3)
    for box in meals.locator("input").all():
        expect(box).not_to_be_checked()
    expect(meals.locator(".hint")).to_have_text(["One or two", "Choose at least 1, at most 2."])
    extras = card.locator('.field[data-name="extras"]')
    expect(extras.locator(".label")).to_have_text("Extras")
    expect(extras.locator(".choice")).to_have_text(["<i>Checked bag</i>", "Wi-Fi", "Lounge access"])
    assert card.locator("i").count() == 0  # the title is text
    expect(extras.locator("input")).to_have_count(3)
    assert [box.get_attribute("value") for box in extras.locator("input").all()] == ["bag", "wifi", "lounge"]
    for box in extras.locator("input").all():
        expect(box).to_be_checked()  # its default, more than it allows
    expect(extras.locator(".hint")).to_have_text("Choose at most 2.")
    cabin = card.locator('.field[data-name="cabin"] select')
    expect(cabin.locator("option")).to_have_text(["—", "Economy", "Business"])  # the titles shown
    assert [option.get_attribute("value") for option in cabin.locator("option").all()] == ["", "eco", "biz"]
    expect(cabin).to_have_value("eco")
    side = card.locator('.field[data-name="side"] select')
    expect(side.locator("option")).to_have_text(["—", "Aisle", "Window"])  # the legacy ``enumNames``
    expect(side).to_have_value("w")
    return card


def refused(page: Page, card: Any, field: str, why: str) -> None:
    """Accept is refused by the page, telling why on the field's first box: nothing is sent."""
    card.locator("button.accept").click()
    box = card.locator(f'.field[data-name="{field}"] input:not([disabled])').first
    expect(box).to_have_js_property("validationMessage", why)
    expect(page.locator(".termination")).to_have_count(1)  # the turn was not resumed
    expect(card.locator(".decided")).to_have_count(0)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_choices_are_checked_within_their_bounds_and_reach_the_tool_as_lists(page: Page, sync: bool) -> None:
    app, server = trip_app(sync, reply("planned"))
    with LiveServer(app) as live:
        page.goto(live.url)
        ask(page, "Plan Oslo")
        expect(page.locator(".termination")).to_have_text(re.compile(r"Turn ended: paused"))
        card = the_form(page)
        if not sync:
            page.screenshot(path=SHOT, full_page=True)
        meals = card.locator('.field[data-name="meals"]')
        extras = card.locator('.field[data-name="extras"]')
        refused(page, card, "meals", "Choose at least 1 option.")  # required, none checked
        meals.get_by_label("veg").check()
        refused(page, card, "extras", "Choose at most 2 options.")  # the default's three
        extras.get_by_label("Wi-Fi").uncheck()
        meals.get_by_label("kosher").check()  # two: the most
        expect(meals.get_by_label("fish")).to_be_disabled()  # no third can be checked
        expect(extras.get_by_label("Wi-Fi")).to_be_disabled()
        meals.get_by_label("veg").uncheck()
        expect(meals.get_by_label("fish")).to_be_enabled()
        meals.get_by_label("fish").check()
        card.locator('.field[data-name="cabin"] select').select_option("Business")
        card.locator('.field[data-name="side"] select').select_option("Aisle")
        card.locator("button.accept").click()
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
        expect(card.locator(".result")).to_have_text("Oslo: ['fish', 'kosher'] ['bag', 'lounge'] biz a")
        expect(card.locator(".decided")).to_have_text("Accepted")
        expect(page.locator(".answer").last).to_have_text("planned")
    assert RAN == [{"meals": ["fish", "kosher"], "extras": ["bag", "lounge"], "cabin": "biz", "side": "a"}]
    server.close()


class Tags(BaseModel):
    tags: list[Literal["red", "green", "blue"]] | None = Field(None, title="Tags", min_length=2)  # no default


async def label(item: str, tags: Annotated[ElicitationResult[Tags], Resolve(lambda: Elicit("Tag it.", Tags))]) -> str:
    """Tag an item, asking which tags."""
    RAN.append(tags.data.model_dump() if isinstance(tags, AcceptedElicitation) else {"action": tags.action})
    return "tagged"


def tags_app() -> tuple[Any, mcp.Server]:
    served = MCPServer("tagger", request_state_security=RequestStateSecurity(keys=[KEY]))
    served.tool()(label)
    server = mcp.memory(served, elicit="pause")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with_lm(agent, [reply(calls=[call("label", {"item": "box"}, id="t1")]), reply("Tagged.")])
    return dspy_imp.web.app(agent), server


def test_an_optional_field_with_a_least_is_left_out_when_nothing_is_checked(page: Page) -> None:
    app, server = tags_app()
    with LiveServer(app) as live:
        page.goto(live.url)
        ask(page, "Tag the box")
        card = page.locator('.tool-call[data-call-id="t1"]')
        tags = card.locator('.field[data-name="tags"]')
        expect(tags.locator(".label")).to_have_text("Tags")  # not required
        expect(tags.locator(".hint")).to_have_text("Choose at least 2.")
        tags.get_by_label("green").check()
        refused(page, card, "tags", "Choose at least 2 options.")  # something checked: at least two
        tags.get_by_label("green").uncheck()
        card.locator("button.accept").click()  # nothing checked: the field is left out
        expect(page.locator(".termination").last).to_have_text(re.compile(r"Turn ended: answered"))
    assert RAN == [{"tags": None}]
    server.close()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ({"meals": ["veg", "fish", "kosher"]}, "field `meals`: ['veg', 'fish', 'kosher'] is too long"),
        ({"meals": ["beef"]}, "field `meals.0`: 'beef' is not one of ['veg', 'fish', 'kosher']"),
        ({"meals": []}, "field `meals`: [] should be non-empty"),
        ({"meals": ["veg"], "extras": ["spa"]}, "field `extras.0`: 'spa' is not valid under any of the given schemas"),
        ({"meals": [1]}, "field `meals`: a form's field holds a string, number, boolean or list of strings, got [1]"),
    ],
    ids=["too many", "not offered", "too few", "not a titled one", "not strings"],
)
def test_a_list_the_form_refuses_is_refused_by_the_app_naming_the_field(content: Any, said: str) -> None:
    # On a thread of its own: the browser's sync API keeps a loop running on this module's thread.
    with concurrent.futures.ThreadPoolExecutor(1) as other:
        other.submit(asyncio.run, _refused(content, said)).result()


async def _refused(content: Any, said: str) -> None:
    app, server = trip_app(False, reply("planned"))
    await agui(app, run_input("Plan Oslo"))
    content = {"extras": ["bag"], **content}  # the default's three are too many
    bad = [{"interruptId": "t1", "status": "resolved", "payload": {"action": "accept", "content": content}}]
    refused = await agui(app, run_input(run="r2", resume=bad))
    assert [e["type"] for e in refused] == ["RUN_STARTED", "RUN_ERROR"]
    assert refused[-1]["message"].startswith(f"ConfigurationError: `approvals['t1']` {said}")
    assert RAN == []
    server.close()

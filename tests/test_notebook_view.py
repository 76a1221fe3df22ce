"""The notebook view: ``_repr_html_`` of a prediction, its metadata and a history, parsed and
checked for structure (termination at the top, every call and result, request kinds, long
values folded) and escaping; the plain ``repr`` stays short; live progress shows only where
someone watches and can be turned off.
"""

from __future__ import annotations

import io
import sys
from html.parser import HTMLParser
from typing import Any

import dspy
import pytest
from helpers import SubmitSig

import dspy_imp
from dspy_imp._watch import progress as _progress
from dspy_imp.testing import ScriptedLM, call, fail, reply

SCRIPT = "<script>alert('x')</script>"
LONG = "word " * 200


def fetch(url: str) -> str:
    """Fetch a page."""
    return SCRIPT if "evil" in url else LONG


class Tree(HTMLParser):
    """Every element as (tag, attrs, text inside it, flattened)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[list[Any]] = []
        self.elements: list[tuple[str, dict[str, str | None], str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in ("br", "hr"):
            self.stack.append([tag, dict(attrs), ""])

    def handle_endtag(self, tag: str) -> None:
        item = self.stack.pop()
        assert item[0] == tag, f"unbalanced <{item[0]}> closed by </{tag}>"
        self.elements.append((item[0], item[1], item[2]))
        if self.stack:
            self.stack[-1][2] += item[2]

    def handle_data(self, data: str) -> None:
        if self.stack:
            self.stack[-1][2] += data

    def find(self, cls: str) -> list[tuple[str, dict[str, str | None], str]]:
        return [e for e in self.elements if cls in (e[1].get("class") or "").split()]


def usage_cells(markup: str) -> dict[str, str]:
    """The usage table's header cells and the values under them."""
    tree = parse(markup[markup.index('<table class="dspy-imp-usage">') :].split("</table>")[0] + "</table>")
    heads = [text for tag, _, text in tree.elements if tag == "th"]
    values = [text for tag, _, text in tree.elements if tag == "td"]
    return dict(zip(heads, values, strict=True))


def parse(markup: str) -> Tree:
    tree = Tree()
    tree.feed(markup)
    tree.close()
    assert tree.stack == [], "every element is closed"
    return tree


@pytest.fixture
def prediction(run: Any) -> dspy_imp.Prediction:
    lm = ScriptedLM(
        [
            reply("I will read both pages.", calls=[call("fetch", {"url": "https://evil.test"}, id="c1")]),
            reply(calls=[call("fetch", {"url": "https://long.test"}, id="c2"), call("nope", {}, id="c3")]),
            fail.tool_choice_refused(),
            reply(calls=[call("submit", {"answer": "a <b>bold</b> claim", "confidence": 0.5}, id="c4")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[fetch], max_iters=2, last_request_note="Wrap up now.")
    with dspy.context(lm=lm):
        return run(agent, intent="Summarise <these> pages")


def test_the_prediction_view_shows_the_termination_first_then_every_call_and_result(prediction):
    meta = prediction.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
    markup = prediction._repr_html_()
    tree = parse(markup)

    # The termination comes first: the reason as the view's first text, its cause beside it, then
    # the usage as a small table (requests by kind, tokens, cost); then the outputs and the history.
    assert markup.index("dspy-imp-termination") < markup.index("dspy-imp-outputs") < markup.index("dspy-imp-history")
    assert [text for _, _, text in tree.find("dspy-imp-reason")] == ["forced_submit"]
    assert tree.find("dspy-imp-reason")[0][1]["class"] == "dspy-imp-reason tone-owed"
    assert [text for _, _, text in tree.find("dspy-imp-cause")] == ["cause: max_iters"]
    assert usage_cells(markup) == {
        "requests": "4 (step 2 · forced_submit 1 · required_retry 1)",
        "input tokens": str(meta.usage.input_tokens),
        "output tokens": str(meta.usage.output_tokens),
        "cost": "—",
    }

    # Every call with its arguments and result; the error result marked.
    calls = [text for _, _, text in tree.find("dspy-imp-call")]
    assert len(calls) == 4
    assert calls[0].startswith('fetch({"url": "https://evil.test"}) → ' + SCRIPT)
    assert calls[1].startswith('fetch({"url": "https://long.test"}) → word word')
    assert calls[2].startswith("nope({}) → error: ") and "nope" in calls[2]
    assert calls[3].startswith("submit(")
    assert [e[2] for e in tree.elements if e[0] == "span" and e[1].get("class") == "error"][-1].startswith("error: ")

    # Each entry is marked by the request it came from: two steps, the note, the forced submit.
    kinds = [attrs["data-kind"] for _, attrs, _ in tree.find("dspy-imp-entry")]
    assert kinds == ["step", "step", "note", "forced submit"]
    entries = [text for _, _, text in tree.find("dspy-imp-entry")]
    assert "Summarise <these> pages" in entries[0] and "I will read both pages." in entries[0]
    assert "Wrap up now." in entries[2]

    # The outputs, as text.
    outputs = tree.find("dspy-imp-outputs")[0][2]
    assert "a <b>bold</b> claim" in outputs and "0.5" in outputs


def test_an_incomplete_turn_shows_its_errors_at_the_top(run):
    lm = ScriptedLM([fail.server_error(503), fail.server_error(503)])
    with dspy.context(lm=lm):
        pred = run(
            dspy_imp.ReActV2(SubmitSig, tools=[fetch], finish="tools", finish_on={"fetch": lambda *a: None}), intent="q"
        )
    assert pred.metadata.termination_reason == "incomplete"
    markup = pred._repr_html_()
    termination = parse(markup).find("dspy-imp-termination")[0][2]
    assert "incomplete" in termination and "prediction_error" in termination
    assert "error (initial)" in termination and "LMServerError" in termination
    assert markup.index("LMServerError") < markup.index("dspy-imp-history")


def test_everything_is_escaped(prediction):
    markup = prediction._repr_html_()
    assert "<script>" not in markup and "<b>" not in markup and "<these>" not in markup
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in markup
    assert "script" not in parse(markup).tags


def test_long_values_fold(prediction):
    tree = parse(prediction._repr_html_())
    folded = [t for tag, a, t in tree.elements if tag == "details" and a == {"class": "dspy-imp-fold"} and "word" in t]
    assert folded and all(len(summary) < 200 for summary in [t.split("…")[0] for t in folded])
    assert LONG.strip() in folded[0]


def test_metadata_and_history_views(prediction):
    meta = prediction.metadata
    tree = parse(meta._repr_html_())
    assert [a["data-kind"] for _, a, _ in tree.find("dspy-imp-entry")] == ["step", "step", "note", "forced submit"]
    view = dspy_imp.HistoryView(prediction.history)
    assert repr(view) == "HistoryView(4 entries)"
    history = parse(view._repr_html_())
    assert len(history.find("dspy-imp-call")) == 4 and "&lt;script&gt;" in view._repr_html_()


def test_an_extracted_answer_is_marked_as_the_extraction(run):
    extracted = (
        "[[ ## reasoning ## ]]\nr\n\n[[ ## answer ## ]]\nx\n\n[[ ## confidence ## ]]\n0.1\n\n[[ ## completed ## ]]"
    )
    lm = ScriptedLM([reply("thinking"), reply("still thinking"), reply(extracted)])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[fetch], max_iters=1), intent="q")
    assert pred.metadata.termination_reason == "extracted"
    kinds = [a["data-kind"] for _, a, _ in parse(pred._repr_html_()).find("dspy-imp-entry")]
    assert kinds == ["step", "step", "extraction"]


def test_a_text_answer_is_shown_once_and_the_view_brings_its_own_colours(run):
    lm = ScriptedLM([reply(calls=[call("fetch", {"url": "u"}, id="c1")]), reply("It is 21 degrees.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2("question -> answer", tools=[fetch]), question="q")
    assert pred.metadata.termination_reason == "answered"
    markup = pred._repr_html_()
    assert markup.count("It is 21 degrees.") == 1  # in the outputs; not again as a thought or an answer
    assert "answered with the outputs above" in markup
    assert pred.metadata._repr_html_().count("It is 21 degrees.") == 1  # the answer, not also the thought
    style = markup[: markup.index("</style>")]
    assert ".dspy-imp.dspy-imp{" in style and "color:#1f2328" in style and "background:#fff" in style


def test_the_plain_repr_stays_short(prediction):
    text = repr(prediction.metadata)
    assert text == "Metadata(termination_reason='forced_submit', cause='max_iters', history: 4 entries)"
    assert len(repr(prediction)) < 200


# -- live progress --------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_one_line_per_step_in_a_terminal_and_clears_it(monkeypatch, run):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    lm = ScriptedLM(
        [
            reply(calls=[call("fetch", {"url": "u"}, id="c1")]),
            reply(calls=[call("submit", {"answer": "a", "confidence": 1}, id="c2")]),
        ]
    )
    with dspy.context(lm=lm):
        run(dspy_imp.ReActV2(SubmitSig, tools=[fetch]), intent="q")
    lines = [line for line in terminal.getvalue().split("\r\x1b[2K") if line]
    assert [line[2:] for line in lines] == [
        "Step 1: waiting for the model",
        'Calling fetch({"url": "u"})',
        "Step 2: waiting for the model",
        'Calling submit({"answer": "a", "confidence": 1})',
        "Turn ended: submit",
    ]
    assert terminal.getvalue().endswith("\r\x1b[2K")  # nothing left behind


class Display:
    """IPython's ``display(..., display_id=True)``: every line shown, the handle's updates included."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, data: dict[str, str], raw: bool, display_id: bool) -> Display:
        assert raw and display_id
        self.lines.append(data["text/plain"])
        return self

    def update(self, data: dict[str, str], raw: bool) -> None:
        self.lines.append(data["text/plain"])


@pytest.mark.parametrize("fails", [False, True], ids=["ends", "raises"])
def test_progress_in_a_notebook_ends_with_one_clean_line(monkeypatch, run, fails):
    display = Display()
    monkeypatch.setattr(_progress, "_notebook", lambda: display)
    submit = reply(calls=[call("submit", {"answer": "a", "confidence": 1})])
    ending = [fail.server_error(503)] * 2 if fails else [submit]
    lm = ScriptedLM([reply(calls=[call("fetch", {"url": "u"}, id="c1")]), *ending])
    with dspy.context(lm=lm):
        if fails:
            with pytest.raises(dspy_imp.StepError):
                run(dspy_imp.ReActV2(SubmitSig, tools=[fetch]), intent="q")
        else:
            run(dspy_imp.ReActV2(SubmitSig, tools=[fetch]), intent="q")
    assert display.lines[0][2:] == "Step 1: waiting for the model"
    assert display.lines[-1] == ("✗ Turn ended: error (LMServerError)" if fails else "✓ Turn ended: submit")


def test_progress_can_be_turned_off_and_is_silent_when_nobody_watches(monkeypatch, run):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with dspy_imp.show_progress(False):
        assert _progress.Progress.of() is None
    assert _progress.Progress.of() is not None  # back on after the block
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal, not a notebook
    assert _progress.Progress.of() is None


def test_a_paused_turn_shows_the_calls_waiting_for_a_decision(run):
    lm = ScriptedLM([reply(calls=[call("fetch", {"url": "https://pay.test"}, id="c1")])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[fetch], tool_policy=lambda name, args: dspy_imp.NeedsApproval())
    with dspy.context(lm=lm):
        pred = run(agent, intent="q")
    assert pred.metadata.termination_reason == "paused"
    termination = parse(pred._repr_html_()).find("dspy-imp-termination")[0][2]
    assert "paused" in termination and "pending_calls" in termination
    assert '"name": "fetch"' in termination and '"kind": "approval"' in termination
    calls = [text for _, _, text in parse(pred._repr_html_()).find("dspy-imp-call")]
    assert calls == ['fetch({"url": "https://pay.test"}) → waits (approval)']


def test_a_sub_agents_run_is_nested_in_the_call_that_made_it(run):
    researcher = dspy_imp.ReActV2("question -> findings", tools=[fetch])
    researcher.react.lm = ScriptedLM(
        [reply(calls=[call("fetch", {"url": "https://evil.test"}, id="k1")]), reply("A <script> page.")]
    )
    triage = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
    triage.react.lm = ScriptedLM([reply(calls=[call("researcher", {"question": "what?"}, id="p1")]), reply("Done.")])
    markup = run(triage, ticket="t")._repr_html_()
    tree = parse(markup)
    [nested] = tree.find("dspy-imp-agent")
    assert nested[2].startswith("researcher: answered")
    assert 'fetch({"url": "https://evil.test"})' in nested[2] and SCRIPT in nested[2]  # the child's call, escaped
    assert SCRIPT not in markup and [tag for tag in tree.tags if tag == "script"] == []
    assert len(tree.find("dspy-imp-history")) == 2  # the caller's history, and the researcher's inside it

"""Saving and loading: options survive nesting; a tampered state is refused whole (SPEC §5, §6)."""

from __future__ import annotations

import json

import dspy
import pytest
from helpers import TA, Look

import dspy_imp
from dspy_imp.testing import ScriptedLM, reply


def send(text: str) -> str:
    """Send a message."""
    return "sent"


def on_send(args, result, inputs):
    return dspy_imp.Finish(answer=args["text"])


class Outer(dspy.Module):
    def __init__(self, **options):
        super().__init__()
        self.agent = dspy_imp.ReActV2(TA, tools=[Look(), send], finish_on={"send": on_send}, **options)

    def forward(self, intent):
        return self.agent(intent=intent)


def requests_of(program, **inputs):
    lm = ScriptedLM(lambda request: reply(f"thought {len(request.messages)}"))
    with dspy.context(lm=lm):
        program(**inputs)
    return [(r.messages, r.tool_names, r.tool_choice) for r in lm.requests]


def test_a_program_using_no_option_saves_exactly_as_a_predict():
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    plain = dspy.Predict(agent.react.signature)
    assert agent.dump_state() == {"react": plain.dump_state()}


def test_options_set_away_from_defaults_are_saved_on_the_step_predictor():
    agent = dspy_imp.ReActV2(
        TA, tools=[Look()], max_iters=3, finish="submit", history_replay="actions",
        unsent_note="Nobody read that.", last_request_note="Answer now.",
    )  # fmt: skip
    assert agent.dump_state()["react"]["dspy_imp"] == {
        "max_iters": 3,
        "finish": "submit",
        "history_replay": "actions",
        "unsent_note": "Nobody read that.",
        "last_request_note": "Answer now.",
    }


def test_a_nested_program_round_trips_through_json(tmp_path):
    saved = Outer(finish="submit", max_iters=2, unsent_note="Not sent; call submit.", history_replay="actions")
    saved.agent.react.signature = saved.agent.react.signature.with_instructions("Answer briefly.")
    path = tmp_path / "outer.json"
    saved.save(path)
    state = json.loads(path.read_text())
    assert state["agent.react"]["dspy_imp"]["finish"] == "submit"

    loaded = Outer()
    loaded.load(path)
    assert loaded.agent.options.finish == "submit" and loaded.agent.max_iters == 2
    assert requests_of(loaded, intent="hi") == requests_of(saved, intent="hi")
    assert requests_of(loaded, intent="hi")[1][0][-1] == {"role": "user", "content": "Not sent; call submit."}


def test_finish_on_is_saved_by_tool_name_and_needs_the_hook_to_load(tmp_path):
    path = tmp_path / "agent.json"
    dspy_imp.ReActV2(TA, tools=[Look(), send], finish="tools", finish_on={"send": on_send}).save(path)
    assert json.loads(path.read_text())["react"]["dspy_imp"] == {"finish": "tools", "finish_on": ["send"]}

    same = dspy_imp.ReActV2(TA, tools=[Look(), send], finish_on={"send": on_send})
    same.load(path)
    assert same.options.finish == "tools" and set(same.options.finish_on) == {"send"}

    without_hook = dspy_imp.ReActV2(TA, tools=[Look(), send])
    with pytest.raises(dspy_imp.ConfigurationError, match="finish_on"):
        without_hook.load(path)
    assert without_hook.options.finish == "auto"


def _tamper(path, change):
    state = json.loads(path.read_text())
    change(state["react"])
    path.write_text(json.dumps(state))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda react: react.update(config={"api_base": "http://attacker.invalid"}), "config"),
        (lambda react: react.update(api_base="http://attacker.invalid"), "api_base"),
        (lambda react: react.setdefault("dspy_imp", {}).update(temperature=0.1), "temperature"),
        (lambda react: react.setdefault("dspy_imp", {}).update(unsent_note="  "), "unsent_note"),
        (lambda react: react.setdefault("dspy_imp", {}).update(finish="tools"), "finish_on"),
        (lambda react: react.setdefault("dspy_imp", {}).update(max_iters=-1), "max_iters"),
        (lambda react: react.setdefault("dspy_imp", {}).update(history_replay="all"), "history_replay"),
        (lambda react: react.update(dspy_imp=["finish"]), "dspy_imp"),
    ],
)
def test_a_tampered_state_is_refused_and_nothing_is_applied(tmp_path, change, named):
    path = tmp_path / "agent.json"
    original = dspy_imp.ReActV2(TA, tools=[Look()])
    original.react.signature = original.react.signature.with_instructions("Saved instructions.")
    original.save(path)
    _tamper(path, change)

    fresh = dspy_imp.ReActV2(TA, tools=[Look()])
    before = fresh.dump_state()
    with pytest.raises(dspy_imp.ConfigurationError, match=named):
        fresh.load(path)
    assert fresh.dump_state() == before
    assert not hasattr(fresh.react, "config") or fresh.react.config == {}


def test_production_controls_are_saved_and_loaded(tmp_path):
    path = tmp_path / "agent.json"
    limits = dspy_imp.UsageLimits(requests=3, cost=0.5)
    controls = {"parallel_tools": True, "usage_limits": limits, "needs_approval": [send], "external_tools": ["look"]}
    dspy_imp.ReActV2(TA, tools=[Look(), send], **controls).save(path)
    assert json.loads(path.read_text())["react"]["dspy_imp"] == {
        "parallel_tools": True,
        "usage_limits": {"requests": 3, "cost": 0.5},
        "needs_approval": ["send"],
        "external_tools": ["look"],
    }
    fresh = dspy_imp.ReActV2(TA, tools=[Look(), send], parallel_tools=True)  # a file never turns it on (issue 23)
    fresh.load(path)
    options = fresh.options
    assert (options.parallel_tools, options.usage_limits) == (True, limits)
    assert (options.needs_approval, options.external_tools) == (("send",), ("look",))


@pytest.mark.parametrize("value", [False, "1h", "24h"])
def test_prompt_cache_is_saved_loaded_and_copied(tmp_path, value):
    import copy

    path = tmp_path / "agent.json"
    dspy_imp.ReActV2(TA, tools=[Look()], prompt_cache=value).save(path)
    assert json.loads(path.read_text())["react"]["dspy_imp"] == {"prompt_cache": value}
    fresh = dspy_imp.ReActV2(TA, tools=[Look()])
    fresh.load(path)
    assert fresh.options.prompt_cache == value
    assert copy.deepcopy(fresh).options.prompt_cache == value
    assert fresh.deepcopy().options.prompt_cache == value


@pytest.mark.parametrize(
    ("saved", "named"),
    [
        ({"needs_approval": ["delete_everything"]}, "needs_approval"),
        ({"external_tools": "look"}, "external_tools"),
        ({"usage_limits": {"requests": -2}}, "usage_limits.requests"),
        ({"parallel_tools": "yes"}, "parallel_tools"),
        ({"prompt_cache": "forever"}, "prompt_cache"),
        ({"prompt_cache": {"api_base": "http://elsewhere"}}, "prompt_cache"),
    ],
)
def test_tampered_controls_are_refused(tmp_path, saved, named):
    path = tmp_path / "agent.json"
    dspy_imp.ReActV2(TA, tools=[Look()]).save(path)
    _tamper(path, lambda react: react.update(dspy_imp=saved))
    fresh = dspy_imp.ReActV2(TA, tools=[Look()])
    with pytest.raises(dspy_imp.ConfigurationError, match=named):
        fresh.load(path)
    assert fresh.options.needs_approval == () and fresh.options.usage_limits is None

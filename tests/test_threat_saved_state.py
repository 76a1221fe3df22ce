"""Issue 9, holes 1 and 10: a saved file is data; it never re-keys, re-models or breaks the program.

Each tampered file is refused with ``ConfigurationError`` naming the field, nothing is applied,
and the program then sends exactly the requests it sent before the attempt.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from helpers import TA, Look

import dspy_imp
from dspy_imp.testing import ScriptedLM, reply


def saved(tmp_path: Any, agent: dspy_imp.ReActV2 | None = None) -> Any:
    path = tmp_path / "agent.json"
    (agent or dspy_imp.ReActV2(TA, tools=[Look()])).save(path)
    return path


def tamper(path: Any, change: Any) -> None:
    state = json.loads(path.read_text())
    change(state["react"])
    path.write_text(json.dumps(state))


def requests_of(agent: dspy_imp.ReActV2, run: Any) -> list[Any]:
    lm = ScriptedLM([reply("It is on the shelf.")])
    with dspy.context(lm=lm):
        run(agent, intent="Where is the key?")
    return [(r.messages, r.tool_names, r.tool_choice, r.options) for r in lm.requests]


ATTACKER_LM = {
    "model": "openai/gpt-4o-mini",
    "api_key": "sk-attacker-0123456789",
    "extra_headers": {"X-Exfil": "1"},
}


@pytest.mark.parametrize(
    ("block", "named"),
    [
        pytest.param(ATTACKER_LM, "lm.api_key", id="api-key"),
        pytest.param({"model": "openai/scripted", "extra_headers": {"X-Exfil": "1"}}, "lm.extra_headers", id="headers"),
        pytest.param({"model": "openai/scripted", "api_base": "http://attacker.invalid"}, "lm.api_base", id="api-base"),
        pytest.param({"model": "openai/scripted", "base_url": "http://attacker.invalid"}, "lm.base_url", id="base-url"),
        pytest.param({"model": "openai/scripted", "awsSecretAccessKey": "x"}, "lm.awsSecretAccessKey", id="camel"),
        pytest.param({"model": "openai/gpt-4o-mini"}, "lm.model", id="another-model"),
        pytest.param({"model": "openai/scripted", "temperature": 0}, "lm.model", id="a-model-with-no-lm-set"),
        pytest.param({"model": 7}, "lm.model", id="model-not-a-string"),
        pytest.param("openai/gpt-4o-mini", "`lm`", id="lm-not-a-dict"),
    ],
)
def test_a_saved_lm_block_never_chooses_credentials_headers_endpoints_or_the_model(tmp_path, block, named):
    path = saved(tmp_path)
    tamper(path, lambda react: react.update(lm=block))
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    if isinstance(block, dict) and "temperature" not in block:
        agent.react.lm = dspy.LM("openai/scripted", api_key="sk-host")
    # else the host set no LM on the predictor: the file may not pick one either
    host_lm = agent.react.lm
    before = agent.dump_state()

    with pytest.raises(dspy_imp.ConfigurationError, match=named.replace(".", r"\.")):
        agent.load(path)

    assert agent.react.lm is host_lm
    assert agent.dump_state() == before


def test_an_lm_block_naming_the_hosts_model_loads_and_keeps_its_safe_settings(tmp_path):
    path = saved(tmp_path)
    tamper(path, lambda react: react.update(lm={"model": "openai/gpt-4o-mini", "temperature": 0.3}))
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.lm = dspy.LM("openai/gpt-4o-mini", api_key="sk-host")
    agent.load(path)
    assert agent.react.lm.model == "openai/gpt-4o-mini"
    assert agent.react.lm.kwargs["temperature"] == 0.3


def test_the_host_opts_in_to_a_trusted_lm_block(tmp_path):
    path = saved(tmp_path)
    tamper(path, lambda react: react.update(lm={"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9"}))
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.load(path, allow_unsafe_lm_state=True)
    assert agent.react.lm.model == "openai/gpt-4o-mini"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        pytest.param(lambda r: r.update(demos="not a list"), "demos", id="demos-a-string"),
        pytest.param(lambda r: r.update(demos=[1, 2]), r"demos\[0\]", id="demos-of-ints"),
        pytest.param(lambda r: r.update(train={"a": 1}), "train", id="train-a-dict"),
        pytest.param(lambda r: r.update(signature="Answer."), "signature", id="signature-a-string"),
        pytest.param(lambda r: r.update(signature={"fields": []}), "signature", id="signature-no-instructions"),
        pytest.param(lambda r: r["signature"].update(fields="x"), r"signature\.fields", id="fields-a-string"),
        pytest.param(lambda r: r["signature"].update(fields=[1]), r"signature\.fields\[0\]", id="field-an-int"),
        pytest.param(
            lambda r: r["signature"]["fields"].extend([{"prefix": "a", "description": "b"}] * 9),
            r"signature\.fields",
            id="too-many-fields",
        ),
        pytest.param(lambda r: r.pop("signature"), "signature", id="no-signature"),
        pytest.param(lambda r: r.update(lm=["openai/x"]), "`lm`", id="lm-a-list"),
        # issue 23: dicts a call could not show are refused at load, not at every call after it
        pytest.param(lambda r: r.update(demos=[{"colour": "red"}]), "demos", id="demo-of-no-field"),
        pytest.param(
            lambda r: r.update(demos=[{"intent": "i", "next_thought": "t", "tool_calls": "not calls"}]),
            "demos",
            id="demo-with-unreadable-calls",
        ),
    ],
)
def test_wrong_typed_demos_or_malformed_blocks_are_refused_and_nothing_changes(tmp_path, run, change, named):
    path = saved(tmp_path)
    tamper(path, change)
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    before = agent.dump_state()
    sent_before = requests_of(agent, run)

    with pytest.raises(dspy_imp.ConfigurationError, match=named):
        agent.load(path)

    assert agent.dump_state() == before
    assert requests_of(agent, run) == sent_before
    agent.save(tmp_path / "again.json")  # saving still works


def test_load_state_on_the_predictor_itself_refuses_and_changes_nothing():
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    state = agent.react.dump_state()
    before = dict(agent.react.__dict__)
    with pytest.raises(dspy_imp.ConfigurationError, match="demos"):
        agent.react.load_state({**state, "demos": [1]})
    assert agent.react.__dict__ == before

"""Reference §12 B: tool execution (§2.4, §2.6, §10.3, Appendix B).

Every problem with a call is an observation recorded as that call's error result, whose
``result`` is the sentence the model reads after ``Error: ``; the loop goes on. The tool
policy applies to ``submit`` too.
"""

from __future__ import annotations

import gc
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import dspy
import pydantic
from dspy import lm15
from helpers import NAMED_SUBMIT, TA, Look, SubmitSig, assistant, inputs, submit_system, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

SYSTEM_SUBMIT_LOOKUP = submit_system("lookup")


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def timeless(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry with each result's ``returned_at`` checked (ISO 8601, UTC, just now) and removed."""
    results = []
    for result in entry["tool_call_results"]:
        result = dict(result)
        stamp = datetime.fromisoformat(result.pop("returned_at"))
        assert stamp.utcoffset() == timedelta(0), stamp
        assert abs(datetime.now(UTC) - stamp) < timedelta(minutes=1), stamp
        results.append(result)
    return {**entry, "tool_call_results": results}


def ok(call_id: str, name: str, result: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "result": result, "error": False}


def err(call_id: str, name: str | None, sentence: str, kind: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "result": sentence, "error": True, "error_kind": kind}


# -- B1 -----------------------------------------------------------------------------------------


def test_b1_parallel_calls_ids_and_a_submit_in_the_same_step(run):
    lm = ScriptedLM(
        [
            reply(
                "gather and finish",
                calls=[
                    call("lookup", {"query": "beam"}, id="lookup-1"),
                    call("missing", {}, id="missing-1"),
                    call("submit", {"answer": "BEAM", "confidence": 1.0}, id="submit-1"),
                ],
            )
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup])
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is beam?")

    [request] = lm.requests
    assert request.messages == [{"role": "system", "content": SYSTEM_SUBMIT_LOOKUP}, inputs(intent="what is beam?")]
    assert (request.tool_names, request.tool_choice) == (["lookup", "submit"], "auto")
    assert (pred.answer, pred.confidence) == ("BEAM", 1.0)
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause, meta.finished_by_tool) == ("submit", None, None)
    assert meta.unexecuted_tool_calls == ()
    [entry] = meta.history.messages
    assert timeless(entry) == {
        "intent": "what is beam?",
        "next_thought": "gather and finish",
        "tool_calls": [
            {"id": "lookup-1", "name": "lookup", "args": {"query": "beam"}},
            {"id": "missing-1", "name": "missing", "args": {}},
            {"id": "submit-1", "name": "submit", "args": {"answer": "BEAM", "confidence": 1.0}},
        ],
        "tool_call_results": [
            ok("lookup-1", "lookup", "found beam"),
            err("missing-1", "missing", "there is no tool named missing.", "unknown_tool"),
            ok("submit-1", "submit", {"answer": "BEAM", "confidence": 1.0}),
        ],
        "answer": "BEAM",
        "confidence": 1.0,
    }
    lm.assert_complete()


def test_b1_parallel_calls_reach_the_model_with_their_ids_in_call_order(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("look", {"where": "shelf"}, id="z-9"),
                    call("lookup", {"query": "key"}, id="a-1"),
                    call("look", {"where": "desk"}, id="m-5"),
                ]
            ),
            reply("The key is on the desk."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look, lookup])
    with dspy.context(lm=lm):
        pred = run(agent, intent="where is the key?")

    assert lm.requests[1].messages[1:] == [
        inputs(intent="where is the key?"),
        assistant(
            "",
            [
                ("z-9", "look", '{"where":"shelf"}'),
                ("a-1", "lookup", '{"query":"key"}'),
                ("m-5", "look", '{"where":"desk"}'),
            ],
        ),
        tool("z-9", '{"seen": true}'),
        tool("a-1", "found key"),
        tool("m-5", '{"seen": true}'),
    ]
    assert look.runs == [{"where": "shelf"}, {"where": "desk"}]
    first, _ = pred.metadata.history.messages
    assert [c["id"] for c in first["tool_calls"]] == ["z-9", "a-1", "m-5"]
    assert [r["id"] for r in first["tool_call_results"]] == ["z-9", "a-1", "m-5"]
    assert pred.answer == "The key is on the desk."


# -- B2 -----------------------------------------------------------------------------------------


def nameless(lm: ScriptedLM, marker: str = "NAMELESS") -> ScriptedLM:
    """Make the scripted provider send calls named ``marker`` with an empty name.

    lm15 refuses to build a ``ToolCallPart`` without a name, so the name is blanked on the
    response the engine returns, as a provider's malformed reply would arrive.
    """
    script = lm._engine_spec
    answer = script.answer

    def blanked(item: Any, number: int, recorded: Any) -> Any:
        response = answer(item, number, recorded)
        for part in response.message.parts:
            if isinstance(part, lm15.ToolCallPart) and part.name == marker:
                object.__setattr__(part, "name", "")
        return response

    script.answer = blanked
    return lm


def test_b2_a_call_that_names_no_tool_is_an_observation(run):
    written: list[str] = []

    def write(path: str) -> str:
        """Write a file."""
        written.append(path)
        return f"wrote {path}"

    lm = nameless(
        ScriptedLM(
            [
                reply(calls=[call("NAMELESS", {"command": "cat", "args": ["notes.txt"]}, id="m1")]),
                reply(
                    calls=[
                        call("write", {"path": "notes.txt"}, id="w1"),
                        call("submit", {"answer": "recovered", "confidence": 1.0}, id="s1"),
                    ]
                ),
            ]
        )
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[write], max_iters=2)
    with dspy.context(lm=lm):
        pred = run(agent, intent="recover")

    assert pred.metadata.termination_reason == "submit"
    assert (pred.answer, pred.confidence) == ("recovered", 1.0)
    assert written == ["notes.txt"]
    first, second = pred.metadata.history.messages
    [result] = timeless(first)["tool_call_results"]
    assert result == err("m1", None, "the tool call could not be read.", "malformed_tool_call")
    assert first["tool_calls"][0]["id"] == "m1" and first["tool_calls"][0]["name"] is None
    assert [c["name"] for c in second["tool_calls"]] == ["write", "submit"]
    # The model reads the sentence; the unreadable call is replayed under a placeholder name
    # (the code's choice: the reference does not say how a nameless native call is replayed).
    assert lm.requests[1].messages[2:] == [
        assistant("", [("m1", "unreadable_call", '{"command":"cat","args":["notes.txt"]}')]),
        tool("m1", "Error: the tool call could not be read."),
    ]
    lm.assert_complete()


# -- B3 -----------------------------------------------------------------------------------------


def test_b3_failing_and_unknown_tools_do_not_abort(run):
    def broken() -> str:
        """Always breaks."""
        raise ValueError("disk on fire")

    lm = ScriptedLM([reply(calls=[call("broken", {}, id="b1"), call("unknown", {}, id="u1")]), reply("recovered")])
    agent = dspy_imp.ReActV2(TA, tools=[broken], max_iters=2)
    with dspy.context(lm=lm):
        pred = run(agent, intent="try")

    assert pred.answer == "recovered"
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("answered", None)
    first, second = pred.metadata.history.messages
    assert timeless(first)["tool_call_results"] == [
        err("b1", "broken", "broken failed: disk on fire", "tool_error"),
        err("u1", "unknown", "there is no tool named unknown.", "unknown_tool"),
    ]
    assert second["answer"] == "recovered"
    assert lm.requests[1].messages[1:] == [
        inputs(intent="try"),
        assistant("", [("b1", "broken", "{}"), ("u1", "unknown", "{}")]),
        tool("b1", "Error: broken failed: disk on fire"),
        tool("u1", "Error: there is no tool named unknown."),
    ]
    assert lm.requests[1].tool_names == ["broken"]
    lm.assert_complete()


# -- B4 / B5 ------------------------------------------------------------------------------------
# B4's `{"tool_calls": [...]}` wrappers and `recipient_name: "functions.submit"` calls, and B5's
# `tool`/`args` spellings, are shapes of *written* tool calls (a model without native calling
# writes its calls as JSON text). They are left to the issue that adds written tool calls; what
# applies to native calls is the id a call without one gets: `call_{step}_{index}`.


def test_b4_native_calls_without_an_id_get_call_step_index(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "shelf"}, id="")]),
            reply("again", calls=[call("look", {"where": "desk"}, id=""), call("look", {"where": "box"}, id="given")]),
            reply(calls=[call("look", {"where": "bag"}, id="")]),
            reply("Nothing there."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look])
    with dspy.context(lm=lm):
        pred = run(agent, intent="find it")

    entries = pred.metadata.history.messages
    assert [[c["id"] for c in e["tool_calls"]] for e in entries] == [
        ["call_0_0"],
        ["call_1_0", "given"],
        ["call_2_0"],
        [],
    ]
    assert [[r["id"] for r in e["tool_call_results"]] for e in entries[:3]] == [
        ["call_0_0"],
        ["call_1_0", "given"],
        ["call_2_0"],
    ]
    assert lm.requests[3].messages[1:] == [
        inputs(intent="find it"),
        assistant("", [("call_0_0", "look", '{"where":"shelf"}')]),
        tool("call_0_0", '{"seen": true}'),
        assistant("again", [("call_1_0", "look", '{"where":"desk"}'), ("given", "look", '{"where":"box"}')]),
        tool("call_1_0", '{"seen": true}'),
        tool("given", '{"seen": true}'),
        assistant("", [("call_2_0", "look", '{"where":"bag"}')]),
        tool("call_2_0", '{"seen": true}'),
    ]
    assert len(look.runs) == 4


def test_b4_the_step_index_restarts_at_zero_on_every_call_and_ids_stay_unique(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {}, id="")]),
            reply("one"),
            reply(
                calls=[call("look", {}, id=""), call("look", {"where": "box"}, id="dup"), call("look", {}, id="dup")]
            ),
            reply("two"),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="first")
        second = run(agent, intent="second", history=first.metadata.history)

    entries = second.metadata.history.messages
    # call_{step}_{index} again in the second call, renamed because the conversation already holds it;
    # a provider repeating an id within a step is renamed the same way, so every tool message pairs.
    assert [[c["id"] for c in e["tool_calls"]] for e in entries] == [
        ["call_0_0"],
        [],
        ["call_0_0_2", "dup", "dup_2"],
        [],
    ]
    replayed = lm.requests[3].messages
    assert [m["tool_call_id"] for m in replayed if m["role"] == "tool"] == ["call_0_0", "call_0_0_2", "dup", "dup_2"]


# -- B6 -----------------------------------------------------------------------------------------


def test_b6_a_tool_that_raises_is_an_observation_with_unknown_outcome(run):
    def look(where: str) -> str:
        """Look at a thing."""
        raise ConnectionError("lost connection")

    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "door"}, id="l1")]), reply("I could not tell whether the look happened.")]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look])
    with dspy.context(lm=lm):
        pred = run(agent, intent="look at the door")

    assert pred.answer == "I could not tell whether the look happened."
    assert pred.metadata.termination_reason == "answered"
    first, _ = pred.metadata.history.messages
    assert timeless(first)["tool_call_results"] == [err("l1", "look", "look failed: lost connection", "tool_error")]
    assert lm.requests[1].messages[-1] == tool("l1", "Error: look failed: lost connection")


# -- B7 -----------------------------------------------------------------------------------------


def test_b7_the_policy_denies_submit_in_a_step_and_in_the_forced_request(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply(calls=[call("submit", {"answer": "a", "confidence": 1.0}, id="s1")]),
            reply("I am done."),
            reply(calls=[call("submit", {"answer": "a", "confidence": 1.0}, id="s2")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[look], tool_policy=["look"])
    with dspy.context(lm=lm):
        pred = run(agent, intent="answer")

    assert len(lm.requests) == 3  # step, step, forced submit; no extraction request
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto", NAMED_SUBMIT]
    assert lm.requests[1].messages[-1] == tool("s1", "Error: submit is not allowed.")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "empty_tool_calls")
    assert (pred.answer, pred.confidence) == (None, None)
    first, thought, forced = meta.history.messages
    assert timeless(first)["tool_call_results"] == [err("s1", "submit", "submit is not allowed.", "tool_denied")]
    assert "answer" not in first
    assert thought == {"next_thought": "I am done.", "tool_calls": [], "tool_call_results": []}
    assert timeless(forced)["tool_call_results"] == [err("s2", "submit", "submit is not allowed.", "tool_denied")]
    assert "answer" not in forced
    lm.assert_complete()


# -- tool_policy ----------------------------------------------------------------------------------


def other() -> str:
    """Another tool."""
    return "other ran"


def test_tool_policy_as_a_list_allows_only_the_named_tools(run):
    look, ran = Look(), []

    def erase(where: str) -> str:
        """Erase a thing."""
        ran.append(where)
        return "erased"

    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "a"}, id="l1"), call("erase", {"where": "a"}, id="e1")]), reply("done")]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look, erase], tool_policy=["look"])
    with dspy.context(lm=lm):
        pred = run(agent, intent="tidy")

    assert look.runs == [{"where": "a"}] and ran == []
    assert lm.requests[0].tool_names == ["look", "erase"]  # the policy does not change the roster
    first, _ = pred.metadata.history.messages
    assert timeless(first)["tool_call_results"] == [
        ok("l1", "look", {"seen": True}),
        err("e1", "erase", "erase is not allowed.", "tool_denied"),
    ]
    assert lm.requests[1].messages[-1] == tool("e1", "Error: erase is not allowed.")
    assert pred.answer == "done"


def test_tool_policy_as_a_callable_returning_true_false_or_a_reason(run):
    look, asked = Look(), []

    def policy(name: str, args: dict[str, Any]) -> bool | str:
        asked.append((name, args))
        return {"look": True, "other": False}.get(name, "it needs a human's approval")

    def third(level: int) -> str:
        """A third tool."""
        raise AssertionError("a refused tool must not run")

    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("look", {"where": "desk"}, id="c1"),
                    call("other", {}, id="c2"),
                    call("third", {"level": 2}, id="c3"),
                ]
            ),
            reply("done"),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look, other, third], tool_policy=policy)
    with dspy.context(lm=lm):
        pred = run(agent, intent="act")

    assert asked == [("look", {"where": "desk"}), ("other", {}), ("third", {"level": 2})]
    assert look.runs == [{"where": "desk"}]
    first, _ = pred.metadata.history.messages
    assert timeless(first)["tool_call_results"] == [
        ok("c1", "look", {"seen": True}),
        err("c2", "other", "other is not allowed.", "tool_denied"),
        err("c3", "third", "third is not allowed: it needs a human's approval", "tool_denied"),
    ]
    assert lm.requests[1].messages[-2:] == [
        tool("c2", "Error: other is not allowed."),
        tool("c3", "Error: third is not allowed: it needs a human's approval"),
    ]


def test_tool_policy_applies_to_submit_and_the_loop_goes_on(run):
    look = Look()

    def policy(name: str, args: dict[str, Any]) -> bool | str:
        if name == "submit" and not look.runs:
            return "look first"
        return True

    lm = ScriptedLM(
        [
            reply(calls=[call("submit", {"answer": "early", "confidence": 0.1}, id="s1")]),
            reply(calls=[call("look", {}, id="l1")]),
            reply(calls=[call("submit", {"answer": "seen", "confidence": 0.9}, id="s2")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[look], tool_policy=policy)
    with dspy.context(lm=lm):
        pred = run(agent, intent="look then answer")

    assert (pred.answer, pred.confidence) == ("seen", 0.9)
    assert pred.metadata.termination_reason == "submit"
    first = pred.metadata.history.messages[0]
    assert timeless(first)["tool_call_results"] == [
        err("s1", "submit", "submit is not allowed: look first", "tool_denied")
    ]
    assert lm.requests[1].messages[-1] == tool("s1", "Error: submit is not allowed: look first")
    lm.assert_complete()


# -- argument schema --------------------------------------------------------------------------------


def test_arguments_that_fail_the_tools_schema_are_observations(run):
    ran: list[dict[str, Any]] = []

    def search(sku: str, region: str, limit: int = 5) -> str:
        """Search the catalog."""
        ran.append({"sku": sku, "region": region, "limit": limit})
        return "hit"

    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("search", {}, id="a"),
                    call("search", {"region": "eu"}, id="b"),
                    call("search", {"sku": 3, "region": "eu", "limit": "many"}, id="c"),
                    call("search", {"sku": "x1", "region": "eu"}, id="d"),
                ]
            ),
            reply("done"),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[search])
    with dspy.context(lm=lm):
        pred = run(agent, intent="find x1")

    assert ran == [{"sku": "x1", "region": "eu", "limit": 5}]
    first, _ = pred.metadata.history.messages
    assert timeless(first)["tool_call_results"] == [
        err("a", "search", "missing required arguments: sku, region", "missing_required"),
        err("b", "search", "missing required arguments: sku", "missing_required"),
        err(
            "c",
            "search",
            "invalid arguments: sku 3 is not of type 'string'; limit 'many' is not of type 'integer'",
            "schema_validation",
        ),
        ok("d", "search", "hit"),
    ]
    assert lm.requests[1].messages[-4:-1] == [
        tool("a", "Error: missing required arguments: sku, region"),
        tool("b", "Error: missing required arguments: sku"),
        tool("c", "Error: invalid arguments: sku 3 is not of type 'string'; limit 'many' is not of type 'integer'"),
    ]


def test_an_argument_the_tool_does_not_take_is_an_observation(run):
    look = Look()
    lm = ScriptedLM([reply(calls=[call("look", {"where": "desk", "zoom": 3}, id="l1")]), reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[look])
    with dspy.context(lm=lm):
        pred = run(agent, intent="look")

    # The code's wording for an unexpected argument (the reference only fixes "invalid arguments: ...").
    assert look.runs == []
    first, _ = pred.metadata.history.messages
    assert timeless(first)["tool_call_results"] == [
        err("l1", "look", "invalid arguments: zoom is not an argument of look", "schema_validation")
    ]


# -- async tools ----------------------------------------------------------------------------------


def test_an_async_tool_runs_on_the_async_path_and_is_an_error_on_the_sync_path(run):
    awaited: list[str] = []

    async def fetch(key: str) -> str:
        """Fetch a value."""
        awaited.append(key)
        return f"value of {key}"

    lm = ScriptedLM([reply(calls=[call("fetch", {"key": "k1"}, id="f1")]), reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[fetch])
    with warnings.catch_warnings(record=True) as caught, dspy.context(lm=lm):
        warnings.simplefilter("always")
        pred = run(agent, intent="fetch k1")
        gc.collect()

    # Refusing an async tool on the sync path must not leave a coroutine that was never awaited.
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
    assert pred.metadata.termination_reason == "answered"
    [result] = pred.metadata.history.messages[0]["tool_call_results"]
    if run.mode == "async":
        assert awaited == ["k1"]
        assert (result["result"], result["error"]) == ("value of k1", False)
        assert lm.requests[1].messages[-1] == tool("f1", "value of k1")
    else:
        assert awaited == []
        assert (result["error"], result["error_kind"]) == (True, "tool_error")
        assert result["result"].startswith("fetch failed: ")
        assert lm.requests[1].messages[-1] == tool("f1", "Error: " + result["result"])


# -- rendering of results ---------------------------------------------------------------------------


class Item(pydantic.BaseModel):
    name: str
    qty: int


def test_structured_results_render_as_compact_json_with_spaced_separators(run):
    def item() -> Item:
        """An item."""
        return Item(name="bolt", qty=3)

    def table() -> dict:
        """A table."""
        return {"city": "Zürich", "sizes": [1, 2], "nested": {"ok": True, "none": None}}

    def rows() -> list:
        """Some rows."""
        return [1, {"x": "é"}, "s"]

    def count() -> int:
        """A count."""
        return 42

    def text() -> str:
        """Plain text."""
        return '{"already": "text"}'

    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("item", {}, id="i"),
                    call("table", {}, id="t"),
                    call("rows", {}, id="r"),
                    call("count", {}, id="c"),
                    call("text", {}, id="x"),
                ]
            ),
            reply("done"),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[item, table, rows, count, text])
    with dspy.context(lm=lm):
        pred = run(agent, intent="gather")

    assert lm.requests[1].messages[-5:] == [
        tool("i", '{"name": "bolt", "qty": 3}'),
        tool("t", '{"city": "Zürich", "sizes": [1, 2], "nested": {"ok": true, "none": null}}'),
        tool("r", '[1, {"x": "é"}, "s"]'),
        tool("c", "42"),
        tool("x", '{"already": "text"}'),
    ]
    # The record keeps the values whole; only the prompt shows them as text.
    results = pred.metadata.history.messages[0]["tool_call_results"]
    assert results[1]["result"] == {"city": "Zürich", "sizes": [1, 2], "nested": {"ok": True, "none": None}}
    assert results[2]["result"] == [1, {"x": "é"}, "s"]
    assert results[3]["result"] == 42


class Spot(pydantic.BaseModel):
    shelf: int


def find(where: str, spot: Spot, count: int = 1) -> str:
    """Find a thing."""
    return f"{where} {spot.shelf} {count}"


def test_a_function_tool_is_checked_as_dspy_checks_it_with_each_validator_built_once(run, monkeypatch):
    """Issue 29: ``dspy.Tool`` re-checks each call's arguments, rebuilding a JSON-schema validator (and the
    schema's own check) and a pydantic model per argument every call; ours builds them once."""
    import jsonschema.validators

    built: list[Any] = []
    original = jsonschema.validators.validator_for

    def counted(schema: Any, *args: Any, **kwargs: Any) -> Any:
        built.append(schema)
        return original(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema.validators, "validator_for", counted)
    calls = [call("find", {"where": "hall", "spot": {"shelf": i}, "count": i}, id=f"c{i}") for i in (1, 2, 3)]
    lm = ScriptedLM([reply(calls=[c]) for c in calls] + [reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[find])
    with dspy.context(lm=lm):
        pred = run(agent, intent="find it")

    steps = pred.metadata.history.messages
    assert [s["tool_call_results"][0]["result"] for s in steps[:3]] == ["hall 1 1", "hall 2 2", "hall 3 3"]
    tool = agent.tools["find"]
    mine = [schema for schema in built if any(schema is spec for spec in tool.args.values())]
    assert len(mine) == 3  # one validator per argument for the whole turn (DSPy's own check: 3 per call)
    assert isinstance(tool, dspy.Tool) and tool.args == dspy.Tool(find).args
    # Outside the loop the tool answers as DSPy's does, refusals and their messages included.
    for kwargs in (
        {"where": "x", "spot": {"shelf": "2"}},
        {"where": 3, "spot": {"shelf": 1}},
        {"where": "x", "spot": {"shelf": 1}, "other": 1},
        {"where": "x", "spot": {"shelf": "two"}},
    ):
        outcomes = []
        for each in (tool, dspy.Tool(find)):
            try:
                outcomes.append(each(**kwargs))
            except Exception as error:
                outcomes.append((type(error), str(error)))
        assert outcomes[0] == outcomes[1]

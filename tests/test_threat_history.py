"""Issue 9, holes 4, 6, 7, 8: what a history carries is enough, clean and lossless.

- A ``StepError`` raised before the first step was recorded still carries the call's inputs,
  so ``history=error.history`` resends the very first request.
- Redaction catches the common spellings of secrets.
- Fields named like the history's own keys are refused at construction.
- Dump/load sends byte-identical requests for non-UTF-8 bytes, tuple keys, NaN and infinity,
  and every dump is strict JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

import dspy
import pytest
from helpers import TA, SubmitSig, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

# -- hole 4: resuming after an early failure --------------------------------------------------------


@pytest.mark.parametrize("signature", [TA, SubmitSig], ids=["text-answer", "submit"])
@pytest.mark.parametrize(
    "failures",
    [
        pytest.param([fail.server_error(), fail.server_error()], id="first-and-last-request-fail"),
        pytest.param([reply("", finish_reason="content_filter")], id="first-reply-content-filtered"),
    ],
)
def test_an_early_step_error_carries_the_inputs_and_resumes_with_the_same_request(run, signature, failures):
    agent = dspy_imp.ReActV2(signature)
    failing = ScriptedLM(failures)
    with dspy.context(lm=failing), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="Where is the key?")
    assert caught.value.history.messages == [{"intent": "Where is the key?", "tool_calls": [], "tool_call_results": []}]

    submit = call("submit", {"answer": "On the shelf.", "confidence": 1})
    answer = reply("On the shelf.") if signature is TA else reply(calls=[submit])
    resumed = ScriptedLM([answer])
    with dspy.context(lm=resumed):
        pred = run(agent, history=caught.value.history)
    assert resumed.requests[0].messages == failing.requests[0].messages
    assert pred.metadata.complete


# -- hole 6: redaction -----------------------------------------------------------------------------

SECRET_TEXTS = [
    "client_secret=cs-live-123456 and access_token=at-live-654321",
    '{"password": "hunter2-live"}',
    '{\\"refresh_token\\": \\"rt-live-777777\\"}',
    "Authorization: Basic dXNlcjpwYXNzd29yZA==",
    "authorization: Bearer eyJhbGciOiJIUzI1NiJ9",
    "X-Api-Key: key-live-888888",
    "clientSecret: 'cs-live-999999'",
]
SECRET_KEYS = ["accessToken", "clientSecret", "refreshToken", "secret_key", "aws_secret_access_key", "private_key",
               "client-secret", "X-Api-Key", "Authorization", "password"]  # fmt: skip
LIVE_VALUES = ("live", "dXNlcjpwYXNzd29yZA", "eyJhbGciOiJIUzI1NiJ9")


def test_redaction_catches_snake_camel_kebab_json_and_http_auth_spellings():
    results = [
        {"id": f"c{i}", "name": "fetch", "result": text, "error": False, "returned_at": "2026-01-01T00:00:00.000Z"}
        for i, text in enumerate(SECRET_TEXTS)
    ]
    record = {key: f"{key}-live-value" for key in SECRET_KEYS}
    record.update(max_tokens=5, token_count=3, note="tokens are counted")
    history = dspy.History(
        messages=[
            {
                "intent": " ".join(SECRET_TEXTS),
                "tool_calls": [{"id": f"c{i}", "name": "fetch", "args": {}} for i in range(len(results))],
                "tool_call_results": results,
                "answer": record,
            }
        ]
    )
    redacted = dspy_imp.redact_history(history)
    text = json.dumps(redacted.messages)
    for live in LIVE_VALUES:
        assert live not in text
    answer = redacted.messages[0]["answer"]
    assert {k: answer[k] for k in SECRET_KEYS} == dict.fromkeys(SECRET_KEYS, "[REDACTED]")
    assert (answer["max_tokens"], answer["token_count"], answer["note"]) == (5, 3, "tokens are counted")
    assert [r["result"] for r in redacted.messages[0]["tool_call_results"]] == [
        "client_secret=[REDACTED] and access_token=[REDACTED]",
        '{"password": "[REDACTED]"}',
        '{\\"refresh_token\\": \\"[REDACTED]\\"}',
        "Authorization: [REDACTED]",
        "authorization: [REDACTED]",
        "X-Api-Key: [REDACTED]",
        "clientSecret: '[REDACTED]'",
    ]
    assert history.messages[0]["answer"]["accessToken"] == "accessToken-live-value"  # the original is untouched


@pytest.mark.parametrize("text", SECRET_TEXTS)
def test_termination_error_is_redacted_in_every_spelling(run, text):
    def done() -> str:
        """Finish."""
        return "done"

    agent = dspy_imp.ReActV2(TA, finish="tools", tools=[done], finish_on={"done": lambda *_: None})
    lm = ScriptedLM([fail.invalid_request(f"rejected: {text}"), fail.invalid_request(f"rejected: {text}")])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")
    errors = json.dumps(pred.metadata.termination_error)
    assert "[REDACTED]" in errors
    for live in LIVE_VALUES:
        assert live not in errors


# -- hole 7: reserved field names --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tool_calls", "tool_call_results", "next_thought"])
@pytest.mark.parametrize("side", ["input", "output"])
def test_fields_named_like_the_history_keys_are_refused_at_construction(name, side):
    signature = f"{name} -> answer" if side == "input" else f"question -> {name}"
    with pytest.raises(dspy_imp.ConfigurationError, match=f"{side} field `{name}` is reserved"):
        dspy_imp.ReActV2(signature)


# -- hole 8: dump/load is byte-identical and strict -------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"\xff\xfe", id="non-utf8-bytes"),
        pytest.param(b"plain", id="utf8-bytes"),
        pytest.param({(1, 2): "pair", 3: "int"}, id="tuple-keys"),
        pytest.param(math.nan, id="nan"),
        pytest.param({"v": math.inf, "w": [-math.inf, 1.5]}, id="inf-in-a-dict"),
        pytest.param((1, "two", None), id="tuple"),
    ],
)
def test_a_reloaded_history_sends_the_same_bytes_and_every_dump_is_strict_json(run, value):
    def fetch() -> Any:
        """Fetch."""
        return value

    agent = dspy_imp.ReActV2(TA, tools=[fetch])
    lm = ScriptedLM([reply(calls=[call("fetch", {}, id="f1")]), reply("Done.")])
    with dspy.context(lm=lm):
        pred = run(agent, intent="Fetch it.")
    live = lm.requests[1].messages
    assert live[-1]["role"] == "tool"

    text = json.dumps(dspy_imp.dump_history(pred.metadata.history), allow_nan=False)
    reloaded = dspy_imp.load_history(json.loads(text))

    for history in (pred.metadata.history, reloaded):
        again = ScriptedLM([reply("Still done.")])
        with dspy.context(lm=again):
            run(agent, history=history, intent="Again.")
        assert again.requests[0].messages[: len(live)] == live
    assert live[-1] == tool("f1", live[-1]["content"])

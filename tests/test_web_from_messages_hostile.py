"""``dspy_imp.web.from_messages`` on hostile input: a value, or a ``ConfigurationError`` naming the
message and field (``messages[3].content``), never another exception."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import dspy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspy_imp import ConfigurationError
from dspy_imp.web import from_messages


class QA(dspy.Signature):
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
CALL = st.builds(lambda i, n, a: SimpleNamespace(id=i, function=SimpleNamespace(name=n, arguments=a)), JSON, JSON, JSON)
META = JSON | st.fixed_dictionaries(
    {"dspy_imp": JSON | st.fixed_dictionaries({}, optional={"entry": JSON, "inputs": JSON, "alone": JSON})}
)
MESSAGE = st.builds(
    SimpleNamespace,
    role=st.sampled_from(["user", "assistant", "tool", "reasoning", "system"]) | JSON,
    content=JSON,
    metadata=META,
    tool_calls=JSON | st.lists(CALL, max_size=2),
    tool_call_id=JSON,
    error=JSON,
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(MESSAGE | JSON, max_size=5) | JSON)
def test_hostile_messages_give_a_value_or_a_configuration_error(messages: Any) -> None:
    try:
        entries, inputs = from_messages(messages, QA)
    except ConfigurationError as error:
        assert "messages" in str(error)
    else:
        assert isinstance(entries, list) and isinstance(inputs, dict)


def test_the_error_names_the_message_and_its_field():
    bad = [SimpleNamespace(role="user", content=7, metadata=None)]
    with pytest.raises(ConfigurationError, match=r"`messages\[0\]\.content`"):
        from_messages(bad, QA)

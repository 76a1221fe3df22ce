"""Traces in the OpenTelemetry GenAI conventions: one line turns them on (``docs/observability.md``).

``instrument()`` makes every ``dspy_imp`` turn emit, through your ``TracerProvider``, an
``invoke_agent {agent}`` span with a ``chat {model}`` span per request and an ``execute_tool {tool}``
span per call inside it (a sub-agent's turn inside its tool's span), and the GenAI client metrics
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` through your
``MeterProvider``. No other instrumentation is needed, and MLflow or OpenInference may run beside
it: each writes its own spans, and the request appears once in each.

Example:
    ```python
    from opentelemetry.sdk.trace import TracerProvider
    import dspy_imp.tracing

    provider = TracerProvider()  # with your exporter (OTLP to a collector, ...)
    dspy_imp.tracing.instrument(tracer_provider=provider)
    with dspy_imp.tracing.conversation("ticket-4711"):
        agent(question="...")
    ```
"""

from __future__ import annotations

import contextlib
from typing import Any

from dspy_imp._watch import genai


def instrument(tracer_provider: Any = None, meter_provider: Any = None, *, capture_content: bool = False) -> None:
    """Emit GenAI spans and metrics for every turn of every ``dspy_imp`` program from now on.

    Args:
        tracer_provider: The OpenTelemetry ``TracerProvider`` the spans go to; ``None``: the global one
            (``opentelemetry.trace.set_tracer_provider``).
        meter_provider: The ``MeterProvider`` the metrics go to; ``None``: the global one.
        capture_content: Also record what was sent and received (``gen_ai.input.messages``,
            ``gen_ai.output.messages``, tool arguments and results), redacted by dspy_imp's redaction,
            media never included. Off by default, as the conventions require.

    Calling it again replaces the earlier settings; ``uninstrument()`` turns the spans off.

    Raises:
        ConfigurationError: A provider that is not one, or a ``capture_content`` that is not a bool.
        ImportError: OpenTelemetry is not installed (the ``tracing`` extra: ``pip install -e ".[tracing]"`` in a clone).
    """
    genai.instrument(tracer_provider, meter_provider, capture_content)


def uninstrument() -> None:
    """Stop emitting GenAI spans and metrics."""
    genai.uninstrument()


def conversation(conversation_id: str) -> contextlib.AbstractContextManager[None]:
    """Label the turns run inside the block with ``gen_ai.conversation.id`` (their agent and chat spans).

    Args:
        conversation_id: Your id of the conversation (a chat thread, a ticket): a non-empty string.

    Raises:
        ConfigurationError: An id that is not a non-empty string (raised here, before any turn).

    Example:
        ```python
        with dspy_imp.tracing.conversation("ticket-4711"):
            agent(question="Where is my order?")
        ```
    """
    return genai.conversation(conversation_id)


__all__ = ["conversation", "instrument", "uninstrument"]

"""What tracers see of a turn: tool events for every call, span attributes, usage.

Tracers hook DSPy in two ways. Callback tracers (MLflow's ``mlflow.dspy.autolog()``, DSPy's
own status messages, any ``dspy.utils.callback.BaseCallback``) see ``on_module_*``,
``on_lm_*``, ``on_adapter_*`` and ``on_tool_*`` events; OpenInference's ``DSPyInstrumentor``
wraps ``Module.__call__``, ``Predict.forward``, ``LM.__call__``, ``Adapter.__call__`` and
``Tool.__call__``/``Tool.acall`` by name. This module makes a turn tell its story to both:

- **Every tool call has a tool event.** A call that runs calls its ``dspy.Tool`` (the driver
  does that). A call decided without running a tool (refused by the policy, unknown, malformed,
  rejected arguments, ``submit``) is *reported*: a stand-in ``dspy.Tool`` with the call's name
  is called with the call's arguments, through ``Tool.__call__``/``Tool.acall``, and returns
  what ``submit`` accepted or raises ``ToolCallRejected`` whose message is the observation the
  model reads. So every callback and every instrumentor sees the same events as for a tool
  that ran. A call of a last request that was not run raises ``ToolCallRejected`` of kind
  ``unexecuted`` saying why; a ``finish_on`` hook that rejected its tool's result is reported
  after the tool's own (OK) event, as ``<name>.finish_on`` raising the observation.
- **Spans say what they are.** The turn's span gets the termination attributes and usage,
  each request's span its kind (``ATTRIBUTES`` lists every key). They are written to the span
  each active tracer has open for the call: MLflow's active span while an ``MlflowCallback``
  is among DSPy's callbacks, and the current OpenTelemetry span when OpenInference opened it.
  Nothing is imported from a tracer: a tracer not imported is a tracer not in use.

DSPy internals touched for tracing, all listed here: ``expose_on_dspy`` (sets an attribute on
the ``dspy`` module, see its docstring), and the step predictor's overrides of the private
``Predict._forward_preprocess``/``_forward_postprocess`` (``_program.predictor``), which write the
request attributes from inside the request's span.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

import dspy

from dspy_imp._prompt.render import render_result
from dspy_imp._records.errors import ToolCallRejected
from dspy_imp._turn.effects import DecidedCall
from dspy_imp._watch import genai

PREFIX = "dspy_imp."


ATTRIBUTES: dict[str, str] = {
    "dspy_imp.termination.reason": "how the turn ended (`metadata.termination_reason`), or `step_error`",
    "dspy_imp.termination.complete": "false for an `incomplete` or `paused` turn, or a `StepError`",
    "dspy_imp.termination.cause": "why it was interrupted, when it was",
    "dspy_imp.termination.finish_reason": "the provider's finish reason of a text answer",
    "dspy_imp.termination.error": "`termination_error` of an incomplete turn, or the StepError's reason",
    "dspy_imp.termination.finished_by_tool": "the `finish_on` tool that ended the turn",
    "dspy_imp.termination.unexecuted_tool_calls": "calls the last request made that did not run",
    "dspy_imp.termination.pending_calls": "a paused turn's calls waiting for approval or an external result",
    "dspy_imp.termination.guardrail": "a blocked turn's guardrail: its stage, name and reason",
    "dspy_imp.turn.fallbacks": "each time a request went to the next LM of the chain: kind, model, error, next",
    "dspy_imp.turn.failed_requests": "every request of the turn that failed, by role, recovered or not",
    "dspy_imp.usage": "`metadata.usage` without its per-call list: requests by kind, token sums, cost, per sub-agent",
    "dspy_imp.request.kind": "step | last_text | forced_submit | required_retry | extraction | summary | json_fallback",
    "dspy_imp.request.context": "what a context policy measured and applied before this request (`metadata.context`)",
    "dspy_imp.request.json_fallback": "true when DSPy's JSON fallback re-sent this request",
    "dspy_imp.request.cache_bust": "why this request does not extend the one before (a `CacheBustReason`)",
    "dspy_imp.reply.answer": "the reply's text as the task output it answers (text-answer requests)",
}


"""Every span attribute dspy_imp sets, and what it means (``docs/observability.md``)."""


MALFORMED_NAME = "<malformed call>"


"""The tool name a call that named no tool is reported under."""


FINISH_ON_SUFFIX = ".finish_on"


"""Appended to a tool's name for the report of its ``finish_on`` hook rejecting its result."""


def reported_call(effect: DecidedCall, renderer: Callable[[Any, Any], str] | None) -> tuple[dspy.Tool, dict[str, Any]]:
    """The stand-in tool and the arguments to call it with, for ``effect``."""
    call, result = effect.call, effect.result
    # an unexecuted call's text says why it was not run: the model read nothing, so no renderer
    observation = result.value if effect.stage == "unexecuted" else (renderer or render_result)(call, result)
    kind = result.error_kind or "error"
    value = result.value

    def reported(**_: Any) -> Any:
        if result.error:
            raise ToolCallRejected(kind, observation)
        return value

    # args={} with a **kwargs function: DSPy validates nothing, so the stand-in sees the call's
    # arguments exactly as the model sent them (a bad argument is the point of the report).
    name = call.name or MALFORMED_NAME
    if effect.stage == "finish_on":  # the tool's own span (OK) is its run; this one is the hook's verdict
        name = f"{name}{FINISH_ON_SUFFIX}"
    tool = dspy.Tool(reported, name=name, desc=effect.description or "", args={})
    if call.name is None:  # what the model wrote, as it wrote it
        args = {"received": call.received}
    else:
        args = dict(effect.args) if isinstance(effect.args, Mapping) else {"arguments": effect.args}
    return tool, {str(k): v for k, v in args.items()}


def report(effect: DecidedCall, renderer: Callable[[Any, Any], str] | None) -> None:
    tool, args = reported_call(effect, renderer)
    with contextlib.suppress(ToolCallRejected):
        tool(**args)


async def areport(effect: DecidedCall, renderer: Callable[[Any, Any], str] | None) -> None:
    tool, args = reported_call(effect, renderer)
    with contextlib.suppress(ToolCallRejected):
        await tool.acall(**args)


def trace_turn(program: Any, metadata: Any, failed: Mapping[str, str]) -> None:
    """Annotate the turn's span (the program's module span) with how the turn ended."""
    attributes = turn_attributes(metadata, failed)
    annotate(program, attributes, _tracer_tokens(metadata.usage))
    end_genai_turn(program, attributes, metadata.usage)


def trace_failure(
    program: Any, description: str, failed: Mapping[str, str], usage: Any, fallbacks: tuple[Any, ...] = ()
) -> None:
    """Annotate the turn's span of a turn that raises ``StepError`` (``description``: its redacted reason)."""
    attributes = failure_attributes(description, failed, usage, fallbacks)
    annotate(program, attributes, _tracer_tokens(usage))
    end_genai_turn(program, attributes, usage)


def trace_stop(program: Any, stop: BaseException) -> None:
    """The turn of ``program`` stopped on ``stop`` (an interrupt, a cancellation): its GenAI span ends as an error."""
    end_genai_turn(program, {}, None, stop)


def end_genai_turn(program: Any, attributes: Mapping[str, Any], usage: Any, stop: BaseException | None = None) -> None:
    """End the GenAI agent span this context has open for ``program``'s turn (``_watch.genai``), if any."""
    spans = genai.open_turn(program)
    if spans is None:
        return
    try:
        spans.end({key: _otel_value(value) for key, value in attributes.items()}, usage, stop)
    finally:
        genai.close_turn(spans)


def _tracer_tokens(usage: Any) -> dict[str, int] | None:
    """The turn's tokens for the tracers' own keys, unless an outer usage tracker counts them.

    With ``dspy.configure(track_usage=True)`` (or ``dspy.track_usage()`` around the call) MLflow
    writes the same totals on the outermost module's span; a trace must not count them twice.
    """
    if usage is None or dspy.settings.usage_tracker is not None or not usage.total_tokens:
        return None
    return {"prompt": usage.input_tokens, "completion": usage.output_tokens, "total": usage.total_tokens}


def usage_attribute(usage: Any) -> dict[str, Any] | None:
    """``metadata.usage`` without its per-call list: requests by kind, token sums, cost, and the
    same for each sub-agent the turn called (``agents``, only when it called one)."""
    if usage is None:
        return None
    agents = getattr(usage, "agents", None) or {}
    values = {
        "requests": dict(usage.requests),
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.cached_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "cost": usage.cost,
        "agents": {name: usage_attribute(used) for name, used in agents.items()} or None,
    }
    return {k: v for k, v in values.items() if v is not None}


def turn_attributes(metadata: Any, failed: Mapping[str, str]) -> dict[str, Any]:
    """The turn span's attributes for a turn that returned ``metadata``."""
    values = {
        "termination.reason": metadata.termination_reason,
        "termination.complete": metadata.complete,
        "termination.cause": metadata.termination_cause,
        "termination.finish_reason": metadata.finish_reason,
        "termination.error": dict(metadata.termination_error) if metadata.termination_error else None,
        "termination.finished_by_tool": metadata.finished_by_tool,
        "termination.unexecuted_tool_calls": [dict(c) for c in metadata.unexecuted_tool_calls] or None,
        "termination.pending_calls": [dict(c) for c in metadata.pending_calls] or None,
        "termination.guardrail": dict(metadata.guardrail) if metadata.guardrail else None,
    }
    return _prefixed({**values, **_common(failed, metadata.usage, metadata.fallbacks)})


def failure_attributes(
    reason: str, failed: Mapping[str, str], usage: Any, fallbacks: tuple[Any, ...] = ()
) -> dict[str, Any]:
    """The turn span's attributes for a turn that raised ``StepError``."""
    values = {"termination.reason": "step_error", "termination.complete": False, "termination.error": reason}
    return _prefixed({**values, **_common(failed, usage, fallbacks)})


def _common(failed: Mapping[str, str], usage: Any, fallbacks: tuple[Any, ...] = ()) -> dict[str, Any]:
    hops = [dict(hop) for hop in fallbacks] or None
    return {"turn.failed_requests": dict(failed) or None, "turn.fallbacks": hops, "usage": usage_attribute(usage)}


def _prefixed(values: Mapping[str, Any]) -> dict[str, Any]:
    return {PREFIX + key: value for key, value in values.items() if value is not None}


def request_attributes(
    kind: str, context: Mapping[str, Any] | None = None, cache_bust: str | None = None
) -> dict[str, Any]:
    """A request span's attributes: its kind, what a context policy did before it, and why it does
    not extend the request before (``dspy_imp.request.cache_bust``, a ``CacheBustReason``)."""
    attributes: dict[str, Any] = {PREFIX + "request.kind": kind}
    if context is not None:
        attributes[PREFIX + "request.context"] = dict(context)
    if cache_bust is not None:
        attributes[PREFIX + "request.cache_bust"] = cache_bust
    return attributes


def reply_attributes(guidance: Any, reply: Any, json_fallback: bool) -> dict[str, Any]:
    """What the request span learns from the reply: the answer, labelled as the task output.

    A text-answer request's text is the answer when nothing else claims the turn: a step that
    made no call, or the last-text request.
    """
    attributes: dict[str, Any] = {}
    if json_fallback:
        attributes[PREFIX + "request.json_fallback"] = True
    if reply is None or not reply.said_something or not guidance.text_answer:
        return attributes
    if guidance.kind == "last_text" or not reply.calls:
        attributes[PREFIX + "reply.answer"] = {guidance.task.output_names[0]: reply.text}
    return attributes


def annotate(instance: Any, attributes: Mapping[str, Any], tokens: Mapping[str, int] | None = None) -> None:
    """Set ``attributes`` on the span each active tracer has open for ``instance``'s call.

    ``tokens`` (``prompt``, ``completion``, ``total``) are also written in each tracer's own keys.
    Tracing never fails a turn: a tracer that refuses an attribute is left as it is.
    """
    if not attributes:
        return
    for write in (_mlflow_span, _openinference_span):
        with contextlib.suppress(Exception):
            write(instance, attributes, tokens or {})


def _mlflow_span(instance: Any, attributes: Mapping[str, Any], tokens: Mapping[str, int]) -> None:
    mlflow, callback = sys.modules.get("mlflow"), sys.modules.get("mlflow.dspy.callback")
    if mlflow is None or callback is None:
        return
    callbacks = [*dspy.settings.get("callbacks", []), *getattr(instance, "callbacks", [])]
    if not any(isinstance(c, callback.MlflowCallback) for c in callbacks):
        return
    span = mlflow.get_current_active_span()
    if span is None or not span.name.startswith(type(instance).__name__):
        return
    span.set_attributes(dict(attributes))
    if tokens:
        span.set_attribute(
            "mlflow.chat.tokenUsage",
            {"input_tokens": tokens["prompt"], "output_tokens": tokens["completion"], "total_tokens": tokens["total"]},
        )


def _openinference_span(instance: Any, attributes: Mapping[str, Any], tokens: Mapping[str, int]) -> None:
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return
    span = trace.get_current_span()
    own = getattr(span, "attributes", None) or {}
    if not span.is_recording() or "openinference.span.kind" not in own:
        return
    if not str(getattr(span, "name", "")).startswith(type(instance).__name__):
        return
    span.set_attributes({key: _otel_value(value) for key, value in attributes.items()})
    span.set_attributes({f"llm.token_count.{key}": value for key, value in tokens.items()})


def _otel_value(value: Any) -> Any:
    """OpenTelemetry takes only scalars and lists of scalars: anything else as JSON."""
    if isinstance(value, str | bool | int | float):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def expose_on_dspy(cls: type) -> type:
    """Make ``dspy.<cls.__name__>`` resolve to ``cls`` (a ``dspy.Predict`` subclass of ours).

    OpenInference's ``DSPyInstrumentor.instrument()`` wraps the ``forward`` of every direct
    ``dspy.Predict`` subclass *by name, as an attribute of the* ``dspy`` *module*. A subclass
    defined elsewhere and imported before ``instrument()`` makes it raise
    ``PathResolutionError`` half way, leaving every program (ours and plain DSPy ones) with LM
    spans only. Exposing the class under its own name lets the instrumentor wrap it like any
    other: one span per request whichever is imported first. The name is set only if ``dspy``
    has nothing under it.
    """
    if not hasattr(dspy, cls.__name__):
        setattr(dspy, cls.__name__, cls)
    return cls

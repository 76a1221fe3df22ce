"""One turn's spans and metrics in the OpenTelemetry GenAI conventions, fed by what the driver performs.

The span tree of a turn (``docs/observability.md``)::

    invoke_agent {agent}              the turn: its ending, usage and cost (``dspy_imp.*``)
      chat {model}                    each model request (a step, the last-text request, the extraction, ...)
        execute_tool {hosted tool}    each call the provider ran inside the reply (``dspy_imp.hosted``)
      execute_tool {tool}             each call: run, refused, rejected, unexecuted
      execute_tool {sub-agent}        a sub-agent's call (``agent.as_tool()``) ...
        invoke_agent {sub-agent}      ... with the sub-agent's turn inside it

Every name and attribute key comes from ``opentelemetry-semantic-conventions`` (never retyped);
what the conventions have no key for is under ``dspy_imp.`` (``GENAI_ATTRIBUTES``).

Emitted once per performed effect. The agent span is made when the turn's first effect is
performed, not before: a durable turn recovered by DBOS, whose recorded steps are replayed without
being performed, emits spans only for what it performs again. A sub-agent's tool span is made when
the sub-agent's turn makes its own, for the same reason.

A request's span is the current span while it runs (and a tool's while it runs), so spans of other
instrumentations opened inside (an LM span of OpenInference's, an HTTP client's) nest under it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import dspy
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode

from dspy_imp._records.outcomes import Failed, Reply
from dspy_imp._turn.effects import DecidedCall, Extraction, ModelRequest, RunAgent, RunTool
from dspy_imp._watch import genai_content as content
from dspy_imp._watch import genai_facts as facts
from dspy_imp._watch.events import hosted_calls

INVOKE_AGENT = facts.OPERATION.INVOKE_AGENT.value

_PENDING: ContextVar[_PendingToolSpan | None] = ContextVar("dspy_imp_genai_pending", default=None)


CACHE_BUST = "dspy_imp.cache_bust"
"""The event on a request's span when it does not extend the request before (attribute ``.reason``)."""


class _PendingToolSpan:
    """A sub-agent's ``execute_tool`` span, made only when its turn makes its own agent span."""

    def __init__(self, tracer: Any, parent: Any, name: str, attributes: Mapping[str, Any]):
        self.tracer, self.parent, self.name, self.attributes = tracer, parent, name, dict(attributes)
        self.started = time.time_ns()
        self.span: Any = None
        self.lock = threading.Lock()

    def materialize(self) -> Any:
        with self.lock:
            if self.span is None:
                context = trace.set_span_in_context(self.parent)
                self.span = self.tracer.start_span(
                    f"{facts.OPERATION.EXECUTE_TOOL.value} {self.name}",
                    context,
                    attributes=self.attributes,
                    start_time=self.started,
                )
            return self.span


class TurnSpans:
    """One turn's spans: the agent span (made at the first performed effect), one per effect, its end."""

    def __init__(self, program: Any, settings: Any, conversation: str | None = None, previous: Any = None):
        self.program, self.settings, self.previous = program, settings, previous
        self.tracer = trace.get_tracer(facts.SCOPE, tracer_provider=settings.tracer_provider)
        self.pending = _PENDING.get()  # set: this is a sub-agent's turn, inside its caller's tool call
        self.parent_context = otel_context.get_current()
        self.name = self.pending.name if self.pending is not None else facts.agent_name(program)
        self.conversation = conversation
        self.started = time.time_ns()
        self.span: Any = None
        self.error_type: str | None = None
        self.lock = threading.Lock()

    def agent_span(self) -> Any:
        with self.lock:
            if self.span is None:
                parent = self.pending.materialize() if self.pending is not None else None
                context = trace.set_span_in_context(parent) if parent is not None else self.parent_context
                attributes = {ga.GEN_AI_OPERATION_NAME: INVOKE_AGENT, ga.GEN_AI_AGENT_NAME: self.name}
                provider, model = facts.model_name(self._lm(0))
                attributes |= facts.present({ga.GEN_AI_PROVIDER_NAME: provider, ga.GEN_AI_REQUEST_MODEL: model})
                attributes |= facts.present({ga.GEN_AI_CONVERSATION_ID: self.conversation})
                self.span = self.tracer.start_span(
                    f"{facts.OPERATION.INVOKE_AGENT.value} {self.name}",
                    context,
                    attributes=attributes,
                    start_time=self.started,
                )
            return self.span

    def _lm(self, index: int) -> Any:
        if index:
            return self.program.options.fallback[index - 1]
        return getattr(self.program.react, "lm", None) or dspy.settings.lm  # as the request will use

    # -- each effect ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def spanning(self, effect: Any, job: Any) -> Iterator[Callable[[Any], None]]:
        """Around performing ``effect``: its span, current while it runs; call the yielded function
        with the effect's outcome."""
        agent = self.agent_span()
        if isinstance(effect, RunAgent):
            with self._sub_agent(effect, agent) as end_call:
                yield end_call
            return
        start = self._start(effect, agent)
        if start is None:
            yield _ignore
            return
        span, attributes = start
        token = _PENDING.set(None)
        began, ended = time.perf_counter(), [False]

        def end(outcome: Any) -> None:
            if not ended[0]:
                ended[0] = True
                self._end(span, effect, job, outcome, attributes, time.perf_counter() - began)

        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield end
        except BaseException as stop:  # an interrupt or a cancellation: the effect has no outcome
            if not ended[0]:
                ended[0] = True
                facts.failed(span, stop)
                span.end()
            raise
        finally:
            _PENDING.reset(token)
            if not ended[0]:
                span.end()

    def _start(self, effect: Any, agent: Any) -> tuple[Any, dict[str, Any]] | None:
        context = trace.set_span_in_context(agent)
        if isinstance(effect, ModelRequest | Extraction):
            attributes = self._request_attributes(effect)
            name = f"{facts.OPERATION.CHAT.value} {attributes.get(ga.GEN_AI_REQUEST_MODEL, '')}".rstrip()
            span = self.tracer.start_span(name, context, kind=SpanKind.CLIENT, attributes=attributes)
            bust = getattr(effect, "cache_bust", None)
            if bust is not None:  # the request does not extend the one before (``_turn.busts``)
                span.add_event(CACHE_BUST, {CACHE_BUST + ".reason": bust})
            return span, attributes
        if isinstance(effect, RunTool | DecidedCall):
            attributes = facts.tool_attributes(effect)
            name = f"{facts.OPERATION.EXECUTE_TOOL.value} {attributes[ga.GEN_AI_TOOL_NAME]}"
            if self.settings.capture_content:
                attributes[ga.GEN_AI_TOOL_CALL_ARGUMENTS] = content.as_json(effect.args)
            return self.tracer.start_span(name, context, attributes=attributes), attributes
        return None

    def _request_attributes(self, effect: ModelRequest | Extraction) -> dict[str, Any]:
        provider, model = facts.model_name(self._lm(effect.model))
        kind = "extraction" if isinstance(effect, Extraction) else effect.guidance.kind
        kwargs = getattr(self._lm(effect.model), "kwargs", None) or {}
        return facts.present(
            {
                ga.GEN_AI_OPERATION_NAME: facts.OPERATION.CHAT.value,
                ga.GEN_AI_PROVIDER_NAME: provider,
                ga.GEN_AI_REQUEST_MODEL: model,
                ga.GEN_AI_CONVERSATION_ID: self.conversation,
                ga.GEN_AI_REQUEST_TEMPERATURE: facts.number(kwargs.get("temperature")),
                ga.GEN_AI_REQUEST_MAX_TOKENS: facts.number(
                    kwargs.get("max_tokens", kwargs.get("max_completion_tokens"))
                ),
                "dspy_imp.request.kind": kind,
            }
        )

    def _end(self, span: Any, effect: Any, job: Any, outcome: Any, attributes: Mapping[str, Any], took: float) -> None:
        if isinstance(effect, ModelRequest | Extraction):
            self._end_request(span, job, outcome, attributes, took)
        else:
            facts.end_tool(span, effect, outcome, self.settings.capture_content)
        span.end()

    def _end_request(self, span: Any, job: Any, outcome: Any, attributes: Mapping[str, Any], took: float) -> None:
        entries = list(getattr(job, "lm_calls", tuple)()) if job is not None else []
        first = entries[0] if entries else {}
        response = first.get("response")
        learned = facts.present(
            {
                ga.GEN_AI_RESPONSE_MODEL: first.get("response_model") or getattr(response, "model", None),
                ga.GEN_AI_RESPONSE_ID: getattr(response, "id", None),
            }
        )
        if isinstance(outcome, Reply) and outcome.finish_reason:
            learned[ga.GEN_AI_RESPONSE_FINISH_REASONS] = [outcome.finish_reason]
        used = () if isinstance(outcome, Failed) else getattr(outcome, "usage", ()) or ()  # a failure: none, not 0
        tokens = {
            ga.GEN_AI_USAGE_INPUT_TOKENS: sum(u.input_tokens for u in used),
            ga.GEN_AI_USAGE_OUTPUT_TOKENS: sum(u.output_tokens for u in used),
            ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: sum(u.cached_tokens for u in used),
            ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: sum(u.cache_write_tokens for u in used),
            ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: sum(u.reasoning_tokens for u in used),
        }
        span.set_attributes({**learned, **(tokens if used else {})})
        if self.settings.capture_content:
            span.set_attributes(content.request_content(first.get("messages"), outcome))
        self._hosted_spans(span, outcome)
        metric = {k: v for k, v in {**attributes, **learned}.items() if k in facts.METRIC_KEYS}
        if isinstance(outcome, Failed):
            facts.failed(span, outcome.error)
            metric[error_attributes.ERROR_TYPE] = type(outcome.error).__qualname__
        usage_histogram, duration_histogram = facts.instruments(self.settings.meter_provider)
        duration_histogram.record(took, metric)
        if used:
            for kind, key in (
                (ga.GenAiTokenTypeValues.INPUT, ga.GEN_AI_USAGE_INPUT_TOKENS),
                (ga.GenAiTokenTypeValues.OUTPUT, ga.GEN_AI_USAGE_OUTPUT_TOKENS),
            ):
                usage_histogram.record(tokens[key], {**metric, ga.GEN_AI_TOKEN_TYPE: kind.value})

    def _hosted_spans(self, request: Any, outcome: Any) -> None:
        """An ``execute_tool`` span for each call the provider ran inside the reply, under the request's
        span: it ran within the request (when exactly, the reply does not say), so it spans the request."""
        context = trace.set_span_in_context(request)
        began = getattr(request, "start_time", None)
        for call in hosted_calls(outcome):
            name = f"{facts.OPERATION.EXECUTE_TOOL.value} {call.name}"
            span = self.tracer.start_span(
                name, context, attributes=facts.hosted_tool_attributes(call), start_time=began
            )
            facts.end_hosted_tool(span, call, self.settings.capture_content)
            span.end()

    @contextlib.contextmanager
    def _sub_agent(self, effect: RunAgent, agent: Any) -> Iterator[Callable[[Any], None]]:
        pending = _PendingToolSpan(self.tracer, agent, effect.tool.name, facts.tool_attributes(effect))
        token = _PENDING.set(pending)

        def end_tool(outcome: Any) -> None:
            if pending.span is not None:
                facts.end_tool(pending.span, effect, outcome, self.settings.capture_content)
                pending.span.end()
                pending.span = None

        try:
            yield end_tool
        except BaseException as stop:
            if pending.span is not None:
                facts.failed(pending.span, stop)
            raise
        finally:
            _PENDING.reset(token)
            if pending.span is not None:
                pending.span.end()

    # -- the turn's end ------------------------------------------------------------------------

    def ended(self, outcome: Any) -> None:
        """The machine's conclusion (``Ending`` or ``Failure``), before the turn's attributes."""
        error = getattr(outcome, "error", None)
        if isinstance(error, BaseException):
            self.error_type = type(error).__qualname__

    def end(self, attributes: Mapping[str, Any], usage: Any, stop: BaseException | None = None) -> None:
        """Write the turn's ending (``attributes``: ``_watch.tracing``'s, already OpenTelemetry values)
        and end the agent span; a turn that performed nothing (all replayed) has none."""
        if self.span is None:
            return
        span, self.span = self.span, None
        span.set_attributes(dict(attributes))
        if usage is not None:
            span.set_attributes(
                {
                    ga.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
                    ga.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
                    ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cached_tokens,
                    ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: usage.cache_write_tokens,
                    ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning_tokens,
                    **facts.present({"dspy_imp.usage.cost": usage.cost}),
                }
            )
        if stop is not None:
            facts.failed(span, stop)
        elif self.error_type is not None:
            span.set_status(StatusCode.ERROR, str(attributes.get("dspy_imp.termination.error", ""))[:500])
            span.set_attribute(error_attributes.ERROR_TYPE, self.error_type)
        span.end()


def _ignore(_: Any) -> None:
    return None

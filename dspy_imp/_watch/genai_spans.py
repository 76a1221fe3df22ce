"""One turn's spans and metrics in the OpenTelemetry GenAI conventions, fed by what the driver performs.

The span tree of a turn (``docs/observability.md``)::

    invoke_agent {agent}              the turn: its ending, usage and cost (``dspy_imp.*``)
      chat {model}                    each model request (a step, the last-text request, the extraction, ...)
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

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode

from dspy_imp._records.errors import ToolTimedOut
from dspy_imp._records.outcomes import AgentEnded, Failed, Raised, Reply, Returned
from dspy_imp._turn.effects import DecidedCall, Extraction, ModelRequest, RunAgent, RunTool
from dspy_imp._watch import genai_content as content
from dspy_imp._watch.genai import Instrumentation, conversation_id

SCOPE = "dspy_imp"

GENAI_ATTRIBUTES: dict[str, str] = {
    "dspy_imp.tool.outcome": "returned | error | timed_out | refused | rejected | unexecuted, or a sub-agent's paused | incomplete | blocked",
    "dspy_imp.tool.error_kind": "the error kind of the result the model read (`tool_denied`, `unknown_tool`, ...)",
    "dspy_imp.usage.cost": "the turn's summed cost in USD, where the LM reported one (`invoke_agent` spans)",
}
"""The attributes only these spans carry, beside the ``dspy_imp.*`` of ``_watch.tracing.ATTRIBUTES``."""

REFUSALS = frozenset({"tool_denied", "unknown_tool", "malformed_tool_call", "schema_validation", "missing_required"})

OPERATION = ga.GenAiOperationNameValues

# litellm's provider prefix -> the conventions' provider name (others are passed on as they are)
_PROVIDERS = {
    "openai": ga.GenAiProviderNameValues.OPENAI.value,
    "anthropic": ga.GenAiProviderNameValues.ANTHROPIC.value,
    "gemini": ga.GenAiProviderNameValues.GCP_GEMINI.value,
    "vertex_ai": ga.GenAiProviderNameValues.GCP_VERTEX_AI.value,
    "bedrock": ga.GenAiProviderNameValues.AWS_BEDROCK.value,
    "azure": ga.GenAiProviderNameValues.AZURE_AI_OPENAI.value,
    "azure_ai": ga.GenAiProviderNameValues.AZURE_AI_INFERENCE.value,
    "cohere": ga.GenAiProviderNameValues.COHERE.value,
    "groq": ga.GenAiProviderNameValues.GROQ.value,
    "mistral": ga.GenAiProviderNameValues.MISTRAL_AI.value,
    "deepseek": ga.GenAiProviderNameValues.DEEPSEEK.value,
    "xai": ga.GenAiProviderNameValues.X_AI.value,
    "perplexity": ga.GenAiProviderNameValues.PERPLEXITY.value,
    "watsonx": ga.GenAiProviderNameValues.IBM_WATSONX_AI.value,
}

_PENDING: ContextVar[_PendingToolSpan | None] = ContextVar("dspy_imp_genai_pending", default=None)

_INSTRUMENTS: dict[int, tuple[Any, Any]] = {}


def reset_instruments() -> None:
    """Forget the metric instruments made so far (``instrument()`` may name another meter provider)."""
    _INSTRUMENTS.clear()


def _instruments(meter_provider: Any) -> tuple[Any, Any]:
    key = id(meter_provider)
    if key not in _INSTRUMENTS:
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        tokens = gen_ai_metrics.create_gen_ai_client_token_usage(meter)
        _INSTRUMENTS[key] = (tokens, gen_ai_metrics.create_gen_ai_client_operation_duration(meter))
    return _INSTRUMENTS[key]


def model_name(lm: Any) -> tuple[str | None, str | None]:
    """``(provider, model)`` of an LM: ``"anthropic/claude-x"`` -> ``("anthropic", "claude-x")``."""
    model = getattr(lm, "model", None)
    if not isinstance(model, str):
        return None, type(lm).__name__ if lm is not None else None
    prefix, slash, rest = model.partition("/")
    if not slash:
        return None, model
    return _PROVIDERS.get(prefix, prefix), rest


def agent_name(program: Any) -> str:
    """A turn's agent name: the signature class's name (``ReActV2`` for a string signature)."""
    name = getattr(getattr(program, "signature", None), "__name__", "")
    return name if name and name != "StringSignature" else type(program).__name__


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
                    f"{OPERATION.EXECUTE_TOOL.value} {self.name}", context, attributes=self.attributes, start_time=self.started
                )
            return self.span


class TurnSpans:
    """One turn's spans: the agent span (made at the first performed effect), one per effect, its end."""

    def __init__(self, program: Any, settings: Instrumentation, previous: Any = None):
        self.program, self.settings, self.previous = program, settings, previous
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=settings.tracer_provider)
        self.pending = _PENDING.get()  # set: this is a sub-agent's turn, inside its caller's tool call
        self.parent_context = otel_context.get_current()
        self.name = self.pending.name if self.pending is not None else agent_name(program)
        self.conversation = conversation_id()
        self.started = time.time_ns()
        self.span: Any = None
        self.error_type: str | None = None
        self.lock = threading.Lock()

    def agent_span(self) -> Any:
        with self.lock:
            if self.span is None:
                parent = self.pending.materialize() if self.pending is not None else None
                context = trace.set_span_in_context(parent) if parent is not None else self.parent_context
                attributes = {ga.GEN_AI_OPERATION_NAME: OPERATION.INVOKE_AGENT.value, ga.GEN_AI_AGENT_NAME: self.name}
                provider, model = model_name(self._lm(0))
                attributes |= _present({ga.GEN_AI_PROVIDER_NAME: provider, ga.GEN_AI_REQUEST_MODEL: model})
                attributes |= _present({ga.GEN_AI_CONVERSATION_ID: self.conversation})
                self.span = self.tracer.start_span(
                    f"{OPERATION.INVOKE_AGENT.value} {self.name}", context, attributes=attributes, start_time=self.started
                )
            return self.span

    def _lm(self, index: int) -> Any:
        if index:
            return self.program.options.fallback[index - 1]
        import dspy  # the program's LM, else the configured one (as the request will use)

        return getattr(self.program.react, "lm", None) or dspy.settings.lm

    # -- each effect ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def spanning(self, effect: Any, job: Any) -> Iterator[Callable[[Any], None]]:
        """Around performing ``effect``: its span, current while it runs; call the yielded function
        with the effect's outcome."""
        agent = self.agent_span()
        if isinstance(effect, RunAgent):
            with self._sub_agent(effect, agent) as end:
                yield end
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
                _failed(span, stop)
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
            name = f"{OPERATION.CHAT.value} {attributes.get(ga.GEN_AI_REQUEST_MODEL, '')}".rstrip()
            return self.tracer.start_span(name, context, kind=SpanKind.CLIENT, attributes=attributes), attributes
        if isinstance(effect, RunTool | DecidedCall):
            attributes = _tool_attributes(effect)
            name = f"{OPERATION.EXECUTE_TOOL.value} {attributes[ga.GEN_AI_TOOL_NAME]}"
            if self.settings.capture_content:
                attributes[ga.GEN_AI_TOOL_CALL_ARGUMENTS] = content.as_json(effect.args)
            return self.tracer.start_span(name, context, attributes=attributes), attributes
        return None

    def _request_attributes(self, effect: ModelRequest | Extraction) -> dict[str, Any]:
        provider, model = model_name(self._lm(effect.model))
        kind = "extraction" if isinstance(effect, Extraction) else effect.guidance.kind
        kwargs = getattr(self._lm(effect.model), "kwargs", None) or {}
        return _present(
            {
                ga.GEN_AI_OPERATION_NAME: OPERATION.CHAT.value,
                ga.GEN_AI_PROVIDER_NAME: provider,
                ga.GEN_AI_REQUEST_MODEL: model,
                ga.GEN_AI_CONVERSATION_ID: self.conversation,
                ga.GEN_AI_REQUEST_TEMPERATURE: _number(kwargs.get("temperature")),
                ga.GEN_AI_REQUEST_MAX_TOKENS: _number(kwargs.get("max_tokens") or kwargs.get("max_completion_tokens")),
                "dspy_imp.request.kind": kind,
            }
        )

    def _end(self, span: Any, effect: Any, job: Any, outcome: Any, attributes: Mapping[str, Any], took: float) -> None:
        if isinstance(effect, ModelRequest | Extraction):
            self._end_request(span, job, outcome, attributes, took)
        else:
            _end_tool(span, effect, outcome, self.settings.capture_content)
        span.end()

    def _end_request(self, span: Any, job: Any, outcome: Any, attributes: Mapping[str, Any], took: float) -> None:
        entries = list(getattr(job, "lm_calls", tuple)()) if job is not None else []
        first = entries[0] if entries else {}
        response = first.get("response")
        facts = _present(
            {
                ga.GEN_AI_RESPONSE_MODEL: first.get("response_model") or getattr(response, "model", None),
                ga.GEN_AI_RESPONSE_ID: getattr(response, "id", None),
            }
        )
        if isinstance(outcome, Reply) and outcome.finish_reason:
            facts[ga.GEN_AI_RESPONSE_FINISH_REASONS] = [outcome.finish_reason]
        used = getattr(outcome, "usage", ()) or ()
        tokens = {
            ga.GEN_AI_USAGE_INPUT_TOKENS: sum(u.input_tokens for u in used),
            ga.GEN_AI_USAGE_OUTPUT_TOKENS: sum(u.output_tokens for u in used),
            ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: sum(u.cached_tokens for u in used),
            ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: sum(u.reasoning_tokens for u in used),
        }
        span.set_attributes({**facts, **(tokens if used else {})})
        if self.settings.capture_content:
            span.set_attributes(content.request_content(first.get("messages"), outcome))
        metric = {k: v for k, v in {**attributes, **facts}.items() if k in _METRIC_KEYS}
        if isinstance(outcome, Failed):
            _failed(span, outcome.error)
            metric[error_attributes.ERROR_TYPE] = type(outcome.error).__qualname__
        usage_histogram, duration_histogram = _instruments(self.settings.meter_provider)
        duration_histogram.record(took, metric)
        if used:
            for kind, key in ((ga.GenAiTokenTypeValues.INPUT, ga.GEN_AI_USAGE_INPUT_TOKENS), (ga.GenAiTokenTypeValues.OUTPUT, ga.GEN_AI_USAGE_OUTPUT_TOKENS)):
                usage_histogram.record(tokens[key], {**metric, ga.GEN_AI_TOKEN_TYPE: kind.value})

    @contextlib.contextmanager
    def _sub_agent(self, effect: RunAgent, agent: Any) -> Iterator[Callable[[Any], None]]:
        pending = _PendingToolSpan(self.tracer, agent, effect.tool.name, _tool_attributes(effect))
        token = _PENDING.set(pending)

        def end(outcome: Any) -> None:
            if pending.span is not None:
                _end_tool(pending.span, effect, outcome, self.settings.capture_content)
                pending.span.end()
                pending.span = None

        try:
            yield end
        except BaseException as stop:
            if pending.span is not None:
                _failed(pending.span, stop)
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
                    ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning_tokens,
                    **_present({"dspy_imp.usage.cost": usage.cost}),
                }
            )
        if stop is not None:
            _failed(span, stop)
        elif self.error_type is not None:
            span.set_status(StatusCode.ERROR, str(attributes.get("dspy_imp.termination.error", ""))[:500])
            span.set_attribute(error_attributes.ERROR_TYPE, self.error_type)
        span.end()


_METRIC_KEYS = frozenset({ga.GEN_AI_OPERATION_NAME, ga.GEN_AI_PROVIDER_NAME, ga.GEN_AI_REQUEST_MODEL, ga.GEN_AI_RESPONSE_MODEL})


def _tool_attributes(effect: RunTool | DecidedCall) -> dict[str, Any]:
    call = effect.call
    name = (call.name if call is not None else None) or getattr(getattr(effect, "tool", None), "name", None)
    description = effect.tool.desc if isinstance(effect, RunTool) else effect.description
    return _present(
        {
            ga.GEN_AI_OPERATION_NAME: OPERATION.EXECUTE_TOOL.value,
            ga.GEN_AI_TOOL_NAME: name or "<malformed call>",
            ga.GEN_AI_TOOL_CALL_ID: call.id if call is not None else None,
            ga.GEN_AI_TOOL_TYPE: "function",
            ga.GEN_AI_TOOL_DESCRIPTION: description or None,
        }
    )


def _end_tool(span: Any, effect: Any, outcome: Any, capture: bool) -> None:
    outcome_name, error_kind, value, error = _tool_outcome(effect, outcome)
    span.set_attributes(_present({"dspy_imp.tool.outcome": outcome_name, "dspy_imp.tool.error_kind": error_kind}))
    if capture and value is not None:
        span.set_attribute(ga.GEN_AI_TOOL_CALL_RESULT, content.as_json(value))
    if error is not None:
        _failed(span, error)
    elif outcome_name not in ("returned",):
        span.set_status(StatusCode.ERROR, str(value)[:500])
        span.set_attribute(error_attributes.ERROR_TYPE, error_kind or outcome_name)


def _tool_outcome(effect: Any, outcome: Any) -> tuple[str, str | None, Any, BaseException | None]:
    """``(outcome, error kind, value the model reads, exception)`` of a tool span."""
    if isinstance(effect, DecidedCall):
        result = effect.result
        if effect.stage == "unexecuted":
            return "unexecuted", result.error_kind, result.value, None
        if not result.error:
            return "returned", None, result.value, None
        return ("refused" if result.error_kind in REFUSALS else "rejected"), result.error_kind, result.value, None
    if isinstance(outcome, AgentEnded):
        if outcome.error is not None:
            return "error", None, None, outcome.error
        return ("returned" if outcome.outputs is not None else outcome.reason), None, outcome.outputs, None
    if isinstance(outcome, Returned):
        return "returned", None, outcome.value, None
    if isinstance(outcome, Raised):
        timed_out = isinstance(outcome.error, ToolTimedOut)
        return ("timed_out" if timed_out else "error"), None, None, outcome.error
    return "returned", None, None, None


def _failed(span: Any, error: BaseException) -> None:
    span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {content.redacted(str(error))}"[:500])
    span.set_attribute(error_attributes.ERROR_TYPE, type(error).__qualname__)


def _present(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _ignore(_: Any) -> None:
    return None


__all__ = ["GENAI_ATTRIBUTES", "TurnSpans", "reset_instruments"]


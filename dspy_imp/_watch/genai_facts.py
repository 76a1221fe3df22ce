"""What GenAI spans say, by the conventions' names: providers, tool outcomes, the metric instruments.

The helpers of ``genai_spans``: every key comes from ``opentelemetry-semantic-conventions``; what the
conventions have no key for is under ``dspy_imp.`` (``GENAI_ATTRIBUTES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import StatusCode

from dspy_imp._records.errors import ToolTimedOut
from dspy_imp._records.outcomes import AgentEnded, Raised, Returned
from dspy_imp._turn.effects import DecidedCall, RunTool
from dspy_imp._watch import genai_content as content

SCOPE = "dspy_imp"

GENAI_ATTRIBUTES: dict[str, str] = {
    "dspy_imp.tool.outcome": (
        "returned | error | timed_out | refused | rejected | unexecuted; a sub-agent's call may also be "
        "paused | incomplete | blocked (its turn's ending)"
    ),
    "dspy_imp.tool.error_kind": "the error kind of the result the model read (`tool_denied`, `unknown_tool`, ...)",
    "dspy_imp.usage.cost": "the turn's summed cost in USD, where the LM reported one (`invoke_agent` spans)",
    "dspy_imp.cache_bust": "an event on a `chat` span whose request does not extend the one before",
    "dspy_imp.cache_bust.reason": "that event's `CacheBustReason` (`metadata.cache_busts`)",
    "dspy_imp.tool.provider_executed": "true on the `execute_tool` span of a call the provider ran inside a reply",
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

_INSTRUMENTS: dict[int, tuple[Any, Any]] = {}
# The bucket boundaries the OpenTelemetry GenAI semantic conventions give each histogram.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = tuple(float(4**n) for n in range(14))  # 1, 4, 16, ... 67108864


def reset_instruments() -> None:
    """Forget the metric instruments made so far (``instrument()`` may name another meter provider)."""
    _INSTRUMENTS.clear()
    _WAITS.clear()


def instruments(meter_provider: Any) -> tuple[Any, Any]:
    key = id(meter_provider)
    if key not in _INSTRUMENTS:
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        tokens = meter.create_histogram(
            name=gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
            description="Number of input and output tokens used.",
            unit="{token}",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        duration = meter.create_histogram(
            name=gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
            description="GenAI operation duration.",
            unit="s",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        _INSTRUMENTS[key] = (tokens, duration)
    return _INSTRUMENTS[key]


WAIT_DURATION = "dspy_imp.model_request.wait_duration"
"""The histogram of how long each model request waited for a slot of the web app's ``model_requests``."""
_WAITS: dict[int, Any] = {}


def wait_histogram(meter_provider: Any) -> Any:
    """The wait histogram of ``meter_provider`` (the global one for ``None``), made once."""
    key = id(meter_provider)
    if key not in _WAITS:
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        _WAITS[key] = meter.create_histogram(
            name=WAIT_DURATION,
            description="Time a model request waited for a slot of the app's model_requests before it was sent.",
            unit="s",
            explicit_bucket_boundaries_advisory=(0.0, *DURATION_BUCKETS),
        )
    return _WAITS[key]


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


METRIC_KEYS = frozenset(
    {ga.GEN_AI_OPERATION_NAME, ga.GEN_AI_PROVIDER_NAME, ga.GEN_AI_REQUEST_MODEL, ga.GEN_AI_RESPONSE_MODEL}
)


def tool_attributes(effect: RunTool | DecidedCall) -> dict[str, Any]:
    call = effect.call
    name = (call.name if call is not None else None) or getattr(getattr(effect, "tool", None), "name", None)
    description = effect.tool.desc if isinstance(effect, RunTool) else effect.description
    attributes = {
        ga.GEN_AI_OPERATION_NAME: OPERATION.EXECUTE_TOOL.value,
        ga.GEN_AI_TOOL_NAME: name or "<malformed call>",
        ga.GEN_AI_TOOL_CALL_ID: call.id if call is not None else None,
        ga.GEN_AI_TOOL_TYPE: "function",
        ga.GEN_AI_TOOL_DESCRIPTION: description or None,
    }
    own = getattr(getattr(effect, "tool", None), "trace_attributes", None)
    if callable(own):  # a tool that says more of itself: an MCP server's (``mcp.method.name``, ...)
        attributes.update(own())
    return present(attributes)


PROVIDER_EXECUTED = "dspy_imp.tool.provider_executed"  # listed in GENAI_ATTRIBUTES
"""True on the ``execute_tool`` span of a call the provider ran inside a reply (``dspy_imp.hosted``)."""


def hosted_tool_attributes(call: Any) -> dict[str, Any]:
    """An ``execute_tool`` span's attributes for a call the provider ran (a ``HostedCall``): its type is
    the conventions' ``extension`` (run agent-side, calling out: a search, a fetch, code, an MCP
    server), a file search's ``datastore`` (retrieval over stored data)."""
    return present(
        {
            ga.GEN_AI_OPERATION_NAME: OPERATION.EXECUTE_TOOL.value,
            ga.GEN_AI_TOOL_NAME: call.name,
            ga.GEN_AI_TOOL_CALL_ID: call.id or None,
            ga.GEN_AI_TOOL_TYPE: "datastore" if call.name == "file_search" else "extension",
            ga.GEN_AI_PROVIDER_NAME: call.provider or None,
            PROVIDER_EXECUTED: True,
            "dspy_imp.tool.outcome": "failed" if call.error else "returned",
        }
    )


def end_hosted_tool(span: Any, call: Any, capture: bool) -> None:
    """The call's input and result (with ``capture``), its error as the span's."""
    if capture:
        span.set_attribute(ga.GEN_AI_TOOL_CALL_ARGUMENTS, content.as_json(dict(call.input)))
        span.set_attribute(ga.GEN_AI_TOOL_CALL_RESULT, content.as_json(dict(call.result)))
    if call.error:
        span.set_status(StatusCode.ERROR, str(call.error)[:500])
        span.set_attribute(error_attributes.ERROR_TYPE, str(call.error))


def end_tool(span: Any, effect: Any, outcome: Any, capture: bool) -> None:
    outcome_name, error_kind, value, error = tool_outcome(effect, outcome)
    span.set_attributes(present({"dspy_imp.tool.outcome": outcome_name, "dspy_imp.tool.error_kind": error_kind}))
    if capture and value is not None:
        span.set_attribute(ga.GEN_AI_TOOL_CALL_RESULT, content.as_json(value))
    if error is not None:
        failed(span, error)
    elif outcome_name not in ("returned",):
        span.set_status(StatusCode.ERROR, str(value)[:500])
        span.set_attribute(error_attributes.ERROR_TYPE, error_kind or outcome_name)


def tool_outcome(effect: Any, outcome: Any) -> tuple[str, str | None, Any, BaseException | None]:
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


def failed(span: Any, error: BaseException) -> None:
    span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {content.redacted(str(error))}"[:500])
    span.set_attribute(error_attributes.ERROR_TYPE, type(error).__qualname__)


def present(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def number(value: Any) -> int | float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None

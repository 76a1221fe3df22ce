"""The four loops under comparison, each pointed at the benchmark server the way its users would.

Every loop gets a base URL and an API key and nothing else: ``dspy.LM`` (the default native
engine, and ``engine="litellm"`` for ours), pydantic-ai's ``OpenAIChatModel`` with an
``OpenAIProvider``, and the OpenAI Agents SDK's ``OpenAIChatCompletionsModel`` over an
``AsyncOpenAI`` client (Chat Completions: the API an OpenAI-compatible server speaks; its
tracing is off, since it would upload traces). DSPy's response cache is off (a repeated
turn would otherwise never reach the server). ``dspy.ReActV2`` runs with native function
calling (``ChatAdapter(use_native_function_calling=True)``), as ours always does.

Given a Claude ``model`` (``benchmarks.costs``), every loop speaks Anthropic's Messages API to
the same server instead, each with its own prompt caching on where it has one: ours by default,
``dspy.ReActV2`` with DSPy's ``prompt_cache=dspy.lm15.CacheConfig(prefix="history")``,
pydantic-ai with its ``Caching()`` capability over ``AnthropicModel``; the Agents SDK goes
through its ``LitellmModel`` and has no cache setting.

A loop runs one *kind* of turn: ``"text"`` (``question -> answer``, the answer in plain text
where the loop allows it) or ``"typed"`` (an answer plus a ``confidence``, or an enum answer:
every loop then needs its own way to hand over structured outputs). ``turn`` returns whether
the turn ended with a usable answer; any exception is a turn without one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy
import pydantic

import dspy_imp

from . import ledger

MODEL = "gpt-4o-mini"  # a name DSPy knows to call tools natively; the server answers for it
KEY = "sk-bench"


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


class Typed(pydantic.BaseModel):
    answer: str
    confidence: float


class Enum(pydantic.BaseModel):
    answer: Literal["yes", "no"]
    confidence: float


class TextTask(dspy.Signature):
    """Find the thing."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class TypedTask(dspy.Signature):
    """Find the thing."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


class EnumTask(dspy.Signature):
    """Find the thing."""

    question: str = dspy.InputField()
    answer: Literal["yes", "no"] = dspy.OutputField()
    confidence: float = dspy.OutputField()


SIGNATURES: dict[str, type[dspy.Signature]] = {"text": TextTask, "typed": TypedTask, "enum": EnumTask}
MODELS: dict[str, Any] = {"text": str, "typed": Typed, "enum": Enum}
QUESTION = "Where is the thing?"

Turn = Callable[[], bool]


def _answered(value: Any) -> bool:
    return getattr(value, "answer", None) is not None


def _dspy_turn(module: dspy.Module, lm: dspy.LM, adapter: dspy.Adapter | None) -> Turn:
    """The turn; after each run ``turn.hosted`` holds its hosted calls (``ledger.hosted``; empty: none)."""

    def turn() -> bool:
        turn.hosted = {}  # type: ignore[attr-defined]
        with dspy.context(lm=lm, adapter=adapter):
            try:
                pred = module(question=QUESTION)
            except Exception:
                return False
        metadata = getattr(pred, "metadata", None)
        turn.hosted = ledger.hosted(getattr(metadata, "usage", None), str(lm.model))  # type: ignore[attr-defined]
        return _answered(pred)

    return turn


def _claude(model: str) -> bool:
    return model.startswith("claude")


def _dspy_lm(base_url: str, model: str, engine: str, **options: Any) -> dspy.LM:
    if engine != "auto":
        options["engine"] = engine
    provider = "anthropic" if _claude(model) else "openai"
    return dspy.LM(f"{provider}/{model}", api_base=base_url, api_key=KEY, cache=False, **options)


def ours(base_url: str, kind: str, max_steps: int, engine: str = "auto", model: str = MODEL) -> Turn:
    """Ours as a user runs it: the defaults (``prompt_cache`` on)."""
    agent = dspy_imp.ReActV2(SIGNATURES[kind], tools=[look], max_iters=max_steps)
    return _dspy_turn(agent, _dspy_lm(base_url, model, engine), None)


def ours_thinking_off(base_url: str, kind: str, max_steps: int, model: str = MODEL) -> Turn:
    """Ours with ``thinking="off"``: on Claude no request asks for thinking (the cost part's other row of ours)."""
    agent = dspy_imp.ReActV2(SIGNATURES[kind], tools=[look], max_iters=max_steps, thinking="off")
    return _dspy_turn(agent, _dspy_lm(base_url, model, "auto"), None)


def ours_litellm(base_url: str, kind: str, max_steps: int, model: str = MODEL) -> Turn:
    return ours(base_url, kind, max_steps, engine="litellm", model=model)


def dspy_react(base_url: str, kind: str, max_steps: int, engine: str = "auto", model: str = MODEL) -> Turn:
    """DSPy's own loop; on Claude with DSPy's prompt-cache setting on (a mark at the end of the history)."""
    options: dict[str, Any] = {}
    if _claude(model) and engine == "auto":
        options["prompt_cache"] = dspy.lm15.CacheConfig(prefix="history")
    agent = dspy.ReActV2(SIGNATURES[kind], tools=[look], max_iters=max_steps)
    lm = _dspy_lm(base_url, model, engine, **options)
    return _dspy_turn(agent, lm, dspy.ChatAdapter(use_native_function_calling=True))


def dspy_react_litellm(base_url: str, kind: str, max_steps: int, model: str = MODEL) -> Turn:
    return dspy_react(base_url, kind, max_steps, engine="litellm", model=model)


def pydantic_ai(base_url: str, kind: str, max_steps: int, model: str = MODEL) -> Turn:
    """pydantic-ai; on Claude with its caching capability on (``Caching()``: instructions, tools, messages)."""
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    options: dict[str, Any] = {}
    if _claude(model):
        from pydantic_ai.capabilities import Caching
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        chosen: Any = AnthropicModel(model, provider=AnthropicProvider(base_url=_root(base_url), api_key=KEY))
        options["capabilities"] = [Caching()]
    else:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        chosen = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key=KEY))
    agent = Agent(chosen, output_type=MODELS[kind], tools=[look], instructions=TextTask.__doc__, **options)
    limits = UsageLimits(request_limit=max_steps)

    def turn() -> bool:
        try:
            output = agent.run_sync(QUESTION, usage_limits=limits).output
        except Exception:
            return False
        return bool(output) if kind == "text" else _answered(output)

    return turn


def openai_agents(base_url: str, kind: str, max_steps: int, model: str = MODEL) -> Turn:
    """The Agents SDK; on Claude through its LiteLLM model (it has no prompt-cache setting of its own)."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    if _claude(model):
        from agents.extensions.models.litellm_model import LitellmModel

        chosen: Any = LitellmModel(f"anthropic/{model}", base_url=_root(base_url), api_key=KEY)
    else:
        chosen = OpenAIChatCompletionsModel(model, openai_client=AsyncOpenAI(base_url=base_url, api_key=KEY))
    agent = Agent(
        name="finder",
        instructions=TextTask.__doc__,
        tools=[function_tool(look)],
        model=chosen,
        output_type=MODELS[kind],
    )

    def turn() -> bool:
        try:
            output = Runner.run_sync(agent, QUESTION, max_turns=max_steps).final_output
        except Exception:
            return False
        return bool(output) if kind == "text" else _answered(output)

    return turn


def _root(base_url: str) -> str:
    """The server's root (the Anthropic clients add ``/v1/messages`` themselves)."""
    return base_url.removesuffix("/v1")


LOOPS: dict[str, Callable[..., Turn]] = {
    "dspy_imp": ours,
    "dspy_imp (litellm)": ours_litellm,
    "dspy.ReActV2": dspy_react,
    "pydantic-ai": pydantic_ai,
    "openai-agents": openai_agents,
}
# The cost part also prices ours with thinking off (``benchmarks.costs``).
COST_LOOP_MAKERS: dict[str, Callable[..., Turn]] = {**LOOPS, "dspy_imp (thinking off)": ours_thinking_off}
# End to end, stock on both engines too (``benchmarks.e2e``).
E2E_LOOPS: dict[str, Callable[..., Turn]] = {**LOOPS, "dspy.ReActV2 (litellm)": dspy_react_litellm}

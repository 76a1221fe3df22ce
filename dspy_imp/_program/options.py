"""Option validation: construction, per call, and saved state.

Options are checked once, with errors that name the option and show the value; the loop
trusts them afterwards. ``ProgramOptions`` is what a program holds; ``CallPlan`` is what
one call runs with (program options overridden by per-call options, roster resolved).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dspy

from dspy_imp._program.limits import LIMIT_OPTIONS, call_limits
from dspy_imp._prompt.signature import SUBMIT, is_text_answer
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.kinds import (
    CACHE_TTLS,
    FINISH_MODES,
    HISTORY_REPLAYS,
    THINKING_MODES,
    FinishMode,
    HistoryReplay,
    PromptCache,
    ThinkingMode,
)
from dspy_imp._records.steps import _STEP_KEYS as RECORD_KEYS
from dspy_imp._records.usage import check_usage_limits
from dspy_imp._routes.dspy_private import checked_tool
from dspy_imp._turn.approval import Decisions
from dspy_imp._turn.arguments import argument_validator
from dspy_imp._turn.context import check_context
from dspy_imp._turn.plan import CallPlan, FinishHook, ProgramOptions, ToolPolicy

logger = logging.getLogger("dspy_imp")


CALL_OPTIONS = (
    "max_iters",
    "last_request_note",
    "last_request_tools",
    "config",
    "tools",
    "finish",
    "parallel_tools",
    "usage_limits",
    "approvals",
    "results",
    *LIMIT_OPTIONS,
    "context",
    "prompt_cache",
)


# Options only a program takes: given beside a call's inputs they are refused, never ignored.
PROGRAM_ONLY = frozenset(
    {"needs_approval", "external_tools", "tool_policy", "finish_on", "history_replay", "unsent_note",
     "tool_result_renderer", "input_guardrails", "output_guardrails", "fallback"}
)  # fmt: skip
# Like `finish`, `approvals`, `results`, the limits and `context` are that input when the signature has one so named.
_INPUT_FIRST = ("tools", "finish", "approvals", "results", *LIMIT_OPTIONS, "context")


RESERVED_INPUTS = ("history", "tools", *(o for o in CALL_OPTIONS if o not in _INPUT_FIRST))


LOOP_OWNED_CONFIG = frozenset({"tools", "tool_choice"})


CLIENT_CONFIG = frozenset(
    {
        "api_base",
        "base_url",
        "api_key",
        "model",
        "api_version",
        "organization",
        "project",
        "headers",
        "extra_headers",
        "extra_query",
        "custom_llm_provider",
        "azure_ad_token_provider",
        "model_list",
    }
)


def check_max_iters(value: Any, where: str = "max_iters") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"`{where}` must be a non-negative integer, got {value!r}")
    return value


def check_finish(value: Any) -> FinishMode:
    if value not in FINISH_MODES:
        raise ConfigurationError(f"`finish` must be one of {', '.join(map(repr, FINISH_MODES))}; got {value!r}")
    return value


def check_flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"`{where}` must be True or False, got {value!r}")
    return value


def check_prompt_cache(value: Any) -> PromptCache:
    """``True``, ``False``, or a cache lifetime (``"5m"``, ``"1h"``, ``"24h"``)."""
    if isinstance(value, bool) or (isinstance(value, str) and value in CACHE_TTLS):
        return value  # type: ignore[return-value]
    raise ConfigurationError(
        f"`prompt_cache` must be True, False or one of {', '.join(map(repr, CACHE_TTLS))}; got {value!r}"
    )


def check_thinking(value: Any) -> ThinkingMode:
    """``"every"``, ``"first"``, ``"off"`` or ``"interleaved"``."""
    if isinstance(value, str) and value in THINKING_MODES:
        return value  # type: ignore[return-value]
    raise ConfigurationError(f"`thinking` must be one of {', '.join(map(repr, THINKING_MODES))}; got {value!r}")


def check_note(value: Any, where: str = "last_request_note") -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"`{where}` must be a string or None, got {value!r}")
    return value


def check_unsent_note(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigurationError(f"`unsent_note` must be a non-blank string or None, got {value!r}")
    return value


def check_history_replay(value: Any) -> HistoryReplay:
    if value not in HISTORY_REPLAYS:
        raise ConfigurationError(
            f"`history_replay` must be one of {', '.join(map(repr, HISTORY_REPLAYS))}; got {value!r}"
        )
    return value


def check_config(value: Any, where: str = "config") -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"`{where}` must be a dict of request options, got {value!r}")
    owned = sorted(LOOP_OWNED_CONFIG.intersection(value))
    if owned:
        raise ConfigurationError(
            f"`{where}` may not set {', '.join(owned)}: the loop chooses them on each request; got {value!r}"
        )
    client = sorted(CLIENT_CONFIG.intersection(value))
    if client:
        raise ConfigurationError(
            f"`{where}` may not set {', '.join(client)}: configure the endpoint and credentials on the dspy.LM; "
            f"got keys {client!r}"
        )
    return dict(value)


def check_tool_names(value: Any, held: Mapping[str, dspy.Tool], where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(f"`{where}` must be a list of tool names or tools, got {value!r}")
    names = []
    for item in value:
        name = item.name if isinstance(item, dspy.Tool) else getattr(item, "__name__", item)
        if name == SUBMIT:
            raise ConfigurationError(f"`{where}` may not name `submit`: the loop owns it (use `tool_policy` for it)")
        if not isinstance(name, str) or name not in held:
            raise ConfigurationError(f"`{where}` names a tool the program does not hold: {item!r}")
        names.append(name)
    return tuple(dict.fromkeys(names))


def check_policy(value: Any) -> ToolPolicy:
    if value is None or callable(value):
        return value
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"`tool_policy` must be None, a list of allowed tool names or a callable; got {value!r}"
        )
    names = [v.name if isinstance(v, dspy.Tool) else v for v in value]
    if not all(isinstance(n, str) for n in names):
        raise ConfigurationError(f"`tool_policy` must list tool names, got {value!r}")
    return frozenset(names)


def check_finish_on(value: Any, held: Mapping[str, dspy.Tool]) -> dict[str, FinishHook]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"`finish_on` must be a dict of tool name -> hook, got {value!r}")
    hooks: dict[str, FinishHook] = {}
    for key, hook in value.items():
        name = key.name if isinstance(key, dspy.Tool) else key
        if name == SUBMIT:
            raise ConfigurationError("`finish_on` may not name `submit`: submit already ends the turn")
        if not isinstance(name, str) or name not in held:
            raise ConfigurationError(f"`finish_on` names no tool: {key!r}")
        if not callable(hook) or not _takes_three(hook):
            raise ConfigurationError(
                f"`finish_on[{name!r}]` must be a callable hook(args, result, inputs), got {hook!r}"
            )
        hooks[name] = hook
    return hooks


def _takes_three(hook: Callable[..., Any]) -> bool:
    try:
        inspect.signature(hook).bind(None, None, None)
    except TypeError:
        return False
    except ValueError:  # builtins without a signature
        return True
    return True


def check_rules(options: ProgramOptions, where: str = "") -> None:
    """Combination rules shared by construction, per-call plans and loading."""
    prefix = f"{where}: " if where else ""
    for key in ("needs_approval", "external_tools"):
        clash = sorted(set(getattr(options, key)) & set(options.last_request_tools))
        if clash:
            raise ConfigurationError(
                f"{prefix}`last_request_tools` names {clash!r}, which are in `{key}`: "
                "a last request cannot wait for a person or an external runner"
            )
    both = sorted(set(options.needs_approval) & set(options.external_tools))
    if both:
        raise ConfigurationError(
            f"{prefix}{both!r} are in both `needs_approval` and `external_tools`; the host that runs an "
            "external tool decides whether to run it"
        )
    if options.finish == "tools":
        if not options.finish_on:
            raise ConfigurationError(f"{prefix}finish='tools' needs at least one `finish_on` tool to end a turn")
        if options.last_request_note is not None:
            raise ConfigurationError(
                f"{prefix}finish='tools' makes no last request, so `last_request_note` would never be used; "
                f"got {options.last_request_note!r}"
            )
        if options.last_request_tools:
            raise ConfigurationError(
                f"{prefix}finish='tools' makes no last request, so `last_request_tools` would never be used; "
                f"got {list(options.last_request_tools)!r}"
            )


def check_signature(signature: type[dspy.Signature]) -> None:
    for name in signature.input_fields:
        if name in RESERVED_INPUTS:
            reason = {
                "history": "`history` is the call's conversation history",
                "tools": "`tools` is reserved for the step's tool list",
            }.get(name, f"`{name}` is a per-call option")
            raise ConfigurationError(f"input field `{name}` is reserved: {reason}; rename that field")
    if "tools" in signature.output_fields:
        raise ConfigurationError("output field `tools` is reserved for the step's tool list; rename that field")
    for kind, fields in (("input", signature.input_fields), ("output", signature.output_fields)):
        for name in sorted(RECORD_KEYS.intersection(fields)):
            raise ConfigurationError(
                f"{kind} field `{name}` is reserved: the history records each step under `{name}`; rename that field"
            )


def wrap_tools(tools: Any) -> dict[str, dspy.Tool]:
    if tools is None:
        return {}
    if isinstance(tools, Mapping) or not isinstance(tools, Iterable):
        raise ConfigurationError(f"`tools` must be a list of callables or dspy.Tool, got {tools!r}")
    held: dict[str, dspy.Tool] = {}
    for item in tools:
        if not isinstance(item, dspy.Tool) and not callable(item):
            raise ConfigurationError(f"`tools` must hold callables or dspy.Tool, got {item!r}")
        tool = _held(item)
        if tool.name == SUBMIT:
            raise ConfigurationError("a tool named `submit`: submit is reserved for the final outputs")
        if tool.name in held:
            raise ConfigurationError(f"two tools are named {tool.name!r}; tool names must be unique")
        held[tool.name] = tool
    return held


def _held(item: Any) -> dspy.Tool:
    """A ``dspy.Tool`` as given, or a function as one whose argument check is built once (``checked_tool``)."""
    return item if isinstance(item, dspy.Tool) else checked_tool(item, argument_validator)


def has_submit(signature: type[dspy.Signature], finish: FinishMode) -> bool:
    if finish == "auto":
        return not is_text_answer(signature)
    return finish == "submit"


def plan_call(
    options: ProgramOptions,
    signature: type[dspy.Signature],
    held: Mapping[str, dspy.Tool],
    kwargs: dict[str, Any],
) -> CallPlan:
    """Split a call's keyword arguments into inputs and per-call options, and check them."""
    kwargs = dict(kwargs)
    history = kwargs.pop("history", None)
    given = {k: kwargs.pop(k) for k in CALL_OPTIONS if k in kwargs and k not in signature.input_fields}
    changes: dict[str, Any] = {}
    if "max_iters" in given:
        changes["max_iters"] = check_max_iters(given["max_iters"])
    if "finish" in given:
        changes["finish"] = check_finish(given["finish"])
    if "last_request_note" in given:
        changes["last_request_note"] = check_note(given["last_request_note"])
    if "last_request_tools" in given:
        changes["last_request_tools"] = check_tool_names(given["last_request_tools"], held, "last_request_tools")
    if "parallel_tools" in given:
        changes["parallel_tools"] = check_flag(given["parallel_tools"], "parallel_tools")
    if "usage_limits" in given:
        changes["usage_limits"] = check_usage_limits(given["usage_limits"])
    changes.update(call_limits(given, held))
    if "context" in given:
        changes["context"] = check_context(given["context"])
    if "prompt_cache" in given:
        changes["prompt_cache"] = check_prompt_cache(given["prompt_cache"])
    decisions = Decisions.of(given.get("approvals"), given.get("results"))
    config = {**options.config, **check_config(given.get("config"))}
    runners = _swap_runners(held, given.get("tools"))
    plan_options = _for_call(options, changes, given)
    check_rules(plan_options, where="this call")
    inputs = {k: v for k, v in kwargs.items() if k in signature.input_fields and v is not None}
    extra = [k for k in kwargs if k not in signature.input_fields]
    program_only = sorted(PROGRAM_ONLY.intersection(extra))
    if program_only:  # a gate given per call would be dropped: the call would run unguarded
        raise ConfigurationError(
            f"{', '.join(f'`{k}`' for k in program_only)} cannot be given per call: set it when you build the "
            "program (ReActV2(..., needs_approval=...)); a call may set only "
            f"{', '.join(f'`{k}`' for k in CALL_OPTIONS)}"
        )
    if extra:
        logger.warning("dspy_imp.ReActV2: inputs not in signature, ignored: %s", ", ".join(map(repr, extra)))
    return CallPlan(plan_options, inputs, history, runners, config, decisions)


def _for_call(options: ProgramOptions, changes: dict[str, Any], given: dict[str, Any]) -> ProgramOptions:
    if changes.get("finish") == "tools" and options.finish != "tools":
        # A program's last-request settings are ignored by a per-call "tools"; the call's own are refused.
        for key in ("last_request_note", "last_request_tools"):
            if key not in given:
                changes[key] = None if key == "last_request_note" else ()
    return _replace(options, changes)


def _replace(options: ProgramOptions, changes: dict[str, Any]) -> ProgramOptions:
    from dataclasses import replace

    return replace(options, **changes) if changes else options


def _swap_runners(held: Mapping[str, dspy.Tool], swap: Any) -> Mapping[str, dspy.Tool]:
    if swap is None:
        return held
    if isinstance(swap, str | bytes | Mapping) or not isinstance(swap, Iterable):
        raise ConfigurationError(f"`tools` (per call) must be a list of tools the program holds, got {swap!r}")
    runners = dict(held)
    for item in swap:
        tool = _held(item) if isinstance(item, dspy.Tool) or callable(item) else None
        mine = held.get(tool.name) if tool is not None else None
        if tool is None or mine is None:
            raise ConfigurationError(f"`tools` (per call): the program holds no tool {item!r}")
        if (tool.desc, tool.args) != (mine.desc, mine.args):
            raise ConfigurationError(
                f"`tools` (per call): {tool.name!r} differs from the program's tool in description or schema; "
                "a call may swap a tool's runner, not what the model is told"
            )
        runners[tool.name] = tool
    return runners

"""The inner step predictor, which also carries the program's options through save/load.

DSPy saves a program as the state of its predictors only, so options kept on the module
would be lost once the program is nested inside another module. They live here instead:
``dump_state`` adds a ``"dspy_imp"`` block holding the options set away from their
defaults (a program using none saves exactly as ``dspy.Predict`` would), and
``load_state`` accepts only the keys DSPy's ``Predict`` and ``dspy_imp`` write. Anything
else (``config`` with an ``api_base``, an unknown option, a ``finish_on`` name the program
has no hook for) raises ``ConfigurationError`` naming the key, and nothing is applied.
The DSPy keys are checked too (``_records.saved_state``): demos, signature and ``lm`` blocks of the
wrong shape are refused, and an ``lm`` block may not choose credentials, headers,
endpoints or another model unless the host passes ``allow_unsafe_lm_state=True``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import dspy

from dspy_imp._drivers.adapter import current_exchange
from dspy_imp._program import options as opts
from dspy_imp._prompt.sentences import SUMMARY_INSTRUCTIONS
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.saved_state import check_predict_state
from dspy_imp._records.usage import UsageLimits, check_usage_limits
from dspy_imp._turn.plan import ProgramOptions
from dspy_imp._watch import tracing

STATE_KEY = "dspy_imp"


_PREDICT_KEYS = frozenset({"traces", "train", "demos", "signature", "lm", "fields"})


_DEFAULTS = ProgramOptions()


_SAVED = (
    "max_iters",
    "finish",
    "history_replay",
    "unsent_note",
    "last_request_note",
    "finish_on",
    "parallel_tools",
    "usage_limits",
    "needs_approval",
    "external_tools",
    "prompt_cache",
    "thinking",
)


_TOOL_LISTS = ("needs_approval", "external_tools")


@tracing.expose_on_dspy
class StepPredictor(dspy.Predict):
    """``dspy.Predict`` over the fixed step signature, holding the program's ``ProgramOptions``.

    Its span in a trace is the request's span: it says the request's kind (and, from the
    reply, the answer). The two hooks below are DSPy's private ``_forward_preprocess`` and
    ``_forward_postprocess``: the only code of a ``Predict`` call that runs inside the span
    every tracer opens for it (MLflow's and OpenInference's) and outside the adapter's, for
    sync, async and streamed calls alike. ``forward`` itself is not overridden: OpenInference
    would then give the predictor no span when ``dspy_imp`` is imported after ``instrument()``.
    """

    def __init__(self, signature: Any, options: ProgramOptions, tool_names: tuple[str, ...] = (), **config: Any):
        super().__init__(signature, **config)
        self.options = options
        self.host_gates = options  # what the host built: a loaded file may tighten these gates, never loosen them
        self.tool_names = tool_names

    def _forward_preprocess(self, **kwargs: Any) -> Any:
        exchange = current_exchange().get()
        if exchange is not None:
            attributes = tracing.request_attributes(exchange.guidance.kind, exchange.context, exchange.cache_bust)
            tracing.annotate(self, attributes)
        return super()._forward_preprocess(**kwargs)

    def _forward_postprocess(self, completions: Any, signature: Any, **kwargs: Any) -> Any:
        exchange = current_exchange().get()
        if exchange is not None:
            attributes = tracing.reply_attributes(exchange.guidance, exchange.reply, exchange.fallbacks > 0)
            tracing.annotate(self, attributes)
        return super()._forward_postprocess(completions, signature, **kwargs)

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        state = super().dump_state(json_mode=json_mode)
        saved = saved_options(self.options)
        if saved:
            state[STATE_KEY] = saved
        return state

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> StepPredictor:
        unknown = sorted(set(state) - _PREDICT_KEYS - {STATE_KEY})
        if unknown:
            raise ConfigurationError(
                f"saved state for the step predictor has key(s) dspy_imp does not write: {unknown!r}; "
                "refusing to load it"
            )
        options = restore_options(self.options, state.get(STATE_KEY, {}), self.tool_names)
        options = within_host_gates(options, getattr(self, "host_gates", self.options), state.get(STATE_KEY, {}))
        check_predict_state(state, self.signature, self.lm, trusted=allow_unsafe_lm_state)
        plain = {k: v for k, v in state.items() if k != STATE_KEY}
        before = dict(self.__dict__)
        try:
            super().load_state(plain, allow_unsafe_lm_state=allow_unsafe_lm_state)
        except (TypeError, KeyError, ValueError, AttributeError, ImportError) as exc:
            self.__dict__.clear()
            self.__dict__.update(before)  # nothing applied
            raise ConfigurationError(f"saved state for the step predictor could not be loaded: {exc!r}") from exc
        self.options = options
        self._check_loaded_demos(before)
        return self

    def _check_loaded_demos(self, before: dict[str, Any]) -> None:
        check = getattr(self, "demo_check", None)
        if check is None:
            return
        try:
            check(self.options, self.demos)
        except ConfigurationError as refused:
            self.__dict__.clear()
            self.__dict__.update(before)  # nothing applied
            raise ConfigurationError(
                f"saved `demos` cannot be shown to the model; refusing to load: {refused}"
            ) from refused


def saved_options(options: ProgramOptions) -> dict[str, Any]:
    """The options set away from their defaults, JSON-safe (``finish_on`` by tool name)."""
    saved: dict[str, Any] = {}
    for name in _SAVED:
        value = getattr(options, name)
        if value == getattr(_DEFAULTS, name):
            continue
        if name == "finish_on":
            value = sorted(value)
        elif name == "usage_limits":
            value = value.to_dict()
        elif name in _TOOL_LISTS:
            value = list(value)
        saved[name] = value
    return saved


def restore_options(current: ProgramOptions, saved: Any, tool_names: tuple[str, ...] = ()) -> ProgramOptions:
    """``current`` with the saved options applied, after the construction checks."""
    if not isinstance(saved, dict):
        raise ConfigurationError(f"saved `{STATE_KEY}` options must be a dict, got {saved!r}")
    unknown = sorted(set(saved) - set(_SAVED))
    if unknown:
        raise ConfigurationError(f"saved `{STATE_KEY}` options have unknown key(s) {unknown!r}; refusing to load")
    changes: dict[str, Any] = {
        "max_iters": opts.check_max_iters(saved.get("max_iters", _DEFAULTS.max_iters)),
        "finish": opts.check_finish(saved.get("finish", _DEFAULTS.finish)),
        "history_replay": opts.check_history_replay(saved.get("history_replay", _DEFAULTS.history_replay)),
        "unsent_note": opts.check_unsent_note(saved.get("unsent_note")),
        "last_request_note": opts.check_note(saved.get("last_request_note")),
        "finish_on": _restore_hooks(current, saved.get("finish_on", [])),
        "parallel_tools": opts.check_flag(saved.get("parallel_tools", False), "parallel_tools"),
        "usage_limits": check_usage_limits(saved.get("usage_limits")),
        "prompt_cache": opts.check_prompt_cache(saved.get("prompt_cache", _DEFAULTS.prompt_cache)),
        "thinking": opts.check_thinking(saved.get("thinking", _DEFAULTS.thinking)),
    }
    for key in _TOOL_LISTS:
        names = saved.get(key, [])
        if not isinstance(names, list):
            raise ConfigurationError(f"saved `{key}` must be a list of tool names, got {names!r}")
        # The program's tools, and the names its constructor took for its toolsets' (``sets.Deferred``).
        held = dict.fromkeys((*tool_names, *getattr(current, key)))
        changes[key] = opts.check_tool_names(names, held, key)
    options = replace(current, **changes)
    opts.check_rules(options, where="loading saved state")
    return options


def within_host_gates(loaded: ProgramOptions, host: ProgramOptions, saved: dict[str, Any]) -> ProgramOptions:
    """``loaded`` with the host's gates kept: a saved file may tighten them, never loosen them.

    A file (even an untampered one saved by an older version of the program) is not the host's
    word on what may run unasked or what may be spent: ``needs_approval`` and ``external_tools``
    are the union of the host's and the file's, each ``usage_limits`` field the lower of the two
    (``None`` is no limit), and ``parallel_tools`` is on only when the host turned it on and the
    file, when it says, agrees. ``tool_policy`` and the tools are the host's code, never saved.
    """
    gated = replace(
        loaded,
        needs_approval=tuple(dict.fromkeys((*host.needs_approval, *loaded.needs_approval))),
        external_tools=tuple(dict.fromkeys((*host.external_tools, *loaded.external_tools))),
        usage_limits=_tighter(host.usage_limits, loaded.usage_limits),
        parallel_tools=host.parallel_tools and (loaded.parallel_tools if "parallel_tools" in saved else True),
    )
    opts.check_rules(gated, where="loading saved state over this program's gates")
    return gated


def _tighter(host: UsageLimits | None, saved: UsageLimits | None) -> UsageLimits | None:
    if host is None or saved is None:
        return saved if host is None else host
    fields = {}
    for name in ("requests", "input_tokens", "output_tokens", "total_tokens", "cost"):
        values = [v for v in (getattr(host, name), getattr(saved, name)) if v is not None]
        fields[name] = min(values) if values else None
    return UsageLimits(**fields)


def _restore_hooks(current: ProgramOptions, names: Any) -> dict[str, Any]:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigurationError(f"saved `finish_on` must be a list of tool names, got {names!r}")
    missing = [n for n in names if n not in current.finish_on]
    if missing:
        raise ConfigurationError(
            f"saved `finish_on` names {missing!r}, but this program has no finish_on hook for them; "
            "build it with the same finish_on hooks before loading"
        )
    return {name: current.finish_on[name] for name in names}


class SummaryPredictor(StepPredictor):
    """The context policy's summary predictor (``agent.summarizer``), over the step signature.

    Its instructions are the one instruction a summary request ends on (``dspy_imp.Context``'s
    summarize tier), so optimizers that rewrite a predictor's instructions tune the summary. The
    request itself keeps the program's system message, tools and history, so it shares the cached
    prefix of the step request before it.

    It holds no demos (``docs/decisions.md``): a summary request is the step conversation plus one
    instruction, and examples of other conversations' summaries would be the longest text of the
    most expensive request and break the prefix it shares. An optimizer's demos for it (the
    Bootstrap optimizers keep the summary requests they trace) are not kept, not saved, and a
    file's are not loaded; its instructions are what an optimizer tunes.
    """

    def __init__(self, signature: Any, instructions: str = SUMMARY_INSTRUCTIONS):
        super().__init__(signature.with_instructions(instructions), ProgramOptions())

    @property
    def demos(self) -> list[Any]:
        return []

    @demos.setter
    def demos(self, value: Any) -> None:
        """Not kept: see the class docstring."""

"""The closed sets of the loop, as ``Literal`` aliases.

Every dispatch over one of these is exhaustive; adding a value means revisiting the
decision table in ``_turn/machine.py`` and the rendering rules in ``_prompt/render.py``.
"""

from __future__ import annotations

from typing import Literal, get_args

FinishMode = Literal["auto", "submit", "tools"]


"""How a turn may end.

- ``"auto"``: a one-unconstrained-text-output signature answers in text; every other
  signature ends through ``submit`` (DSPy's ending: a text-only step forces it at once).
- ``"submit"``: every signature gets ``submit``; text is a thought, continued once.
- ``"tools"``: only ``finish_on`` tools end a turn; nothing is forced.
"""


HistoryReplay = Literal["trajectory", "actions"]


"""How recorded steps are shown to the model.

- ``"trajectory"``: every step whole.
- ``"actions"``: earlier turns without the text and reasoning written beside calls.
"""


TerminationReason = Literal[
    "answered",
    "submit",
    "finished_by_tool",
    "last_text",
    "forced_submit",
    "extracted",
    "incomplete",
    "paused",
    "blocked",
]


"""How a turn ended; see ``docs/termination.md``."""


TerminationCause = Literal[
    "max_iters",
    "parse_error",
    "prediction_error",
    "empty_tool_calls",
    "context_window_exceeded",
    "deadline_exceeded",
    "usage_limit_exceeded",
    "repeated_calls",
    "tool_retries_exhausted",
]


"""Why a turn was interrupted (absent when it was not)."""


RequestKind = Literal["step", "last_text", "forced_submit", "required_retry", "extraction", "summary"]


"""Which request of the turn is being sent (``"summary"``: a context policy's summary request)."""


UsageKind = Literal[
    "step",
    "last_text",
    "forced_submit",
    "required_retry",
    "extraction",
    "summary",
    "json_fallback",
    "guardrail",
    "sampling",
]


"""How ``metadata.usage`` counts a model call: a request kind, DSPy's JSON fallback for a step, or a
model call a guardrail made (a ``dspy.Module`` guardrail, or a function that calls an LM). ``sampling``: a
model call answering an MCP server's ``sampling/createMessage`` during a tool call."""


PendingKind = Literal["approval", "external", "elicitation"]


"""Why a call waits in a paused turn.

- ``"approval"``: a person must approve it (``tool_policy`` answered ``dspy_imp.NeedsApproval()``,
  or the tool is named in ``needs_approval``); resume with ``approvals={id: ...}``.
- ``"external"``: the host runs it elsewhere (the tool is named in ``external_tools``); resume
  with ``results={id: ...}``.
- ``"elicitation"``: the tool's call waits for a person's input (an MCP server asked with
  ``elicitation/create``, under ``elicit="pause"``); resume with ``approvals={id: answer}``
  (a dict accepts, ``True`` accepts the form's defaults, ``False`` declines, ``"cancel"`` cancels).
"""
PENDING_KINDS: tuple[str, ...] = get_args(PendingKind)


GuardrailStage = Literal["input", "output"]


"""Which guardrails tripped in a ``"blocked"`` turn: on the call's inputs, or on its outputs."""


CacheTTL = Literal["5m", "1h", "24h"]


"""How long a provider keeps a cached prompt prefix (``prompt_cache=``).

- ``"5m"``: Anthropic's default lifetime (refreshed at each hit); on OpenAI, its default in-memory
  retention.
- ``"1h"``: Anthropic's long lifetime (cache writes cost 2x input instead of 1.25x).
- ``"24h"``: OpenAI's extended retention (``prompt_cache_retention="24h"``); on Anthropic, its
  longest lifetime, ``"1h"``.
"""


PromptCache = bool | CacheTTL


"""A program's (or a call's) ``prompt_cache``: ``True`` (the provider's default lifetime),
``False`` (nothing sent), or a lifetime."""


ThinkingMode = Literal["off", "first", "every", "interleaved"]


"""When a program's requests ask for thinking (``thinking=``, ``docs/providers.md#thinking``):
``"every"`` (the default, DSPy's: every ordinary step), ``"first"`` (the turn's first step only),
``"off"`` (never), ``"interleaved"`` (every ordinary step, with Anthropic's interleaved-thinking
beta on the Claude models that take it: the model may think after each tool result)."""


CacheBustReason = Literal[
    "context_policy", "fallback", "tools_changed", "history_edited", "history_replay", "tool_choice_changed"
]


"""Why a request did not extend the one before it (``metadata.cache_busts``), so the provider's
prompt cache could serve only what the two still share.

- ``"context_policy"``: a context tier cleared, summarized or left out earlier entries (or a
  context-window refusal left more out).
- ``"fallback"``: the request went to another LM of the chain, whose cache has none of the turn.
- ``"tools_changed"``: the ``"required"`` retry offers ``submit`` alone.
- ``"history_edited"``: the call's ``history`` is not the one this conversation last returned
  (an edited or rebuilt history); only the first request of the call.
- ``"history_replay"``: under ``history_replay="actions"``, the call's first request replays the
  turn before as its calls and results, without the thoughts, narration or reasoning that turn's
  own requests sent.
- ``"tool_choice_changed"``: on Claude (Anthropic, Bedrock, Vertex AI, OpenRouter), the request's
  ``tool_choice`` differs from the last one's, as the forced submit's does: Anthropic's cache keeps
  the tools and system but reads the messages again.
"""


FINISH_MODES: tuple[str, ...] = get_args(FinishMode)


CACHE_TTLS: tuple[str, ...] = get_args(CacheTTL)
THINKING_MODES: tuple[str, ...] = get_args(ThinkingMode)


HISTORY_REPLAYS: tuple[str, ...] = get_args(HistoryReplay)

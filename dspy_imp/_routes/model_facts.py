"""What a model accepts that neither DSPy nor the request says: one table, matched by model name.

Four facts, each a 400 from the provider when the loop gets it wrong (sources in
``docs/providers.md``, "Per-model facts"):

- ``refuses_forced_tool_choice``: ``tool_choice`` ``any``/``tool`` (DSPy's ``"required"`` or a
  named choice) is refused. The loop's forced ``submit`` then goes out as an ordinary ``"auto"``
  request offering the same tools (``route.settle_options``); only ``submit`` runs, and the
  extractor follows when the model does not call it.
- ``adaptive_only_thinking``: ``thinking`` ``enabled``/``disabled`` is refused; only ``adaptive``
  (or no ``thinking`` at all) is accepted. The loop never turns manual thinking off on these
  models (there is none to turn off).
- ``binds_thinking``: each replayed thinking block is bound to the prefix before it (system,
  tools, earlier messages). Requests that replay such blocks ask for
  ``thinking.block_binding.prefix_mismatch_behavior: "drop_block"`` where the route can carry it,
  and the loop keeps the prefix intact where it can (the forced ``submit`` keeps the tool list).
- ``takes_cache_retention``: OpenAI's ``prompt_cache_retention: "24h"`` is accepted. Other models
  (gpt-4o-mini, gpt-5-mini) refuse it; ``prompt_cache="24h"`` sends it only where this is set.

A pattern is a regular expression searched in the *normalized* model name: lower case, the
last ``/`` segment (``openrouter/anthropic/claude-fable-5.1`` -> ``claude-fable-5.1``), dots as
hyphens (-> ``claude-fable-5-1``). Entries registered with ``register_model_facts`` are matched
before the built-in table, the latest first; the first match wins.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from dspy_imp._records.errors import ConfigurationError


@dataclass(frozen=True)
class ModelFacts:
    """What a model refuses that its provider's API does not say (all ``False``: nothing special).

    Attributes:
        refuses_forced_tool_choice: A forced ``tool_choice`` (``"required"``, a named tool) gets a 400.
        adaptive_only_thinking: ``thinking`` ``enabled``/``disabled`` gets a 400; ``adaptive`` only.
        binds_thinking: Replayed thinking blocks are bound to the prefix before them.
        takes_cache_retention: OpenAI's ``prompt_cache_retention: "24h"`` is accepted.
    """

    refuses_forced_tool_choice: bool = False
    adaptive_only_thinking: bool = False
    binds_thinking: bool = False
    takes_cache_retention: bool = False

    def __post_init__(self) -> None:
        for name in ("refuses_forced_tool_choice", "adaptive_only_thinking", "binds_thinking", "takes_cache_retention"):
            value = getattr(self, name)
            if not isinstance(value, bool):  # "no" is truthy: it would declare the fact
                raise ConfigurationError(f"`ModelFacts.{name}` must be True or False, got {value!r}")


NOTHING_SPECIAL = ModelFacts()
_CLAUDE_5_1 = ModelFacts(refuses_forced_tool_choice=True, adaptive_only_thinking=True, binds_thinking=True)

_RETAINS = ModelFacts(takes_cache_retention=True)
_SNAPSHOT = r"(-\d{4}-\d{2}-\d{2})?$"  # gpt-4.1-2025-04-14 (normalized: gpt-4-1-2025-04-14)

# (pattern, facts). "5-[1-9](?!\d)": a minor version, never a snapshot date (claude-fable-5-20260601).
BUILT_IN: tuple[tuple[str, ModelFacts], ...] = (
    (r"claude-fable-5-[1-9](?!\d)", _CLAUDE_5_1),
    (r"claude-mythos-5-[1-9](?!\d)", _CLAUDE_5_1),
    (r"claude-opus-5-5(?!\d)", _CLAUDE_5_1),
    (r"claude-sonnet-5-5(?!\d)", _CLAUDE_5_1),
    (r"claude-haiku-5-5(?!\d)", ModelFacts(binds_thinking=True)),
    # Extended prompt cache retention, "available for the following models" (Azure OpenAI's
    # prompt-caching guide, learn.microsoft.com/azure/foundry/openai/how-to/prompt-caching, the same
    # list as OpenAI's developers.openai.com/api/docs/guides/prompt-caching): gpt-5.4, gpt-5.3-codex,
    # gpt-5.2, gpt-5.1(-codex, -codex-max, -codex-mini, -chat), gpt-5(-codex), gpt-4.1; a dated
    # snapshot of each. Not their -mini/-nano siblings, not gpt-4o. From gpt-5.5 on, "24h" is the
    # only retention and the default (OpenAI's API reference), so nothing needs sending there.
    (r"^gpt-5-4" + _SNAPSHOT, _RETAINS),
    (r"^gpt-5-3-codex" + _SNAPSHOT, _RETAINS),
    (r"^gpt-5-2" + _SNAPSHOT, _RETAINS),
    (r"^gpt-5-1(-codex(-max|-mini)?|-chat(-latest)?)?" + _SNAPSHOT, _RETAINS),
    (r"^gpt-5(-codex)?" + _SNAPSHOT, _RETAINS),
    (r"^gpt-4-1" + _SNAPSHOT, _RETAINS),
)

_registered: list[tuple[re.Pattern[str], ModelFacts]] = []
_lock = threading.Lock()


def register_model_facts(pattern: str, facts: ModelFacts) -> None:
    """Declare the facts of every model whose normalized name matches ``pattern`` (a regex, searched).

    Matched before the built-in table, the latest registration first. To undo a built-in fact,
    register the model with ``ModelFacts()``.

    Raises:
        ConfigurationError: ``pattern`` is not a non-empty regular expression, or ``facts`` is not
            a ``ModelFacts`` (whose fields are checked when it is built: each must be a ``bool``).

    Example::

        dspy_imp.register_model_facts(r"my-claude-proxy", dspy_imp.ModelFacts(refuses_forced_tool_choice=True))
    """
    if not isinstance(pattern, str) or not pattern:
        raise ConfigurationError(f"register_model_facts: `pattern` must be a non-empty string, got {pattern!r}")
    if not isinstance(facts, ModelFacts):
        raise ConfigurationError(f"register_model_facts: `facts` must be a dspy_imp.ModelFacts, got {facts!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as bad:
        raise ConfigurationError(
            f"register_model_facts: `pattern` is not a regular expression ({bad}), got {pattern!r}"
        ) from None
    with _lock:
        _registered.insert(0, (compiled, facts))


def model_facts(model: object) -> ModelFacts:
    """The facts for ``model``: a model name, or an LM (its ``.model``)."""
    name = normalized(str(getattr(model, "model", model) or ""))
    for pattern, facts in [*_registered, *_BUILT_IN]:
        if pattern.search(name):
            return facts
    return NOTHING_SPECIAL


def normalized(model: str) -> str:
    """``openrouter/anthropic/claude-fable-5.1`` -> ``claude-fable-5-1``."""
    return model.lower().rsplit("/", 1)[-1].replace(".", "-")


_BUILT_IN = [(re.compile(pattern), facts) for pattern, facts in BUILT_IN]

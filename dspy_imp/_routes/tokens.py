"""A request's prompt tokens and a model's input window, as LiteLLM knows them (no network).

``count_tokens`` is LiteLLM's ``token_counter`` over the request's messages and tools: the model's
own tokenizer where LiteLLM bundles one (Claude, DeepSeek, Llama, Cohere; chosen from the model name
without its provider prefix), tiktoken's encoding otherwise, which is the documented estimate for
every other model. ``window_of`` reads ``max_input_tokens`` from LiteLLM's model map
(``litellm.model_cost``), by the full name and then without the provider prefix; ``None`` when the
map does not know the model. Media parts count as LiteLLM's default image size (nothing is fetched).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any


def bare(model: str) -> str:
    """The model name without its provider prefix (``anthropic/claude-x`` -> ``claude-x``)."""
    return model.split("/", 1)[1] if "/" in model else model


def count_tokens(messages: Sequence[Any], tools: Sequence[Any] | None, model: str) -> int:
    import litellm

    return int(
        litellm.token_counter(
            model=bare(model),
            messages=list(messages),
            tools=list(tools) if tools else None,
            use_default_image_token_count=True,
        )
    )


@functools.lru_cache(maxsize=256)
def window_of(model: str) -> int | None:
    import litellm

    for name in (model, bare(model)):
        info = litellm.model_cost.get(name)
        if isinstance(info, dict) and isinstance(info.get("max_input_tokens"), int):
            return int(info["max_input_tokens"])
    return None

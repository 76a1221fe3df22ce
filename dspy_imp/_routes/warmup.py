"""Paying LiteLLM's cold import before a deadline's last check (DSPy's private LiteLLM import)."""

from __future__ import annotations

import contextlib
import functools
import importlib

from dspy_imp._routes import dspy_private

# Modules LiteLLM (1.110) and DSPy import lazily inside the first send, after the adapter's
# last deadline check; one that is missing or fails to import (another LiteLLM version) is skipped.
_LAZY_SEND_MODULES = (
    "dspy.clients.execution",
    "httpcore",
    "litellm._service_logger",
    "litellm.proxy.openai_files_endpoints.common_utils",
    "litellm.proxy.spend_tracking.savings",
    "litellm.llms.github_copilot.per_user_auth",
    "litellm.llms.fal_ai.image_generation",
    "litellm.llms.fal_ai.chat.transformation",
    "litellm.llms.custom_httpx.aiohttp_transport",
)


@functools.cache
def warm_litellm() -> None:
    """Pay LiteLLM's cold import (seconds) before the last deadline check, not after it.

    DSPy imports LiteLLM inside the send, after the adapter read the deadline for the last
    time; under a deadline that import alone sent requests seconds late.
    """
    dspy_private.litellm()
    for name in _LAZY_SEND_MODULES:
        with contextlib.suppress(Exception):  # best effort: the send imports what is missing
            importlib.import_module(name)

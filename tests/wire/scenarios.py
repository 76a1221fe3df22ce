"""Every wire scenario, for ``test_providers.py``."""

from __future__ import annotations

from turns import BASE_SUFFIX, Outcome, Scenario
from turns_anthropic import ANTHROPIC
from turns_cache import CACHE
from turns_chat import DEEPSEEK, OPENAI
from turns_claude5 import CLAUDE5
from turns_compat import COMPAT
from turns_foreign import FOREIGN
from turns_gemini import GEMINI
from turns_responses import RESPONSES_API
from turns_thinking import THINKING_SCENARIOS

SCENARIOS: list[Scenario] = [
    *ANTHROPIC,
    *CLAUDE5,
    *GEMINI,
    *DEEPSEEK,
    *OPENAI,
    *COMPAT,
    *RESPONSES_API,
    *FOREIGN,
    *CACHE,
    *THINKING_SCENARIOS,
]

__all__ = ["BASE_SUFFIX", "SCENARIOS", "Outcome", "Scenario"]

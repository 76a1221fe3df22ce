"""Provider routes: where a request goes and what each provider takes back.

Which engine sends a request (``route``), reading and replaying signed reasoning
(``reasoning``), calls that arrive without a name (``nameless``), what a provider's refusal
means (``failures``), LiteLLM's cold import (``warmup``), and every use of DSPy's private API
(``dspy_private``, the only module the import contracts let touch it). A new provider quirk
goes here.
"""

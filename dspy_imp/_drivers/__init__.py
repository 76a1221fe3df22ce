"""The drivers: they perform the turn's effects, sync or async, and decide nothing.

``driver`` runs the turn and dispatches each effect to its I/O (a ``job``): requests through the
program's inner predictor and ``adapter`` (``requests``; ``dspy_imp.ReActAdapter`` is what DSPy
calls to format and parse a step), tools (``tools``; a sync tool off the event loop, with its bound,
through ``tool_threads``), the watching glue (``watched``); it records usage (``recorder``), reads
mocked predictions (``predicted``) and keeps fine-tuning data (``finetune``). A new way to perform
effects (another engine, a durable one) is a new driver.
"""

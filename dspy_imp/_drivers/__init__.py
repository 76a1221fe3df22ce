"""The drivers: they perform the turn's effects, sync or async, and decide nothing.

``driver`` sends each request through the program's inner predictor and ``adapter``
(``dspy_imp.ReActAdapter``, what DSPy calls to format and parse a step), runs tools, records
usage (``recorder``), reads mocked predictions (``predicted``) and keeps fine-tuning data
(``finetune``). A new way to perform effects (another engine, a durable one) is a new driver.
"""

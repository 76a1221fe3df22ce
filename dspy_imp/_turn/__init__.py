"""The turn: one I/O-free state machine that decides what happens next.

``machine.Turn.run`` is a generator of effects (``effects``); it checks and decides each
step's calls (``tools``, ``approval``), counts usage against limits (``meter``), leaves out
episodes when the context window is full (``projection``), and runs on a ``plan``. It imports
no DSPy (an import contract says so): it reads records and renders through ``_prompt``, and
drivers perform what it yields. A new capability is a new effect here and its performance in a
driver, not a branch through the machine.
"""

"""The program: ``dspy_imp.ReActV2`` and what it hands to and returns from a turn.

The module itself (``module``), its inner step predictor (``predictor``), option checks
(``options``) and the prediction it returns (``prediction``).
"""

"""Records: what a turn keeps and reports, at the bottom of the layers.

Steps and their history entries (``steps``, the one seam to ``dspy.History`` dicts), dumps and
loads (``history``), redaction, checks of saved state, the stock ``dspy.ReActV2`` shape, the
closed sets (``kinds``), the errors, usage values and limits, what performing an effect
produced (``outcomes``), media values, a value as text, the step window and the clock a turn
reads (``clock``: live time or a durable record's, and the deadline). Nothing here imports
the rest of the package.
"""

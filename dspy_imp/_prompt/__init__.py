"""What the model reads: pure rendering from records to messages.

Every sentence the model reads (``sentences``), the guidance a request is rendered with, the
written and native dialects, rendering and its incremental memo, demos, media placement,
lenient reading of written replies (``markup``) and the signatures the inner predictors use.
Nothing here performs I/O or decides what happens next in a turn.
"""

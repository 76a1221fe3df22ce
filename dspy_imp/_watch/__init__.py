"""Watching a turn: streaming, status messages, progress, tracing and the HTML view.

The drivers report what they perform here; nothing here changes what a turn does.
"""

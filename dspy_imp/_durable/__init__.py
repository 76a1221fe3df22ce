"""Durable turns on DBOS: the driver that checkpoints each effect, and the codec of what it stores.

``dspy_imp.durable`` is the public face of this wing.
"""

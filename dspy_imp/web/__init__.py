"""Agents in a web page: AG-UI and the AI SDK UI message stream, and a chat page (``pip install -e ".[web]"``).

``dspy_imp.web.app(agent)`` is an ASGI (Starlette) app serving, for one ``dspy_imp.ReActV2``, a
chat page that works offline, the AG-UI endpoint (``POST /ag-ui``) and the AI SDK UI message
stream (``POST /api/chat``); ``python -m dspy_imp.web module:agent`` serves it on 127.0.0.1.
``dspy_imp.web.agui`` and ``dspy_imp.web.vercel`` hold the two encoders and the conversions of
their messages. See ``docs/web.md``.

Example:
    ```python
    from fastapi import FastAPI
    api = FastAPI()
    api.mount("/support", dspy_imp.web.app(agent))
    ```
"""

from dspy_imp._records.errors import require_extra

require_extra(
    'dspy_imp.web needs its extra: pip install -e ".[web]" (from a clone)', "ag_ui.core", "sqlalchemy", "starlette"
)

from dspy_imp.web._database import ConversationInfo, DatabaseStore
from dspy_imp.web._turns import Conversation, FileStore, MemoryStore, Store
from dspy_imp.web.app import app
from dspy_imp.web.messages import from_messages, to_messages

__all__ = [
    "Conversation",
    "ConversationInfo",
    "DatabaseStore",
    "FileStore",
    "MemoryStore",
    "Store",
    "app",
    "from_messages",
    "to_messages",
]

"""Gemini built-in tool replies, from third-party recordings (``cassettes/hosted/gemini_*.json``).

Each JSON file holds the response bodies of one of pydantic-ai's cassettes, exact, in order, with the
request URI each answered and the cassette it comes from (``source``: repository, commit, path). All
were recorded against the Gemini API (AI Studio, ``generativelanguage.googleapis.com/v1beta``) with the
google-genai SDK, the endpoint and body format DSPy's native Gemini provider talks, so no body is
converted (the URL-context cassette kept its body as a string: it is parsed, not changed).

- ``function_tools_with_builtin_tools``: ``gemini-3-flash-preview`` with ``googleSearch`` beside a
  ``calculator`` function and ``includeServerSideToolInvocations``: a ``functionCall``, a ``toolCall``
  (``GOOGLE_SEARCH_WEB``) and its ``toolResponse``, each signed; then the answer, grounded.
- ``code_execution``: ``gemini-3-flash-preview`` with ``codeExecution``: two ``executableCode`` /
  ``codeExecutionResult`` pairs and a signed text part, on two turns.
- ``web_search_tool``: ``gemini-2.5-pro`` with ``googleSearch`` only: grounded answers with
  ``toolUsePromptTokenCount``, on two turns.
- ``web_fetch_tool``: ``gemini-2.5-flash`` with ``urlContext``: an answer with ``urlContextMetadata``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emulator import Scripted

HERE = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"  # recorded HTTP, shared with examples/


def recording(name: str) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads((HERE / f"gemini_{name}.json").read_text())
    return recorded


def replies(name: str) -> list[Scripted]:
    """The recording's responses, to play in order."""
    return [Scripted(r["status"], r["body"]) for r in recording(name)["responses"]]


def body(name: str, index: int) -> dict[str, Any]:
    found: dict[str, Any] = recording(name)["responses"][index]["body"]
    return found


def parts(name: str, index: int) -> list[dict[str, Any]]:
    """The parts of response ``index``'s first candidate, as served."""
    found: list[dict[str, Any]] = body(name, index)["candidates"][0]["content"]["parts"]
    return found


def signatures() -> frozenset[str]:
    """Every ``thoughtSignature`` the recordings hold (Gemini returned them: they are genuine)."""
    found: set[str] = set()
    for path in HERE.glob("gemini_*.json"):
        recording = json.loads(path.read_text())
        bodies = [r["body"] for r in recording.get("responses") or ()] + [  # a streamed one: each chunk
            json.loads(e["data"]) for i in recording.get("interactions") or () for e in i["events"]
        ]
        for body in bodies:
            for candidate in body.get("candidates") or ():
                for part in (candidate.get("content") or {}).get("parts") or ():
                    if part.get("thoughtSignature"):
                        found.add(part["thoughtSignature"])
    return frozenset(found)

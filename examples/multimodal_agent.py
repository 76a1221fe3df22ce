"""An agent that looks at a picture and zooms in with a tool that returns another picture.

The task input is a ``dspy.Image``; the ``zoom`` tool returns a ``dspy.Image`` too. Both reach
the model as images (content parts), never as text. On OpenAI-style providers a tool message
carries text only, so the zoomed picture follows the tool results in a user message; on
Anthropic and Gemini it rides inside the tool result. The pictures are drawn here (a red square
on a white canvas, stdlib only), so the example needs no files.

Offline with a scripted model (no network), or live against a real vision model::

    python examples/multimodal_agent.py
    DSPY_IMP_MODEL=openai/gpt-4o-mini OPENAI_API_KEY=... python examples/multimodal_agent.py --live
"""

from __future__ import annotations

import argparse
import base64
import os
import struct
import sys
import zlib
from typing import Any

# Use the model metadata bundled with DSPy/LiteLLM instead of fetching it (keeps the offline run offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

WHITE, RED = (255, 255, 255), (220, 30, 30)


def png(width: int, height: int, pixel: Any) -> dspy.Image:
    """A PNG drawn by ``pixel(x, y) -> (r, g, b)``, as a ``dspy.Image`` holding a data URL."""
    rows = b"".join(b"\x00" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return dspy.Image(f"data:image/png;base64,{base64.b64encode(data).decode()}")


def scene(x: int, y: int) -> tuple[int, int, int]:
    """A 64x64 canvas with a red square in the top-left quarter."""
    return RED if 8 <= x < 24 and 8 <= y < 24 else WHITE


def zoom(quarter: str) -> dspy.Image:
    """Zoom into one quarter of the picture: "top-left", "top-right", "bottom-left" or "bottom-right"."""
    dx = 32 if quarter.endswith("right") else 0
    dy = 32 if quarter.startswith("bottom") else 0
    return png(64, 64, lambda x, y: scene(dx + x // 2, dy + y // 2))


class Describe(dspy.Signature):
    """Answer the question about the picture; zoom in when a detail is too small to see."""

    picture: dspy.Image = dspy.InputField()
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def scripted_model() -> dspy.LM:
    """Zooms into the top-left quarter, then answers. It records requests and sends none."""
    return ScriptedLM(
        [
            reply(calls=[call("zoom", {"quarter": "top-left"}, id="call_zoom")]),
            reply("A red square, in the top-left quarter of a white picture."),
        ]
    )


def live_model() -> dspy.LM:
    model = os.environ.get("DSPY_IMP_MODEL")
    if not model:
        sys.exit("--live needs DSPY_IMP_MODEL, e.g. DSPY_IMP_MODEL=openai/gpt-4o-mini (plus its API key)")
    return dspy.LM(model)


def describe(message: dict[str, Any]) -> str:
    """One line per message: its role and what its content is made of."""
    content = message.get("content")
    if not isinstance(content, list):
        text = (content or "").replace("\n", " ")
        return f"{message['role']}: {text[:70]!r}" + (" + tool calls" if message.get("tool_calls") else "")
    kinds = [p["type"] if p["type"] != "text" else repr(p["text"].replace("\n", " ")[:30]) for p in content]
    return f"{message['role']}: " + " + ".join(kinds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use DSPY_IMP_MODEL instead of the scripted model")
    live = parser.parse_args().live
    lm = live_model() if live else scripted_model()
    print(f"model: {lm.model}" if live else "model: scripted model (no network)")

    agent = dspy_imp.ReActV2(Describe, tools=[zoom])
    with dspy.context(lm=lm):
        pred = agent(picture=png(64, 64, scene), question="What is in the picture, and where?")

    for step in pred.metadata.history.messages:
        for tool_call in step.get("tool_calls", []):
            print(f"tool call: {tool_call['name']}({tool_call['args']}) -> an image")
    if isinstance(lm, ScriptedLM):
        print("the last request, message by message:")
        for message in lm.requests[-1].messages[1:]:
            print(f"  {describe(message)}")
    print(f"answer: {pred.answer}")
    print(f"termination_reason: {pred.metadata.termination_reason}")

    saved = dspy_imp.dump_history(pred.metadata.history)
    print(f"the history dumps with its images: {saved['messages'][0]['picture']['class']}")


if __name__ == "__main__":
    main()

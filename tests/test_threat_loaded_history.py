"""Issue 23, point 12: ``load_history`` refuses what is not a well-formed media value.

A dump's media must be of a media class (``dspy.Image``/``Audio``/``File``, their subclasses, or
a user ``dspy.Type`` that formats as content parts), with each field of its declared type; DSPy's
other types (``dspy.Tool`` with a ``func`` of the file's choosing) never come back from a dump.
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest

import dspy_imp


def _dump_with(media: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "history",
        "messages": [{"question": media, "tool_calls": [], "tool_call_results": []}],
    }


def _media(cls: str, **fields: Any) -> dict[str, Any]:
    return {"__imp_type__": "media", "class": cls, "fields": fields}


@pytest.mark.parametrize(
    ("media", "named"),
    [
        (_media("dspy.Image", url=123), "`url` = 123"),
        (_media("dspy.Image", url=None), "`url` = None"),
        (_media("dspy.Image", url=["http://a"]), "`url`"),
        (_media("dspy.Image"), "no `url`"),
        (_media("dspy.Audio", data="AAAA", audio_format=7), "`audio_format` = 7"),
        (_media("dspy.File", file_id=5), "`file_id` = 5"),
        (_media("dspy.adapters.types.tool.Tool", func="os.system", name="x"), "not a dspy.Type defined"),
        (_media("dspy.adapters.types.history.History", messages=[]), "not a dspy.Type defined"),
    ],
)
def test_malformed_or_non_media_values_are_refused(media, named):
    with pytest.raises(dspy_imp.ConfigurationError, match=named):
        dspy_imp.load_history(_dump_with(media))


def test_well_formed_media_still_round_trips():
    history = dspy.History(
        messages=[
            {
                "question": dspy.Image(url="https://example.com/cat.png"),
                "file": dspy.File(file_id="file-1"),
                "tool_calls": [],
                "tool_call_results": [],
            }
        ]
    )
    loaded = dspy_imp.load_history(dspy_imp.dump_history(history))
    assert loaded.messages[0]["question"] == history.messages[0]["question"]
    assert isinstance(loaded.messages[0]["file"], dspy.File) and loaded.messages[0]["file"].file_id == "file-1"

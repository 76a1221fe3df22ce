"""``examples/multimodal_agent.py`` runs offline and shows where its images went."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "multimodal_agent.py"


def test_the_multimodal_example_runs_offline_and_sends_images() -> None:
    env = {key: value for key, value in os.environ.items() if key != "DSPY_IMP_MODEL"}
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "model: scripted model (no network)"
    assert "tool call: zoom({'quarter': 'top-left'}) -> an image" in lines
    assert "  user: '[[ ## picture ## ]] ' + image_url + '  [[ ## question ## ]] What is'" in lines
    assert "  tool: '[image 1]'" in lines
    assert "  user: 'Media returned by the tools ab' + '[image 1]' + image_url" in lines
    assert "termination_reason: answered" in lines
    assert "the history dumps with its images: dspy.Image" in lines

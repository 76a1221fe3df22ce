"""One compile teaches a team: each real DSPy optimizer, run on the parent, teaches both agents.

``teaching_team``'s scripted model answers right only when triage AND its researcher (a sub-agent
tool) were taught, so a score of 100 on held-out examples means the optimizer reached the child
through the parent: its predictors among the parent's, its requests in the parent's traces, its
copy in every candidate. The lesson survives ``save`` -> fresh program -> ``load``. Each program
is built both ways: the researcher as a tool of triage, and DSPy's wrapper-module idiom. Scores
are taken through ``forward`` (``dspy.Evaluate``) and through ``acall``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
import pytest
import teaching
import teaching_team as world
from teaching_team import DEVSET, TRAINSET, ascore, metric, score, task_lm

BUILDS: dict[str, Callable[[], dspy.Module]] = {"as_tool": world.team, "wrapper": world.Team}


@pytest.fixture(params=sorted(BUILDS))
def build(request: pytest.FixtureRequest) -> Callable[[], dspy.Module]:
    return BUILDS[request.param]


def _researcher(program: dspy.Module) -> Any:
    return program.researcher


def _check(build: Callable[[], dspy.Module], compiled: dspy.Module, tmp_path: Path) -> None:
    assert score(build()) == 0 and asyncio.run(ascore(build())) == 0
    assert score(compiled) == 100 and asyncio.run(ascore(compiled)) == 100
    path = tmp_path / "team.json"
    compiled.save(str(path))
    fresh = build()
    fresh.load(str(path))
    assert score(fresh) == 100 and asyncio.run(ascore(fresh)) == 100


def test_bootstrap_few_shot(build, tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=2, max_labeled_demos=0)
        compiled = optimizer.compile(build(), trainset=TRAINSET)
        child = _researcher(compiled).react
        assert child.demos and all(d.get("augmented") for d in child.demos)
        assert all("question" in d or "history" in d for d in child.demos)  # the child's own steps
        _check(build, compiled, tmp_path)


def test_bootstrap_few_shot_with_random_search(build, tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.BootstrapFewShotWithRandomSearch(
            metric=metric, max_bootstrapped_demos=1, max_labeled_demos=0, num_candidate_programs=1, num_threads=1
        )
        compiled = optimizer.compile(build(), trainset=TRAINSET, valset=DEVSET)
        _check(build, compiled, tmp_path)


def test_copro(build, tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.COPRO(
            prompt_model=teaching.prompt_lm(), metric=metric, breadth=2, depth=1, init_temperature=0.0
        )
        compiled = optimizer.compile(
            build(), trainset=TRAINSET, eval_kwargs={"num_threads": 1, "display_progress": False}
        )
        assert teaching.LESSON in _researcher(compiled).react.signature.instructions
        _check(build, compiled, tmp_path)


def test_mipro_v2_light(build, tmp_path):
    with dspy.context(lm=task_lm()):
        compiled = teaching.mipro_light(metric, build(), TRAINSET, DEVSET)
        _check(build, compiled, tmp_path)


def test_simba(build, tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.SIMBA(metric=metric, bsize=4, num_candidates=2, max_steps=1, num_threads=1)
        compiled = optimizer.compile(build(), trainset=TRAINSET + DEVSET, seed=0)
        _check(build, compiled, tmp_path)


def test_gepa(build, tmp_path):
    reflection = teaching.prompt_lm()
    with dspy.context(lm=task_lm()):
        optimizer = dspy.GEPA(
            metric=world.feedback_metric,
            reflection_lm=reflection,
            max_metric_calls=24,
            num_threads=1,
            reflection_minibatch_size=2,
            component_selector="all",
            use_merge=False,
            track_stats=False,
        )
        compiled = optimizer.compile(build(), trainset=TRAINSET, valset=TRAINSET)
        assert teaching.LESSON in _researcher(compiled).react.signature.instructions
        _check(build, compiled, tmp_path)
    # The researcher's reflection reads the researcher's own requests (its instruction, its question).
    prompts = [r.messages[-1]["content"] for r in reflection.requests]
    own = [p for p in prompts if world.Research.__doc__ in p and world.Triage.__doc__ not in p]
    assert own and all("what is on the" in p and "## ticket ##" not in p for p in own)

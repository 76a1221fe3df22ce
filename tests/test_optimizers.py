"""End to end: each DSPy optimizer teaches the agent something, and the lesson survives save/load.

Every test runs the real optimizer on ``teaching``'s tiny world: the scripted model answers
right only when its prompt carries what the optimizer should have taught (a demo in the live
tool-call format, or the instruction). The compiled program must score strictly higher on
the dev set than the uncompiled one, and the same after ``save``/``load`` into a fresh program.
"""

from __future__ import annotations

from pathlib import Path

import dspy
import teaching
from teaching import DEVSET, TRAINSET, agent, metric, prompt_lm, score, task_lm


def _check(compiled: dspy.Module, tmp_path: Path) -> None:
    baseline = score(agent())
    taught = score(compiled)
    assert taught > baseline
    path = tmp_path / "program.json"
    compiled.save(str(path))
    fresh = agent()
    fresh.load(str(path))
    assert score(fresh) == taught


def test_bootstrap_few_shot(tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=2, max_labeled_demos=0)
        compiled = optimizer.compile(agent(), trainset=TRAINSET)
        assert compiled.react.demos and all(d.get("augmented") for d in compiled.react.demos)
        _check(compiled, tmp_path)


def test_bootstrap_few_shot_with_random_search(tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.BootstrapFewShotWithRandomSearch(
            metric=metric, max_bootstrapped_demos=1, max_labeled_demos=0, num_candidate_programs=1, num_threads=1
        )
        compiled = optimizer.compile(agent(), trainset=TRAINSET, valset=DEVSET)
        _check(compiled, tmp_path)


def test_labeled_few_shot(tmp_path):
    with dspy.context(lm=task_lm()):
        compiled = dspy.LabeledFewShot(k=2).compile(agent(), trainset=TRAINSET)
        _check(compiled, tmp_path)


def test_copro(tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.COPRO(prompt_model=prompt_lm(), metric=metric, breadth=2, depth=1, init_temperature=0.0)
        compiled = optimizer.compile(
            agent(), trainset=TRAINSET, eval_kwargs={"num_threads": 1, "display_progress": False}
        )
        assert teaching.LESSON in compiled.react.signature.instructions
        _check(compiled, tmp_path)


def test_mipro_v2(tmp_path):
    with dspy.context(lm=task_lm()):
        compiled = teaching.mipro_light(metric, agent(), TRAINSET, DEVSET)
        _check(compiled, tmp_path)


def test_simba(tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.SIMBA(metric=metric, bsize=4, num_candidates=2, max_steps=1, num_threads=1)
        compiled = optimizer.compile(agent(), trainset=TRAINSET + DEVSET, seed=0)
        _check(compiled, tmp_path)


def test_gepa(tmp_path):
    with dspy.context(lm=task_lm()):
        optimizer = dspy.GEPA(
            metric=teaching.feedback_metric,
            reflection_lm=prompt_lm(),
            max_metric_calls=12,
            num_threads=1,
            reflection_minibatch_size=2,
            use_merge=False,
            track_stats=False,
        )
        compiled = optimizer.compile(agent(), trainset=TRAINSET, valset=TRAINSET)
        assert teaching.LESSON in compiled.react.signature.instructions
        _check(compiled, tmp_path)

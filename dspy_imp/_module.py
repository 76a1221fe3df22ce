"""``ReActV2``: the program. Holds configuration and the inner predictor, nothing of a run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dspy
from dspy.signatures.signature import ensure_signature

from . import _options as opts
from ._drivers import Effects, adrive, drive
from ._effects import Ending, Failure
from ._errors import ConfigurationError, StepError
from ._guidance import Guidance, Task
from ._machine import Setup, Turn
from ._options import CallPlan, ProgramOptions
from ._prediction import Metadata, Prediction, make_prediction
from ._predictor import StepPredictor
from ._records import coerce_history, make_history, read_steps
from ._signature import OutputSpec, is_text_answer, make_step_signature, make_submit_tool
from ._tools import CallContext


class ReActV2(dspy.Module):
    """A tool-using agent loop whose turns end the way the program means them to.

    A drop-in replacement for ``dspy.ReActV2``: same constructor and call, native tool
    calls, a structured ``dspy.History``; plus finish modes, exact termination metadata,
    deadlines and prompts where each request extends the previous one.

    Args:
        signature: Any DSPy signature (string or class).
        tools: Callables or ``dspy.Tool``s; their declared order is kept.
        max_iters: Ordinary steps before the step limit interrupts the turn.
        finish: ``"auto"``, ``"submit"`` or ``"tools"`` (see ``docs/finish-modes.md``).
        finish_on: ``{"tool_name": hook}``; ``hook(args, result, inputs)`` returns
            ``dspy_imp.Finish(**outputs)`` to end the turn, or anything else to go on.
        history_replay: ``"trajectory"`` (every step) or ``"actions"``.
        unsent_note: Host words replacing the unsent line.
        last_request_note: One line of host text put before a last request.
        last_request_tools: Tools (names or the objects) whose calls run in the last-text request.
        tool_policy: ``None`` (allow all), allowed names, or ``callable(name, args) -> bool | str``.
        tool_result_renderer: ``callable(call, result) -> str``; ``result.returned_at`` is the
            ISO 8601 UTC time the result came back.
        config: Request options for every request (``temperature``, ``max_tokens``, ...).

    Example:
        >>> agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
        >>> pred = agent(question="Where is the key?")
        >>> pred.answer, pred.metadata.termination_reason
    """

    def __init__(
        self,
        signature: str | type[dspy.Signature],
        tools: Iterable[Callable[..., Any] | dspy.Tool] = (),
        max_iters: int = 20,
        *,
        finish: str = "auto",
        finish_on: Mapping[str, Callable[..., Any]] | None = None,
        history_replay: str = "trajectory",
        unsent_note: str | None = None,
        last_request_note: str | None = None,
        last_request_tools: Iterable[Any] = (),
        tool_policy: Any = None,
        tool_result_renderer: Callable[[Any, Any], str] | None = None,
        config: Mapping[str, Any] | None = None,
        **unknown: Any,
    ):
        super().__init__()
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {sorted(unknown)!r}; request options such as temperature go under `config=`"
            )
        self.signature = ensure_signature(signature)
        opts.check_signature(self.signature)
        self.tools = opts.wrap_tools(tools)
        if tool_result_renderer is not None and not callable(tool_result_renderer):
            raise ConfigurationError(f"`tool_result_renderer` must be callable, got {tool_result_renderer!r}")
        options = ProgramOptions(
            max_iters=opts.check_max_iters(max_iters),
            finish=opts.check_finish(finish),
            finish_on=opts.check_finish_on(finish_on, self.tools),
            history_replay=opts.check_history_replay(history_replay),
            unsent_note=opts.check_unsent_note(unsent_note),
            last_request_note=opts.check_note(last_request_note),
            last_request_tools=opts.check_tool_names(last_request_tools, self.tools, "last_request_tools"),
            tool_policy=opts.check_policy(tool_policy),
            tool_result_renderer=tool_result_renderer,
            config=opts.check_config(config),
        )
        opts.check_rules(options)
        self.submit_tool = make_submit_tool(self.signature)
        self.react = StepPredictor(make_step_signature(self.signature), options)

    @property
    def options(self) -> ProgramOptions:
        """The program's options; they live on the inner predictor so that save/load keeps them."""
        return self.react.options

    @property
    def max_iters(self) -> int:
        return self.react.options.max_iters

    # -- calls --------------------------------------------------------------------------------

    def forward(self, **kwargs: Any) -> Prediction:
        turn = self._turn(kwargs)
        return self._conclude(turn, drive(turn.run(), Effects(self)))

    async def aforward(self, **kwargs: Any) -> Prediction:
        turn = self._turn(kwargs)
        return self._conclude(turn, await adrive(turn.run(), Effects(self)))

    def _turn(self, kwargs: dict[str, Any]) -> Turn:
        plan = opts.plan_call(self.options, self.signature, self.tools, kwargs)
        entries = coerce_history(plan.history)
        task = Task.of(self.signature, is_text_answer(self.signature))
        prior = tuple(read_steps(entries, task.input_names, task.output_names))
        return Turn(
            plan,
            Setup(
                self._guidance(plan, task), OutputSpec(self.signature), self._call_context(plan), prior, tuple(entries)
            ),
        )

    def _guidance(self, plan: CallPlan, task: Task) -> Guidance:
        options = plan.options
        with_submit = opts.has_submit(self.signature, options.finish)
        roster = (*self.tools.values(), self.submit_tool) if with_submit else tuple(self.tools.values())
        return Guidance(
            task=task,
            finish=options.finish,
            has_submit=with_submit,
            roster=tuple(roster),
            ending_tools=tuple(name for name in self.tools if name in options.finish_on),
            unsent_note=options.unsent_note,
            history_replay=options.history_replay,
            result_renderer=options.tool_result_renderer,
        )

    def _call_context(self, plan: CallPlan) -> CallContext:
        options = plan.options
        roster = dict(self.tools)
        if opts.has_submit(self.signature, options.finish):
            roster[self.submit_tool.name] = self.submit_tool
        return CallContext(
            roster=roster,
            runners=plan.runners,
            outputs=OutputSpec(self.signature),
            inputs=plan.inputs,
            policy=options.tool_policy,
            finish_on=options.finish_on,
            last_request_tools=options.last_request_tools,
        )

    def _conclude(self, turn: Turn, outcome: Ending | Failure) -> Prediction:
        if isinstance(outcome, Failure):
            raise StepError(outcome.error, make_history(turn.resumable_entries())) from outcome.error
        history = make_history(turn.entries)
        metadata = Metadata(
            history=history,
            termination_reason=outcome.reason,
            termination_cause=outcome.cause,
            termination_error=outcome.error,
            finished_by_tool=outcome.finished_by_tool,
            unexecuted_tool_calls=tuple(outcome.unexecuted),
            context_projection=turn.projection.metadata(),
            finish_reason=outcome.finish_reason,
        )
        values = outcome.outputs or {}
        outputs = {name: values.get(name) for name in self.signature.output_fields}
        return make_prediction(outputs, metadata)

"""``ReActV2``: the program. Holds configuration and the inner predictor, nothing of a run."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dspy
from dspy.signatures.signature import ensure_signature

from dspy_imp._drivers.child import current as current_child
from dspy_imp._drivers.driver import Effects, adrive, drive
from dspy_imp._drivers.interrupts import AGENT_HISTORY_ATTRIBUTE, attach_history, host_hook, tool_failure
from dspy_imp._drivers.requests import Extractor
from dspy_imp._program import continuity, parts
from dspy_imp._program import limits as lim
from dspy_imp._program import options as opts
from dspy_imp._program import toolsets as sets
from dspy_imp._program.agent_tool import agent_tool
from dspy_imp._program.guidance import check_demos, program_guidance
from dspy_imp._program.prediction import Metadata, Prediction, make_prediction
from dspy_imp._program.predictor import StepPredictor, SummaryPredictor
from dspy_imp._prompt.demos import complete_trace, demo_examples
from dspy_imp._prompt.guidance import Task
from dspy_imp._prompt.sentences import SUMMARY_INSTRUCTIONS
from dspy_imp._prompt.signature import OutputSpec, is_text_answer, make_step_signature, make_submit_tool
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.hosted import HostedTool
from dspy_imp._records.saved_state import read_state_file
from dspy_imp._records.step_error import StepError
from dspy_imp._records.steps import coerce_history, make_history, read_steps
from dspy_imp._records.usage import UsageLimits, check_usage_limits
from dspy_imp._routes.dspy_private import install_closing_sync_streams, install_part_tolerant_loading
from dspy_imp._routes.failures import describe, is_missing_credentials, refused_option
from dspy_imp._routes.hosted import citations_of
from dspy_imp._turn.approval import check_resume, paused_step, pending_metadata
from dspy_imp._turn.context import Context, check_context
from dspy_imp._turn.effects import Ending, Failure
from dspy_imp._turn.limits import ToolLimits
from dspy_imp._turn.machine import Setup, Turn
from dspy_imp._turn.plan import CallPlan, ProgramOptions
from dspy_imp._turn.tools import CallContext
from dspy_imp._watch.tracing import trace_failure, trace_stop, trace_turn


class ReActV2(dspy.Module):
    """A tool-using agent loop whose turns end the way the program means them to.

    A drop-in replacement for ``dspy.ReActV2``: same constructor and call, native tool
    calls, a structured ``dspy.History``; plus finish modes, exact termination metadata,
    deadlines and prompts where each request extends the previous one.

    Args:
        signature: Any DSPy signature (string or class).
        tools: Callables or ``dspy.Tool``s; their declared order is kept. MCP servers
            (``dspy_imp.mcp``) may stand among them: their tools are listed at the start of each
            turn (``docs/mcp.md``).
        max_iters: Ordinary steps before the step limit interrupts the turn.
        finish: ``"auto"``, ``"submit"`` or ``"tools"`` (see ``docs/finish-modes.md``).
        finish_on: ``{"tool_name": hook}``; ``hook(args, result, inputs)`` returns
            ``dspy_imp.Finish(**outputs)`` to end the turn, or anything else to go on.
        history_replay: ``"trajectory"`` (every step) or ``"actions"``.
        unsent_note: Host words replacing the unsent line.
        last_request_note: One line of host text put before a last request.
        last_request_tools: Tools (names or the objects) whose calls run in the last-text request.
        tool_policy: ``None`` (allow all), allowed names, or ``callable(name, args)`` returning
            ``True``, ``False``, a reason (a refusal the model reads) or ``dspy_imp.NeedsApproval()``.
        tool_result_renderer: ``callable(call, result) -> str``; ``result.returned_at`` is the
            ISO 8601 UTC time the result came back, ``result.value`` the value as returned. It
            may also return a media value (``dspy.Image``, ...) or a list of text and media
            (``docs/media.md``).
        config: Request options for every request (``temperature``, ``max_tokens``, ...).
        parallel_tools: Run the calls of one reply concurrently (tasks under ``acall``, a
            bounded thread pool in a sync call); the record is that of the sequential run.
        usage_limits: A ``dspy_imp.UsageLimits``; no request leaves once one is reached.
        needs_approval: Tools (names or the objects) whose calls wait for a person: the turn
            ends ``"paused"``; resume with ``approvals=``.
        external_tools: Tools (names or the objects) the host runs elsewhere: the turn ends
            ``"paused"``; resume with ``results=``. Their runners are never called.
        tool_timeouts: Seconds one run of a tool may take: a number (every tool) or
            ``{name: seconds, "*": seconds}``; a tool past it is an observation the model reads.
        tool_retries: How many calls of a tool may raise ``dspy_imp.RetryTool`` in a turn
            (default 1); one more interrupts it (cause ``"tool_retries_exhausted"``).
        max_result_chars: A result longer than this is cut for the model when it arrives (the
            record keeps it whole): a number or ``{name: chars, "*": chars}``.
            With toolsets in ``tools`` (MCP servers), the names ``needs_approval``,
            ``tool_timeouts``, ``tool_retries``, ``max_result_chars``, ``finish_on`` and
            ``last_request_tools`` give may be a toolset's tools (as the model calls them):
            checked when a turn lists them, a ``ConfigurationError`` naming the option then for
            one no toolset offers.
        repeat_limit: The same call with the same result this many times in a turn interrupts it
            (cause ``"repeated_calls"``); default 3, ``None`` to turn it off.
        input_guardrails: Checks on the call's inputs (functions, DSPy modules or
            ``dspy_imp.Guardrail``); a tripped one ends the turn ``"blocked"`` before any request.
        output_guardrails: Checks on the outputs before the turn ends; a tripped one ends it
            ``"blocked"`` (or, with ``retry=True``, asks the model once to try again).
        fallback: LMs to send a request to, in order, when the program's LM fails it with a
            provider error (``metadata.fallbacks`` records each hop).
        context: A ``dspy_imp.Context``: count each request's tokens before it is sent and keep
            long conversations under the model's window (``docs/context.md``). With its summarize
            tier, the program holds a summary predictor at ``agent.summarizer``.
        prompt_cache: Provider prompt caching (``docs/providers.md#prompt-caching``): ``True`` (the
            default: cache breakpoints or a cache key where the route takes them), ``False``, or a
            lifetime, ``"5m"``, ``"1h"`` (Anthropic) or ``"24h"`` (OpenAI's extended retention).
        thinking: Which requests ask for thinking on a model that supports reasoning
            (``docs/providers.md#thinking``): ``"every"`` (the default, DSPy's: every ordinary
            step, ``reasoning_effort="low"``), ``"first"`` (the turn's first step only), ``"off"``
            (none; under ``finish="auto"`` with ``submit`` each step then asks for a call,
            ``tool_choice="required"``), or ``"interleaved"`` (every step, with Anthropic's
            interleaved-thinking beta on Claude 4.x). The requests that only force or extract the
            answer never ask for it.

    Example:
        ```python
        agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
        pred = agent(question="Where is the key?")
        pred.answer, pred.metadata.termination_reason
        ```
    """

    toolsets: tuple[sets.Toolset, ...] = ()
    """The MCP servers (toolsets) given in ``tools=``; their tools are listed at each turn's start. A
    class default too, so a program pickled before toolsets existed loads with none."""

    hosted_tools: tuple[HostedTool, ...] = ()
    """The hosted tools given in ``tools=`` (``dspy_imp.hosted``): sent with every step request, run by
    the provider. A class default too, so a program pickled before hosted tools existed loads with none."""

    Extractor = Extractor
    """The extractor's class, built per extraction request: patch its ``forward`` in a test that mocks
    ``react`` (``docs/migrating.md#tests``). A class, not a predictor: ``named_predictors()`` skips it."""

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
        tool_result_renderer: Callable[[Any, Any], Any] | None = None,
        config: Mapping[str, Any] | None = None,
        parallel_tools: bool = False,
        usage_limits: UsageLimits | None = None,
        needs_approval: Iterable[Any] = (),
        external_tools: Iterable[Any] = (),
        tool_timeouts: float | Mapping[Any, float] | None = None,
        tool_retries: int | Mapping[Any, int] | None = None,
        max_result_chars: int | Mapping[Any, int] | None = None,
        repeat_limit: int | None = 3,
        input_guardrails: Iterable[Any] = (),
        output_guardrails: Iterable[Any] = (),
        fallback: Iterable[dspy.BaseLM] = (),
        context: Context | None = None,
        prompt_cache: bool | str = True,
        thinking: str = "every",
        **unknown: Any,
    ):
        super().__init__()
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {sorted(unknown)!r}; request options such as temperature go under `config=`"
            )
        self.signature = ensure_signature(signature)
        opts.check_signature(self.signature)
        install_closing_sync_streams()  # before ``dspy.streamify(agent)(...)`` opens the first sync stream
        install_part_tolerant_loading(parts.optional_ids)  # a wrapper module's old files load too
        tools, self.toolsets = sets.split(tools)
        tools, self.hosted_tools = sets.hosted_split(tools)
        self.own_tools = opts.wrap_tools(tools)
        self.deferred_names: dict[str, list[str]] = {}  # options' names of a toolset's tools (``sets.Deferred``)

        def held(where: str) -> Mapping[str, dspy.Tool]:
            return sets.Deferred(self.own_tools, where, self.deferred_names) if self.toolsets else self.own_tools

        if tool_result_renderer is not None and not callable(tool_result_renderer):
            raise ConfigurationError(f"`tool_result_renderer` must be callable, got {tool_result_renderer!r}")
        options = ProgramOptions(
            max_iters=opts.check_max_iters(max_iters),
            finish=opts.check_finish(finish),
            finish_on=opts.check_finish_on(finish_on, held("finish_on")),
            history_replay=opts.check_history_replay(history_replay),
            unsent_note=opts.check_unsent_note(unsent_note),
            last_request_note=opts.check_note(last_request_note),
            last_request_tools=opts.check_tool_names(
                last_request_tools, held("last_request_tools"), "last_request_tools"
            ),
            tool_policy=opts.check_policy(tool_policy),
            tool_result_renderer=tool_result_renderer,
            config=opts.check_config(config),
            parallel_tools=opts.check_flag(parallel_tools, "parallel_tools"),
            usage_limits=check_usage_limits(usage_limits),
            needs_approval=opts.check_tool_names(needs_approval, held("needs_approval"), "needs_approval"),
            external_tools=opts.check_tool_names(external_tools, self.own_tools, "external_tools"),
            tool_timeouts=lim.check_tool_timeouts(tool_timeouts, held("tool_timeouts")),
            tool_retries=lim.check_tool_retries(tool_retries, held("tool_retries")),
            max_result_chars=lim.check_max_result_chars(max_result_chars, held("max_result_chars")),
            repeat_limit=lim.check_repeat_limit(repeat_limit),
            input_guardrails=lim.check_guardrails(input_guardrails, "input_guardrails"),
            output_guardrails=lim.check_guardrails(output_guardrails, "output_guardrails"),
            fallback=lim.check_fallback(fallback),
            context=check_context(context),
            prompt_cache=opts.check_prompt_cache(prompt_cache),
            thinking=opts.check_thinking(thinking),
        )
        opts.check_rules(options)
        self.submit_tool = make_submit_tool(self.signature)
        self.react = StepPredictor(make_step_signature(self.signature), options, tool_names=tuple(self.own_tools))
        if options.context is not None and options.context.summarize:  # only then among named_predictors()
            self.summarizer = SummaryPredictor(self.react.signature)
        # Loading demos checks them as a call would show them (a file's demos of the wrong shape are refused).
        guidance_of = functools.partial(program_guidance, self.signature, self.own_tools, self.submit_tool)
        self.react.demo_check = functools.partial(check_demos, self.signature, guidance_of)
        parts.check_parts(self)

    # -- the program's parts (``_program.parts``): sub-agents and guardrail modules ----------------

    def program_parts(self) -> list[tuple[str, dspy.Module]]:
        """The DSPy modules it was given, by name: sub-agents (tool name), then guardrail modules."""
        return parts.parts(self)

    def named_parameters(self) -> list[tuple[str, Any]]:
        """DSPy's, then each part's under its name (``researcher.react``), each parameter once."""
        return parts.named_parameters(self, super().named_parameters())

    def named_sub_modules(self, type_: Any = None, skip_compiled: bool = False) -> Any:
        return parts.named_sub_modules(self, type_, skip_compiled)

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> None:
        """DSPy's; a part (or the summarizer) the file holds no state for keeps its defaults."""
        parts.load_state(self, state, allow_unsafe_lm_state)

    def load(self, path: Any, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False) -> None:
        """DSPy's; a ``.json`` file that is not JSON, not an object or has a malformed ``metadata``
        block is a ``ConfigurationError`` naming the file (``read_state_file``), nothing applied."""
        if not str(path).endswith(".json"):
            return super().load(path, allow_pickle=allow_pickle, allow_unsafe_lm_state=allow_unsafe_lm_state)
        self.load_state(read_state_file(path), allow_unsafe_lm_state=allow_unsafe_lm_state)
        return None

    def __getattr__(self, name: str) -> Any:  # only for names no attribute has: a part by name
        found = parts.part(self, name) if not name.startswith("_") and "own_tools" in self.__dict__ else None
        if found is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return found

    def summary_predictor(self) -> dspy.Predict:
        """The predictor a summary request goes through: ``agent.summarizer``, or a default one
        (a per-call policy on a program built without one)."""
        held = self.__dict__.get("summarizer")
        return held if isinstance(held, SummaryPredictor) else SummaryPredictor(self.react.signature)

    def summary_instruction(self) -> str:
        """The instruction a summary request ends on, read without building the default predictor:
        that is a new signature class (a pydantic model) each time, once per call for a request
        most calls never send."""
        held = self.__dict__.get("summarizer")
        return held.signature.instructions if isinstance(held, SummaryPredictor) else SUMMARY_INSTRUCTIONS

    @property
    def options(self) -> ProgramOptions:
        """The program's options; they live on the inner predictor so that save/load keeps them."""
        return self.react.options

    @property
    def tools(self) -> dict[str, dspy.Tool]:
        """The tools by name, as on ``dspy.ReActV2``: yours in declared order, then ``submit`` when
        the program's turns end through it (a submit signature, or ``finish="submit"``)."""
        if opts.has_submit(self.signature, self.options.finish):
            return {**self.own_tools, self.submit_tool.name: self.submit_tool}
        return dict(self.own_tools)

    @property
    def max_iters(self) -> int:
        return self.react.options.max_iters

    # -- calls --------------------------------------------------------------------------------

    def forward(self, **kwargs: Any) -> Prediction:
        child = current_child(self)  # run as a sub-agent: on its caller's kind of driver and budget
        effects = child.effects(self) if child is not None else Effects(self)
        listing = effects.listing(self) if self.toolsets else None  # a durable driver records it
        turn = self._turn(kwargs, child.budget if child is not None else None, listing)
        mark = len(dspy.settings.trace or ())
        try:
            outcome: Ending | Failure = drive(turn.run(), effects)
        except BaseException as error:  # a stop propagates with the history; failing host code is a Failure
            outcome = escaped(self, turn, error)
        return self._conclude(turn, outcome, mark)

    async def aforward(self, **kwargs: Any) -> Prediction:
        child = current_child(self)
        effects = child.effects(self) if child is not None else Effects(self)
        listing = await effects.alisting(self) if self.toolsets else None
        turn = self._turn(kwargs, child.budget if child is not None else None, listing)
        mark = len(dspy.settings.trace or ())
        try:
            outcome: Ending | Failure = await adrive(turn.run(), effects)
        except BaseException as error:
            outcome = escaped(self, turn, error)
        return self._conclude(turn, outcome, mark)

    def _listed(self) -> sets.Listing:
        """Its toolsets' tools now (``Effects.listing``: a durable driver records what this returns)."""
        return sets.listed(self.toolsets, self.own_tools)

    async def _alisted(self) -> sets.Listing:
        return await sets.alisted(self.toolsets, self.own_tools)

    def as_tool(self, name: str | None = None, description: str | None = None) -> dspy.Tool:
        """This agent as a tool another agent calls: a sub-agent (``docs/agents-as-tools.md``).

        The tool's arguments are this agent's inputs; its result, its outputs. Called by a
        ``dspy_imp.ReActV2``, its turn runs inside the caller's: within the caller's deadline and
        usage limits, its usage counted in the caller's (and shown in ``usage.agents[name]``), its
        history kept in the caller's record of the call, its pauses pausing the caller.

        Args:
            name: The tool's name (letters, digits, ``_``, ``-``); by default the signature class's
                name in snake case (a string signature needs one).
            description: What the caller's model reads about the tool; by default the signature's
                instructions.

        Example:
            ```python
            researcher = dspy_imp.ReActV2("question -> findings", tools=[search])
            triage = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
            ```
        """
        return agent_tool(self, name, description)

    def as_mcp_server(
        self,
        name: str,
        *,
        tool: str | None = None,
        description: str | None = None,
        sync: bool = False,
        tasks: bool = True,
    ) -> Any:
        """This program as an MCP server with one tool (``pip install -e ".[mcp]"``, ``docs/mcp.md``).

        The tool's input schema is the signature's inputs, its ``outputSchema`` the outputs; a call
        runs one turn, with progress per step, cancellation, and an approval pause asked of the
        client as an elicitation; a 2025-11-25 client may run it as a task (``tasks/get``,
        ``tasks/result``, ``tasks/cancel``, ``tasks/list``, ``notifications/tasks/status``; kept in
        this process's memory, each at most an hour), unless ``tasks=False``. Serve it with
        ``.run_stdio()`` or ``.run_http()`` (127.0.0.1, Host and Origin checked), or
        ``python -m dspy_imp.mcp serve module:program``.

        Args:
            name: The server's name (and the tool's, unless ``tool`` is given).
            tool: The tool's name (letters, digits, ``_``, ``-``).
            description: What the client's model reads; by default the signature's instructions.
            sync: Run each turn with the sync call in a worker thread (a program whose tools are sync).
            tasks: Let a 2025-11-25 client run a call as a task (the default). ``False``: the server
                declares no tasks capability and runs every call inline, as a plain call.
        """
        # Imported by name: the program's floor sits below ``dspy_imp.mcp`` and must not import it.
        serving = importlib.import_module("dspy_imp.mcp._serving")
        return serving.ProgramServer(self, name, tool=tool, description=description, sync=sync, tasks=tasks)

    def _turn(
        self, kwargs: dict[str, Any], budget: UsageLimits | None = None, listing: sets.Listing | None = None
    ) -> Turn:
        if listing is not None:  # the constructor's names of its toolsets' tools, now that they are listed
            sets.check_deferred(self.deferred_names, listing, self.toolsets)
        own = self.own_tools if listing is None else {**self.own_tools, **listing.tools}
        options = self.options if listing is None else sets.with_listing(self.options, listing)
        plan = opts.plan_call(options, self.signature, own, kwargs)
        entries = coerce_history(plan.history)
        edited = continuity.edited(entries)  # before a paused step is taken off to be answered
        if not plan.inputs and not entries:  # the request would hold nothing to answer
            names = ", ".join(f"`{n}`" for n in self.signature.input_fields) or "no input fields"
            raise ConfigurationError(
                f"this call has no input and no history: give at least one of the signature's inputs ({names}), "
                "or a history to continue; an input given as None counts as not given"
            )
        task = Task.of(self.signature, is_text_answer(self.signature))
        prior = tuple(read_steps(entries, task.input_names, task.output_names))
        paused = paused_step(prior)
        check_resume(paused, plan.decisions, plan.inputs)
        if paused is not None:  # answered first, then recorded again with its results
            prior, entries = prior[:-1], entries[:-1]
        guidance = program_guidance(self.signature, own, self.submit_tool, plan.options, task)
        demo_examples(guidance, self.react.demos)  # a demo that cannot be shown is refused before any request
        setup = Setup(
            guidance,
            OutputSpec.of(self.signature),
            self._call_context(plan, own),
            prior,
            tuple(entries),
            paused=paused,
            decisions=plan.decisions,
            models=self._models(plan),
            summary_instruction=self.summary_instruction(),
            budget=budget,
            history_edited=edited,
        )
        return Turn(plan, setup)

    def fallback_chain(self) -> tuple[dspy.BaseLM, ...]:
        """The LMs a failed request goes to next: ``fallback=[...]``; a sub-agent built without any
        inherits its caller's chain for the call (as it inherits the deadline and limits)."""
        child = current_child(self)
        return self.options.fallback or (child.fallback if child is not None else ())

    def _models(self, plan: CallPlan) -> tuple[str, ...]:
        """The names of the LM chain a request may go to: the program's LM, then its fallbacks."""
        first = self.react.lm or dspy.settings.lm
        return tuple(lim.model_name(lm) for lm in (first, *self.fallback_chain()))

    def _call_context(self, plan: CallPlan, own: Mapping[str, dspy.Tool] | None = None) -> CallContext:
        options = plan.options
        roster = dict(self.own_tools if own is None else own)
        if opts.has_submit(self.signature, options.finish):
            roster[self.submit_tool.name] = self.submit_tool
        return CallContext(
            roster=roster,
            runners=plan.runners,
            outputs=OutputSpec.of(self.signature),
            inputs=plan.inputs,
            policy=options.tool_policy,
            finish_on=options.finish_on,
            last_request_tools=options.last_request_tools,
            parallel=options.parallel_tools,
            needs_approval=frozenset(options.needs_approval),
            external=frozenset(options.external_tools),
            limits=ToolLimits.of(options),
            renderer=options.tool_result_renderer,
        )

    def _conclude(self, turn: Turn, outcome: Ending | Failure, trace_mark: int = 0) -> Prediction:
        if dspy.settings.trace is not None:
            complete_trace(dspy.settings.trace[trace_mark:], self.react, turn.steps)
        usage = turn.meter.usage()
        if isinstance(outcome, Failure):
            trace_failure(self, describe(outcome.error), turn.errors, usage, tuple(turn.models.hops))
            refused = refused_option(outcome.error)
            if refused is not None and len(turn.meter.calls) <= 1:  # the first request, refused before sending
                raise refused  # a bad option: the ConfigurationError itself, as for the program's options
            history = make_history(turn.resumable_entries())  # the inputs too: enough to resume
            # A missing API key is one line naming the variable; its chain (DSPy's and lm15's
            # copies of the same sentence) would bury it, and nothing was sent. `reason` keeps it.
            cause = None if is_missing_credentials(outcome.error) else outcome.error
            raise StepError(outcome.error, history, usage=usage, hook=outcome.hook) from cause
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
            usage=usage,
            pending_calls=pending_metadata(outcome.pending),
            guardrail=outcome.guardrail,
            fallbacks=tuple(turn.models.hops),
            context=turn.policy.metadata() if turn.policy is not None else (),
            duration=turn.duration,
            cache_busts=turn.cache_busts,
            citations=tuple(c for step in turn.steps for c in citations_of(step.reasoning_details)),
        )
        continuity.remember(turn.entries)
        trace_turn(self, metadata, turn.errors)
        values = outcome.outputs or {}
        outputs = {name: values.get(name) for name in self.signature.output_fields}
        return make_prediction(outputs, metadata)


def escaped(program: Any, turn: Turn, error: BaseException) -> Failure:
    """What escaped a turn's drive: host code failing where it has no observation of its own (a
    context counter, a library's own ``BaseException`` from a guardrail or a hook) ends the turn
    the one documented way, a ``StepError`` with the history; a stop (an interrupt, the caller's
    cancellation, a closed stream) and a refused option propagate, the history attached."""
    if isinstance(error, ConfigurationError | StepError) or not tool_failure(error):
        agent_history = getattr(error, AGENT_HISTORY_ATTRIBUTE, None)  # a sub-agent stopped with the turn
        attach_history(error, make_history(turn.resumable_entries(agent_history)))
        trace_stop(program, error)
        raise error
    return Failure(error, hook=host_hook(error))

"""Tools a program lists at the start of each turn: toolsets (an MCP server, ``dspy_imp.mcp``).

A ``Toolset`` given in ``ReActV2(..., tools=[...])`` beside function tools and sub-agents is not a
tool: it is asked, when a turn starts, for the tools it offers then (``listing``, or ``alisting``
under ``acall``), and the turn runs with the program's own tools and those, as if the program held
them all. The turn keeps the tools it started with; the next turn asks again. What a toolset lists
is checked here: its names may take no name of the program's own tools, of ``submit`` or of
another toolset's (a ``ConfigurationError`` naming both); its approvals and time bounds join the
turn's options (``needs_approval``, ``tool_timeouts``), the program's own settings first, and its
instructions (an MCP server's, on request) go in the turn's requests, never in the program.

The constructor's per-tool options may name a toolset's tools before any is listed (``DEFERRED``):
their names are kept, and checked against each turn's listing (``check_deferred``).

The toolset itself is shared, never copied: ``copy.deepcopy`` of a program (every optimizer's
first step) keeps the same toolset, so a copy reuses its connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.hosted import HostedTool
from dspy_imp._turn.plan import ProgramOptions


@dataclass(frozen=True)
class Listing:
    """What a toolset offers one turn: its tools by the name the model calls them, the names of
    those that wait for a person's approval, per-tool time bounds (seconds), and instructions of
    its own to add to the program's for the turn (``(whose, text)``: untrusted text, shown as
    such; an MCP server's with ``add_instructions=True``)."""

    tools: Mapping[str, dspy.Tool] = field(default_factory=dict)
    needs_approval: frozenset[str] = frozenset()
    timeouts: Mapping[str, float] = field(default_factory=dict)
    instructions: tuple[tuple[str, str], ...] = ()


class Toolset:
    """A source of tools listed at the start of each turn (subclassed by ``dspy_imp.mcp``'s servers)."""

    label: str = "toolset"
    """How errors name it (``"MCP server 'time'"``)."""

    def listing(self) -> Listing:
        """The tools it offers now (blocking; a sync turn's start)."""
        raise NotImplementedError

    async def alisting(self) -> Listing:
        """The tools it offers now (an async turn's start)."""
        raise NotImplementedError

    durable: bool = False
    """Whether ``record`` and ``revive`` are implemented: a ``DurableAgent`` records the listing a
    turn starts with, so the turn resumed after a crash has the same tools (not a changed list)."""

    def record(self, listing: Listing) -> Any:
        """``listing`` (its own) as plain JSON data, stored with a durable turn's workflow."""
        raise NotImplementedError

    def revive(self, record: Any) -> Listing:
        """The listing ``record`` holds, its tools calling this toolset again."""
        raise NotImplementedError

    def __deepcopy__(self, memo: dict[int, Any]) -> Toolset:
        return self  # one connection, shared by a program and its copies


def split(tools: Any) -> tuple[Any, tuple[Toolset, ...]]:
    """``tools`` as given, with the toolsets taken out (the rest goes to ``wrap_tools``)."""
    if tools is None or isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        return tools, ()
    items = list(tools)
    toolsets = tuple(item for item in items if isinstance(item, Toolset))
    seen: set[int] = set()
    for toolset in toolsets:
        if id(toolset) in seen:
            raise ConfigurationError(f"`tools` holds {toolset.label} twice; give each toolset once")
        seen.add(id(toolset))
    return [item for item in items if not isinstance(item, Toolset)], toolsets


def hosted_split(tools: Any) -> tuple[Any, tuple[HostedTool, ...]]:
    """``tools`` with the hosted tools (``dspy_imp.hosted``: the provider runs them) taken out; each
    kind at most once (a ``ConfigurationError`` naming it)."""
    if tools is None or isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        return tools, ()
    items = list(tools)
    hosted = tuple(item for item in items if isinstance(item, HostedTool))
    kinds = [tool.kind for tool in hosted]
    for kind in kinds:
        if kinds.count(kind) > 1:
            raise ConfigurationError(f"`tools` holds two hosted {kind} tools; give each hosted tool once")
    return [item for item in items if not isinstance(item, HostedTool)], hosted


def merged(own: Mapping[str, dspy.Tool], listings: Sequence[tuple[Toolset, Listing]]) -> Listing:
    """The toolsets' listings as one, each name checked against the program's tools, ``submit``
    (reserved whatever the finish mode, as for the program's own tools) and the other toolsets'
    (a ``ConfigurationError`` naming both)."""
    owners: dict[str, Toolset] = {}
    tools: dict[str, dspy.Tool] = {}
    approval: set[str] = set()
    timeouts: dict[str, float] = {}
    instructions: list[tuple[str, str]] = []
    for toolset, listing in listings:
        for name, tool in listing.tools.items():
            if name == SUBMIT:
                raise ConfigurationError(
                    f"{toolset.label} offers a tool named {SUBMIT!r}, which is reserved for the final outputs; "
                    "give it a `prefix=` or leave the tool out with `exclude=`"
                )
            if name in own:
                raise ConfigurationError(
                    f"{toolset.label} offers a tool named {name!r}, the name of the program's own tool {name!r}; "
                    "give the server a `prefix=` or leave the tool out with `exclude=`"
                )
            if name in owners:
                raise ConfigurationError(
                    f"{owners[name].label} and {toolset.label} both offer a tool named {name!r}; "
                    "give one of them a `prefix=` or leave the tool out with `exclude=`"
                )
            owners[name] = toolset
            tools[name] = tool
        approval.update(listing.needs_approval)
        timeouts.update(listing.timeouts)
        instructions.extend(listing.instructions)
    return Listing(tools, frozenset(approval), timeouts, tuple(instructions))


def listed(toolsets: Sequence[Toolset], own: Mapping[str, dspy.Tool]) -> Listing:
    """Every toolset's listing, asked in turn (a sync turn's start)."""
    return merged(own, [(toolset, toolset.listing()) for toolset in toolsets])


async def alisted(toolsets: Sequence[Toolset], own: Mapping[str, dspy.Tool]) -> Listing:
    """Every toolset's listing, asked at once (an async turn's start)."""
    listings = await asyncio.gather(*(toolset.alisting() for toolset in toolsets))
    return merged(own, list(zip(toolsets, listings, strict=True)))


def record(toolsets: Sequence[Toolset]) -> list[Any]:
    """Every toolset's listing now, as data (a durable turn's recorded step, sync)."""
    return [toolset.record(toolset.listing()) for toolset in toolsets]


async def arecord(toolsets: Sequence[Toolset]) -> list[Any]:
    listings = await asyncio.gather(*(toolset.alisting() for toolset in toolsets))
    return [toolset.record(listing) for toolset, listing in zip(toolsets, listings, strict=True)]


def revive(toolsets: Sequence[Toolset], own: Mapping[str, dspy.Tool], records: Sequence[Any]) -> Listing:
    """The turn's listing from its record, checked as a live one is (``merged``)."""
    if len(records) != len(toolsets):
        raise ConfigurationError(
            f"the recorded turn listed {len(records)} toolsets, the program has {len(toolsets)}: "
            "a durable turn resumes with the program it started with"
        )
    return merged(own, [(toolset, toolset.revive(data)) for toolset, data in zip(toolsets, records, strict=True)])


DEFERRED = (
    "needs_approval",
    "tool_timeouts",
    "tool_retries",
    "max_result_chars",
    "finish_on",
    "last_request_tools",
)
"""The constructor's options that may name a toolset's tools (an MCP server's), which are not
known until a turn lists them: each name the program does not hold is noted (``Deferred``) and
checked against the first listing of every turn (``check_deferred``)."""


class Deferred(Mapping[str, dspy.Tool]):
    """The program's own tools, as the construction checks of one option see them when the program
    has toolsets: any other name is there too, and noted in ``noted[where]``."""

    def __init__(self, own: Mapping[str, dspy.Tool], where: str, noted: dict[str, list[str]]):
        self.own, self.where, self.noted = own, where, noted

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name not in self.own:
            self.noted.setdefault(self.where, []).append(name)
        return isinstance(name, str)

    def __getitem__(self, name: str) -> dspy.Tool:
        return self.own[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.own)

    def __len__(self) -> int:
        return len(self.own)


def check_deferred(noted: Mapping[str, Sequence[str]], listing: Listing, toolsets: Sequence[Toolset]) -> None:
    """The names the constructor's options gave for a toolset's tools (``Deferred``), against the
    turn's listing: one no toolset offers is a ``ConfigurationError`` naming the option and the key."""
    for where, names in noted.items():
        for name in names:
            if name not in listing.tools:
                labels = ", ".join(toolset.label for toolset in toolsets)
                raise ConfigurationError(
                    f"`{where}` names a tool that neither the program nor its toolsets ({labels}) offer: {name!r}; "
                    "a toolset's tools are named as the model calls them (after the server's `prefix_`)"
                )


def with_listing(options: ProgramOptions, listing: Listing) -> ProgramOptions:
    """The program's options for a turn that also holds ``listing``'s tools: their approvals added,
    their time bounds where the program sets none for them (its ``"*"`` bound stays the fallback),
    the toolsets' instructions for this turn's requests (never the program's saved state)."""
    if not listing.tools and not listing.instructions:
        return options
    approval = tuple(name for name in listing.tools if name in listing.needs_approval)
    timeouts = dict(options.tool_timeouts)
    for name, seconds in listing.timeouts.items():
        timeouts.setdefault(name, seconds)
    changes: dict[str, Any] = {}
    if approval:
        changes["needs_approval"] = (*options.needs_approval, *approval)
    if timeouts != dict(options.tool_timeouts):
        changes["tool_timeouts"] = timeouts
    if listing.instructions:
        changes["toolset_instructions"] = listing.instructions
    return dataclasses.replace(options, **changes) if changes else options

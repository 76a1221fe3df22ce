"""Schemathesis against the web app, in process (its ASGI transport: no socket), from the app's
own ``GET /openapi.json``.

Four apps: the memory store and the SQLite ``DatabaseStore``, each without and with ``auth=``
(a bearer token, the description's default security scheme; two users, alice and bob).

- Every operation fuzzed by Schemathesis' engine, as its CLI runs it (examples, coverage and
  generated phases, valid and invalid cases), on the two ends of that matrix: memory without
  ``auth``, SQLite with it; on the latter also its stateful phase, which follows the description's
  links (a run to reading, stopping, approving, renaming and deleting its conversation).
- A conversation's whole life on all four (``Lifecycle``, a Hypothesis state machine sending each
  request through Schemathesis): runs on either stream, reading back, approving or refusing what it
  waits on, stopping, renaming, deleting, listing, by its owner and by another user. (The engine's
  generated bodies seldom start a turn, so this is what walks a conversation through all of it.)

Every built-in check runs on every request (the lifecycle's through ``call_and_validate``): no
5xx (but the 501 of a store that cannot list, rename or delete, as described), every status,
content type, header and body as described (each AG-UI event and AI SDK part too), no valid
request refused, no invalid one accepted, auth not ignored.

Budget and seed: a few examples each (``DSPY_IMP_FUZZ_EXAMPLES``, ``DSPY_IMP_FUZZ_STEPS`` for
more), ``derandomize`` (Hypothesis seeds each test from its own code, so every run tries the same
inputs) and a fixed Schemathesis seed. Hypothesis keeps no example database under
``derandomize``; a failure found here is kept instead as an explicit regression test with its
input (``tests/test_web_openapi.py``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import hypothesis
import hypothesis.strategies as st
import pytest
import schemathesis
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test
from schemathesis import engine
from schemathesis.engine import Status, events

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply

EXAMPLES = int(os.environ.get("DSPY_IMP_FUZZ_EXAMPLES", "10"))
STEPS = int(os.environ.get("DSPY_IMP_FUZZ_STEPS", "10"))
TOKENS = {"Bearer alice-token": "alice", "Bearer bob-token": "bob"}


def refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"order {order_id} refunded"


def _respond(request: Any) -> Any:
    """The model: a refund that waits for approval, then the answer once its result is in."""
    if request.messages and request.messages[-1]["role"] == "tool":
        return reply("Order 42 is refunded.")
    return reply("A refund needs approval.", calls=[call("refund", {"order_id": "42"})])


def _signed_in(request: Any) -> str | None:
    return TOKENS.get(request.headers.get("authorization", ""))


def make_app(store: Any, auth: bool) -> Any:
    agent = dspy_imp.ReActV2("message -> reply", tools=[refund], needs_approval=[refund])
    agent.set_lm(ScriptedLM(_respond))
    return dspy_imp.web.app(agent, store=store, auth=_signed_in if auth else None)


def _config(stateful: bool) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": 48,
            "headers": {"Authorization": "Bearer alice-token"},
            "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none"},
            # the engine's own link-following state machine: on one app (the lifecycle runs on all)
            "phases": {"stateful": {"enabled": stateful, "max-steps": STEPS}},
            "checks": {
                # a store that cannot list or rename says so: 501, as described
                "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "501"]},
                "positive_data_acceptance": {"expected-statuses": ["2xx", "3xx", "401", "403", "404", "409", "501"]},
            },
        }
    )


_DATABASES = tempfile.TemporaryDirectory(prefix="dspy-imp-schemathesis-")  # removed at exit


def _schema(kind: str, auth: bool) -> Any:
    store = None
    if kind == "sqlite":
        store = dspy_imp.web.DatabaseStore(f"sqlite:///{Path(_DATABASES.name) / f'{kind}-{auth}.db'}")
    config = _config(stateful=kind == "sqlite" and auth)
    return schemathesis.openapi.from_asgi("/openapi.json", make_app(store, auth), config=config)


SCHEMAS = {
    "memory": _schema("memory", False),
    "memory_auth": _schema("memory", True),
    "sqlite": _schema("sqlite", False),
    "sqlite_auth": _schema("sqlite", True),
}


def schemathesis_failures(schema: Any) -> list[str]:
    """What Schemathesis' engine (as its CLI runs it: examples, coverage, fuzzing and stateful phases,
    every check) finds against ``schema``'s app: one line per failing check, with its ``curl``."""
    problems = []
    for event in engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished) and event.status in (Status.FAILURE, Status.ERROR):
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failure = check.failure_info.failure
                        problems.append(
                            f"{event.recorder.label}: {failure.title}: {failure.message}\n  "
                            f"{check.failure_info.code_sample}"
                        )
            if not event.recorder.checks:
                problems.append(f"{event.recorder.label}: {event.status} ({event.recorder.label})")
        elif isinstance(event, events.NonFatalError):
            problems.append(f"{event.label}: {event.info.title}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            problems.append(f"fatal: {event.exception!r}")
    return problems


# Every operation fuzzed on the two ends of the matrix (how a body is read does not depend on the
# store); the lifecycle below runs on all four. Run by Schemathesis' engine, one test per app:
# its pytest items of one function share one node id under pytest 9, and `pytest -n --dist
# loadfile` then runs only one of them.
@pytest.mark.parametrize("name", ["memory", "sqlite_auth"])
def test_every_operation_as_described(name: str) -> None:
    problems = schemathesis_failures(SCHEMAS[name])
    assert not problems, "\n".join(problems)


USERS = {"alice": "Bearer alice-token", "bob": "Bearer bob-token"}
THREADS = ("t1", "t2", "a/b")  # an id may hold "/": the path sends it as %2F
THREAD = st.sampled_from(THREADS)
USER = st.sampled_from(sorted(USERS))


class Lifecycle(RuleBasedStateMachine):
    """Conversations driven through their whole life, every request and response checked by
    Schemathesis against the description (``call_and_validate``: all of its checks), and what one
    route says checked against what the others say: a conversation a run made is read back by its
    owner only, waits on the refund's approval, is finished by the approval (or the refusal), is
    listed, renamed and deleted (``DatabaseStore``), and is gone after the delete."""

    schema: Any
    auth: bool
    lists: bool
    made = 0

    def __init__(self) -> None:
        super().__init__()
        self.owner: dict[str, str | None] = {}  # the conversations that exist, by who made them
        self.waits: dict[str, list[str]] = {}  # the interrupt ids a conversation waits on
        self.serial = 0
        # a new app (and store) for each example: what one example left cannot change the next
        Lifecycle.made += 1
        store = None
        if self.lists:
            store = dspy_imp.web.DatabaseStore(f"sqlite:///{Path(_DATABASES.name) / f'life-{Lifecycle.made}.db'}")
        self.app = make_app(store, self.auth)

    def _send(self, path: str, method: str, user: str, **data: Any) -> Any:
        self.serial += 1
        case = self.schema[path][method].Case(**data)
        headers = {"Authorization": USERS[user]}
        return case.call_and_validate(headers=headers, app=self.app)

    def _user(self, user: str) -> str | None:
        return user if self.auth else None

    def _thread(self, data: st.DataObject) -> str:
        """Mostly a conversation that exists (when one does), else any of ``THREADS``."""
        if self.owner and data.draw(st.integers(0, 3), label="existing") > 0:
            return data.draw(st.sampled_from(sorted(self.owner)), label="thread")
        return data.draw(THREAD, label="thread")

    def _who(self, thread: str, user: str, as_owner: bool) -> str:
        """``user``, or the conversation's owner (when it has one) if ``as_owner``."""
        owner = self.owner.get(thread)
        return owner if as_owner and owner is not None else user

    def _mine(self, thread: str, user: str) -> bool:
        return thread in self.owner and self.owner[thread] == self._user(user)

    @rule(thread=THREAD, user=USER, chat=st.booleans())
    def run_turn(self, thread: str, user: str, chat: bool) -> None:
        if chat:
            message = {"id": f"m{self.serial}", "role": "user", "parts": [{"type": "text", "text": "Refund 42"}]}
            response = self._send("/api/chat", "POST", user, body={"id": thread, "messages": [message]})
        else:
            message = {"id": f"m{self.serial}", "role": "user", "content": "Refund 42"}
            body = {"threadId": thread, "runId": f"r{self.serial}", "messages": [message]}
            response = self._send("/ag-ui", "POST", user, body=body)
        theirs = thread in self.owner and not self._mine(thread, user)
        assert response.status_code == (404 if theirs else 200), response.text  # another's: as REST answers
        if theirs:
            return
        if thread not in self.owner:
            self.owner[thread] = self._user(user)  # a new conversation: its first turn pauses on the refund
        self.read(thread, user)

    @rule(thread=THREAD, user=USER)
    def read(self, thread: str, user: str) -> None:
        response = self._send("/api/conversations/{id}", "GET", user, path_parameters={"id": thread})
        assert response.status_code == (200 if self._mine(thread, user) else 404), response.text
        if response.status_code == 200:
            body = response.json()
            assert body["running"] is False
            self.waits[thread] = [interrupt["id"] for interrupt in body["interrupts"]]

    def _waiting(self) -> list[str]:
        return sorted(thread for thread, waits in self.waits.items() if waits and thread in self.owner)

    @precondition(lambda self: self._waiting())
    @rule(data=st.data(), approved=st.booleans())
    def decide(self, data: st.DataObject, approved: bool) -> None:
        thread = data.draw(st.sampled_from(self._waiting()))
        owner = self.owner[thread]
        user = owner if owner is not None else "alice"
        waits = self.waits[thread]
        resume = [{"interruptId": waits[0], "status": "resolved", "payload": {"approved": approved}}]
        body = {"threadId": thread, "runId": f"r{self.serial}", "messages": [], "resume": resume}
        response = self._send("/ag-ui", "POST", user, body=body)
        assert response.status_code == 200
        assert '"type":"RUN_FINISHED"' in response.text, response.text[-500:]
        self.read(thread, user)
        assert self.waits[thread] == []  # decided: the turn ran to its answer

    @rule(thread=THREAD, user=USER)
    def stop(self, thread: str, user: str) -> None:
        response = self._send("/api/conversations/{id}/stop", "POST", user, path_parameters={"id": thread}, body={})
        # every turn here has ended by the time its stream is read: nothing to stop
        theirs = thread in self.owner and not self._mine(thread, user)
        assert response.status_code == (404 if theirs else 409), response.text

    @rule(data=st.data(), user=USER, as_owner=st.booleans(), title=st.text(max_size=20))
    def rename(self, data: st.DataObject, user: str, as_owner: bool, title: str) -> None:
        thread = self._thread(data)
        user = self._who(thread, user, as_owner)
        response = self._send(
            "/api/conversations/{id}", "PATCH", user, path_parameters={"id": thread}, body={"title": title}
        )
        expected = 501 if not self.lists else 200 if self._mine(thread, user) else 404
        assert response.status_code == expected, response.text

    @rule(data=st.data(), user=USER, as_owner=st.booleans())
    def delete(self, data: st.DataObject, user: str, as_owner: bool) -> None:
        thread = self._thread(data)
        user = self._who(thread, user, as_owner)
        response = self._send("/api/conversations/{id}", "DELETE", user, path_parameters={"id": thread})
        if not self._mine(thread, user):
            assert response.status_code == 404, response.text
            return
        assert response.status_code == (204 if self.lists else 501), response.text
        if self.lists:
            del self.owner[thread]
            self.waits.pop(thread, None)

    @rule(user=USER)
    def listed(self, user: str) -> None:
        response = self._send("/api/conversations", "GET", user)
        if not self.lists:
            assert response.status_code == 501
            return
        mine = {thread for thread in self.owner if self._mine(thread, user)}
        assert {c["id"] for c in response.json()} == mine


def _lifecycle(name: str) -> type[Lifecycle]:
    store_lists = name.startswith("sqlite")
    return type(
        f"Lifecycle_{name}",
        (Lifecycle,),
        {"schema": SCHEMAS[name], "auth": name.endswith("auth"), "lists": store_lists},
    )


@pytest.mark.parametrize("name", SCHEMAS)
def test_conversations_through_their_life(name: str) -> None:
    machine = _lifecycle(name)
    settings = hypothesis.settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),  # they time generation: no test on machine speed
    )
    run_state_machine_as_test(machine, settings=settings)

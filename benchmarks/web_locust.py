"""The Locust user of the web load benchmark: one conversation of ``BENCH_TURNS`` turns after another.

Run by ``benchmarks.web_load`` (``locust -f benchmarks/web_locust.py --headless ...``), configured
by the environment:

- ``BENCH_HOSTS``: the instances' base URLs, comma-separated; user *i* keeps to host *i mod n*
  (a sticky load balancer: the memory store keeps a conversation in one process).
- ``BENCH_PROTOCOL``: ``agui`` (``POST /ag-ui`` with a ``RunAgentInput``, read to
  ``RUN_FINISHED``/``RUN_ERROR``), ``aisdk`` (``POST /api/chat``, read to ``[DONE]``) or
  ``mixed`` (even users AG-UI, odd users the AI SDK). Each request carries the whole
  conversation so far, as browser clients send it (pydantic-ai's AG-UI app keeps no history).
- ``BENCH_TURNS`` (3), ``BENCH_MODEL`` (the loopback model's root, for its counts),
  ``BENCH_OUT`` (where the results JSON goes when the run stops), ``BENCH_STOP_AFTER`` (stop
  once that many turns have ended, instead of at the run time: the harness's test).

A refusal with ``Retry-After`` (429, 409) is counted by status and message, and the same turn
is sent again after the wait (at most 10 s). When all users are spawned, the instances' lag
samples and the model's count are reset (their stats then, and this process's CPU seconds, are
kept: ``benchmarks.web_cpu`` counts each process's CPU from there); when the run stops, the instances' ``/bench/stats``,
``/healthz`` and ``/readyz`` and the model's count are read, and everything goes to ``BENCH_OUT``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import gevent
from locust import FastHttpUser, constant, events, task

from benchmarks.web_counts import error_kind, event_error, without_numbers

HOSTS = [h for h in os.environ.get("BENCH_HOSTS", "http://127.0.0.1:8000").split(",") if h]
PROTOCOL = os.environ.get("BENCH_PROTOCOL", "agui")
TURNS = int(os.environ.get("BENCH_TURNS", "3"))
MODEL = os.environ.get("BENCH_MODEL", "")
OUT = os.environ.get("BENCH_OUT", "")
STOP_AFTER = int(os.environ.get("BENCH_STOP_AFTER", "0"))  # quit after this many turns (0: at -t)
RETRY_CAP = 10.0

TURN_RECORDS: list[list[Any]] = []  # [protocol, started (time.time()), first event s, end s]
ERRORS: dict[str, int] = {}
STATE: dict[str, Any] = {"spawned_at": None, "started_at": time.time(), "conversations": 0}
_USERS = itertools.count()


def count(kind: str) -> None:
    ERRORS[kind] = ERRORS.get(kind, 0) + 1


class Conversation(FastHttpUser):
    wait_time = constant(0)
    network_timeout = 300.0
    connection_timeout = 60.0
    host = HOSTS[0]

    def __init__(self, environment: Any) -> None:
        self.index = next(_USERS)
        self.host = HOSTS[self.index % len(HOSTS)]
        super().__init__(environment)
        self.protocol = PROTOCOL if PROTOCOL != "mixed" else ("agui", "aisdk")[self.index % 2]

    @task
    def conversation(self) -> None:
        key = uuid.uuid4().hex
        STATE["conversations"] += 1
        history: list[dict[str, Any]] = []
        for turn in range(TURNS):
            text = f"question {turn}"
            while True:
                wait = self.turn(key, turn, text, history)
                if wait is None:
                    break
                gevent.sleep(wait)

    def turn(self, key: str, turn: int, text: str, history: list[dict[str, Any]]) -> float | None:
        """One turn read to its end; the seconds to wait before sending it again, or ``None``."""
        if self.protocol == "agui":
            path = "/ag-ui"
            user = {"id": f"{key}-u{turn}", "role": "user", "content": text}
            body: dict[str, Any] = {
                "threadId": key,
                "runId": f"{key}-r{turn}",
                "messages": [*history, user],
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
        else:
            path = "/api/chat"
            user = {"id": f"{key}-u{turn}", "role": "user", "parts": [{"type": "text", "text": text}]}
            body = {"id": key, "trigger": "submit-message", "messages": [*history, user]}
        start, first, answer = time.time(), None, []
        end_kind = None
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        try:
            with self.client.post(
                path,
                data=json.dumps(body),
                headers=headers,
                stream=True,
                catch_response=True,
                name=f"{self.protocol} turn",
            ) as response:
                status = response.status_code
                if status != 200:
                    retry = response.headers.get("retry-after")
                    count(error_kind(status, response.text or "", retry))
                    response.failure(f"HTTP {status}")
                    if retry is not None and status in (429, 409, 503):
                        return min(float(retry), RETRY_CAP)
                    return None
                stream = response._response  # geventhttpclient's: readline returns each line as it comes
                while line := stream.readline(b"\n"):
                    data = line.decode().partition("data: ")[2].strip()
                    if not data:
                        continue
                    if first is None:
                        first = time.time() - start
                    end_kind = self.read(data, answer) or end_kind
                if end_kind == "ok":
                    response.success()
                else:
                    count(end_kind or "stream ended before its last event")
                    response.failure(end_kind or "no end")
        except Exception as error:  # a cut connection: counted, the conversation goes on
            count(f"connection: {type(error).__name__}")
            return None
        if end_kind == "ok":
            TURN_RECORDS.append([self.protocol, start, first, time.time() - start])
            if STOP_AFTER and len(TURN_RECORDS) == STOP_AFTER:
                gevent.spawn(self.environment.runner.quit)
            history.append(user)
            reply = "".join(answer)
            if self.protocol == "agui":
                history.append({"id": f"{key}-a{turn}", "role": "assistant", "content": reply})
            else:
                history.append(
                    {"id": f"{key}-a{turn}", "role": "assistant", "parts": [{"type": "text", "text": reply}]}
                )
        return None

    def read(self, data: str, answer: list[str]) -> str | None:
        """``"ok"`` at the stream's last event, an error kind for an error event, else ``None``."""
        if self.protocol == "aisdk" and data == "[DONE]":
            return "ok"
        try:
            event = json.loads(data)
        except ValueError:
            return None
        kind = event.get("type")
        if kind in ("TEXT_MESSAGE_CONTENT", "text-delta"):
            answer.append(str(event.get("delta", "")))
        if kind == "RUN_FINISHED":
            return "ok"
        found = event_error(event)
        if found is not None:
            return ("RUN_ERROR: " if kind == "RUN_ERROR" else "error part: ") + without_numbers(found)
        return None


def _get(url: str, method: str = "GET") -> tuple[int, Any]:
    request = urllib.request.Request(url, data=b"{}" if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        return error.code, None
    except OSError as error:
        return 0, type(error).__name__
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")[:500]


@events.spawning_complete.add_listener
def _spawned(user_count: int, **_: Any) -> None:
    STATE["spawned_at"] = time.time()
    STATE["cpu_at_spawned"] = time.process_time()  # this process's CPU seconds, from here to the stop
    STATE["instances_at_spawned"] = [_get(f"{host}/bench/reset", "POST")[1] for host in HOSTS]
    if MODEL:
        STATE["model_at_spawned"] = _get(f"{MODEL}/_bench/reset", "POST")[1]


@events.test_stop.add_listener
def _stopped(**_: Any) -> None:
    STATE["stopped_at"] = time.time()
    STATE["cpu_at_stopped"] = time.process_time()
    instances = []
    for host in HOSTS:
        _, stats = _get(f"{host}/bench/stats")
        health, _ = _get(f"{host}/healthz")
        ready, readiness = _get(f"{host}/readyz")
        instances.append(
            {
                "host": host,
                "stats": stats,
                "healthz": health,
                "readyz": ready,
                "readyz_body": readiness if ready == 200 else None,
            }
        )
    model = _get(f"{MODEL}/_bench/stats")[1] if MODEL else None
    if OUT:
        result = {**STATE, "turns": TURN_RECORDS, "errors": ERRORS, "instances": instances, "model": model}
        with open(OUT, "w") as f:
            json.dump(result, f)

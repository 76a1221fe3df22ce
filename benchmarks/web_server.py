"""One web instance for the load benchmark, with a probe of its own event loop.

    python -m benchmarks.web_server --kind dspy-imp --store memory --port 8001 --model http://127.0.0.1:9/v1

``--kind dspy-imp`` serves ``dspy_imp.web.app(agent, store=...)``: a ``ReActV2`` agent
(``message -> reply``, one tool) on ``dspy.LM`` pointed at the loopback model
(``benchmarks.web_model``), the response cache off. ``--store`` is ``memory``, or a database URL
for a ``DatabaseStore`` (``sqlite:///...``, ``postgresql://...``). ``--max-turns N`` is passed to
the app only when it takes that option; ``--no-loop-lag`` passes ``max_loop_lag=None`` to one that
takes it (``benchmarks.web_heap``: its turns all start at once). ``--kind pydantic-ai`` serves
pydantic-ai's AG-UI adapter (``AGUIAdapter.dispatch_request``) on ``POST /ag-ui`` for an ``Agent`` with an
``OpenAIChatModel`` on the same model and the same tool.

Both kinds are served by uvicorn, which parses HTTP with httptools when it is installed (the
``bench`` extra), else with h11, on uvloop's event loop when that is installed (the ``bench``
extra too: ``run``), else asyncio's; an idle connection is kept 15 s (``KEEP_ALIVE``), longer
than the load generator waits on a ``Retry-After``.

Besides the app's routes, ``/bench/stats`` returns the lag of the loop (a task sleeping 10 ms,
its overshoot in ms: p50/p95/p99/max since the last ``/bench/reset``; ``own``: each overshoot less
the time the loop's thread waited for a core meanwhile), the process's RSS and CPU
seconds, the garbage collector's time and its pauses by generation (since the reset), and the loop
thread's CPU seconds and the seconds it waited for a core (``loop_thread``: what of the lag is the
machine's); ``/bench/reset`` clears the lag samples and the pauses. ``/bench/heap`` (for
``benchmarks.web_heap``) collects the garbage, then counts the objects the cyclic collector walks
(the frozen ones aside), by type, and times one more full collection of what is left.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from benchmarks.web_counts import percentile

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MODEL = "gpt-4o-mini"
KEY = "sk-bench"
TICK = 0.01
KEEP_ALIVE = 15  # seconds an idle connection is kept (uvicorn's default: 5)

ASGI = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


class Probe:
    """Overshoots of a 10 ms sleep on the loop, in ms, since the last reset; and each one less the
    time the loop's thread waited for a core meanwhile (``own``, where the kernel tells: the lag of
    the process's own work, the machine's share taken out)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.own: list[float] = []

    async def run(self) -> None:
        while True:
            before = loop_thread()
            start = time.perf_counter()
            await asyncio.sleep(TICK)
            late = (time.perf_counter() - start - TICK) * 1000
            self.samples.append(late)
            after = loop_thread()
            if before is not None and after is not None:
                self.own.append(max(0.0, late - (after["runqueue_wait_s"] - before["runqueue_wait_s"]) * 1000))

    def reset(self) -> None:
        self.samples = []
        self.own = []

    def stats(self) -> dict[str, Any]:
        return {**_spread(self.samples), "own": _spread(self.own) if self.own else None}


def _spread(s: list[float]) -> dict[str, Any]:
    return {
        "samples": len(s),
        **{f"p{int(q * 100)}": percentile(s, q) for q in (0.5, 0.95, 0.99)},
        "max": max(s) if s else None,
    }


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Collections:
    """The seconds the cyclic garbage collector took, by generation (its time counts as CPU of
    whatever line allocated when it ran: a profile spreads it over the app); and each collection's
    pause of the process (wall clock, ms) since the last ``/bench/reset``, by generation."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self.pauses: list[list[float]] = [[], [], []]
        self._started = 0.0
        self._wall = 0.0
        gc.callbacks.append(self._timed)

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
            self._wall = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.process_time() - self._started
            self.counts[info["generation"]] += 1
            self.pauses[info["generation"]].append((time.perf_counter() - self._wall) * 1000)

    def reset(self) -> None:
        self.pauses = [[], [], []]

    def stats(self) -> dict[str, Any]:
        pauses = [
            {"count": len(p), "max": round(max(p), 1) if p else None, "over_50": sum(x >= 50 for x in p)}
            for p in self.pauses
        ]
        return {"seconds": [round(s, 3) for s in self.seconds], "counts": list(self.counts), "pauses_ms": pauses}


def loop_thread() -> dict[str, float] | None:
    """The CPU seconds of this thread (the event loop's: the main one) and the seconds it waited,
    runnable, for a core (Linux's ``schedstat``): a loop that waits for a core lags for it, whatever
    the app does. ``None`` where the kernel does not tell."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            ran, waited = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return {"cpu_s": int(ran) / 1e9, "runqueue_wait_s": int(waited) / 1e9}


COLLECTIONS = Collections()


def _kind(thing: Any) -> str:
    """An object's type; a coroutine's, a generator's, a frame's, a function's: with its code's name."""
    kind = f"{type(thing).__module__}.{type(thing).__qualname__}"
    code = getattr(thing, "cr_code", None) or getattr(thing, "gi_code", None) or getattr(thing, "ag_code", None)
    code = code or getattr(thing, "__code__", None)
    return f"{kind} {code.co_qualname} {code.co_filename.rsplit('site-packages/', 1)[-1]}" if code is not None else kind


def heap(top: int = 600) -> dict[str, Any]:
    """The live objects a full collection walks (``gc.get_objects``: the frozen ones are not among
    them), by type, the garbage collected first; and the pause of a full collection of them (wall
    and CPU ms: the walk alone, no garbage left to free)."""
    gc.collect()
    objects = gc.get_objects()
    kinds = Counter(_kind(o) for o in objects)
    tracked = len(objects)
    del objects
    wall, cpu = time.perf_counter(), time.process_time()
    gc.collect()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "tracked": tracked,
        "frozen": gc.get_freeze_count(),
        "by_type": dict(kinds.most_common(top)),
        "full_ms": round(wall * 1000, 2),
        "full_cpu_ms": round(cpu * 1000, 2),
        "threshold": list(gc.get_threshold()),
    }


def with_probe(app: ASGI, probe: Probe) -> ASGI:
    async def outer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/bench/"):
            return await app(scope, receive, send)
        if scope["path"] == "/bench/reset":
            probe.reset()
            COLLECTIONS.reset()
        stats = (
            heap()
            if scope["path"] == "/bench/heap"
            else {
                "lag_ms": probe.stats(),
                "rss": rss(),
                "cpu_s": time.process_time(),
                "gc": COLLECTIONS.stats(),
                "loop_thread": loop_thread(),
            }
        )
        body = json.dumps(stats).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return outer


def ours(model: str, store: str, max_turns: int | None, presence: bool = False, loop_lag: bool = True) -> ASGI:
    import dspy

    import dspy_imp
    import dspy_imp.web

    agent = dspy_imp.ReActV2("message -> reply", tools=[look])
    agent.set_lm(dspy.LM(f"openai/{MODEL}", api_base=model, api_key=KEY, cache=False))
    options: dict[str, Any] = {}
    if store != "memory":
        options["store"] = (
            dspy_imp.web.DatabaseStore(store, presence=True) if presence else dspy_imp.web.DatabaseStore(store)
        )
    if max_turns is not None:
        if "max_turns" not in inspect.signature(dspy_imp.web.app).parameters:
            raise SystemExit("--max-turns: this dspy_imp.web.app takes no `max_turns` option")
        options["max_turns"] = max_turns
    if not loop_lag and "max_loop_lag" in inspect.signature(dspy_imp.web.app).parameters:
        options["max_loop_lag"] = None
    return dspy_imp.web.app(agent, **options)


def peer(model: str) -> ASGI:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.ui.ag_ui import AGUIAdapter
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    agent = Agent(OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=model, api_key=KEY)), tools=[look])

    async def agui(request: Request) -> Response:
        return await AGUIAdapter.dispatch_request(request, agent=agent)

    return Starlette(routes=[Route("/ag-ui", agui, methods=["POST"])])


async def serve(args: argparse.Namespace) -> None:
    import uvicorn

    if args.kind == "pydantic-ai":
        app = peer(args.model)
    else:
        app = ours(args.model, args.store, args.max_turns, args.presence, not args.no_loop_lag)
    probe = Probe()
    task = asyncio.create_task(probe.run())
    # A client told to come back later (``Retry-After``, up to the load generator's 10 s) keeps its
    # connection meanwhile: uvicorn's own 5 s would close it under the client's next request.
    config = uvicorn.Config(
        with_probe(app, probe),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        backlog=4096,
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE,
    )
    try:
        await uvicorn.Server(config).serve()
    finally:
        task.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=["dspy-imp", "pydantic-ai"], default="dspy-imp")
    parser.add_argument("--store", default="memory", help="memory, or a DatabaseStore URL")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True, help="the loopback model's base URL (.../v1)")
    parser.add_argument("--max-turns", type=int, help="the app's max_turns, when it has that option")
    parser.add_argument("--presence", action="store_true", help="DatabaseStore(presence=True) (Postgres)")
    parser.add_argument("--no-loop-lag", action="store_true", help="max_loop_lag=None, when the app has that option")
    run(serve(parser.parse_args()))


def run(main: Coroutine[Any, Any, None]) -> None:
    """``main`` on uvloop's event loop when it is installed (the ``bench`` extra; what uvicorn's own
    ``loop="auto"`` picks), else on asyncio's: every instance and the model alike, ours and the peer."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def loop_name() -> str:
    """The event loop ``run`` uses: ``uvloop`` or ``asyncio``."""
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


if __name__ == "__main__":
    main()

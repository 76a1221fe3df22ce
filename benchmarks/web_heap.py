"""What a running turn keeps alive in the web app, and a full collection's pause with N turns
running (a measurement, not a test).

    python -m benchmarks.web_heap [--levels 100,200,400] [--store memory] [--out /tmp/heap.json]

One instance of the load benchmark's server (``benchmarks.web_server``: ``dspy_imp.web.app`` of
a ``ReActV2`` with one tool on ``dspy.LM``) in a child process, on the load benchmark's loopback
model, held (``ModelServer(hold=True)``): every turn's answer stops halfway through its stream
until the model is released, so N turns started at once are all running, at the same point,
when the heap is read, however fast or busy the machine is (the app's ``max_turns`` above the
level, its ``max_loop_lag`` off: every turn is admitted). Half the turns are AG-UI, half AI
SDK, each a new conversation, sent by this process (the client's objects are not in the heap
read). After a few warm-up turns, for each level: the objects the cyclic collector walks
(``gc.get_objects``, the startup's frozen ones aside) with none running, then with N running,
their difference per running turn by type, and the pause of one full collection of that heap
(wall and CPU ms, the garbage collected first); then the turns are released and read to their
end. The object counts are the machine-independent result; the pauses are this machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from typing import Any

import httpx

from benchmarks.web_load import Target, start, stop
from benchmarks.web_model import ModelServer

WARM_UP = 4  # rounds of two turns before the first level
GUARD = 300.0  # seconds: a bound on every wait, never a measure


def body(protocol: str, key: str) -> tuple[str, dict[str, Any]]:
    """One turn's request: ``(path, JSON)``, a new conversation's first message."""
    if protocol == "agui":
        user = {"id": f"{key}-u", "role": "user", "content": "question"}
        run = {"threadId": key, "runId": f"{key}-r", "messages": [user], "state": {}, "tools": []}
        return "/ag-ui", run | {"context": [], "forwardedProps": {}}
    user = {"id": f"{key}-u", "role": "user", "parts": [{"type": "text", "text": "question"}]}
    return "/api/chat", {"id": key, "trigger": "submit-message", "messages": [user]}


async def turn(http: httpx.AsyncClient, index: int) -> str:
    """One turn read to its end; its last line."""
    path, payload = body(("agui", "aisdk")[index % 2], uuid.uuid4().hex)
    last = ""
    async with http.stream("POST", path, json=payload, headers={"accept": "text/event-stream"}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                last = line
    if response.status_code != 200:
        raise RuntimeError(f"a turn was answered {response.status_code}")
    return last


async def held(model: ModelServer, n: int) -> None:
    """Until ``n`` answers are held (every turn started is running, waiting at the same point)."""
    end = time.monotonic() + GUARD
    while (await asyncio.to_thread(model.stats))["held"] < n:
        if time.monotonic() > end:
            raise RuntimeError(f"{n} turns never all reached the model's hold")
        await asyncio.sleep(0.05)


async def running(http: httpx.AsyncClient, model: ModelServer, n: int, read: Any) -> tuple[Any, list[str]]:
    """``n`` turns started, ``read()`` while all of them run, then their ends."""
    turns = [asyncio.ensure_future(turn(http, i)) for i in range(n)]
    await held(model, n)
    during = await read()
    await asyncio.to_thread(model.release)
    return during, await asyncio.wait_for(asyncio.gather(*turns), GUARD)


def per_turn(during: dict[str, Any], idle: dict[str, Any], n: int) -> dict[str, Any]:
    kinds = {k: during["by_type"].get(k, 0) - idle["by_type"].get(k, 0) for k in during["by_type"]}
    top = sorted(((k, round(v / n, 1)) for k, v in kinds.items() if v > 0), key=lambda kv: -kv[1])
    return {"tracked": round((during["tracked"] - idle["tracked"]) / n, 1), "by_type": dict(top[:600])}


async def measure(levels: list[int], store: str) -> dict[str, Any]:
    with ModelServer(hold=True) as model, _logs() as logs:
        target = Target("dspy-imp heap", "dspy-imp", store, 1, "mixed")
        # every turn admitted: no ``max_turns`` below the level, no lag bound (they all start at once)
        start(target, model.base_url, store, max(levels) + 10, logs, options=("--no-loop-lag",))
        try:
            host = target.hosts[0]
            limits = httpx.Limits(max_connections=max(levels) + 10, max_keepalive_connections=max(levels) + 10)
            async with httpx.AsyncClient(base_url=host, timeout=GUARD, limits=limits) as http:

                async def heap() -> dict[str, Any]:
                    return dict((await http.get("/bench/heap")).json())

                for _ in range(WARM_UP):
                    await running(http, model, 2, heap)
                results: dict[str, Any] = {"levels": []}
                for n in levels:
                    idle = await heap()
                    during, ends = await running(http, model, n, heap)
                    after = await heap()
                    bad = [e for e in ends if "RUN_FINISHED" not in e and "[DONE]" not in e]
                    results["levels"].append(
                        {
                            "running": n,
                            "idle": {k: idle[k] for k in ("tracked", "full_ms", "full_cpu_ms")},
                            "during": {k: during[k] for k in ("tracked", "full_ms", "full_cpu_ms")},
                            "after": {k: after[k] for k in ("tracked", "full_ms", "full_cpu_ms")},
                            "per_running_turn": per_turn(during, idle, n),
                            "kept_per_ended_turn": per_turn(after, idle, n),
                            "turns_not_ended_ok": len(bad),
                            "threshold": during["threshold"],
                            "frozen": during["frozen"],
                        }
                    )
                    print(json.dumps(results["levels"][-1]["per_running_turn"]["tracked"]), n, during["full_ms"])
                return results
        finally:
            stop(target)


class _logs:
    """A temporary directory for the server's log."""

    def __enter__(self) -> Any:
        import tempfile
        from pathlib import Path

        self.folder = tempfile.TemporaryDirectory()
        return Path(self.folder.name)

    def __exit__(self, *exc: Any) -> None:
        self.folder.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="100,200,400", help="running turns, comma-separated")
    parser.add_argument("--store", default="memory", help="memory, or a DatabaseStore URL")
    parser.add_argument("--out", help="write the JSON here (else printed)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x]
    results = asyncio.run(measure(levels, args.store)) | {"load": [round(x, 2) for x in os.getloadavg()]}
    text = json.dumps(results, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()

"""Tools the provider runs (`dspy_imp.hosted`): a web search beside a function tool, on three providers.

`WebSearch` and `CodeExecution` go in `tools=[...]` beside function tools; the provider runs them
inside its reply, and the loop keeps what it served (sent back on the next request), its citations
(`pred.metadata.citations`) and the count of hosted calls (`pred.metadata.usage.hosted_calls`).

Offline, a real `dspy.LM` (DSPy's native engine, a dummy key) talks HTTP to a small server in this
process on 127.0.0.1, which answers each request with the next reply of a recorded exchange: live
replies of each provider's search recorded by pydantic-ai (`cassettes/hosted/*.json`). The few
replies around them that are ours (a function call, a `submit`) are written below, marked as such.

    python examples/hosted_tools.py                      # offline: Anthropic, OpenAI, Gemini in turn
    python examples/hosted_tools.py --provider openai    # offline, one provider
    python examples/hosted_tools.py --live               # DSPY_IMP_MODEL: an anthropic/, openai/ or gemini/ model
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dspy
from _shared import live_model, one_line, show_turn

import dspy_imp
from dspy_imp.hosted import CodeExecution, WebSearch

CASSETTES = Path(__file__).resolve().parent.parent / "cassettes" / "hosted"
PROVIDERS = ("anthropic", "openai", "gemini")


def recording(name: str) -> dict[str, Any]:
    """A recorded exchange of ``cassettes/hosted`` (its ``_source`` names the cassette it came from)."""
    found: dict[str, Any] = json.loads((CASSETTES / f"{name}.json").read_text())
    return found


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def calculator(expression: str) -> str:
    """Add whole numbers, e.g. ``2+2``."""
    terms = expression.replace(" ", "").split("+")
    return str(sum(int(term) for term in terms)) if all(term.isdigit() for term in terms) else "?"


# -- The loopback server: each POST gets the next recorded reply ---------------------------------


@contextmanager
def replay(replies: Sequence[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve ``replies`` in order on 127.0.0.1 (a free port); yield the base URL and the list the
    request bodies arrive in. A request beyond the replies gets HTTP 500, so a turn that asks for more
    than was recorded fails loudly."""
    pending = list(replies)
    received: list[dict[str, Any]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                received.append(json.loads(raw or b"{}"))
                reply = pending.pop(0) if pending else None
            status = 200 if reply is not None else 500
            data = json.dumps(reply or {"error": {"message": "no recorded reply left", "type": "server_error"}})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data.encode())))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data.encode())
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the example prints what the agent did

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- Anthropic: the recorded web search, then our function call and our submit --------------------


def _anthropic_message(content: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    calls = any(block["type"] == "tool_use" for block in content)
    return {
        "id": "msg_011CfY3xKWz4wdu1A1if4oLf",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 120, "output_tokens": 20},
    }


def anthropic_replies() -> list[dict[str, Any]]:
    searched = recording("anthropic_web_search")  # server_tool_use, web_search_tool_result, cited text
    ours_weather = {"type": "tool_use", "id": "toolu_01Weather", "name": "get_weather", "input": {"city": "Geneva"}}
    ours_submit = {
        "type": "tool_use",
        "id": "toolu_02Submit",
        "name": "submit",
        "input": {"answer": "CERN was founded on September 29, 1954; it is sunny in Geneva."},
    }
    return [
        _anthropic_message([*searched["content"], ours_weather], searched["usage"]),  # recorded + ours
        _anthropic_message([ours_submit]),  # ours
    ]


# -- OpenAI Responses: our function call, the recorded gpt-5 search, our submit; then code ------


def _openai_response(*output: dict[str, Any]) -> dict[str, Any]:
    """A Responses API ``response`` object of ours (the recordings' replies are served as recorded)."""
    usage = {"input_tokens": 412, "output_tokens": 64, "total_tokens": 476}
    return {
        "id": "resp_ours",
        "object": "response",
        "status": "completed",
        "model": "gpt-5-2025-08-07",
        "output": list(output),
        "usage": usage,
    }


def _function_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def openai_replies() -> list[dict[str, Any]]:
    searched = recording("openai_web_search")["interactions"][0]["response"]  # six web_search_call items
    answer = "The UN backed a two-state roadmap; protests in Nepal; strikes in Yemen. Sunny in Geneva."
    return [
        _openai_response(_function_call("call_Weather01", "get_weather", {"city": "Geneva"})),  # ours
        searched,  # recorded
        _openai_response(_function_call("call_Submit02", "submit", {"answer": answer})),  # ours
    ]


def openai_code() -> tuple[str, dict[str, Any]]:
    """The recorded code interpreter exchange's question and reply (gpt-5, one ``code_interpreter_call``)."""
    first = recording("openai_code_interpreter")["interactions"][0]
    return first["request"]["input"][0]["content"], first["response"]


# -- Gemini: both recorded replies (a calculator call and a Google Search, then the grounded answer) --
# Gemini reports no count of its searches: each reply grounded by Google Search counts one.


def gemini_replies() -> list[dict[str, Any]]:
    return [r["body"] for r in recording("gemini_function_tools_with_builtin_tools")["responses"]]


# -- The agents, the same offline and live ------------------------------------------------------


def search_agent(provider: str) -> tuple[dspy_imp.ReActV2, str]:
    """The agent and question for ``provider``. Gemini's recording ends in a text answer (no submit)."""
    if provider == "gemini":
        agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), calculator])
        return agent, "What is 2+2? Also search for the current weather in Tokyo."
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), get_weather], finish="submit")
    if provider == "anthropic":
        return agent, "What happened on September 29, and the weather in Geneva?"
    return agent, "The weather in Geneva, and the top 3 news in the world today?"


def offline_lm(provider: str, base_url: str) -> dspy.LM:
    """A real ``dspy.LM`` on DSPy's native engine, pointed at the loopback server, with a dummy key."""
    common: dict[str, Any] = {"api_key": "sk-offline", "cache": False, "num_retries": 0}
    if provider == "anthropic":  # the recorded reply holds no thinking block: a turn without thinking
        return dspy.LM("anthropic/claude-sonnet-4-5", api_base=base_url + "/v1", reasoning_effort=None, **common)
    if provider == "openai":
        return dspy.LM("openai/gpt-5", model_type="responses", api_base=base_url + "/v1", **common)
    return dspy.LM("gemini/gemini-3-flash-preview", api_base=base_url + "/v1beta", **common)


def show_hosted(pred: dspy.Prediction) -> None:
    meta = pred.metadata
    print(f"  hosted_calls: {meta.usage.hosted_calls}")
    if meta.citations:
        first = meta.citations[0]
        print(f"  first citation: {first.get('url')} for {first.get('cited_for', '')[:60]!r}")


def run_turn(agent: dspy_imp.ReActV2, lm: dspy.LM, question: str) -> None:
    print(f"question: {question}")
    with dspy.context(lm=lm):
        pred = agent(question=question)
    show_turn(pred)
    show_hosted(pred)


def served_items_sent_back(provider: str, body: dict[str, Any]) -> int:
    """How many of the provider's own items (its tool calls and their results) a request sends back."""
    if provider == "anthropic":
        blocks = [
            b
            for m in body["messages"]
            if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"]
        ]
        return sum(b["type"] in ("server_tool_use", "web_search_tool_result") for b in blocks)
    if provider == "openai":
        return sum(item.get("type") == "web_search_call" for item in body["input"])
    parts = [p for c in body["contents"] if c["role"] == "model" for p in c["parts"]]
    return sum("toolCall" in p or "toolResponse" in p for p in parts)


def offline(provider: str) -> None:
    print(f"\n== {provider} (recorded replies over loopback HTTP) ==")
    agent, question = search_agent(provider)
    replies = {"anthropic": anthropic_replies, "openai": openai_replies, "gemini": gemini_replies}[provider]()
    with replay(replies) as (base_url, received):
        run_turn(agent, offline_lm(provider, base_url), question)
    count = served_items_sent_back(provider, received[-1])
    print(f"  requests: {len(received)}; the last sent back the {count} provider items served before it")
    if provider == "openai":
        question, reply = openai_code()
        with replay([reply]) as (base_url, _):  # recorded: reasoning, a code_interpreter_call, the answer
            run_turn(
                dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()]),
                offline_lm(provider, base_url),
                question,
            )


def live() -> None:
    lm = live_model()
    provider = lm.model.split("/", 1)[0]
    if provider not in PROVIDERS:
        sys.exit(f"--live: {lm.model} runs no provider tools here (use an anthropic/, openai/ or gemini/ model)")
    if provider == "openai":  # OpenAI's hosted tools run on its Responses API
        lm = dspy.LM(lm.model, model_type="responses")
    print(f"model: {lm.model}")
    agent, question = search_agent(provider)
    try:
        run_turn(agent, lm, question)
        run_turn(dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()]), lm, "What is 3 * 12390?")
    except Exception as error:  # a refused route or a failed request: one line, not a traceback
        sys.exit(f"--live: {one_line(error)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", choices=PROVIDERS, help="offline: replay only this provider's recording")
    parser.add_argument("--live", action="store_true", help="use DSPY_IMP_MODEL instead of the recorded replies")
    args = parser.parse_args()
    if args.live:
        live()
        return
    print("model: scripted (recorded replies, served to a real dspy.LM over 127.0.0.1; --live for a real model)")
    for provider in [args.provider] if args.provider else PROVIDERS:
        offline(provider)


if __name__ == "__main__":
    main()

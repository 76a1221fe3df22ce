// The dspy-imp chat page: speaks AG-UI to POST ag-ui, renders every event as it arrives.
// Everything the agent or a tool sends is shown with textContent (never parsed as HTML).
"use strict";
(() => {
  const log = document.getElementById("log");
  const form = document.getElementById("ask");
  const question = document.getElementById("question");
  const send = document.getElementById("send");
  const threadId = newId();
  const calls = new Map(); // tool call id -> its card, across runs (a Map: an id "__proto__" is an id)
  let busy = false;

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return Date.now().toString(16) + Math.random().toString(16).slice(2);
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function pretty(text) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
  }

  function setBusy(value) {
    busy = value;
    send.disabled = value;
    question.disabled = value;
  }

  fetch("api/info").then((r) => r.json()).then((info) => {
    const tools = info.tools.map((t) => t.name).join(", ");
    document.getElementById("signature").textContent = `${info.signature}` + (tools ? ` · tools: ${tools}` : "");
    if (info.instructions) document.getElementById("title").textContent = info.instructions.split("\n")[0];
  }).catch(() => {});

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = question.value.trim();
    if (!text || busy) return;
    question.value = "";
    log.append(el("div", "user", text));
    run({ messages: [{ id: newId(), role: "user", content: text }] });
  });
  question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
  });

  async function run(extra) {
    setBusy(true);
    const view = new RunView(log.appendChild(el("section", "turn")));
    const body = Object.assign(
      { threadId, runId: newId(), state: null, messages: [], tools: [], context: [], forwardedProps: {} }, extra);
    try {
      const response = await fetch("ag-ui", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "text/event-stream" },
        body: JSON.stringify(body),
      });
      if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
      await readEvents(response, (event) => view.handle(event));
    } catch (error) {
      view.error(String(error));
    }
    setBusy(view.waiting);
  }

  async function readEvents(response, handle) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const chunk = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = chunk.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
        if (data) handle(JSON.parse(data));
      }
    }
  }

  function card(id, name) {
    if (calls.has(id)) return calls.get(id);
    const box = el("div", "tool-call");
    box.dataset.callId = id;
    box.append(el("span", "name", name || "tool"));
    const args = box.appendChild(el("pre", "args", ""));
    const result = box.appendChild(el("pre", "result pending", "running…"));
    const made = { box, args, result, argsText: "" };
    calls.set(id, made);
    return made;
  }

  class RunView {
    constructor(root) {
      this.root = root;
      this.messages = new Map(); // message id -> its node
      this.waiting = false;
    }

    handle(event) {
      switch (event.type) {
        case "TEXT_MESSAGE_START":
          this.messages.set(event.messageId, this.root.appendChild(el("div", "answer", "")));
          break;
        case "REASONING_MESSAGE_START": {
          const thought = this.root.appendChild(el("details", "thought"));
          thought.append(el("summary", null, "Thought"));
          this.messages.set(event.messageId, thought.appendChild(el("div", "body", "")));
          break;
        }
        case "TEXT_MESSAGE_CONTENT":
        case "REASONING_MESSAGE_CONTENT":
          this.messages.get(event.messageId).textContent += event.delta;
          break;
        case "TOOL_CALL_START":
          this.root.append(card(event.toolCallId, event.toolCallName).box);
          break;
        case "TOOL_CALL_ARGS": {
          const call = card(event.toolCallId);
          call.argsText += event.delta;
          call.args.textContent = pretty(call.argsText);
          break;
        }
        case "TOOL_CALL_RESULT": {
          const call = card(event.toolCallId);
          call.result.textContent = event.content;
          call.result.classList.remove("pending");
          call.waiting = false;
          break;
        }
        case "MESSAGES_SNAPSHOT":
          for (const message of event.messages) {
            const call = message.role === "tool" && calls.get(message.toolCallId);
            if (!call) continue;
            if (message.error) call.box.classList.add("error");
            if (call.result.classList.contains("pending") || call.waiting) {
              call.result.textContent = message.content;  // a result this run did not stream
              call.result.classList.remove("pending");
              call.waiting = false;
            }
          }
          break;
        case "RUN_FINISHED":
          this.finished(event);
          break;
        case "RUN_ERROR":
          this.error(event.message);
          break;
        default:
          break;
      }
    }

    finished(event) {
      const result = event.result || {};
      const usage = result.usage || {};
      const requests = Object.values(usage.requests || {}).reduce((a, b) => a + b, 0);
      let line = `Turn ended: ${result.termination_reason}`;
      if (result.termination_cause) line += ` (${result.termination_cause})`;
      line += ` · ${requests} request${requests === 1 ? "" : "s"} · ${usage.input_tokens} tokens in, ${usage.output_tokens} out`;
      if (usage.cost != null) line += ` · $${usage.cost.toFixed(4)}`;
      this.root.append(el("div", `termination ${result.termination_reason}`, line));
      if (event.outcome && event.outcome.type === "interrupt") this.ask(event.outcome.interrupts);
    }

    error(message) {
      this.root.append(el("div", "run-error", message));
    }

    ask(interrupts) {
      this.waiting = true;
      const decisions = new Map();
      for (const interrupt of interrupts) {
        const meta = (interrupt.metadata && interrupt.metadata.dspy_imp) || {};
        const call = card(interrupt.toolCallId, meta.name);
        if (!call.box.isConnected) this.root.append(call.box);
        call.result.textContent = interrupt.message || "waiting";
        call.waiting = true;
        const box = call.box.appendChild(el("div", "approval"));
        const decide = (entry, label) => {
          decisions.set(interrupt.id, Object.assign({ interruptId: interrupt.id }, entry));
          box.replaceChildren(el("span", "decided", label));
          if (decisions.size === interrupts.length) run({ resume: [...decisions.values()] });
        };
        if (interrupt.reason === "tool_approval") {
          const approve = box.appendChild(el("button", "approve", "Approve"));
          const reason = box.appendChild(el("input", "reason"));
          reason.placeholder = "Reason, if you refuse";
          const refuse = box.appendChild(el("button", "refuse", "Refuse"));
          approve.type = refuse.type = "button";
          approve.onclick = () => decide({ status: "resolved", payload: { approved: true } }, "Approved");
          refuse.onclick = () => {
            const why = reason.value.trim();
            decide({ status: "resolved", payload: why ? { approved: false, reason: why } : { approved: false } },
              why ? `Refused: ${why}` : "Refused");
          };
        } else {
          const value = box.appendChild(el("input", "result-input"));
          value.placeholder = "The tool's result";
          const ok = box.appendChild(el("button", "send-result", "Send result"));
          ok.type = "button";
          ok.onclick = () => decide({ status: "resolved", payload: { result: value.value } }, "Result sent");
        }
      }
    }
  }
})();

// The dspy-imp chat page: speaks AG-UI to POST ag-ui and renders every event as it arrives.
// Text from the agent or a tool is shown with textContent, except answers: Markdown, rendered by
// the vendored marked with raw HTML escaped (shown as text), then sanitized by DOMPurify.
// State is keyed by Maps (a call id "__proto__" is just an id). The URL names the conversation
// (#c=<id>): a reload or a second tab reads it back from the server, waiting approvals included.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const log = $("log"), form = $("ask"), question = $("question"), send = $("send"), stop = $("stop");
  const calls = new Map(); // tool call id -> its card, across runs
  let threadId = fromUrl() || newId();
  let busy = false;
  let info = { outputs: [], output_types: {} };
  let stick = true; // follow new content unless the reader scrolled up

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return Date.now().toString(16) + Math.random().toString(16).slice(2);
  }
  function fromUrl() {
    const found = /^#c=(.+)$/.exec(location.hash);
    return found ? decodeURIComponent(found[1]) : null;
  }
  function toUrl(id) {
    history.replaceState(null, "", `#c=${encodeURIComponent(id)}`);
  }
  function api(path) {
    return `api/conversations/${encodeURIComponent(threadId)}${path || ""}`;
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
  const escapeHtml = (text) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  if (window.marked) marked.use({ gfm: true, breaks: true, renderer: { html: (token) => escapeHtml(token.text) } });
  if (window.DOMPurify) {
    DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
    });
  }
  function markdown(node, text) {
    if (!window.marked || !window.DOMPurify) { node.textContent = text; return; }
    node.innerHTML = DOMPurify.sanitize(marked.parse(text, { async: false }), { USE_PROFILES: { html: true } });
  }

  // -- scrolling: the conversation scrolls, the input stays in view ---------------------------
  log.addEventListener("scroll", () => { stick = log.scrollHeight - log.scrollTop - log.clientHeight < 80; });
  new MutationObserver(() => { if (stick) log.scrollTop = log.scrollHeight; })
    .observe(log, { childList: true, subtree: true, characterData: true });

  function setBusy(value, waiting) {
    busy = value;
    send.disabled = value || waiting;
    question.disabled = value || waiting;
    send.hidden = value;
    stop.hidden = !value;
    if (!value && !waiting) question.focus();
  }

  fetch("api/info").then((r) => r.json()).then((got) => {
    info = got;
    const tools = info.tools.map((t) => t.name).join(", ");
    $("signature").textContent = `${info.signature}` + (tools ? ` · tools: ${tools}` : "");
    $("title").textContent = document.title = info.name || "Agent";
  }).catch(() => {});

  // -- the conversations (a sidebar when the store lists them) ---------------------------------
  async function listChats() {
    const response = await fetch("api/conversations").catch(() => null);
    if (!response || !response.ok) return;
    const chats = await response.json();
    $("chats").hidden = window.innerWidth <= 700;
    $("toggle-chats").hidden = false;
    const list = $("chat-list");
    list.replaceChildren();
    for (const chat of chats) {
      const link = list.appendChild(el("a", chat.id === threadId ? "current" : "", chat.title || chat.id));
      link.href = `#c=${encodeURIComponent(chat.id)}`;
    }
  }
  $("toggle-chats").onclick = () => { $("chats").hidden = !$("chats").hidden; };
  window.addEventListener("hashchange", () => {
    const id = fromUrl();
    if (id && id !== threadId && !busy) open(id);
  });
  for (const button of [$("new-chat"), $("new-chat-top")]) {
    button.onclick = () => { if (!busy) open(newId()); };
  }

  async function open(id) {
    threadId = id;
    toUrl(id);
    calls.clear();
    log.replaceChildren();
    setBusy(false, false);
    await readBack();
    listChats();
  }

  async function readBack() {
    const response = await fetch(api()).catch(() => null);
    if (!response || !response.ok) return; // a new conversation
    const got = await response.json();
    let view = null;
    for (const message of got.messages) {
      if (message.role === "user") {
        log.append(el("div", "user", message.content));
        view = null;
        continue;
      }
      if (!view) view = new RunView(log.appendChild(el("section", "turn")));
      view.replay(message);
    }
    if (got.interrupts && got.interrupts.length) {
      if (!view) view = new RunView(log.appendChild(el("section", "turn")));
      view.ask(got.interrupts);
      setBusy(false, true);
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = question.value.trim();
    if (!text || busy) return;
    question.value = "";
    log.append(el("div", "user", text));
    stick = true;
    run({ messages: [{ id: newId(), role: "user", content: text }] }, text);
  });
  question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
  });
  stop.onclick = () => {
    stop.disabled = true;
    fetch(api("/stop"), { method: "POST", headers: { "content-type": "application/json" }, body: "{}" })
      .finally(() => { stop.disabled = false; });
  };

  async function run(extra, text) {
    setBusy(true, false);
    toUrl(threadId);
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
    setBusy(false, view.waiting);
    if (text && log.querySelectorAll(".user").length === 1) {
      await fetch(api(), { method: "PATCH", headers: { "content-type": "application/json" },
        body: JSON.stringify({ title: text.slice(0, 60) }) }).catch(() => null);
    }
    listChats();
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
    const box = el("details", "tool-call");
    box.open = true;
    box.dataset.callId = id;
    const summary = box.appendChild(el("summary"));
    summary.append(el("span", "name", name || "tool"));
    const timing = summary.appendChild(el("span", "timing", ""));
    const args = box.appendChild(el("pre", "args", ""));
    const result = box.appendChild(el("pre", "result pending", "running…"));
    const made = { box, args, result, timing, argsText: "", started: performance.now() };
    calls.set(id, made);
    return made;
  }
  function settle(call, content, error) {
    call.result.textContent = content;
    call.result.classList.remove("pending");
    if (error) call.box.classList.add("error");
    if (call.started !== null) call.timing.textContent = `${((performance.now() - call.started) / 1000).toFixed(1)} s`;
    call.started = null;
    call.waiting = false;
  }

  function typeOf(name, value) {
    const declared = info.output_types && info.output_types[name];
    if (declared) return declared;
    return value === null ? "null" : Array.isArray(value) ? "list" : typeof value;
  }

  class RunView {
    constructor(root) {
      this.root = root;
      this.messages = new Map(); // message id -> { node, text, kind }
      this.waiting = false;
      this.answer = null;
    }

    text(id, kind) {
      if (kind === "text") {
        const node = this.root.appendChild(el("div", "answer streaming", ""));
        this.answer = node;
        this.messages.set(id, { node, text: "", kind });
        return;
      }
      const thought = this.root.appendChild(el("details", "thought"));
      thought.append(el("summary", null, "Thought"));
      this.messages.set(id, { node: thought.appendChild(el("div", "body", "")), text: "", kind });
    }

    delta(id, delta) {
      const message = this.messages.get(id);
      if (!message) return;
      message.text += delta;
      if (message.kind !== "text") { message.node.textContent = message.text; return; }
      if (!message.frame) {
        message.frame = requestAnimationFrame(() => { message.frame = 0; markdown(message.node, message.text); });
      }
    }

    ended(id) {
      const message = this.messages.get(id);
      if (!message || message.kind !== "text") return;
      cancelAnimationFrame(message.frame || 0);
      message.frame = 0;
      markdown(message.node, message.text);
      message.node.classList.remove("streaming");
    }

    handle(event) {
      switch (event.type) {
        case "TEXT_MESSAGE_START": this.text(event.messageId, "text"); break;
        case "REASONING_MESSAGE_START": this.text(event.messageId, "reasoning"); break;
        case "TEXT_MESSAGE_CONTENT":
        case "REASONING_MESSAGE_CONTENT": this.delta(event.messageId, event.delta); break;
        case "TEXT_MESSAGE_END": this.ended(event.messageId); break;
        case "TOOL_CALL_START": {
          const call = card(event.toolCallId, event.toolCallName);
          call.started = performance.now();
          this.root.append(call.box);
          break;
        }
        case "TOOL_CALL_ARGS": {
          const call = card(event.toolCallId);
          call.argsText += event.delta;
          call.args.textContent = pretty(call.argsText);
          break;
        }
        case "TOOL_CALL_RESULT": settle(card(event.toolCallId), event.content, false); break;
        case "MESSAGES_SNAPSHOT":
          for (const message of event.messages) {
            const call = message.role === "tool" && calls.get(message.toolCallId);
            if (!call) continue;
            if (message.error) call.box.classList.add("error");
            if (call.result.classList.contains("pending") || call.waiting) settle(call, message.content, message.error);
          }
          break;
        case "RUN_FINISHED": this.finished(event); break;
        case "RUN_ERROR": this.error(event.message); break;
        default: break;
      }
    }

    replay(message) {
      if (message.role === "reasoning") {
        this.text(message.id, "reasoning");
        this.delta(message.id, message.content || "");
      } else if (message.role === "assistant") {
        for (const call of message.toolCalls || []) {
          const made = card(call.id, call.function.name);
          made.started = null;
          made.args.textContent = pretty(call.function.arguments);
          made.result.textContent = "";
          this.root.append(made.box);
        }
        if (message.content) {
          const node = this.root.appendChild(el("div", "answer", ""));
          markdown(node, message.content);
        }
      } else if (message.role === "tool") {
        const call = calls.get(message.toolCallId);
        if (call) settle(call, message.content, message.error);
      }
    }

    outputs(values) {
      const names = Object.keys(values || {});
      if (!names.length) return;
      const node = this.answer || this.root.appendChild(el("div", "answer", ""));
      node.classList.remove("streaming");
      node.replaceChildren();
      if (names.length === 1 && typeof values[names[0]] === "string") { markdown(node, values[names[0]]); return; }
      for (const name of names) {
        const value = values[name];
        const field = node.appendChild(el("div", "field"));
        field.dataset.name = name;
        const label = field.appendChild(el("span", "label", name));
        label.append(el("span", "type", ` · ${typeOf(name, value)}`));
        const shown = field.appendChild(el("div", typeof value === "string" ? "value" : "value scalar"));
        if (typeof value === "string") markdown(shown, value);
        else shown.textContent = JSON.stringify(value);
      }
    }

    finished(event) {
      const result = event.result || {};
      const usage = result.usage || {};
      const values = result.outputs || {};
      if (result.termination_reason !== "paused" && Object.values(values).some((v) => v !== null)) this.outputs(values);
      const requests = Object.values(usage.requests || {}).reduce((a, b) => a + b, 0);
      let line = `Turn ended: ${result.termination_reason}`;
      if (result.termination_cause) line += ` (${result.termination_cause})`;
      line += ` · ${requests} request${requests === 1 ? "" : "s"} · ${usage.input_tokens} tokens in, ${usage.output_tokens} out`;
      if (usage.cost != null) line += ` · $${usage.cost.toFixed(4)}`;
      this.root.append(el("div", `termination ${result.termination_reason}`, line));
      if (event.outcome && event.outcome.type === "interrupt") this.ask(event.outcome.interrupts);
    }

    error(message) {
      const stopped = /stopped/i.test(message || "");
      this.root.append(el("div", stopped ? "termination stopped" : "run-error", message));
    }

    ask(interrupts) {
      this.waiting = true;
      const decisions = new Map();
      for (const interrupt of interrupts) {
        const meta = (interrupt.metadata && interrupt.metadata.dspy_imp) || {};
        const call = card(interrupt.toolCallId, meta.name);
        if (!call.box.isConnected) this.root.append(call.box);
        if (!call.args.textContent && meta.args) call.args.textContent = JSON.stringify(meta.args, null, 2);
        call.box.open = true;
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

  open(threadId);
})();

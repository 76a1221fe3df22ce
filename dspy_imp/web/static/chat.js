// The dspy-imp chat page: speaks AG-UI to POST ag-ui, renders every event as it arrives.
// Everything the agent or a tool sends is shown with textContent (never parsed as HTML).
// The URL names the conversation (#c=<id>) once its first message is sent: a reload or a second tab
// reopens it from the server (GET api/conversations/<id>), with any approval it waits for, how each
// turn ended and the decisions taken. A decision another tab took first (409) reopens it as it is.
// The input stays usable (and focused) while a turn runs; only a decision to take first disables
// it. Answers are Markdown, rendered by the vendored marked and sanitized by the vendored DOMPurify;
// raw HTML in them is shown as text.
// A sub-agent's work (AG-UI's SUBAGENT_STARTED, then events carrying its subagentRunId) is shown
// inside the card of the call that runs it, its own calls as cards there.
// A call the provider ran inside its reply (a web search, code execution: dspy_imp.hosted) comes as
// a CUSTOM "dspy_imp.provider_executed" event before its TOOL_CALL_*: its card says who ran it, has
// no timing and no buttons (nothing here runs or approves it).
// A call paused on an MCP server's question (interrupt reason "elicitation") gets a form built from
// the server's schema (untrusted: only MCP's flat field kinds, a bounded number, all as text). A
// request to open a URL (its metadata's mode "url") shows the URL in full as text and as a link the
// person opens (only http: and https:, in a new tab with rel="noopener noreferrer"; never opened
// or fetched by the page itself), then "I opened it" / Decline / Cancel.
"use strict";
(() => {
  const log = document.getElementById("log");
  const form = document.getElementById("ask");
  const question = document.getElementById("question");
  const send = document.getElementById("send");
  const newChat = document.getElementById("new-chat");
  const stop = document.getElementById("stop");
  let threadId = fromUrl() || newId();
  let named = fromUrl() !== null; // the URL names it: its first message was sent (nothing to fetch before)
  const calls = new Map(); // tool call id -> its card, across runs (a Map: an id "__proto__" is an id)
  let busy = false; // a turn runs, or the conversation waits for a decision: nothing to send now
  let waiting = false; // it waits for a decision (the input is disabled until it is taken)
  let lists = false; // the store lists (and renames) conversations (``DatabaseStore``): the header's menu
  const agents = new Map(); // subagentRunId -> the view of its work, inside its call's card, across runs

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return Date.now().toString(16) + Math.random().toString(16).slice(2);
  }

  function fromUrl() {
    const found = /^#c=(.+)$/.exec(location.hash);
    if (!found) return null;
    try { return decodeURIComponent(found[1]); } catch (_) { return null; }
  }

  function started(id) {
    history.replaceState(null, "", `#c=${encodeURIComponent(id)}`);
    named = true;
    return id;
  }

  function unnamed() {
    // A new conversation: no id in the URL until its first message (a reload then fetches nothing).
    history.replaceState(null, "", location.pathname + location.search);
    named = false;
  }

  function follow(action) {
    // Keep the newest content in view while the reader is at the bottom; leave them where they scrolled.
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 48;
    action();
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  const escaped = (text) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const markdown = new marked.Marked({ gfm: true, renderer: { html: (token) => escaped(token.text) } });

  function showMarkdown(node, text) {
    node.innerHTML = DOMPurify.sanitize(markdown.parse(text), { USE_PROFILES: { html: true } });
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

  function setBusy(running, waits) {
    waiting = Boolean(waits);
    busy = running || waiting;
    send.disabled = busy;
    question.disabled = waiting; // typing the next message while a turn runs is fine; Enter waits for it
    if (!busy && (document.activeElement === document.body || document.activeElement === null)) question.focus();
  }

  async function refusal(response) {
    // What a refused request says: the JSON body's ``error`` (every route answers ``{"error": ...}``).
    const text = await response.text();
    try { return JSON.parse(text).error || text; } catch (_) { return text; }
  }

  let declared = {}; // output field -> its type, as the signature declares it
  fetch("api/info").then((r) => r.json()).then((info) => {
    declared = info.output_types || {};
    const tools = info.tools.map((t) => t.name).join(", ");
    document.getElementById("signature").textContent = `${info.signature}` + (tools ? ` · tools: ${tools}` : "");
    document.getElementById("title").textContent = info.title;
    document.title = info.title;
    lists = Boolean(info.lists_conversations);
    listChats();
  }).catch(() => {});

  stop.addEventListener("click", () => {
    // The server stops the turn before its next effect and keeps its history; the stream then ends.
    stop.disabled = true;
    fetch(`api/conversations/${encodeURIComponent(threadId)}/stop`, {
      method: "POST", headers: { "content-type": "application/json" }, body: "{}",
    }).catch(() => {});
  });

  newChat.addEventListener("click", () => {
    threadId = newId();
    unnamed();
    calls.clear();
    agents.clear();
    log.replaceChildren();
    setBusy(false, false);
    question.focus();
  });

  async function reopen() {
    // The conversation this URL names, as the server keeps it (a reload, a second tab): its
    // messages, each turn's end ("Turn ended ...", or its error) after its messages, the
    // decisions a turn was resumed with on their cards, and the approval it waits for.
    const response = await fetch(`api/conversations/${encodeURIComponent(threadId)}`);
    if (!response.ok) {  // gone (deleted), or not this user's: an empty conversation to start
      setBusy(false, false);
      return;
    }
    const saved = await response.json();
    const turns = saved.turns || [];
    let view = null;
    let next = 0;
    const ended = (count) => {
      for (; next < turns.length && turns[next].messages <= count; next++) {
        if (!view) view = new RunView(log.appendChild(el("section", "turn")));
        view.reopened(turns[next]);
        view = null; // the next run's messages: a section of their own, as when they streamed
      }
    };
    saved.messages.forEach((message, index) => {
      ended(index);
      if (message.role === "user") {
        log.append(el("div", "user", message.content));
        view = null;
        return;
      }
      if (!view) view = new RunView(log.appendChild(el("section", "turn")));
      view.restore(message);
    });
    ended(saved.messages.length);
    if (saved.interrupts.length) {
      const holder = el("section", "turn");
      new RunView(holder).ask(saved.interrupts);
      if (holder.childNodes.length) log.append(holder);
    }
    setBusy(false, saved.interrupts.length > 0);
    log.scrollTop = log.scrollHeight;
  }

  async function refresh() {
    // The conversation shown again as the server has it now.
    calls.clear();
    agents.clear();
    log.replaceChildren();
    await reopen();
  }
  if (named) refresh().catch(() => {});

  // The user's conversations, when the store lists them (``DatabaseStore``): a menu in the header.
  async function listChats() {
    if (!lists) return; // a store that cannot list them: nothing to ask (and no 501 in the console)
    const response = await fetch("api/conversations").catch(() => null);
    if (!response || !response.ok) return;
    const chats = await response.json();
    const menu = document.getElementById("chats");
    const list = document.getElementById("chat-list");
    list.replaceChildren();
    for (const chat of chats) {
      const link = list.appendChild(el("a", chat.id === threadId ? "current" : "", chat.title || chat.id));
      link.href = `#c=${encodeURIComponent(chat.id)}`;
    }
    menu.hidden = chats.length === 0;
  }
  window.addEventListener("hashchange", () => {
    const id = fromUrl();
    if (!id || id === threadId || (busy && !waiting)) return;
    threadId = id;
    named = true;
    document.getElementById("chats").open = false;
    refresh().catch(() => {});
    listChats();
  });
  async function titled(text) {
    // A new conversation's title: its first message (a store that lists them renames them too).
    if (!lists) return;
    await fetch(`api/conversations/${encodeURIComponent(threadId)}`, {
      method: "PATCH", headers: { "content-type": "application/json" }, body: JSON.stringify({ title: text.slice(0, 60) }),
    }).catch(() => null);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = question.value.trim();
    if (!text || busy) return;
    if (!named) started(threadId); // its first message: now the URL names it
    question.value = "";
    follow(() => log.append(el("div", "user", text)));
    const first = log.querySelectorAll(".user").length === 1;
    run({ messages: [{ id: newId(), role: "user", content: text }] })
      .then(() => (first ? titled(text) : null))
      .then(listChats);
  });
  question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
  });

  async function run(extra) {
    setBusy(true, false);
    stop.hidden = false;
    stop.disabled = false;
    const view = new RunView(log.appendChild(el("section", "turn")));
    const body = Object.assign(
      { threadId, runId: newId(), state: null, messages: [], tools: [], context: [], forwardedProps: {} }, extra);
    try {
      const response = await fetch("ag-ui", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "text/event-stream" },
        body: JSON.stringify(body),
      });
      if (response.status === 409 && extra.resume) {
        // Answered already (another tab took the decision first): shown as the server has it now.
        stop.hidden = true;
        await refresh();
        follow(() => log.append(el("div", "notice",
          "This was already answered in another tab: the conversation is shown as it is now.")));
        return;
      }
      if (!response.ok) throw new Error(`${response.status}: ${await refusal(response)}`);
      await readEvents(response, (event) => follow(() => view.handle(event)));
      if (extra.resume && view.refusal !== null && !view.ended) {
        // A decision the server refused (an answer the form does not take): it still waits; asked again.
        stop.hidden = true;
        await refresh();
        follow(() => log.append(el("div", "run-error", view.refusal)));
        return;
      }
    } catch (error) {
      view.error(String(error).replace(/^Error: /, ""));
    }
    stop.hidden = true;
    setBusy(false, view.waiting);
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
    // A call is a <details>: open, and folded with a click on its name; its timing beside the name.
    const box = el("details", "tool-call");
    box.open = true;
    box.dataset.callId = id;
    const summary = box.appendChild(el("summary"));
    summary.append(el("span", "name", name || "tool"));
    const timing = summary.appendChild(el("span", "timing", ""));
    const args = box.appendChild(el("pre", "args", ""));
    const result = box.appendChild(el("pre", "result pending", "running…"));
    const made = { box, args, result, timing, argsText: "", started: performance.now(), work: null };
    calls.set(id, made);
    return made;
  }

  function providerRun(marker) {
    // The card of a call the provider ran: marked, with who ran it; its result (or error) follows.
    const call = card(marker.toolCallId, marker.toolName);
    call.started = null; // it ran inside the model's reply: no timing of its own
    call.box.classList.add("provider-run");
    call.box.dataset.provider = marker.provider || "";
    if (!call.box.querySelector(".by")) {
      call.box.querySelector("summary").insertBefore(el("span", "by", `run by ${marker.provider || "the provider"}`), call.timing);
    }
    if (marker.error) call.box.classList.add("error");
    return call;
  }

  function decided(id, label) {
    // A decision's label on its call's card (as the buttons leave it when clicked).
    const call = calls.get(id);
    if (!call) return;
    const box = call.box.querySelector(".approval") || call.box.appendChild(el("div", "approval"));
    box.replaceChildren(el("span", "decided", label));
  }

  function agentView(event) {
    // A sub-agent's segment: its work in the card of the call that runs it (the same one when a run resumes it).
    const call = calls.get(event.parentToolCallId) || calls.get(event.subagentRunId);
    if (!call) return null;
    if (!call.work) {
      call.work = el("div", "agent-work");
      call.work.dataset.agent = event.name;
      call.box.insertBefore(call.work, call.result);
    }
    const view = agents.get(event.subagentRunId) || new RunView(call.work);
    agents.set(event.subagentRunId, view);
    return view;
  }

  function restoreWork(path, run) {
    // A reopened sub-agent call's work, from the history entry's record of its run (as it streamed live).
    const view = agentView({ parentToolCallId: path, subagentRunId: path, name: run.agent || "" });
    if (!view) return;
    for (const entry of run.history || []) {
      if (entry.next_thought) view.restore({ role: "reasoning", content: String(entry.next_thought) });
      for (const toolCall of entry.tool_calls || []) {
        const call = card(`${path}/${toolCall.id}`, toolCall.name);
        call.started = null;
        call.args.textContent = JSON.stringify(toolCall.args || {}, null, 2);
        view.root.append(call.box);
      }
      for (const result of entry.tool_call_results || []) {
        const call = calls.get(`${path}/${result.id}`);
        if (!call) continue;
        call.result.textContent = typeof result.result === "string" ? result.result : JSON.stringify(result.result);
        call.result.classList.remove("pending");
        if (result.error) call.box.classList.add("error");
      }
      for (const [callId, inner] of Object.entries(entry.agent_runs || {})) restoreWork(`${path}/${callId}`, inner);
    }
  }

  // A paused MCP request for input (AG-UI interrupt reason "elicitation"): the server's name and
  // message as text, and a form built from its schema. The schema is the server's (untrusted): only
  // MCP's flat field kinds are shown (text, number, integer, boolean, a choice, several choices), at
  // most MAX_FIELDS of them and MAX_CHOICES options each, every label and option as text; the
  // fields are checked again by the server.
  const MAX_FIELDS = 20;
  const MAX_CHOICES = 100;
  const own = (object, key) => Object.prototype.hasOwnProperty.call(object, key);
  const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
  let fieldIds = 0; // the page's ids for a group's label

  function choices(prop) {
    // A single choice's options: ``enum`` (``enumNames`` as their titles) or ``oneOf`` of ``const``/``title``.
    if (Array.isArray(prop.enum)) {
      const names = Array.isArray(prop.enumNames) ? prop.enumNames : [];
      return prop.enum.filter((v) => typeof v === "string").map((v, i) => [v, typeof names[i] === "string" ? names[i] : v]);
    }
    if (Array.isArray(prop.oneOf)) {
      return prop.oneOf.filter((o) => isObject(o) && typeof o.const === "string")
        .map((o) => [o.const, typeof o.title === "string" ? o.title : o.const]);
    }
    return null;
  }

  function manyChoices(prop) {
    // Several choices' options (MCP 2025-11-25, SEP-1330): ``items.enum`` or ``items.anyOf`` of
    // ``const``/``title`` (each a string; any other is left out).
    const items = prop.items;
    if (!isObject(items)) return null;
    if (Array.isArray(items.enum)) return items.enum.filter((v) => typeof v === "string").map((v) => [v, v]);
    if (Array.isArray(items.anyOf)) {
      return items.anyOf.filter((o) => isObject(o) && typeof o.const === "string")
        .map((o) => [o.const, typeof o.title === "string" ? o.title : o.const]);
    }
    return null;
  }

  const count = (value) => (Number.isInteger(value) && value >= 0 ? value : null);
  const plural = (n, one) => `${n} ${one}${n === 1 ? "" : "s"}`;

  function checkboxes(row, name, prop, options, required) {
    // Several choices as checkboxes, then the description and the bounds: the defaults checked, no
    // more than ``maxItems`` can be checked (the others disabled once it is reached), fewer than
    // ``minItems`` is refused on Accept (when the field is required or anything is checked). Its
    // reader gives the list of the checked values, empty too (left out when none is checked, the
    // field is optional and asks for at least one).
    const min = count(prop.minItems);
    const max = count(prop.maxItems);
    const chosen = new Set(Array.isArray(prop.default) ? prop.default.filter((v) => typeof v === "string") : []);
    const group = row.appendChild(el("span", "choices"));
    const boxes = [];
    for (const [value, text] of options.slice(0, MAX_CHOICES)) {
      const choice = group.appendChild(el("label", "choice"));
      const box = choice.appendChild(el("input"));
      box.type = "checkbox";
      box.name = name;
      box.value = value;
      box.checked = chosen.has(value);
      choice.append(el("span", null, text));
      boxes.push(box);
    }
    const picked = () => boxes.filter((box) => box.checked).map((box) => box.value);
    const check = () => {
      const n = picked().length;
      for (const box of boxes) box.disabled = max !== null && n >= max && !box.checked;
      let wrong = "";
      if (min !== null && n < min && (required || n > 0)) wrong = `Choose at least ${plural(min, "option")}.`;
      else if (max !== null && n > max) wrong = `Choose at most ${plural(max, "option")}.`;
      for (const box of boxes) box.setCustomValidity("");
      const told = boxes.find((box) => !box.disabled); // a disabled box is never checked for validity
      if (told) told.setCustomValidity(wrong);
    };
    for (const box of boxes) box.addEventListener("change", check);
    check();
    if (typeof prop.description === "string" && prop.description) row.append(el("span", "hint", prop.description));
    const bounds = [];
    if (min !== null && min > 0) bounds.push(`at least ${min}`);
    if (max !== null) bounds.push(`at most ${max}`);
    if (bounds.length) row.append(el("span", "hint bounds", `Choose ${bounds.join(", ")}.`));
    return () => {
      const values = picked();
      return values.length || required || min === null || min === 0 ? values : undefined;
    };
  }

  function formField(form, name, prop, required) {
    // One field of the form: its label (title, or the name), its input, its description; a reader
    // of its value, or null for a kind this page does not show.
    const many = prop.type === "array" ? manyChoices(prop) : null;
    const row = el(many ? "div" : "label", "field");
    row.dataset.name = name;
    const title = row.appendChild(el("span", "label", typeof prop.title === "string" && prop.title ? prop.title : name));
    if (required) title.append(el("span", "required", " *"));
    if (many) {
      // a group of checkboxes, named by its label (a <label> would toggle only the first)
      title.id = `field-${++fieldIds}`;
      row.setAttribute("role", "group");
      row.setAttribute("aria-labelledby", title.id);
      const read = checkboxes(row, name, prop, many, required);
      form.append(row);
      return read;
    }
    const options = choices(prop);
    let input;
    let read;
    if (options && (prop.type === "string" || prop.type === undefined)) {
      input = el("select");
      if (!required) input.appendChild(el("option", null, "—")).value = "";
      for (const [value, text] of options.slice(0, MAX_CHOICES)) {
        const option = input.appendChild(el("option", null, text));
        option.value = value;
      }
      input.value = typeof prop.default === "string" ? prop.default : required && options.length ? options[0][0] : "";
      read = () => (input.value === "" ? undefined : input.value);
    } else if (prop.type === "boolean") {
      input = el("input");
      input.type = "checkbox";
      input.checked = prop.default === true;
      read = () => input.checked;
    } else if (prop.type === "number" || prop.type === "integer") {
      input = el("input");
      input.type = "number";
      input.step = prop.type === "integer" ? "1" : "any";
      if (typeof prop.minimum === "number") input.min = String(prop.minimum);
      if (typeof prop.maximum === "number") input.max = String(prop.maximum);
      if (typeof prop.default === "number") input.value = String(prop.default);
      read = () => (input.value === "" ? undefined : Number(input.value));
    } else if (prop.type === "string") {
      input = el("input");
      input.type = { email: "email", uri: "url", date: "date" }[prop.format] || "text";
      if (Number.isInteger(prop.minLength)) input.minLength = prop.minLength;
      if (Number.isInteger(prop.maxLength)) input.maxLength = prop.maxLength;
      if (typeof prop.default === "string") input.value = prop.default;
      read = () => (input.value === "" ? undefined : input.value);
    } else {
      return null;
    }
    input.name = name;
    if (required && input.type !== "checkbox") input.required = true;
    row.append(input);
    if (typeof prop.description === "string" && prop.description) row.append(el("span", "hint", prop.description));
    form.append(row);
    return read;
  }

  function askForm(box, interrupt, meta, decide) {
    const server = typeof meta.server === "string" && meta.server ? meta.server : "The tool";
    box.append(el("div", "asker", `${server} asks:`));
    box.append(el("div", "question", String(interrupt.message || meta.message || "")));
    const form = box.appendChild(el("form", "fields"));
    const schema = isObject(meta.schema) ? meta.schema : {};
    const properties = isObject(schema.properties) ? schema.properties : {};
    const required = Array.isArray(schema.required) ? schema.required : [];
    const readers = new Map(); // field name -> its reader (a Map: a field "__proto__" is a field)
    const names = Object.keys(properties);
    for (const name of names.slice(0, MAX_FIELDS)) {
      const prop = properties[name];
      const read = isObject(prop) ? formField(form, name, prop, required.includes(name)) : null;
      if (read) readers.set(name, read);
      else form.append(el("div", "unsupported", `${name}: a kind of field this page cannot show`));
    }
    if (names.length > MAX_FIELDS) form.append(el("div", "unsupported", `${names.length - MAX_FIELDS} more fields not shown`));
    const buttons = form.appendChild(el("div", "approval"));
    const accept = buttons.appendChild(el("button", "accept", "Accept"));
    const decline = buttons.appendChild(el("button", "refuse decline", "Decline"));
    const cancel = buttons.appendChild(el("button", "secondary cancel", "Cancel"));
    accept.type = "submit";
    decline.type = cancel.type = "button";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (!form.reportValidity()) return;
      const content = {};
      for (const [name, read] of readers) {
        const value = read();
        if (value !== undefined) Object.defineProperty(content, name, { value, enumerable: true, writable: true, configurable: true });
      }
      decide({ status: "resolved", payload: { action: "accept", content } }, "Accepted");
    });
    decline.onclick = () => decide({ status: "resolved", payload: { action: "decline" } }, "Declined");
    cancel.onclick = () => decide({ status: "resolved", payload: { action: "cancel" } }, "Cancelled");
  }

  // A paused MCP request to open a URL (metadata mode "url"): the server's name and message as
  // text, the URL in full as text, and a link only when it parses as http: or https: (the server's
  // URL is untrusted; the app sends one that passed its own check, this one is the page's).
  const MAX_URL = 4096;

  function safeUrl(value) {
    if (typeof value !== "string" || !value || value.length > MAX_URL) return null;
    let parsed;
    try {
      parsed = new URL(value);
    } catch {
      return null;
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return null;
    if (parsed.username || parsed.password || !parsed.hostname) return null;
    return parsed.href;
  }

  function askUrl(box, interrupt, meta, decide) {
    const server = typeof meta.server === "string" && meta.server ? meta.server : "The tool";
    box.append(el("div", "asker", `${server} asks you to open a page:`));
    box.append(el("div", "question", String(interrupt.message || meta.message || "")));
    const href = safeUrl(meta.url);
    if (href) {
      const link = box.appendChild(el("a", "open-url", href));
      link.href = href;
      link.target = "_blank";
      link.rel = "noopener noreferrer";
      link.referrerPolicy = "no-referrer";
    } else {
      box.append(el("div", "unsupported", "The server's URL cannot be shown (only http and https links are)."));
    }
    const buttons = box.appendChild(el("div", "approval"));
    const accept = buttons.appendChild(el("button", "accept", "I opened it"));
    const decline = buttons.appendChild(el("button", "refuse decline", "Decline"));
    const cancel = buttons.appendChild(el("button", "secondary cancel", "Cancel"));
    accept.type = decline.type = cancel.type = "button";
    accept.disabled = !href;
    accept.onclick = () => decide({ status: "resolved", payload: { action: "accept" } }, "Opened");
    decline.onclick = () => decide({ status: "resolved", payload: { action: "decline" } }, "Declined");
    cancel.onclick = () => decide({ status: "resolved", payload: { action: "cancel" } }, "Cancelled");
  }

  class RunView {
    constructor(root) {
      this.root = root;
      this.messages = new Map(); // message id -> its node
      this.texts = new Map(); // answer message id -> its Markdown so far
      this.waiting = false;
      this.refusal = null; // the run's error, when it ended with one
      this.ended = false; // RUN_FINISHED seen
      this.seen = 0; // events handled
    }

    restore(message) {
      // One message of a reopened conversation: the answer, a thought, a call or its result.
      if (message.role === "reasoning") {
        const thought = this.root.appendChild(el("details", "thought"));
        thought.append(el("summary", null, "Thought"));
        thought.append(el("div", "body", message.content));
      } else if (message.role === "assistant") {
        if (message.content) showMarkdown(this.root.appendChild(el("div", "answer")), message.content);
        for (const toolCall of message.toolCalls || []) {
          const call = card(toolCall.id, toolCall.function.name);
          call.started = null; // reopened: its timing is not known
          call.args.textContent = pretty(toolCall.function.arguments);
          this.root.append(call.box);
        }
        const meta = (message.metadata && message.metadata.dspy_imp) || {};
        for (const hosted of meta.hosted_calls || []) {
          const call = providerRun({ toolCallId: hosted.id, toolName: hosted.name, provider: hosted.provider, error: hosted.error });
          call.args.textContent = JSON.stringify(hosted.input || {}, null, 2);
          call.result.textContent = hosted.content; // as TOOL_CALL_RESULT told it live
          call.result.classList.remove("pending");
          this.root.append(call.box);
        }
        const entry = meta.entry || {};
        for (const [callId, run] of Object.entries(entry.agent_runs || {})) restoreWork(callId, run);
      } else if (message.role === "tool" && calls.has(message.toolCallId)) {
        const call = calls.get(message.toolCallId);
        call.result.textContent = message.content;
        call.result.classList.remove("pending");
        if (message.error) call.box.classList.add("error");
      }
    }

    handle(event) {
      this.seen += 1;
      if (event.type === "SUBAGENT_STARTED") {
        agentView(event);
        return;
      }
      const inner = event.subagentRunId && agents.get(event.subagentRunId);
      if (inner && inner !== this) {
        if (event.type === "SUBAGENT_FINISHED" || event.type === "SUBAGENT_ERROR") {
          inner.root.classList.add(event.type === "SUBAGENT_ERROR" ? "failed" : "ended");
          const call = calls.get(event.subagentRunId); // its call's card: the segment's id is the call's
          if (call && event.outcome && event.outcome.type === "suspended") call.result.textContent = "waiting for a decision…";
        } else {
          inner.handle(event);
        }
        return;
      }
      switch (event.type) {
        case "TEXT_MESSAGE_START":
          this.messages.set(event.messageId, this.root.appendChild(el("div", "answer", "")));
          this.texts.set(event.messageId, "");
          break;
        case "REASONING_MESSAGE_START": {
          const thought = this.root.appendChild(el("details", "thought"));
          thought.append(el("summary", null, "Thought"));
          this.messages.set(event.messageId, thought.appendChild(el("div", "body", "")));
          break;
        }
        case "TEXT_MESSAGE_CONTENT":
        case "REASONING_MESSAGE_CONTENT":
          if (this.texts.has(event.messageId)) {  // an answer: Markdown, rendered again as it grows
            this.texts.set(event.messageId, this.texts.get(event.messageId) + event.delta);
            showMarkdown(this.messages.get(event.messageId), this.texts.get(event.messageId));
          } else {
            this.messages.get(event.messageId).textContent += event.delta;
          }
          break;
        case "CUSTOM":
          if (event.name === "dspy_imp.provider_executed" && event.value) providerRun(event.value);
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
          if (call.started !== null) call.timing.textContent = `${((performance.now() - call.started) / 1000).toFixed(1)} s`;
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
          this.ended = true;
          this.finished(event);
          break;
        case "RUN_ERROR":
          if (this.seen === 2) this.refusal = event.message; // refused as it started: nothing ran
          this.error(event.message);
          break;
        default:
          break;
      }
    }

    fields(values) {
      // Each output field by its name and type; a string as Markdown. One string field stays as streamed.
      const names = Object.keys(values);
      if (names.length === 1 && typeof values[names[0]] === "string") return;
      const answers = this.root.querySelectorAll(":scope > .answer"); // the agent's own, not a sub-agent's
      const node = answers.length ? answers[answers.length - 1] : this.root.appendChild(el("div", "answer"));
      node.replaceChildren();
      for (const name of names) {
        const value = values[name];
        const field = node.appendChild(el("div", "field"));
        field.dataset.name = name;
        const label = field.appendChild(el("span", "label", name));
        const type = declared[name] || (value === null ? "null" : Array.isArray(value) ? "list" : typeof value);
        label.append(el("span", "type", ` · ${type}`));
        const shown = field.appendChild(el("div", typeof value === "string" ? "value" : "value scalar"));
        if (typeof value === "string") showMarkdown(shown, value);
        else shown.textContent = JSON.stringify(value);
      }
    }

    finished(event) {
      const result = event.result || {};
      const values = result.outputs || {};
      if (result.termination_reason !== "paused" && Object.values(values).some((v) => v !== null)) this.fields(values);
      this.terminated(result);
      if (event.outcome && event.outcome.type === "interrupt") this.ask(event.outcome.interrupts);
    }

    reopened(turn) {
      // A turn's end as the server kept it (a reload): its line or its error, and its decisions.
      for (const [id, approved] of Object.entries(turn.approvals || {})) {
        const label = approved === true ? "Approved" : typeof approved === "string" ? `Refused: ${approved}` : "Refused";
        decided(id, label);
      }
      for (const id of turn.results || []) decided(id, "Result sent");
      const answered = { accept: "Accepted", decline: "Declined", cancel: "Cancelled" };
      for (const [id, action] of Object.entries(turn.answers || {})) decided(id, answered[action] || "Answered");
      if (turn.ending) this.terminated(turn.ending);
      else if (turn.error) this.error(turn.error);
    }

    terminated(result) {
      const usage = result.usage || {};
      const requests = Object.values(usage.requests || {}).reduce((a, b) => a + b, 0);
      let line = `Turn ended: ${result.termination_reason}`;
      if (result.termination_cause) line += ` (${result.termination_cause})`;
      line += ` · ${requests} request${requests === 1 ? "" : "s"} · ${usage.input_tokens} tokens in, ${usage.output_tokens} out`;
      if (usage.cost != null) line += ` · $${usage.cost.toFixed(4)}`;
      this.root.append(el("div", `termination ${result.termination_reason}`, line));
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
        const owner = interrupt.subagentRunId && calls.get(interrupt.subagentRunId); // a sub-agent's call: in its card
        if (call.box.isConnected) {
          // already shown where it was streamed
        } else if (owner) {
          owner.box.insertBefore(call.box, owner.result);
        } else {
          this.root.append(call.box);
        }
        call.result.textContent = interrupt.message || "waiting";
        call.waiting = true;
        const box = call.box.appendChild(el("div", "approval"));
        const decide = (entry, label) => {
          decisions.set(interrupt.id, Object.assign({ interruptId: interrupt.id }, entry));
          call.started = performance.now(); // its run starts with the decision
          box.replaceChildren(el("span", "decided", label));
          if (decisions.size === interrupts.length) run({ resume: [...decisions.values()] });
        };
        if (interrupt.reason === "elicitation" && meta.mode === "url") {
          call.result.textContent = "waiting for you to open a page…";
          box.className = "elicitation";
          askUrl(box, interrupt, meta, decide);
        } else if (interrupt.reason === "elicitation") {
          call.result.textContent = "waiting for your answer…";
          box.className = "elicitation";
          askForm(box, interrupt, meta, decide);
        } else if (interrupt.reason === "tool_approval") {
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

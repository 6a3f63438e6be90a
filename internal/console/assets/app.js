// The AgentRun console's page: plain JavaScript, no framework, no build.
// It reads runs through Server-Sent Event streams (fed by Kubernetes
// watches on the server) and acts through the console's JSON API, which
// forwards everything with the signed-in person's credentials.
"use strict";

const main = document.getElementById("main");
let stream = null; // the open EventSource
let me = null;     // {user, namespace, mode}
let redraw = () => {}; // the run page's: show the latest state

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== false && v !== null && v !== undefined) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function post(path, body) {
  const res = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Agentrun-Console": "1" },
    body: JSON.stringify(body),
  });
  let data = {};
  try { data = await res.json(); } catch (e) { /* no body */ }
  return { ok: res.ok, status: res.status, data };
}

function refusal(r) {
  const from = r.data.from ? " (" + r.data.from + ")" : "";
  return "HTTP " + r.status + from + ": " + (r.data.error || "request failed");
}

function closeStream() {
  if (stream) { stream.close(); stream = null; }
}

function listen(url, handlers) {
  closeStream();
  stream = new EventSource(url);
  for (const [ev, fn] of Object.entries(handlers)) {
    stream.addEventListener(ev, (m) => fn(JSON.parse(m.data)));
  }
  stream.addEventListener("failure", (m) => {
    closeStream();
    const d = JSON.parse(m.data);
    showError("HTTP " + d.code + (d.from ? " (" + d.from + ")" : "") + ": " + d.error);
  });
}

// show replaces the page's content, leaving out absent parts.
function show(...parts) {
  main.replaceChildren(...parts.flat().filter((p) => p !== null && p !== undefined && p !== false));
}

function showError(msg) {
  const box = document.getElementById("stream-error") || main.appendChild(el("p", { id: "stream-error", class: "error" }));
  box.textContent = msg;
}

// ---- sign-in ----

function loginPage() {
  const token = el("textarea", { id: "token", placeholder: "a bearer token (kubectl create token NAME -n NAMESPACE)" });
  const msg = el("p", { class: "error", hidden: true });
  const form = el("form", { class: "login", onsubmit: async (e) => {
    e.preventDefault();
    const r = await post("/api/login", { token: token.value });
    if (!r.ok) { msg.hidden = false; msg.textContent = refusal(r); return; }
    start();
  } },
  el("h1", {}, "Sign in"),
  el("p", { class: "muted" }, "The console acts with your token only: you see and do what the API server lets you."),
  token, el("div", {}, el("button", { class: "primary", type: "submit", id: "signin" }, "Sign in")), msg);
  main.replaceChildren(form);
}

async function start() {
  const res = await fetch("/api/whoami", { credentials: "same-origin" });
  if (res.status === 401) {
    const d = await res.json();
    if (d.mode === "in-cluster") loginPage();
    else main.replaceChildren(el("p", { class: "error" }, "Not signed in: open the URL kubectl agentrun console printed."));
    return;
  }
  me = await res.json();
  document.getElementById("who").textContent = "signed in as " + me.user;
  const out = document.getElementById("logout");
  out.hidden = me.mode !== "in-cluster";
  out.onclick = async () => { await post("/api/logout", {}); location.hash = "#/"; location.reload(); };
  route();
}

// ---- the list ----

function listPage(params) {
  const ns = params.get("namespace") ?? (me.namespace || "default");
  const all = params.get("all") === "1";
  const nsInput = el("input", { type: "text", id: "namespace", value: ns, "aria-label": "namespace" });
  const allBox = el("input", { type: "checkbox", id: "all", checked: all });
  const go = () => { location.hash = "#/?" + new URLSearchParams(allBox.checked ? { all: "1" } : { namespace: nsInput.value }); };
  const body = el("tbody");
  const footer = el("p", { id: "footer", class: "muted" });
  main.replaceChildren(
    el("h1", {}, "Runs"),
    el("div", { class: "controls" }, el("label", {}, "Namespace ", nsInput),
      el("label", {}, allBox, " all namespaces"), el("button", { onclick: go }, "Show")),
    el("table", { id: "runs" }, el("thead", {}, el("tr", {},
      ...(all ? ["Namespace"] : []).concat(["Run", "Phase", "Waiting", "Stage", "Tokens", "Cost", "Working", "Last moved", "Agent"]).map((h) => el("th", {}, h)))), body),
    footer);
  const url = "/api/runs/watch?" + new URLSearchParams(all ? { all: "1" } : { namespace: ns });
  listen(url, { runs: (l) => {
    body.replaceChildren(...l.runs.map((r) => runRow(r, all)));
    footer.textContent = l.footer;
  } });
}

function runRow(r, all) {
  const link = "#/run?" + new URLSearchParams({ namespace: r.namespace, name: r.name });
  const tree = r.depth > 0 ? "   ".repeat(r.depth - 1) + "└─ " : "";
  const cells = [
    el("td", { class: "name" }, el("span", { class: "tree" }, tree), el("a", { href: link }, r.name),
      r.needsAPerson ? el("span", {}, " ", el("span", { class: "badge needs" }, "needs you")) : null,
      r.title ? el("div", { class: "muted" }, r.title) : null),
    el("td", {}, r.phase), el("td", { class: "waiting" }, r.waiting), el("td", {}, r.stage), el("td", {}, r.tokens),
    el("td", {}, r.cost), el("td", {}, r.working), el("td", {}, r.lastMoved), el("td", {}, r.agent || "-"),
  ];
  if (all) cells.unshift(el("td", {}, r.namespace));
  return el("tr", { class: r.needsAPerson ? "needs" : "", "data-run": r.namespace + "/" + r.name }, ...cells);
}

// ---- one run ----

function runPage(params) {
  const ns = params.get("namespace"), name = params.get("name");
  main.replaceChildren(el("p", { class: "muted" }, "Loading " + ns + "/" + name + "…"));
  let notice = "", last = "", latest = null;
  // redraw shows the latest state unless a person is typing an answer;
  // the answer form calls it again once it is sent.
  redraw = () => {
    if (!latest) return;
    const now = JSON.stringify(latest);
    if (now !== last && renderRun(latest, say, notice)) last = now;
  };
  const say = (t) => { notice = t; const n = document.getElementById("notice"); if (n) n.textContent = t; };
  listen("/api/run/watch?" + new URLSearchParams({ namespace: ns, name: name }), {
    run: (p) => { latest = p; redraw(); },
    gone: (g) => main.replaceChildren(el("p", { class: "error" }, g.error),
      el("p", {}, el("a", { href: "#/record?" + new URLSearchParams({ namespace: ns, name: name }), id: "record-link" }, "its archived record, if the operator archived it"))),
  });
}

function renderRun(p, say, notice) {
  const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest(".answer-form");
  if (focused) return false; // do not wipe what a person is typing; the next change redraws
  show(
    el("p", {}, el("a", { href: "#/?" + new URLSearchParams({ namespace: p.namespace }) }, "← runs in " + p.namespace)),
    el("h1", {}, p.name, " ", el("span", { class: "badge", id: "phase" }, p.phase), p.paused ? el("span", { class: "badge" }, " paused") : null),
    p.title ? el("p", {}, p.title) : null,
    el("dl", { class: "kv" }, el("dt", {}, "Agent"), el("dd", {}, p.agent || "-"), el("dt", {}, "Task"), el("dd", {}, p.task || "-"),
      p.error ? [el("dt", {}, "Error"), el("dd", { class: "error" }, p.error)] : null),
    steerButtons(p, say),
    el("p", { id: "notice", class: "notice" }, notice),
    el("h2", {}, "Stages"), timeline(p.stages),
    el("h2", {}, "Waiting on"), waitCard(p, say),
    el("h2", {}, "Usage"), el("dl", { class: "kv", id: "usage" },
      el("dt", {}, "Tokens"), el("dd", {}, p.usage.tokens + " (" + p.usage.prompt + " prompt, " + p.usage.completion + " completion)"),
      el("dt", {}, "Calls"), el("dd", {}, p.usage.modelCalls + " model, " + p.usage.toolCalls + " tool"),
      el("dt", {}, "Cost"), el("dd", { id: "cost" }, p.usage.cost)),
    el("h2", {}, "Output"), p.output !== undefined ? el("pre", { id: "output" }, p.output) : el("p", { class: "muted" }, p.outputNote || "no output yet"),
    el("h2", {}, "Regions"), regions(p.regions),
    el("h2", {}, "Transcript"), transcript(p));
  return true;
}

function steerButtons(p, say) {
  if (!p.may.steer || p.terminal) return null;
  const act = (action) => async () => {
    const r = await post("/api/steer", { namespace: p.namespace, name: p.name, action });
    say(r.ok ? action + " requested" : refusal(r));
  };
  return el("div", { class: "controls" },
    p.paused ? el("button", { id: "resume", onclick: act("resume") }, "Resume") : el("button", { id: "pause", onclick: act("pause") }, "Pause"),
    p.cancelled ? null : el("button", { id: "cancel", class: "danger", onclick: act("cancel") }, "Cancel run"));
}

function timeline(stages) {
  if (!stages.length) return el("p", { class: "muted" }, "no stages recorded yet");
  return el("ol", { class: "timeline", id: "timeline" }, ...stages.map((s) => el("li", { class: s.state + (s.current ? " current" : "") },
    el("div", {}, el("strong", {}, s.name)), el("div", { class: "state" }, s.state),
    el("div", { class: "muted" }, s.visits + " visit(s), " + s.iterations + " turn(s)"),
    s.time ? el("div", { class: "muted" }, s.time + " in ended visits") : null,
    s.entered ? el("div", { class: "muted" }, "entered " + s.entered) : null)));
}

function waitCard(p, say) {
  const w = p.waiting;
  if (!w) return el("p", { class: "muted", id: "wait" }, "nothing");
  const card = el("div", { class: "card wait" + (w.needsAPerson ? " person" : ""), id: "wait" },
    el("dl", { class: "kv" }, el("dt", {}, "Reason"), el("dd", {}, w.summary),
      el("dt", {}, "Needs a person"), el("dd", {}, w.needsAPerson ? "yes" : "no (clears by itself)"),
      w.since ? [el("dt", {}, "Since"), el("dd", {}, w.since)] : null,
      w.question ? [el("dt", {}, "Question"), el("dd", { id: "question" }, w.question)] : null,
      w.remedy ? [el("dt", {}, "Remedy"), el("dd", { id: "remedy" }, w.remedy)] : null,
      w.clearHint && !w.remedy ? [el("dt", {}, "Clears when"), el("dd", {}, w.clearHint)] : null));
  if (w.command && p.may.answer) card.append(answerForm(p, w, say));
  else if (w.command) card.append(el("p", { class: "muted", id: "no-answer" }, "You may not answer runs in " + p.namespace + " (no create agentrunanswers)."));
  return card;
}

function answerForm(p, w, say) {
  const send = async (body) => {
    const r = await post("/api/answer", Object.assign({ namespace: p.namespace, name: p.name, point: w.point }, body));
    say(r.ok ? "agentrunanswer " + r.data.answer + " created as " + r.data.by : refusal(r));
    if (document.activeElement) document.activeElement.blur();
    redraw();
  };
  const input = (id, ph) => el("input", { type: "text", id, placeholder: ph });
  const form = el("div", { class: "answer-form" });
  if (w.command === "approve") {
    const reason = input("reason", "reason (kept with the answer; a denial's is told to the agent)");
    const given = (v) => (v.trim() === "" ? undefined : v);
    if (w.takesChoice) {
      const choice = input("choice", "your choice or answer");
      form.append(el("div", { class: "row" }, choice, el("button", { class: "primary", id: "choose", onclick: () => send({ command: "answer", choice: choice.value }) }, "Choose")));
    } else {
      const args = w.reason === "ToolApproval" ? el("textarea", { id: "edit-args", placeholder: "edited arguments as a JSON object (optional): the call is made with these instead" }) : null;
      if (args) form.append(args);
      form.append(el("div", { class: "row" }, el("button", { class: "primary", id: "approve", onclick: () => send({ command: "approve", reason: given(reason.value), args: args ? given(args.value) : undefined }) }, "Approve")));
    }
    form.append(el("div", { class: "row" }, reason, el("button", { class: "danger", id: "deny", onclick: () => send({ command: "deny", reason: reason.value }) }, "Deny")));
    if (w.checkpoint) {
      const draft = el("textarea", { id: "edit", placeholder: "your edit of the draft (when the checkpoint offers edit)" });
      const revise = input("revise", "instructions to send the stage back (when the checkpoint offers directives)");
      form.append(draft, el("div", { class: "row" }, el("button", { id: "send-edit", onclick: () => send({ command: "answer", edit: draft.value }) }, "Pass with this edit")),
        el("div", { class: "row" }, revise, el("button", { id: "send-revise", onclick: () => send({ command: "answer", revise: revise.value }) }, "Revise")));
    }
  } else if (w.command === "answer") {
    const text = input("answer-text", "your answer");
    const json = el("textarea", { id: "answer-json", placeholder: "or the answer as JSON" });
    form.append(el("div", { class: "row" }, text, el("button", { class: "primary", id: "send-answer", onclick: () => send({ command: "answer", text: text.value }) }, "Answer")),
      json, el("div", { class: "row" }, el("button", { id: "send-json", onclick: () => send({ command: "answer", json: json.value }) }, "Answer with JSON")));
  } else if (w.command === "resolve") {
    const out = el("textarea", { id: "write-output", placeholder: "the write's output, if it happened" });
    form.append(el("p", { class: "muted" }, "A write whose outcome is unknown: check the system it writes to, then settle it."), out,
      el("div", { class: "row" },
        el("button", { class: "primary", id: "resolve-done", onclick: () => send({ command: "resolve", done: true, output: out.value }) }, "It happened (done)"),
        el("button", { id: "resolve-retry", onclick: () => send({ command: "resolve", retry: true }) }, "It did not (retry)"),
        el("button", { class: "danger", id: "resolve-abandon", onclick: () => send({ command: "resolve", abandon: true }) }, "Abandon the run")));
  }
  return form;
}

function regions(list) {
  if (!list.length) return el("p", { class: "muted" }, "no regions");
  return el("div", { id: "regions" }, ...list.map((r) => el("details", {},
    el("summary", {}, r.name + " — " + r.bytes + " bytes, by " + (r.by || "-") + ", #" + r.seq), el("pre", {}, r.content))));
}

function transcript(p) {
  const rows = p.transcript.map((l) => el("tr", {}, el("td", {}, "#" + l.seq), el("td", {}, l.at), el("td", {}, l.turn), el("td", {}, l.what), el("td", {}, l.detail || "")));
  return el("div", {}, p.transcriptError ? el("p", { class: "error" }, p.transcriptError) : null,
    rows.length ? el("table", { id: "transcript" }, el("thead", {}, el("tr", {}, ...["Seq", "Time", "Turn", "What", "Detail"].map((h) => el("th", {}, h)))), el("tbody", {}, ...rows))
      : el("p", { class: "muted" }, "no journal entries yet"));
}

// ---- history: archived runs (history.agentrun.dev), read as the signed-in person ----

async function getJSON(path) {
  const res = await fetch(path, { credentials: "same-origin" });
  let data = {};
  try { data = await res.json(); } catch (e) { /* no body */ }
  return { ok: res.ok, status: res.status, data };
}

function historyPage(params) {
  closeStream();
  const ns = params.get("namespace") ?? (me.namespace || "default");
  const all = params.get("all") === "1";
  const input = (id, label, value, ph) => el("label", {}, label + " ", el("input", { type: "text", id, value: value || "", placeholder: ph || "" }));
  const filters = el("div", { class: "controls" },
    input("h-namespace", "Namespace", ns), el("label", {}, el("input", { type: "checkbox", id: "h-all", checked: all }), " all namespaces"),
    input("h-label", "Labels", params.get("label"), "team=x"), input("h-phase", "Phase", params.get("phase"), "Error"),
    input("h-agent", "Agent", params.get("agent")), input("h-since", "Since", params.get("since"), "7d"),
    el("button", { id: "h-show", onclick: () => {
      const v = (id) => document.getElementById(id).value.trim();
      const q = {};
      if (document.getElementById("h-all").checked) q.all = "1"; else q.namespace = v("h-namespace");
      for (const [k, id] of [["label", "h-label"], ["phase", "h-phase"], ["agent", "h-agent"], ["since", "h-since"]]) if (v(id)) q[k] = v(id);
      location.hash = "#/history?" + new URLSearchParams(q);
    } }, "Show"));
  const body = el("tbody");
  const more = el("button", { id: "h-more", hidden: true }, "More");
  const msg = el("p", { id: "h-message", class: "muted" });
  main.replaceChildren(el("h1", {}, "History"),
    el("p", { class: "muted" }, "Archived runs, newest finished first. Their AgentRuns may be gone; what you see is what the API server lets you read."),
    filters,
    el("table", { id: "history" }, el("thead", {}, el("tr", {},
      ...(all ? ["Namespace"] : []).concat(["Run", "Agent", "Phase", "Tokens", "Cost", "Duration", "Finished"]).map((h) => el("th", {}, h)))), body),
    more, msg);
  const query = {};
  if (all) query.all = "1"; else query.namespace = ns;
  for (const k of ["label", "phase", "agent", "since"]) if (params.get(k)) query[k] = params.get(k);
  const load = async (cont) => {
    const r = await getJSON("/api/history?" + new URLSearchParams(Object.assign({}, query, cont ? { continue: cont } : {})));
    if (!r.ok) { msg.className = "error"; msg.textContent = refusal(r); more.hidden = true; return; }
    body.append(...r.data.records.map((rec) => historyRow(rec, all)));
    msg.textContent = body.children.length ? "" : "No archived runs found.";
    more.hidden = !r.data.continue;
    more.onclick = () => load(r.data.continue);
  };
  load("");
}

function historyRow(r, all) {
  const link = "#/record?" + new URLSearchParams({ namespace: r.namespace, name: r.name });
  const cells = [el("td", { class: "name" }, el("a", { href: link }, r.name)), el("td", {}, r.agent || "-"), el("td", {}, r.phase),
    el("td", {}, r.tokens), el("td", {}, r.cost), el("td", {}, r.duration), el("td", { title: r.finishedAt }, r.finished)];
  if (all) cells.unshift(el("td", {}, r.namespace));
  return el("tr", { "data-record": r.namespace + "/" + r.name }, ...cells);
}

async function recordPage(params) {
  closeStream();
  const ns = params.get("namespace"), name = params.get("name");
  main.replaceChildren(el("p", { class: "muted" }, "Loading " + ns + "/" + name + "…"));
  const r = await getJSON("/api/history/record?" + new URLSearchParams({ namespace: ns, name: name }));
  if (!r.ok) { main.replaceChildren(el("p", { class: "error", id: "record-error" }, refusal(r))); return; }
  const p = r.data, rec = p.record;
  show(
    el("p", {}, el("a", { href: "#/history?" + new URLSearchParams({ namespace: ns }) }, "← history of " + ns)),
    el("h1", {}, rec.name, " ", el("span", { class: "badge", id: "phase" }, rec.phase), " ", el("span", { class: "badge" }, "archived")),
    el("dl", { class: "kv" }, el("dt", {}, "Agent"), el("dd", {}, rec.agent || "-"), el("dt", {}, "Task"), el("dd", {}, p.task || "-"),
      p.error ? [el("dt", {}, "Error"), el("dd", { class: "error" }, p.error)] : null,
      el("dt", {}, "Tokens"), el("dd", {}, rec.tokens), el("dt", {}, "Cost"), el("dd", { id: "cost" }, rec.cost),
      el("dt", {}, "Duration"), el("dd", {}, rec.duration), el("dt", {}, "Finished"), el("dd", {}, rec.finishedAt),
      el("dt", {}, "UID"), el("dd", {}, rec.uid),
      (p.children || []).length ? [el("dt", {}, "Children"), el("dd", {}, p.children.map((c) => c.name + " (" + (c.phase || "-") + ")").join(", "))] : null),
    el("h2", {}, "Output"), p.output !== undefined ? el("pre", { id: "output" }, p.output) : el("p", { class: "muted" }, p.outputNote || "no output"),
    el("h2", {}, "Transcript"), transcript(p));
}

// ---- routing ----

function route() {
  if (!me) return;
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(query || "");
  if (path === "/run") runPage(params);
  else if (path === "/history") historyPage(params);
  else if (path === "/record") recordPage(params);
  else listPage(params);
}

window.addEventListener("hashchange", route);
start();

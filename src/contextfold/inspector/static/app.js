"use strict";
// contextfold inspector: the page over the JSON API next to it (no build step, no libraries).
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const main = document.getElementById("main");
  const state = { token: sessionStorage.getItem("cf-token") || "", config: null, poll: null, head: null };

  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) if (kid !== null && kid !== undefined) node.append(kid);
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }
  const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const when = (ts) => (ts ? String(ts).replace("T", " ").slice(0, 19) : "");
  function tier(t) { return el("span", { class: "tier tier-" + t, text: t }); }

  async function api(path, options) {
    const headers = {};
    if (state.token) headers["X-Contextfold-Token"] = state.token;
    const resp = await fetch("api/" + path, Object.assign({ headers, cache: "no-store" }, options || {}));
    let body = null;
    try { body = await resp.json(); } catch (e) { body = { error: "not JSON (" + resp.status + ")" }; }
    if (resp.status === 401) showTokenBox();
    if (!resp.ok) throw new Error(body && body.error ? body.error : "HTTP " + resp.status);
    return body;
  }
  function showTokenBox() {
    const box = document.getElementById("token-box");
    box.hidden = false;
  }
  function fail(err) {
    main.replaceChildren(el("p", { class: "error", id: "error", text: String(err.message || err) }));
  }
  function stopPolling() {
    if (state.poll) clearInterval(state.poll);
    state.poll = null;
    document.getElementById("live").hidden = true;
  }

  // ------------------------------------------------------------------ session list
  async function showList(query, agent) {
    stopPolling();
    const params = new URLSearchParams({ q: query || "", agent: agent || "", limit: "100" });
    const data = await api("sessions?" + params.toString());
    const search = el("input", { type: "search", id: "session-filter", placeholder: "filter: id, title or agent", value: query || "", size: 34 });
    const pick = el("select", { id: "agent-filter" }, el("option", { value: "", text: "every agent" }),
      data.agents.map((a) => el("option", { value: a, text: a, selected: a === agent })));
    const apply = () => { location.hash = "#/?" + new URLSearchParams({ q: search.value, agent: pick.value }).toString(); };
    search.addEventListener("change", apply);
    pick.addEventListener("change", apply);
    const rows = data.sessions.map((s) => el("tr", { class: "click", "data-session": s.session_id, onclick: () => { location.hash = "#/s/" + encodeURIComponent(s.session_id); } },
      el("td", {}, el("a", { class: "link", href: "#/s/" + encodeURIComponent(s.session_id), text: s.session_id }), el("div", { class: "muted", text: s.title })),
      el("td", { text: s.agent_id }),
      el("td", { class: "num", text: fmt(s.messages) }),
      el("td", { class: "num", text: fmt(s.history_tokens) }),
      el("td", { class: "num", text: fmt(s.view_tokens) }),
      el("td", { class: "num", text: fmt(s.compactions) }),
      el("td", { text: when(s.updated_at) })));
    main.replaceChildren(
      el("h1", { text: "Sessions" }),
      el("div", { class: "toolbar" }, search, pick, el("span", { class: "muted", text: data.total + " session(s)" })),
      el("table", { id: "sessions" },
        el("thead", {}, el("tr", {}, ["session", "agent"].map((h) => el("th", { text: h })),
          ["messages", "history tokens", "last view tokens", "compactions"].map((h) => el("th", { class: "num", text: h })),
          el("th", { text: "last activity" }))),
        el("tbody", {}, rows)));
    state.poll = setInterval(async () => {
      try {
        const again = await api("sessions?" + params.toString());
        if (JSON.stringify(again.sessions) !== JSON.stringify(data.sessions) && document.activeElement !== search) showList(query, agent);
      } catch (e) { /* shown on the next navigation */ }
    }, 5000);
  }

  // ------------------------------------------------------------------ chart
  function chart(tl, selected, onPick) {
    const W = 1000, H = 260, L = 60, R = 12, T = 12, B = 28;
    const calls = tl.calls;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, id: "chart", role: "img", "aria-label": "tokens per model call" });
    if (!calls.length) return root;
    const max = Math.max(1, ...calls.map((c) => c.history_tokens));
    const x = (i) => L + (calls.length === 1 ? 0 : (i - 1) * (W - L - R) / (calls.length - 1));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }), svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
    for (const f of [0, 0.5, 1]) {
      const t = svg("text", { x: L - 6, y: y(max * f) + 4, "text-anchor": "end" }); t.textContent = fmt(Math.round(max * f)); root.append(t);
    }
    const lab = svg("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }); lab.textContent = "model call →"; root.append(lab);
    const one = svg("text", { x: L, y: H - 8 }); one.textContent = "1"; root.append(one);
    const last = svg("text", { x: x(calls.length), y: H - 8, "text-anchor": "middle" }); last.textContent = String(calls.length); root.append(last);
    for (const c of tl.compactions) {
      if (!c.call) continue;
      const line = svg("line", { class: "mark tier-line-" + c.tier, "data-compaction": c.number, x1: x(c.call), y1: T, x2: x(c.call), y2: H - B,
        stroke: { warn: "#c98a00", soft: "#2f9e6b", full: "#7a4fd6", emergency: "#d64545" }[c.tier] || "#98a2b3" });
      const title = svg("title", {}); title.textContent = `compaction #${c.number} (${c.tier}) before call ${c.call}: ${fmt(c.tokens_before)} → ${fmt(c.tokens_after)} tokens`;
      line.append(title);
      line.addEventListener("click", () => document.getElementById("compaction-" + c.number).scrollIntoView());
      root.append(line);
    }
    const pts = (key) => calls.map((c) => `${x(c.call).toFixed(1)},${y(c[key]).toFixed(1)}`).join(" ");
    root.append(svg("polyline", { class: "hist", points: pts("history_tokens") }), svg("polyline", { class: "view", points: pts("view_tokens") }));
    if (selected) root.append(svg("line", { class: "sel", x1: x(selected), y1: T, x2: x(selected), y2: H - B }));
    for (const c of calls) {
      const dot = svg("circle", { class: "dot", cx: x(c.call), cy: y(c.view_tokens), r: 3, "data-call": c.call });
      const title = svg("title", {}); title.textContent = `call ${c.call}: history ${fmt(c.history_tokens)}, view ${fmt(c.view_tokens)} tokens`;
      dot.append(title);
      dot.addEventListener("click", () => onPick(c.call));
      root.append(dot);
    }
    return root;
  }

  // ------------------------------------------------------------------ restore panel
  async function restore(kind, sid, ref, title) {
    const panel = document.getElementById("restore");
    const text = document.getElementById("restore-text");
    const check = document.getElementById("restore-check");
    document.getElementById("restore-title").textContent = title;
    check.textContent = "…"; check.className = ""; text.textContent = "";
    document.getElementById("restore-meta").textContent = "";
    panel.hidden = false;
    try {
      const q = kind === "message" ? "position=" + encodeURIComponent(ref) : (kind === "offload" ? "call_id=" : "id=") + encodeURIComponent(ref);
      const r = await api(`sessions/${encodeURIComponent(sid)}/${kind}?${q}`);
      text.textContent = r.text;
      if (r.sha256_ok === true) { check.textContent = "sha256 ✓ matches"; check.className = "ok"; }
      else if (r.sha256_ok === false) { check.textContent = "sha256 ✗ MISMATCH"; check.className = "bad"; }
      else { check.textContent = "sha256 computed (nothing stored to check against)"; check.className = "muted"; }
      document.getElementById("restore-meta").textContent =
        `${fmt(r.chars)} characters from ${r.source}; sha256 ${r.sha256}` + (r.expected_sha256 ? ` (stored ${r.expected_sha256})` : "") +
        (r.truncated ? " — cut for display" : "") + (r.problem ? " — " + r.problem : "");
    } catch (e) { check.textContent = String(e.message || e); check.className = "bad"; }
  }
  document.getElementById("restore-close").addEventListener("click", () => { document.getElementById("restore").hidden = true; });

  // ------------------------------------------------------------------ one session
  function compactionCard(c, sid) {
    const anchors = c.anchors.filter((a) => a.content && a.content !== "N/A");
    return el("details", { class: "card", id: "compaction-" + c.number, "data-tier": c.tier },
      el("summary", {}, el("strong", { text: `#${c.number} ` }), tier(c.tier),
        ` ${fmt(c.tokens_before)} → ${fmt(c.tokens_after)} tokens (ratio ${Number(c.ratio).toFixed(2)}) before call ${c.call || "–"}; `,
        `${c.summarized} summarized, ${c.offloaded.length} offloaded, tail ${c.preserved_tail}`,
        c.reason ? el("span", { class: "muted reason", text: "why: " + c.reason }) : null,
        c.error ? el("div", { class: "error", text: c.error }) : null),
      el("p", { class: "muted", text: `${c.strategy}, ${c.summarizer || "no summarizer"}, ${Math.round(c.duration_ms)} ms, ${when(c.timestamp)}; history messages 0–${Math.max(0, c.boundary - 1)} left the view` }),
      anchors.length ? el("table", { class: "anchors" }, el("tbody", {}, anchors.map((a) => el("tr", {}, el("td", { text: a.type }), el("td", { text: a.content }))))) : null,
      c.offloaded.length ? el("div", {}, el("h2", { text: "Offloaded" }), c.offloaded.map((o) =>
        el("div", {}, el("a", { class: "link", "data-restore": o.tool_call_id, onclick: () => restore("offload", sid, o.tool_call_id, o.path), text: o.path }),
          el("span", { class: "muted", text: ` ${fmt(o.chars)} chars, ${o.policy}, sha256 ${o.sha256.slice(0, 12)}…` })))) : null,
      c.summary ? el("div", {}, el("h2", { text: "Summary" }), el("pre", { class: "summary", text: c.summary })) : null);
  }

  function messageCard(m, sid) {
    const links = [];
    if (m.status === "summarized" && m.compaction) links.push(el("a", { class: "link", onclick: () => { const d = document.getElementById("compaction-" + m.compaction); d.open = true; d.scrollIntoView(); }, text: `→ summary #${m.compaction}` }));
    if (m.offload) links.push(el("a", { class: "link", onclick: () => restore("offload", sid, m.offload.tool_call_id, m.offload.path), text: "→ " + m.offload.path }));
    if (m.evidence) links.push(el("a", { class: "link", onclick: () => restore("evidence", sid, m.evidence, m.evidence), text: "→ evidence " + m.evidence }));
    const removed = m.status !== "kept" && m.status !== "pinned";
    return el("div", { class: "msg st-" + m.status, "data-position": m.position, "data-status": m.status },
      el("div", { class: "top" }, el("strong", { text: `#${m.position} ${m.role}` }), el("span", { class: "badge b-" + m.status, text: m.status }),
        el("span", { class: "muted", text: fmt(m.tokens) + " tokens" }), links, el("span", { class: "spacer" }),
        el("button", { type: "button", class: removed ? "restore" : "show", "data-position": m.position, onclick: () => restore("message", sid, m.position, `message #${m.position} (${m.role})`), text: removed ? "restore" : "full text" })),
      el("div", { class: "body", text: m.preview }));
  }

  async function showView(sid, call, box) {
    const v = await api(`sessions/${encodeURIComponent(sid)}/view?call=${call}`);
    const inView = v.messages.filter((m) => m.status === "kept" || m.status === "pinned" || m.status === "offloaded" || m.status === "evicted" || m.status === "shortened");
    const removed = v.messages.filter((m) => m.status === "summarized").length;
    const viewCol = [];
    const pinnedFirst = inView.filter((m) => m.position < v.boundary);
    viewCol.push(...pinnedFirst.map((m) => messageCard(m, sid)));
    if (v.summary) viewCol.push(el("div", { class: "msg st-summary" }, el("div", { class: "top" }, el("strong", { text: `summary of compaction #${v.compaction}` })), el("div", { class: "body", text: v.summary.slice(0, 600) })));
    viewCol.push(...inView.filter((m) => m.position >= v.boundary).map((m) => messageCard(m, sid)));
    box.replaceChildren(
      el("h2", { id: "view-title", text: `View at call ${v.call} (history messages 0–${v.position - 1}; ${removed} summarized away)` }),
      el("p", { id: "view-source", class: "muted", text: v.recorded ? "as recorded when it was sent" : "reconstructed from the compaction records (recorded before views were kept)" }),
      el("div", { class: "cols" },
        el("div", { id: "history-col" }, el("h2", { text: "Full history" }), v.messages.map((m) => messageCard(m, sid))),
        el("div", { id: "view-col" }, el("h2", { text: "Sent to the model" }), viewCol)));
  }

  async function showRecall(sid, query, box) {
    box.replaceChildren(el("p", { class: "muted", text: "searching…" }));
    try {
      const r = await api(`sessions/${encodeURIComponent(sid)}/recall?` + new URLSearchParams({ q: query, k: "5" }).toString());
      if (!r.hits.length) { box.replaceChildren(el("p", { class: "muted", id: "recall-empty", text: "no evidence matched" })); return; }
      box.replaceChildren(...r.hits.map((h) => el("div", { class: "msg st-offloaded recall-hit", "data-evidence": h.id },
        el("div", { class: "top" }, el("strong", { text: h.id }), el("span", { class: "muted", text: `score ${h.score} · ${h.command || h.types.join(",")} · ${h.source}` }),
          el("span", { class: h.sha256_ok ? "ok" : "muted", text: h.sha256_ok ? "sha256 ✓" : "" }), el("span", { class: "spacer" }),
          el("button", { type: "button", onclick: () => restore("evidence", sid, h.id, h.id), text: "open" })),
        el("div", { class: "body", text: h.text.slice(0, 600) }))));
    } catch (e) { box.replaceChildren(el("p", { class: "error", text: String(e.message || e) })); }
  }

  async function showSession(sid, call) {
    stopPolling();
    const tl = await api(`sessions/${encodeURIComponent(sid)}`);
    const memory = await api(`sessions/${encodeURIComponent(sid)}/memory`);
    const pickCall = (n) => { location.hash = `#/s/${encodeURIComponent(sid)}/call/${n}`; };
    const selected = call || (tl.calls.length ? tl.calls[tl.calls.length - 1].call : 0);
    const viewBox = el("div", { id: "view" });
    const recallBox = el("div", { id: "recall-results" });
    const recallInput = el("input", { type: "search", id: "recall-query", placeholder: "search the evidence as recall would: a command, file, test, error", size: 60 });
    recallInput.addEventListener("keydown", (e) => { if (e.key === "Enter") showRecall(sid, recallInput.value, recallBox); });
    const callInput = el("input", { type: "number", id: "call-input", min: 1, max: tl.calls.length || 1, value: selected || 1 });
    callInput.addEventListener("change", () => pickCall(callInput.value));
    const del = state.config && state.config.can_delete ? el("button", { type: "button", class: "danger", id: "delete", onclick: async () => {
      if (!confirm(`Delete session ${sid} and its whole history (${tl.messages} messages)? This cannot be undone.`)) return;
      stopPolling();
      try { await api(`sessions/${encodeURIComponent(sid)}`, { method: "DELETE" }); location.hash = "#/"; } catch (e) { alert(e.message || e); }
    }, text: "delete session…" }) : null;
    main.replaceChildren(
      el("div", { class: "toolbar" }, el("h1", { id: "session-title", text: sid }), el("span", { class: "muted", text: `agent ${tl.agent_id} · ${fmt(tl.messages)} messages · ${fmt(tl.history_tokens)} history tokens · ${tl.calls.length} model calls · ${tl.compactions.length} compactions` }), el("span", { class: "spacer" }), del),
      el("div", { class: "card chart" }, el("div", { class: "legend" }, el("span", {}, el("i", { class: "sw sw-hist" }), "full history"), el("span", {}, el("i", { class: "sw sw-view" }), "view sent to the model"), el("span", { class: "muted", text: "dashed: compactions (click one); dots: model calls (click one)" })), chart(tl, selected, pickCall)),
      el("h2", { text: `Compactions (${tl.compactions.length})` }),
      el("div", { id: "compactions" }, tl.compactions.length ? tl.compactions.map((c) => compactionCard(c, sid)) : el("p", { class: "muted", text: "no compaction yet" })),
      el("div", { class: "card" }, el("div", { class: "toolbar" }, el("strong", { text: "Recall" }), recallInput, el("button", { type: "button", id: "recall-go", onclick: () => showRecall(sid, recallInput.value, recallBox), text: "search" })), recallBox),
      el("details", { class: "card", id: "memory" }, el("summary", { text: `Memory facts (${memory.facts.length})` }),
        memory.facts.length ? el("table", {}, el("tbody", {}, memory.facts.map((f) => el("tr", {}, el("td", { text: f.topic }), el("td", { text: f.kind }), el("td", { text: f.text }))))) : el("p", { class: "muted", text: "none" })),
      el("div", { class: "toolbar" }, el("strong", { text: "View at call" }), callInput, el("span", { class: "muted", text: `of ${tl.calls.length}` })),
      viewBox);
    if (selected) await showView(sid, selected, viewBox);
    state.head = tl.head;
    state.poll = setInterval(async () => {
      try {
        const h = await api(`sessions/${encodeURIComponent(sid)}/head`);
        document.getElementById("live").hidden = false;
        if (h.head === 0) { stopPolling(); main.prepend(el("p", { class: "error", id: "gone", text: "this session is no longer in the store" })); return; }
        if (h.head !== state.head) { state.head = h.head; if (!document.getElementById("restore").hidden) return; showSession(sid, call); }
      } catch (e) { document.getElementById("live").hidden = true; }
    }, 2000);
  }

  // ------------------------------------------------------------------ routing
  async function route() {
    const hash = location.hash || "#/";
    try {
      if (!state.config) state.config = await api("config");
      const m = hash.match(/^#\/s\/([^/]+)(?:\/call\/(\d+))?$/);
      if (m) await showSession(decodeURIComponent(m[1]), m[2] ? Number(m[2]) : 0);
      else {
        const q = new URLSearchParams(hash.split("?")[1] || "");
        await showList(q.get("q") || "", q.get("agent") || "");
      }
      document.body.setAttribute("data-ready", "1");
    } catch (e) { fail(e); document.body.setAttribute("data-ready", "error"); }
  }
  if (location.hash.startsWith("#token=")) {  // a link the command printed: the token never reaches a server log
    state.token = decodeURIComponent(location.hash.slice(7));
    sessionStorage.setItem("cf-token", state.token);
    history.replaceState(null, "", location.pathname + "#/");
  }
  const tokenInput = document.getElementById("token");
  tokenInput.value = state.token;
  if (state.token) document.getElementById("token-box").hidden = false;
  tokenInput.addEventListener("change", () => { if (tokenInput.value.trim() === state.token) return; state.token = tokenInput.value.trim(); sessionStorage.setItem("cf-token", state.token); state.config = null; document.body.removeAttribute("data-ready"); route(); });
  window.addEventListener("hashchange", () => { document.body.removeAttribute("data-ready"); route(); });
  route();
})();

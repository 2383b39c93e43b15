// sessionwarden's live page. Reads only: the board arrives as server-sent events
// (/ui/events), a session's timeline and a call's replay are fetched when opened.
// Every text from the log is set as textContent, never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
let board = null;          // the latest board from the daemon
let selected = null;       // the session whose timeline is open
let selectedLast = "";     // its last_at when its timeline was fetched

function el(tag, cls, ...kids) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  for (const kid of kids) {
    if (kid === null || kid === undefined) continue;
    node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function tokens(n) {
  if (n === null || n === undefined) return "–";
  if (n >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + "M";
  if (n >= 1e3) return (n / 1e3).toFixed(n >= 1e4 ? 0 : 1) + "k";
  return String(n);
}

function usd(text) {
  if (text === null || text === undefined) return "–";
  const n = Number(text);
  if (n === 0) return "$0";
  if (n < 0.01) return "$" + n.toPrecision(2);
  return "$" + n.toFixed(2);
}

function ago(iso) {
  if (!iso || !board) return "";
  const s = Math.max(0, (Date.parse(board.now) - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

function bar(fraction, level) {
  const b = el("div", "bar" + (level ? " " + level : ""));
  const fill = el("div", "fill");
  fill.style.width = Math.min(100, Math.max(0, fraction * 100)).toFixed(1) + "%";
  b.append(fill);
  return b;
}

function statusBadge(s) {
  if (s.last_status === null && !s.last_outcome) return el("span", "badge", "in flight");
  const good = s.last_outcome === "ok" || s.last_outcome === "answered";
  const text = (s.last_status || "") + " " + (s.last_outcome || "");
  return el("span", "badge " + (good ? "ok" : "bad"), text.trim());
}

function contextCell(s) {
  const c = s.context;
  const cell = el("div", "ctx");
  cell.append(el("span", "label", "context vs threshold"));
  const limit = c.threshold || c.window;
  const frac = limit ? c.tokens / limit : 0;
  const b = bar(frac, frac >= 1 ? "bad" : frac >= 0.8 ? "warn" : "");
  b.dataset.tokens = String(c.tokens);
  cell.append(b);
  let text = (c.source === "estimated" ? "~" : "") + tokens(c.tokens);
  if (c.threshold) text += " of " + tokens(c.threshold) + " threshold";
  if (c.window) text += " · window " + tokens(c.window);
  cell.append(el("span", "figure", text));
  return cell;
}

function spendCell(s) {
  const cell = el("div", "spend");
  cell.append(el("span", "label", "spend vs cap"));
  if (s.cap) {
    const frac = Number(s.subtree_spent) / Number(s.cap);
    cell.append(bar(frac, frac >= 1 ? "bad" : frac >= 0.8 ? "warn" : ""));
    cell.append(el("span", "figure", usd(s.subtree_spent) + " of " + usd(s.cap) + " cap"));
  } else {
    cell.append(el("span", "", usd(s.spent)));
    cell.append(el("span", "figure", "no cap"));
  }
  if (s.unknown_cost_calls) {
    cell.append(el("span", "figure", s.unknown_cost_calls + " of unknown cost"));
  }
  return cell;
}

function sessionRow(s) {
  const row = el("li", "row");
  row.tabIndex = 0;
  row.dataset.session = s.id;
  const id = el("div", "id", s.live ? el("span", "live") : null, s.id,
                el("span", "sub", (s.parent ? "child of " + s.parent + " · " : "") + (s.client || "")));
  const compactions = el("div", "compactions", el("span", "label", "compactions"), String(s.compressions),
                         s.tokens_saved ? el("span", "figure", tokens(s.tokens_saved) + " saved") : null);
  const last = el("div", "last", el("span", "label", "last"), statusBadge(s),
                  el("span", "figure", ago(s.last_at)));
  if (s.stopped_by) last.append(el("span", "badge warn", s.stopped_by));
  row.append(id, el("div", "model", el("span", "label", "model"), s.model),
             el("div", "", el("span", "label", "calls"), String(s.calls)),
             contextCell(s), compactions, spendCell(s), last);
  row.addEventListener("click", () => { location.hash = "#s=" + encodeURIComponent(s.id); });
  row.addEventListener("keydown", (e) => { if (e.key === "Enter") row.click(); });
  return row;
}

function renderTotals() {
  const today = board.days.length ? board.days[board.days.length - 1] : null;
  const dl = $("totals");
  dl.replaceChildren();
  for (const [k, v] of [["sessions", board.total_sessions], ["live", board.live_sessions],
                        ["spent today", today ? usd(today.spent) : "–"]]) {
    dl.append(el("div", "", el("dt", "", k), el("dd", "", v)));
  }
}

function renderSessions() {
  $("sessions").replaceChildren(...board.sessions.map(sessionRow));
  $("no-sessions").hidden = board.sessions.length > 0;
}

function renderProviders() {
  const box = $("providers");
  box.replaceChildren();
  const names = Object.keys(board.providers);
  if (!names.length) box.append(el("p", "empty", "No key recorded yet."));
  for (const name of names) {
    const p = board.providers[name];
    if (p.simulated && !p.keys.length) {
      box.append(el("div", "provider", el("h3", "", name, el("span", "badge", "offline, no key"))));
      continue;
    }
    const open = p.breaker && p.breaker.state === "open";
    const section = el("div", "provider", el("h3", "", name,
      el("span", "badge " + (open ? "bad" : "ok"), open ? "breaker open" : "breaker closed")));
    for (const k of p.keys) {
      const level = k.state === "ok" ? "ok" : k.state === "dead" || k.state === "removed" ? "bad" : "warn";
      const until = k.until && k.state !== "ok" ? " until " + k.until.slice(11, 19) : "";
      section.append(el("div", "key", el("span", "mono", k.fingerprint.slice(0, 12)),
        el("span", "", k.calls + " calls"), el("span", "badge " + level, k.state + until)));
    }
    box.append(section);
  }
}

function renderChart() {
  const chart = $("chart");
  chart.replaceChildren();
  const days = board.days;
  const top = Math.max(0, ...days.map((d) => Number(d.spent)));
  const w = 280 / Math.max(1, days.length);
  days.forEach((d, i) => {
    const h = top > 0 ? (Number(d.spent) / top) * 96 : 0;
    const rect = svg("rect", { x: i * w + 2, y: 104 - h, width: Math.max(1, w - 4),
                               height: Math.max(h, d.calls ? 1 : 0),
                               class: "day" + (d.unpriced ? " unknown" : "") });
    const title = svg("title", {});
    title.textContent = d.day + ": " + usd(d.spent) + ", " + d.calls + " calls" +
      (d.unpriced ? ", " + d.unpriced + " of unknown cost" : "");
    rect.append(title);
    chart.append(rect);
    if ((days.length - 1 - i) % 2 === 0 || days.length <= 7) {  // today always labelled
      const t = svg("text", { x: i * w + w / 2, y: 116, "text-anchor": "middle" });
      t.textContent = d.day.slice(8);
      chart.append(t);
    }
  });
  const total = days.reduce((a, d) => a + Number(d.spent), 0);
  $("chart-note").textContent = days.length
    ? "last " + days.length + " days: " + usd(String(total)) + "; highest day " + usd(String(top))
    : "";
}

function render() {
  renderTotals();
  renderSessions();
  renderProviders();
  renderChart();
  if (selected) {
    const s = board.sessions.find((x) => x.id === selected);
    if (s && s.last_at !== selectedLast) loadTimeline();
  }
}

function summary(s) {
  const box = $("detail-summary");
  box.replaceChildren();
  if (!s) return;
  const c = s.context;
  for (const [k, v] of [["model", s.model], ["calls", s.calls], ["context", tokens(c.tokens) +
      (c.threshold ? " / " + tokens(c.threshold) : "")], ["compactions", s.compressions],
      ["spills", s.spills], ["spent", usd(s.spent)], ["cap", s.cap ? usd(s.cap) : "none"]]) {
    box.append(el("span", "", k + " ", el("b", "", v)));
  }
}

const MAX_SHOWN = 500;   // timeline entries kept on the page, as the daemon sends at most
let timeline = { id: null, version: 0, entries: [], omitted: 0, loading: false, again: false };

function entryItem(id, e) {
  const text = el("span", "text", e.text);
  if (e.replay) {
    const a = el("a", "", " replay");
    a.href = "#s=" + encodeURIComponent(id) + "&c=" + encodeURIComponent(e.call_id);
    text.append(" ", a);
  }
  const li = el("li", "", el("time", "", e.at.slice(11, 19)), el("span", "kind " + e.kind, e.kind), text);
  li.dataset.kind = e.kind;
  return li;
}

// The selected session's timeline: the whole of it once, then only what came after the
// stream version already shown (a long session is not read again every second).
async function loadTimeline() {
  const id = selected;
  if (timeline.id !== id) {
    timeline = { id, version: 0, entries: [], omitted: 0, loading: false, again: false };
  }
  if (timeline.loading) { timeline.again = true; return; }  // fetched once this one lands
  timeline.loading = true;
  const s = board && board.sessions.find((x) => x.id === id);
  selectedLast = s ? s.last_at : "";
  summary(s);
  try {
    const answer = await fetch("/ui/api/sessions/" + encodeURIComponent(id) +
                               (timeline.version ? "?after=" + timeline.version : ""));
    if (id !== selected) return;
    if (!answer.ok) {
      $("timeline").replaceChildren(el("li", "", "No such session in this log."));
      return;
    }
    const data = await answer.json();
    timeline.version = data.version;
    timeline.entries = timeline.entries.concat(data.entries);
    timeline.omitted += data.omitted + Math.max(0, timeline.entries.length - MAX_SHOWN);
    timeline.entries = timeline.entries.slice(-MAX_SHOWN);
    const items = timeline.entries.slice().reverse().map((e) => entryItem(id, e));
    if (timeline.omitted) {
      items.push(el("li", "", "", "", el("span", "text hint", timeline.omitted + " older entries not shown")));
    }
    $("timeline").replaceChildren(...items);
  } finally {
    timeline.loading = false;
    if (timeline.again && timeline.id === id) { timeline.again = false; loadTimeline(); }
  }
}

async function loadReplay(session, call) {
  $("replay").hidden = false;
  $("replay-call").textContent = call;
  $("replay-cmd").textContent = "sessionwarden replay --session " + session + " --call " + call;
  $("replay-body").textContent = "loading…";
  $("replay").scrollIntoView({ block: "start" });
  const answer = await fetch("/ui/api/replay/" + encodeURIComponent(session) + "/" + encodeURIComponent(call));
  const text = await answer.text();
  let shown = text;
  try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* cut, or an error: as sent */ }
  $("replay-body").textContent = shown;
}

function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const session = params.get("s");
  $("sessions-panel").hidden = Boolean(session);
  $("detail").hidden = !session;
  if (!session) { selected = null; return; }
  if (session !== selected) {
    selected = session;
    $("detail-id").textContent = session;
    $("timeline").replaceChildren();
    loadTimeline();
  }
  const call = params.get("c");
  if (call) loadReplay(session, call); else $("replay").hidden = true;
}

function connect() {
  const source = new EventSource("/ui/events");
  source.addEventListener("board", (e) => {
    board = JSON.parse(e.data);
    $("link").textContent = "live";
    $("link").className = "link on";
    render();
  });
  source.addEventListener("error", () => {
    $("link").textContent = "reconnecting…";
    $("link").className = "link off";
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $("back").addEventListener("click", (e) => { e.preventDefault(); location.hash = ""; });
  $("replay-close").addEventListener("click", (e) => {
    e.preventDefault();
    location.hash = "#s=" + encodeURIComponent(selected);
  });
  window.addEventListener("hashchange", route);
  route();
  connect();
});

// hpcopt dashboard: a single page over the public REST API (/api/v1), no build step.
// Pages: #/ campaigns, #/campaign/ID, #/trial/ID, #/new. Views refresh every 2 s
// without a reload, keeping the user's sort, filter, page and selection.
"use strict";

const POLL_MS = 2000;
const STATES = ["QUEUED", "RUNNING", "COMPLETED", "PRUNED", "FAILED", "CANCELLED", "PREEMPTED"];
const app = document.getElementById("app");
const session = {
  token: localStorage.getItem("hpcopt.token") || "",
  who: null, // {auth, token, scopes}
  timer: null,
  refresh: () => {},
  generation: 0, // bumps on every navigation: stale refreshes drop their results
  listSort: { key: "id", desc: true },
  table: {}, // per campaign: {sort, desc, states, offset, limit}
  curves: {}, // per campaign: selected trial ids (null: the best 5)
};

// ---------------------------------------------------------------- API ---

class HttpError extends Error {
  constructor(status, body) {
    super(body && body.detail ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (session.token) headers.Authorization = `Bearer ${session.token}`;
  const res = await fetch(`api/v1${path}`, Object.assign({}, options, { headers }));
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
  if (res.status === 401) { askToken(body && body.detail); throw new HttpError(401, body); }
  if (!res.ok) throw new HttpError(res.status, body);
  return body;
}

async function download(path, filename) {
  const headers = session.token ? { Authorization: `Bearer ${session.token}` } : {};
  const res = await fetch(`api/v1${path}`, { headers });
  if (!res.ok) { alert(`download failed: HTTP ${res.status}`); return; }
  const url = URL.createObjectURL(await res.blob());
  const a = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 5000);
}

const can = (scope) => !session.who || !session.who.auth || session.who.scopes.includes(scope) || session.who.scopes.includes("admin");

function askToken(reason) {
  const dialog = document.getElementById("token-dialog");
  const err = document.getElementById("token-error");
  if (session.token && reason) { err.textContent = reason; err.hidden = false; }
  if (!dialog.open) dialog.showModal();
}

document.getElementById("token-form").addEventListener("submit", () => {
  session.token = document.getElementById("token-input").value.trim();
  localStorage.setItem("hpcopt.token", session.token);
  start();
});

async function loadWho() {
  session.who = await api("/whoami");
  if (session.who.auth && !session.who.token) {
    askToken(session.token ? "The stored token is unknown or revoked." : "");
    throw new HttpError(401, { detail: "a token is needed" });
  }
  const who = document.getElementById("whoami");
  const banner = document.getElementById("banner");
  if (!session.who.auth) {
    who.textContent = "auth off (loopback)";
  } else {
    who.innerHTML = "";
    who.append(`token ${session.who.token} · ${session.who.scopes.join(", ")} `);
    const out = el("a", { href: "#", text: "sign out" });
    out.addEventListener("click", (e) => { e.preventDefault(); localStorage.removeItem("hpcopt.token"); location.reload(); });
    who.append(out);
  }
  if (!can("submit")) {
    banner.textContent = "This token can read but not submit or cancel: viewing only.";
    banner.hidden = false;
  } else {
    banner.hidden = true;
  }
}

// ------------------------------------------------------------ helpers ---

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k === "html") node.innerHTML = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

const badge = (state, extra = "") => el("span", { class: `badge ${state} ${extra}`, text: state });
const fmt = (v, digits = 4) => (v === null || v === undefined ? "–" : typeof v === "number" ? (Number.isInteger(v) ? String(v) : Number(v.toPrecision(digits)).toString()) : String(v));
const done = (c) => Object.entries(c.trial_counts).filter(([s]) => s !== "QUEUED" && s !== "RUNNING").reduce((a, [, n]) => a + n, 0);
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
function duration(t) {
  if (!t.started_at) return "–";
  const end = t.finished_at ? new Date(t.finished_at) : new Date();
  const s = Math.max(0, (end - new Date(t.started_at)) / 1000);
  return s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
}
const ago = (iso) => { const s = (Date.now() - new Date(iso)) / 1000; return s < 90 ? `${Math.round(s)} s ago` : `${Math.round(s / 60)} min ago`; };

function progress(c) {
  const n = done(c);
  const pct = c.max_trials ? Math.min(100, (100 * n) / c.max_trials) : 0;
  return el("span", {}, el("span", { class: "progress" }, el("span", { style: `width:${pct}%` })), el("span", { class: "progress-label", text: `${n} / ${c.max_trials}` }));
}

function chips(counts) {
  return el("span", { class: "chips" }, STATES.filter((s) => counts[s]).map((s) => el("span", { class: `badge ${s}`, title: s, text: `${s.toLowerCase()} ${counts[s]}` })));
}

function sortableHeader(label, key, current, onSort, cls = "") {
  const th = el("th", { class: `sortable ${cls} ${current.key === key ? "sorted" : ""} ${current.key === key && current.desc ? "desc" : ""}`, text: label, "data-sort": key });
  th.addEventListener("click", () => onSort(key));
  return th;
}

const plotConfig = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
const baseLayout = (extra) => Object.assign({ margin: { l: 55, r: 15, t: 10, b: 40 }, font: { size: 11 }, paper_bgcolor: "#fff", plot_bgcolor: "#fff", uirevision: "keep", hovermode: "closest" }, extra);

function draw(id, traces, layout) {
  const node = document.getElementById(id);
  if (node && window.Plotly) Plotly.react(node, traces, baseLayout(layout), plotConfig);
}

// -------------------------------------------------------------- router ---

// Runs `refresh` now and every POLL_MS while this view is shown; `session.refresh()`
// asks for one at once (after a sort or filter change), queued behind a running one.
function live(refresh) {
  const gen = session.generation;
  let busy = false, again = false;
  const tick = async () => {
    if (gen !== session.generation) return;
    if (busy) { again = true; return; }
    busy = true;
    try { await refresh(gen); } catch (e) { if (!(e instanceof HttpError && e.status === 401)) console.warn("refresh failed:", e.message); } finally { busy = false; }
    if (again) { again = false; tick(); }
  };
  session.refresh = tick;
  tick();
  session.timer = setInterval(tick, POLL_MS);
}

const nextFrame = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));

function route() {
  clearInterval(session.timer);
  session.generation += 1;
  // Free the old view's plots (WebGL contexts are few).
  if (window.Plotly) document.querySelectorAll(".js-plotly-plot").forEach((node) => Plotly.purge(node));
  const hash = location.hash || "#/";
  let m;
  if ((m = hash.match(/^#\/campaign\/(\d+)/))) return campaignPage(Number(m[1]));
  if ((m = hash.match(/^#\/trial\/(\d+)/))) return trialPage(Number(m[1]));
  if (hash.startsWith("#/new")) return newPage();
  return campaignsPage();
}

async function start() {
  try { await loadWho(); } catch (e) { if (e.status === 401) return; }
  document.getElementById("nav-new").hidden = !can("submit");
  route();
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", start);

// ---------------------------------------------------------- campaigns ---

function campaignsPage() {
  app.replaceChildren(el("h1", { text: "Campaigns" }), el("div", { class: "card" }, el("table", { id: "campaigns" }, el("thead"), el("tbody"))));
  let rows = [];
  const sorters = {
    id: (c) => c.id, name: (c) => c.name.toLowerCase(), state: (c) => c.state, algorithm: (c) => c.algorithm,
    progress: (c) => done(c) / Math.max(1, c.max_trials), best: (c) => (c.best_value === null ? Infinity : c.best_value), agents: (c) => c.live_agents,
  };
  const render = () => {
    const s = session.listSort;
    const onSort = (key) => { s.desc = s.key === key ? !s.desc : false; s.key = key; render(); };
    const table = document.getElementById("campaigns");
    if (!table) return;
    table.tHead.replaceChildren(el("tr", {},
      sortableHeader("ID", "id", s, onSort), sortableHeader("Name", "name", s, onSort), sortableHeader("State", "state", s, onSort),
      sortableHeader("Algorithm", "algorithm", s, onSort), sortableHeader("Progress", "progress", s, onSort),
      sortableHeader("Best", "best", s, onSort, "num"), el("th", { text: "Trials by state" }), sortableHeader("Live agents", "agents", s, onSort, "num")));
    const sorted = [...rows].sort((a, b) => { const x = sorters[s.key](a), y = sorters[s.key](b); return (x < y ? -1 : x > y ? 1 : 0) * (s.desc ? -1 : 1); });
    table.tBodies[0].replaceChildren(...(sorted.length ? sorted.map((c) => el("tr", { "data-id": c.id },
      el("td", { text: c.id }), el("td", {}, el("a", { href: `#/campaign/${c.id}`, text: c.name })), el("td", {}, badge(c.state)),
      el("td", { text: c.algorithm }), el("td", {}, progress(c)),
      el("td", { class: "num", title: c.metric, text: c.best_value === null ? "–" : `${fmt(c.best_value)}` }),
      el("td", {}, chips(c.trial_counts)), el("td", { class: "num", text: c.live_agents }))) :
      [el("tr", {}, el("td", { colspan: 8, class: "muted", text: "No campaigns yet. Submit one with `hpcopt submit` or New campaign." }))]));
  };
  live(async (gen) => {
    const data = await api("/campaigns");
    if (gen !== session.generation) return;
    rows = data;
    render();
  });
}

// ----------------------------------------------------------- campaign ---

function campaignPage(id) {
  const t = (session.table[id] = session.table[id] || { sort: "number", desc: false, states: [], offset: 0, limit: 25 });
  app.replaceChildren(
    el("div", { class: "row" }, el("h1", { id: "campaign-title", text: `Campaign ${id}` }), el("span", { class: "spacer" }),
      el("button", { id: "export-json", text: "Export JSON", onclick: () => download(`/campaigns/${id}/export`, `campaign-${id}.json`) }),
      el("button", { id: "export-csv", text: "Export CSV", onclick: () => download(`/campaigns/${id}/export?format=csv`, `campaign-${id}-trials.csv`) }),
      el("button", { id: "cancel", class: "danger", text: "Cancel campaign", onclick: () => cancelCampaign(id) })),
    el("div", { class: "card", id: "summary" }),
    el("div", { class: "grid two" },
      el("div", { class: "card" }, el("h2", { text: "Optimization history" }), el("div", { id: "plot-history", class: "plot" }), el("div", { id: "history-note", class: "note" })),
      el("div", { class: "card" }, el("h2", { text: "Learning curves" }), el("div", { id: "curve-picker", class: "note" }), el("div", { id: "plot-curves", class: "plot" }))),
    el("div", { class: "card", id: "card-front", hidden: true }, el("h2", { text: "Pareto front" }), el("div", { id: "plot-front", class: "plot" }), el("div", { id: "front-note", class: "note" })),
    el("div", { class: "card" }, el("h2", { text: "Parallel coordinates" }), el("div", { id: "plot-parcoords", class: "plot" })),
    el("div", { class: "card" }, el("h2", { text: "Slices: the value against each parameter" }), el("div", { id: "slices", class: "slices" })),
    el("div", { class: "card" }, el("div", { class: "row" }, el("h2", { text: "Trials" }), el("span", { class: "spacer" }), el("span", { id: "state-filter" })),
      el("table", { id: "trials" }, el("thead"), el("tbody")), el("div", { class: "row pager", id: "pager" })),
    el("div", { class: "card" }, el("h2", { text: "Agents" }), el("table", { id: "agents" }, el("thead"), el("tbody"))),
  );
  renderStateFilter(id, t);
  const query = () => {
    const qs = new URLSearchParams({ sort: t.sort, order: t.desc ? "desc" : "asc", offset: t.offset, limit: t.limit });
    t.states.forEach((s) => qs.append("state", s));
    return qs.toString();
  };
  live(async (gen) => {
    const qs = query();
    const sel = session.curves[id];
    const cq = sel && sel.length ? sel.map((x) => `trial_id=${x}`).join("&") : "limit=5";
    const [c, plot, page, agents, curves] = await Promise.all([
      api(`/campaigns/${id}`), api(`/campaigns/${id}/plot?max_points=1000`), api(`/campaigns/${id}/trials?${qs}`),
      api(`/campaigns/${id}/agents`), api(`/campaigns/${id}/curves?${cq}`),
    ]);
    if (gen !== session.generation) return;
    // Cheap parts first, then one plot per frame, so the page answers while plots draw.
    renderSummary(c);
    // A sort, filter or page change made while this refresh ran: the queued one renders it.
    if (qs === query()) renderTrials(id, c, page, t);
    renderAgents(agents);
    performance.mark("hpcopt:tables"); // performance marks: benchmarks/dashboard_open.py reads them
    // Parallel coordinates last: WebGL, the slowest to set up where there is no GPU.
    const steps = [["history", () => renderHistory(plot)], ["front", () => renderFront(plot)], ["curves", () => renderCurves(id, curves, plot)], ["slices", () => renderSlices(plot)], ["parcoords", () => renderParcoords(plot)]];
    for (const [name, step] of steps) {
      await nextFrame();
      if (gen !== session.generation) return;
      step();
      performance.mark(`hpcopt:${name}`);
    }
  });
  document.getElementById("cancel").disabled = true;
}

function renderSummary(c) {
  document.getElementById("campaign-title").textContent = `${c.name}`;
  const spec = c.spec;
  const cancel = document.getElementById("cancel");
  cancel.disabled = c.state !== "RUNNING" || !can("submit");
  cancel.title = !can("submit") ? "this token has no submit scope" : c.state !== "RUNNING" ? `the campaign is ${c.state}` : "";
  const training = spec.training || {};
  const space = Object.entries(spec.space).map(([k, p]) => (p.type === "categorical" ? `${k} ∈ {${p.choices.join(", ")}}` : `${k} ∈ [${p.low}, ${p.high}]${p.scale === "log" ? " log" : ""}${p.type === "int" ? " int" : ""}`));
  document.getElementById("summary").replaceChildren(el("div", { class: "grid two" },
    el("dl", { class: "spec" },
      el("dt", { text: "ID" }), el("dd", { text: c.id }), el("dt", { text: "State" }), el("dd", {}, badge(c.state)),
      el("dt", { text: spec.objectives ? "Objectives" : "Objective" }), el("dd", { id: "campaign-objectives", text: (spec.objectives || [spec.objective]).map((o) => `${o.direction} ${o.metric}`).join(", ") }),
      el("dt", { text: "Algorithm" }), el("dd", { text: `${c.algorithm}${spec.algorithm && spec.algorithm.seed !== null && spec.algorithm.seed !== undefined ? ` (seed ${spec.algorithm.seed})` : ""}` }),
      ...prunerAndWarmStart(spec),
      el("dt", { text: "Progress" }), el("dd", {}, progress(c)),
      el("dt", { text: "Best" }), el("dd", {}, c.best_trial_id ? el("a", { href: `#/trial/${c.best_trial_id}`, text: `${fmt(c.best_value)} (trial ${c.best_trial_id})` }) : "–"),
      el("dt", { text: "Trials" }), el("dd", {}, chips(c.trial_counts)), el("dt", { text: "Live agents" }), el("dd", { text: c.live_agents })),
    el("dl", { class: "spec" },
      el("dt", { text: "Space" }), el("dd", { class: "mono", html: space.map((s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;")).join("<br>") }),
      el("dt", { text: "Budget" }), el("dd", { text: `${spec.budget.max_trials} trials, ${spec.budget.max_parallel} at once` }),
      el("dt", { text: "Folds" }), el("dd", { text: spec.folds }),
      el("dt", { text: "Training" }), el("dd", { class: "mono", text: `${training.task} · ${training.scheme} · ${training.epochs} epochs · ${training.ranks_per_fold} rank(s)/fold` }),
      el("dt", { text: "Created" }), el("dd", { text: when(c.created_at) }))));
}

async function cancelCampaign(id) {
  if (!confirm(`Cancel campaign ${id}? Its queued and running trials are cancelled; agents stop at their next heartbeat.`)) return;
  try {
    await api(`/campaigns/${id}/cancel`, { method: "POST" });
    session.refresh();
  } catch (e) {
    alert(`cancel failed: ${e.message}`);
  }
}

function renderHistory(plot) {
  const pts = plot.points;
  const last = pts.length ? pts[pts.length - 1].number : 0;
  const best = plot.best.map((b) => [b.number, b.value]);
  if (best.length) best.push([Math.max(last, best[best.length - 1][0]), best[best.length - 1][1]]);
  // A campaign that searches the training scheme: one trace (colour, legend entry that hides it) per scheme.
  const groups = schemeGroups(plot, pts);
  draw("plot-history", [
    ...groups.map(([name, color, members]) => ({ type: "scatter", mode: "markers", name, x: members.map((p) => p.number), y: members.map((p) => p.value), customdata: members.map((p) => p.trial_id),
      error_y: { type: "data", array: members.map((p) => p.value_std || 0), visible: true, thickness: 1, width: 0, color: color.replace(".8)", ".35)") },
      marker: { size: 6, color }, hovertemplate: `trial %{customdata}${name === "trial" ? "" : ` (${name})`}<br>#%{x}: %{y:.4g}<extra></extra>` })),
    { type: "scatter", mode: "lines", name: `best ${plot.metric}`, x: best.map((b) => b[0]), y: best.map((b) => b[1]), line: { shape: "hv", color: "#c0392b", width: 2 } },
  ], { xaxis: { title: { text: "trial number" } }, yaxis: { title: { text: plot.metric } }, legend: { orientation: "h", y: 1.12 } });
  document.getElementById("history-note").textContent = plot.downsampled
    ? `${pts.length} of ${plot.completed} completed trials shown (every improvement, the best, a random sample of the rest); the best line uses all.`
    : `${plot.completed} completed trials; error bars: std over folds.`;
  const node = document.getElementById("plot-history");
  if (node && !node.dataset.bound && node.on) { node.on("plotly_click", (e) => { const tid = e.points[0].customdata; if (tid) location.hash = `#/trial/${tid}`; }); node.dataset.bound = "1"; }
}

const SCHEME_COLORS = ["rgba(43,95,217,.8)", "rgba(230,126,34,.8)", "rgba(39,174,96,.8)", "rgba(142,68,173,.8)", "rgba(192,57,43,.8)", "rgba(22,160,133,.8)", "rgba(127,140,141,.8)"];

// [name, colour, points] per choice of the space's `scheme` parameter, or one group "trial".
// A multi-objective campaign: every completed trial by its first two objectives, the
// Pareto front (over all objectives, computed by the server) highlighted and joined.
function renderFront(plot) {
  const card = document.getElementById("card-front");
  const objectives = plot.objectives || [];
  card.hidden = objectives.length < 2;
  if (card.hidden) return;
  const [a, b] = objectives;
  const onFront = new Set(plot.front);
  const pts = plot.points.filter((p) => p.values);
  const rest = pts.filter((p) => !onFront.has(p.trial_id));
  const front = pts.filter((p) => onFront.has(p.trial_id)).sort((p, q) => p.values[0] - q.values[0]);
  const hover = `trial %{customdata}<br>${a.metric}=%{x:.4g}<br>${b.metric}=%{y:.4g}<extra></extra>`;
  draw("plot-front", [
    { type: "scatter", mode: "markers", name: "dominated", x: rest.map((p) => p.values[0]), y: rest.map((p) => p.values[1]), customdata: rest.map((p) => p.trial_id), marker: { size: 5, color: "#b0b8c4" }, hovertemplate: hover },
    { type: "scatter", mode: objectives.length === 2 ? "lines+markers" : "markers", name: "Pareto front", x: front.map((p) => p.values[0]), y: front.map((p) => p.values[1]), customdata: front.map((p) => p.trial_id), marker: { size: 8, color: "#c0392b" }, line: { shape: "hv", color: "#c0392b" }, hovertemplate: hover },
  ], { xaxis: { title: { text: `${a.metric} (${a.direction})` } }, yaxis: { title: { text: `${b.metric} (${b.direction})` } }, legend: { orientation: "h", y: 1.12 } });
  const node = document.getElementById("plot-front");
  if (node.on && !node.dataset.linked) {
    node.on("plotly_click", (ev) => { location.hash = `#/trial/${ev.points[0].customdata}`; });
    node.dataset.linked = "1";
  }
  const shown = objectives.length > 2 ? `; the plot shows the first two of ${objectives.map((o) => o.metric).join(", ")}` : "";
  const drawn = plot.front_size > front.length ? ` (${front.length} of them drawn)` : "";
  document.getElementById("front-note").textContent = `${plot.front_size} of ${plot.completed} completed trials are on the front${drawn}: no other completed trial is better in every objective${shown}. Click a point for its trial.`;
}

function schemeGroups(plot, pts) {
  const scheme = plot.space.scheme;
  if (!scheme || scheme.type !== "categorical") return [["trial", SCHEME_COLORS[0], pts]];
  return scheme.choices.map((c, i) => [String(c), SCHEME_COLORS[i % SCHEME_COLORS.length], pts.filter((p) => p.params.scheme === c)]);
}

function paramAxis(spec, values) {
  if (spec.type === "categorical") {
    const labels = spec.choices.map(String);
    return { values: values.map((v) => labels.indexOf(String(v))), tickvals: labels.map((_, i) => i), ticktext: labels };
  }
  if (spec.scale === "log") {
    const lo = Math.log10(spec.low), hi = Math.log10(spec.high);
    const ticks = [];
    for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) ticks.push(e);
    return { values: values.map((v) => Math.log10(v)), range: [lo, hi], tickvals: ticks, ticktext: ticks.map((e) => `1e${e}`) };
  }
  return { values, range: [spec.low, spec.high] };
}

function renderParcoords(plot) {
  // Conditional parameters are missing from some trials: parallel coordinates need every axis.
  const names = Object.keys(plot.space).filter((n) => !plot.space[n].when);
  const pts = plot.points;
  const dims = names.map((n) => Object.assign({ label: n }, paramAxis(plot.space[n], pts.map((p) => p.params[n]))));
  dims.push({ label: plot.metric, values: pts.map((p) => p.value) });
  draw("plot-parcoords", [{ type: "parcoords", dimensions: dims,
    line: { color: pts.map((p) => p.value), colorscale: "Viridis", reversescale: plot.direction === "maximize", showscale: true, colorbar: { title: { text: plot.metric }, thickness: 10 } } }],
  { margin: { l: 60, r: 60, t: 40, b: 20 } });
}

function renderSlices(plot) {
  const box = document.getElementById("slices");
  const names = Object.keys(plot.space);
  if (box.children.length !== names.length) box.replaceChildren(...names.map((n) => el("div", { id: `slice-${n}`, class: "plot small", "data-param": n })));
  for (const n of names) {
    const spec = plot.space[n];
    const xaxis = { title: { text: n } };
    if (spec.type === "categorical") xaxis.type = "category";
    else if (spec.scale === "log") xaxis.type = "log";
    // Inactive (conditional) parameters are absent from a trial: its point is left out here.
    const pts = plot.points.filter((p) => p.params[n] !== undefined);
    const groups = plot.space.scheme ? schemeGroups(plot, pts) : null;
    const traces = groups
      ? groups.map(([name, color, members]) => ({ type: "scatter", mode: "markers", name, x: members.map((p) => (spec.type === "categorical" ? String(p.params[n]) : p.params[n])), y: members.map((p) => p.value),
        marker: { size: 5, color }, hovertemplate: `${n}=%{x}<br>${plot.metric}=%{y:.4g} (${name})<extra></extra>` }))
      : [{ type: "scatter", mode: "markers", x: pts.map((p) => (spec.type === "categorical" ? String(p.params[n]) : p.params[n])), y: pts.map((p) => p.value),
        marker: { size: 5, color: pts.map((p) => p.number), colorscale: "Blues", showscale: false }, hovertemplate: `${n}=%{x}<br>${plot.metric}=%{y:.4g}<extra></extra>` }];
    draw(`slice-${n}`, traces, { xaxis, yaxis: { title: { text: plot.metric } }, margin: { l: 50, r: 10, t: 10, b: 40 }, showlegend: false });
  }
}

function renderCurves(id, curves, plot) {
  const traces = [];
  for (const c of curves) {
    const folds = [...new Set(c.points.map((p) => p.fold))].sort((a, b) => a - b);
    for (const f of folds) {
      const pts = c.points.filter((p) => p.fold === f);
      traces.push({ type: "scatter", mode: "lines+markers", name: `trial ${c.trial_id} fold ${f}`, legendgroup: `t${c.trial_id}`, x: pts.map((p) => p.step), y: pts.map((p) => p.value), marker: { size: 4 } });
    }
  }
  draw("plot-curves", traces, { xaxis: { title: { text: "epoch" } }, yaxis: { title: { text: plot.metric } }, showlegend: traces.length <= 25 });
  const picker = document.getElementById("curve-picker");
  const sel = session.curves[id];
  let text = sel && sel.length ? `trials ${sel.join(", ")} (ticked in the table)` : `the ${curves.length} best trials; tick trials in the table to choose`;
  if (curves.length && !traces.length) text += " — they reported no learning-curve points";
  picker.replaceChildren(`Showing ${text}. `, sel && sel.length ? el("a", { href: "#", text: "show the best instead", onclick: (e) => { e.preventDefault(); session.curves[id] = null; session.refresh(); } }) : "");
}

function renderStateFilter(id, t) {
  const box = document.getElementById("state-filter");
  box.replaceChildren("State: ", ...STATES.map((s) => el("label", { class: "check" },
    el("input", { type: "checkbox", value: s, "data-state": s, checked: t.states.includes(s), onchange: (e) => {
      t.states = e.target.checked ? [...t.states, s] : t.states.filter((x) => x !== s);
      t.offset = 0;
      session.refresh();
    } }), ` ${s.toLowerCase()}`)));
}

function renderTrials(id, c, page, t) {
  const names = Object.keys(c.spec.space);
  const cur = { key: t.sort, desc: t.desc };
  const onSort = (key) => { t.desc = t.sort === key ? !t.desc : key === "value" && c.direction === "maximize"; t.sort = key; t.offset = 0; session.refresh(); };
  const table = document.getElementById("trials");
  table.tHead.replaceChildren(el("tr", {}, el("th", { title: "show the learning curves of these trials", text: "curves" }),
    sortableHeader("#", "number", cur, onSort), el("th", { text: "ID" }), sortableHeader("State", "state", cur, onSort),
    sortableHeader(c.metric, "value", cur, onSort, "num"), sortableHeader("Attempt", "attempt", cur, onSort, "num"),
    ...names.map((n) => el("th", { text: n })), el("th", { text: "Duration" }), el("th", { text: "Agent" })));
  const sel = session.curves[id] || [];
  table.tBodies[0].replaceChildren(...(page.trials.length ? page.trials.map((tr) => el("tr", { "data-trial": tr.id },
    el("td", {}, el("input", { type: "checkbox", checked: sel.includes(tr.id), title: "show its learning curves", onchange: (e) => {
      const now = session.curves[id] || [];
      session.curves[id] = e.target.checked ? [...now, tr.id] : now.filter((x) => x !== tr.id);
      session.refresh();
    } })),
    el("td", { text: tr.number }), el("td", {}, el("a", { href: `#/trial/${tr.id}`, text: tr.id })), el("td", {}, badge(tr.state)),
    el("td", { class: "num", text: tr.value === null ? "–" : `${fmt(tr.value)} ± ${fmt(tr.value_std || 0, 2)}` }), el("td", { class: "num", text: tr.attempt }),
    ...names.map((n) => el("td", { class: "mono", text: fmt(tr.params[n]) })), el("td", { text: duration(tr) }), el("td", { class: "mono", title: tr.agent_id, text: tr.agent_id.slice(0, 8) }))) :
    [el("tr", {}, el("td", { colspan: 8 + names.length, class: "muted", text: "No trials match." }))]));
  const last = Math.max(0, Math.ceil(page.total / t.limit) - 1);
  const at = Math.floor(t.offset / t.limit);
  document.getElementById("pager").replaceChildren(
    el("button", { id: "prev", text: "‹ Prev", disabled: at === 0, onclick: () => { t.offset = Math.max(0, t.offset - t.limit); session.refresh(); } }),
    el("span", { id: "page-info", class: "muted", text: `page ${at + 1} of ${last + 1} · ${page.total} trials` }),
    el("button", { id: "next", text: "Next ›", disabled: at >= last, onclick: () => { t.offset += t.limit; session.refresh(); } }),
    el("span", { class: "spacer" }),
    el("label", { class: "check" }, "rows ", el("select", { id: "page-size", onchange: (e) => { t.limit = Number(e.target.value); t.offset = 0; session.refresh(); } },
      ...[25, 50, 100].map((n) => el("option", { value: n, text: n, selected: n === t.limit })))));
}

function renderAgents(agents) {
  const table = document.getElementById("agents");
  table.tHead.replaceChildren(el("tr", {}, ...["Agent", "Host", "Slurm job", "Ranks", "GPUs", "Current trial", "Last heartbeat", "Health"].map((h) => el("th", { text: h }))));
  table.tBodies[0].replaceChildren(...(agents.length ? agents.map((a) => el("tr", { "data-agent": a.id },
    el("td", { class: "mono", title: a.id, text: a.id.slice(0, 8) }), el("td", { text: a.host }), el("td", { text: a.slurm_job_id || "–" }),
    el("td", { class: "num", text: a.ranks }), el("td", { class: "num", text: a.gpus }),
    el("td", {}, a.current_trial_id ? el("a", { href: `#/trial/${a.current_trial_id}`, text: a.current_trial_id }) : "idle"),
    el("td", { title: when(a.last_seen_at), text: ago(a.last_seen_at) }),
    el("td", {}, a.stale ? badge("stale", "stale") : a.current_trial_id ? badge("RUNNING") : el("span", { class: "muted", text: "–" })))) :
    [el("tr", {}, el("td", { colspan: 8, class: "muted", text: "No agent has registered for this campaign." }))]));
}

// -------------------------------------------------------------- trial ---

// The scheme a trial trained with and its knobs: searched ones from its params, fixed ones from training.options.
// The pruner, and the earlier campaigns whose trials seeded the optimizer (not in this
// campaign's trials or budget).
function prunerAndWarmStart(spec) {
  const out = [];
  const p = spec.pruner || { name: "none" };
  if (p.name !== "none") {
    const within = p.options && p.options.within;
    const inner = within ? ` within folds: ${typeof within === "string" ? within : within.name}` : "";
    out.push(el("dt", { text: "Pruner" }), el("dd", { id: "campaign-pruner", text: `${p.name}${inner}` }));
  }
  const warm = (spec.warm_start && spec.warm_start.campaigns) || [];
  if (warm.length) {
    out.push(el("dt", { text: "Warm start" }), el("dd", { id: "campaign-warm-start" }, "completed trials of ",
      ...warm.flatMap((id, i) => [i ? ", " : "", el("a", { href: `#/campaign/${id}`, text: `campaign ${id}` })]),
      " seed the optimizer (not counted here)"));
  }
  return out;
}

function schemeRow(training, params) {
  if (!training) return [];
  const scheme = training.scheme === "search" ? params.scheme : training.scheme;
  if (scheme === undefined) return [];
  const searched = Object.entries(params).filter(([k]) => k.startsWith(`${scheme}.`)).map(([k, v]) => `${k.slice(scheme.length + 1)}=${fmt(v, 4)}`);
  const options = training.options || {};
  const fixed = Object.entries(options[scheme] || {}).concat(Object.entries(options).filter(([k]) => k.startsWith(`${scheme}.`)).map(([k, v]) => [k.slice(scheme.length + 1), v]))
    .filter(([k]) => !(`${scheme}.${k}` in params)).map(([k, v]) => `${k}=${v}`);
  const knobs = [...searched, ...fixed];
  return [el("dt", { text: "Scheme" }), el("dd", { id: "trial-scheme", class: "mono", text: `${scheme}${knobs.length ? ` (${knobs.join(", ")})` : ""}` })];
}

function trialPage(id) {
  app.replaceChildren(el("h1", { id: "trial-title", text: `Trial ${id}` }), el("div", { id: "trial" }));
  let metric = "objective", training = null;
  live(async (gen) => {
    const t = await api(`/trials/${id}`);
    if (metric === "objective") {
      const c = await api(`/campaigns/${t.campaign_id}`);
      metric = c.metric;
      training = (c.spec && c.spec.training) || null;
    }
    if (gen !== session.generation) return;
    const box = document.getElementById("trial");
    document.getElementById("trial-title").replaceChildren(`Trial ${t.id} `, badge(t.state), " ", el("a", { class: "note", href: `#/campaign/${t.campaign_id}`, text: `campaign ${t.campaign_id}` }));
    const metrics = [...new Set(t.folds.flatMap((f) => Object.keys(f.metrics)))].sort();
    if (!box.children.length) {
      box.append(el("div", { class: "grid two" }, el("div", { class: "card", id: "trial-params" }), el("div", { class: "card" }, el("h2", { text: "Learning curves" }), el("div", { id: "plot-trial-curves", class: "plot" }))),
        el("div", { class: "card", id: "trial-folds" }), el("div", { class: "card", id: "trial-events" }));
    }
    document.getElementById("trial-params").replaceChildren(el("h2", { text: "Parameters" }), el("dl", { class: "spec" },
      ...Object.entries(t.params).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { class: "mono", text: fmt(v, 6) })]),
      ...schemeRow(training, t.params),
      el("dt", { text: t.state === "PRUNED" ? "Value when pruned" : "Value" }),
      el("dd", { text: t.value === null ? "–" : t.state === "PRUNED" ? fmt(t.value, 6) : `${fmt(t.value, 6)} ± ${fmt(t.value_std || 0, 3)}` }),
      ...(t.values ? [el("dt", { text: "Objectives" }), el("dd", { id: "trial-values", class: "mono", text: t.values.map((v) => fmt(v, 6)).join(", ") })] : []),
      el("dt", { text: "Attempt" }), el("dd", { text: t.attempt }), el("dt", { text: "Duration" }), el("dd", { text: duration(t) }),
      el("dt", { text: "Agent" }), el("dd", { class: "mono", text: t.agent_id || "–" })),
    t.error && t.state === "PRUNED" ? el("div", {}, el("h2", { text: "Why it was pruned" }), el("p", { id: "trial-pruned", text: t.error })) : "",
    t.error && t.state !== "PRUNED" ? el("div", {}, el("h2", { text: "Error" }), el("pre", { class: "trace", id: "trial-error", text: t.error })) : "");
    document.getElementById("trial-folds").replaceChildren(el("h2", { text: "Folds" }), el("table", { id: "folds" },
      el("thead", {}, el("tr", {}, el("th", { text: "Fold" }), el("th", { text: "Finished" }), el("th", { class: "num", text: "Value" }),
        ...metrics.map((m) => el("th", { class: "num", text: m })), el("th", { text: "Attempt" }), el("th", { text: "Checkpoint" }))),
      el("tbody", {}, ...t.folds.sort((a, b) => a.index - b.index).map((f) => el("tr", {}, el("td", { text: f.index }), el("td", { text: f.finished ? "yes" : "no" }),
        el("td", { class: "num", text: fmt(f.value, 6) }), ...metrics.map((m) => el("td", { class: "num", text: fmt(f.metrics[m], 5) })),
        el("td", { text: f.attempt }), el("td", { class: "mono", text: f.checkpoint_uri || "–" }))))));
    document.getElementById("trial-events").replaceChildren(el("h2", { text: "Attempt history" }), el("table", { id: "events" },
      el("thead", {}, el("tr", {}, ...["When", "Attempt", "Event", "Agent", "Reason"].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...(t.events || []).map((e) => el("tr", {}, el("td", { text: when(e.at) }), el("td", { text: e.attempt }), el("td", {}, badge(e.kind.toUpperCase())),
        el("td", { class: "mono", text: (e.agent_id || "").slice(0, 8) || "–" }), el("td", { text: e.reason || "" }))))));
    const folds = [...new Set((t.curves || []).map((p) => p.fold))].sort((a, b) => a - b);
    draw("plot-trial-curves", folds.map((f) => { const pts = t.curves.filter((p) => p.fold === f); return { type: "scatter", mode: "lines+markers", name: `fold ${f}`, x: pts.map((p) => p.step), y: pts.map((p) => p.value) }; }),
      { xaxis: { title: { text: "epoch" } }, yaxis: { title: { text: metric } } });
  });
}

// ---------------------------------------------------------------- new ---

const EXAMPLE = `name: my-campaign
objective: {metric: val_loss, direction: minimize}
space:
  lr:    {type: real, low: 1.0e-4, high: 0.1, scale: log}
  width: {type: int, low: 16, high: 256, scale: log}
algorithm: bo
budget: {max_trials: 50, max_parallel: 4}
folds: 5
training: {task: examples/digits/task.py:DigitsTask, epochs: 10}
`;

function newPage() {
  const text = el("textarea", { id: "spec-text", spellcheck: "false" });
  text.value = EXAMPLE;
  const file = el("input", { type: "file", id: "spec-file", accept: ".yaml,.yml,.json", onchange: async (e) => { if (e.target.files[0]) text.value = await e.target.files[0].text(); } });
  const submit = el("button", { id: "submit", class: "primary", text: "Submit", disabled: !can("submit"), title: can("submit") ? "" : "this token has no submit scope", onclick: () => submitSpec(text.value) });
  app.replaceChildren(el("h1", { text: "New campaign" }), el("div", { class: "card" },
    el("p", { class: "muted", text: "Paste a campaign spec in YAML or JSON, or load a file. The server validates it; errors appear next to the offending lines." }),
    el("div", { class: "row" }, file), text, el("div", { class: "row", style: "margin-top:.6rem" }, submit, el("span", { id: "submit-status", class: "muted" })),
    el("div", { id: "spec-errors" })));
}

// The line of a dotted field path (space.lr.low) in a YAML or JSON text: each key is
// looked for after its parent, flow mappings ({low: 1}) included. 0 when not found.
function locate(textValue, path) {
  const lines = textValue.split("\n");
  let line = 0;
  for (const key of path.split(".").filter((k) => k && !/^\d+$/.test(k))) {
    const re = new RegExp(`(^|[\\s{,"'])${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}["']?\\s*:`);
    const found = lines.findIndex((l, i) => i >= line && re.test(l));
    if (found < 0) break;
    line = found;
  }
  return line + 1;
}

// Validates first (a 200 answer either way), then submits a valid spec.
async function submitSpec(textValue) {
  const status = document.getElementById("submit-status");
  const box = document.getElementById("spec-errors");
  box.replaceChildren();
  status.textContent = "checking…";
  const json = textValue.trim().startsWith("{");
  const request = { method: "POST", body: textValue, headers: { "Content-Type": json ? "application/json" : "application/yaml" } };
  let errors = [];
  try {
    const check = await api("/campaigns/validate", request);
    if (check.valid) {
      status.textContent = "submitting…";
      const c = await api("/campaigns", request);
      status.textContent = `campaign ${c.id} submitted`;
      location.hash = `#/campaign/${c.id}`;
      return;
    }
    errors = check.errors.length ? check.errors : [{ field: "", message: check.detail }];
  } catch (e) {
    errors = e.body && e.body.errors && e.body.errors.length ? e.body.errors : [{ field: "", message: e.message }];
  }
  status.textContent = "";
  const byLine = {};
  for (const err of errors) (byLine[err.field ? locate(textValue, err.field) : 1] ||= []).push(err);
  box.append(el("ul", { class: "errors" }, errors.map((err) => el("li", { class: "field-error-item", "data-field": err.field }, el("code", { text: err.field || "spec" }), `: ${err.message}`))));
  box.append(el("div", { class: "annotated", id: "annotated" }, textValue.split("\n").flatMap((l, i) => [
    el("div", { class: `line ${byLine[i + 1] ? "bad" : ""}` }, el("span", { class: "ln", text: i + 1 }), l),
    ...(byLine[i + 1] || []).map((err) => el("div", { class: "field-error", "data-field": err.field, text: `↑ ${err.field}: ${err.message}` })),
  ])));
}

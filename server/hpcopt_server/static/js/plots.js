// The campaign page's plots. Each draws one element from data the page already has, and
// is called only when that data changed (see campaign.js): every draw leaves a
// performance mark "hpcopt:draw:<id>", which the idle-redraw test and the benchmark count.

import { agentLabel, el, fmt, fmtParam, pointerHeld, seconds } from "./core.js";

const plotConfig = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
const baseLayout = (extra) =>
  Object.assign(
    { margin: { l: 60, r: 20, t: 10, b: 45 }, font: { size: 11 }, paper_bgcolor: "#fff", plot_bgcolor: "#fff", uirevision: "keep", hovermode: "closest" },
    extra,
  );

export function draw(id, traces, layout) {
  const node = document.getElementById(id);
  if (!node || !window.Plotly) return null;
  Plotly.react(node, traces, baseLayout(layout), plotConfig);
  performance.mark(`hpcopt:draw:${id}`);
  return node;
}

function onClick(node, handler) {
  if (node && node.on && !node.dataset.clicks) {
    node.on("plotly_click", (e) => {
      const p = e.points && e.points[0];
      if (p && p.customdata !== undefined) handler(p.customdata);
    });
    node.dataset.clicks = "1";
  }
}

// Distinct colours (Tableau 10 and two more); past them, golden-angle hues.
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#17becf", "#7f3c8d"];
export const colour = (i) => (i < PALETTE.length ? PALETTE[i] : `hsl(${Math.round((i * 137.508) % 360)}, 60%, 45%)`);
const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];
// Best (low when minimizing) dark red, through orange, to light grey: the best stand out.
const BEST_FIRST = [
  [0, "#7f0000"],
  [0.25, "#d7301f"],
  [0.55, "#fc8d59"],
  [1, "#d9dde3"],
];
const SCHEME_COLORS = ["#2b5fd9", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d"];

/** A user's string (a name, a choice, a host) as Plotly text: Plotly reads a subset of
 * HTML in every label, so "<b>x</b>" would be drawn bold; entities show it as typed. */
export const plain = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

const quantile = (sorted, q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))))] : null);
const sign = (plot) => (plot.direction === "maximize" ? -1 : 1);

/** Colour scale settings for values: the best end strong, the worst tenth all grey. */
export function valueColours(plot, values, bar) {
  const sorted = [...values].sort((a, b) => a - b);
  const lo = sorted[0],
    hi = sorted[sorted.length - 1];
  const minimize = plot.direction !== "maximize";
  const cmin = minimize ? lo : quantile(sorted, 0.1),
    cmax = minimize ? quantile(sorted, 0.9) : hi;
  return { color: values, colorscale: BEST_FIRST, reversescale: !minimize, cmin, cmax: cmax > cmin ? cmax : cmin + 1e-12, showscale: !!bar, colorbar: bar };
}

/** Marker colours by rank (Optuna's rank plot): each value's place among `values`, 0 for
 * the best to 1 for the worst, ties sharing the better place; a diverged run is only the
 * worst, however far off. {marker props, ranks}. */
export function rankColours(plot, values, bar) {
  const s = plot.direction === "maximize" ? -1 : 1;
  const order = values.map((v, i) => [s * v, i]).sort((a, b) => a[0] - b[0]);
  const ranks = new Array(values.length);
  order.forEach(([v, i], k) => {
    ranks[i] = k && order[k - 1][0] === v ? ranks[order[k - 1][1]] : k;
  });
  const n = Math.max(1, values.length - 1);
  return { marker: { color: ranks.map((r) => r / n), colorscale: BEST_FIRST, cmin: 0, cmax: 1, showscale: !!bar, colorbar: bar }, ranks };
}

/** Points in drawing order: the best last, so they sit on top. */
const bestOnTop = (plot, pts) => [...pts].sort((a, b) => sign(plot) * (b.value - a.value));

/** The plot data as objective `k` sees it: its values in `value`, its best line,
 * distribution and robust limit (a single-objective campaign: objective 0, as it is). */
export function forObjective(plot, k) {
  const objectives = plot.objectives || [];
  const o = objectives[k] || objectives[0];
  if (!o) return plot;
  const at = objectives.indexOf(o);
  const points = at ? plot.points.map((p) => Object.assign({}, p, { value: p.values ? p.values[at] : p.value, value_std: null })) : plot.points;
  return Object.assign({}, plot, {
    metric: o.metric,
    direction: o.direction,
    best: o.best,
    edf: o.edf,
    limit: o.limit,
    off_scale: o.off_scale,
    points,
    objective: at,
  });
}

/** A robust value axis (issue 31, item 1): the server's limit (Tukey's far-out fence on
 * the worse side, over every completed trial) unless the reader asked for every value.
 * {range, edge, off(v), limit} in axis units (log10 when `log`), or null (autorange) when
 * none of `values` lies past the limit.
 * Off-scale points are drawn at `edge`, just past the limit, as triangles. */
export function robustRange(plot, view, values, log = false) {
  const limit = view.all ? null : plot.limit;
  if (limit === null || limit === undefined || (log && limit <= 0)) return null;
  const minimize = plot.direction !== "maximize";
  const off = (v) => (minimize ? v > limit : v < limit);
  const t = (v) => (log ? Math.log10(v) : v);
  let far = null,
    any = false;
  for (const v of values) {
    if (off(v)) any = true;
    else if ((!log || v > 0) && (far === null || (minimize ? t(v) < far : t(v) > far))) far = t(v);
  }
  if (far === null || !any) return null; // nothing to leave off: the axis spans every value
  const lim = t(limit),
    pad = Math.abs(lim - far) * 0.06 || 1;
  return {
    range: minimize ? [far - pad, lim + pad] : [lim - pad, far + pad],
    edge: log ? 10 ** (lim + (minimize ? 0.6 : -0.6) * pad) : lim + (minimize ? 0.6 : -0.6) * pad,
    off,
    limit,
    symbol: minimize ? "triangle-up" : "triangle-down",
  };
}

/** Marker y values, symbols and hover text of points on a robust axis `r` (or none). */
function onScale(r, pts) {
  return {
    y: pts.map((p) => (r && r.off(p.value) ? r.edge : p.value)),
    symbol: pts.map((p) => (r && r.off(p.value) ? r.symbol : "circle")),
    text: pts.map((p) => (r && r.off(p.value) ? `${fmt(p.value)} (off the scale)` : fmt(p.value))),
  };
}

// ------------------------------------------------------------- history ---

// A campaign with constraints: one trace for the feasible trials, one for the others
// (their hover says what they broke); else, one per scheme.
function pointGroups(plot, pts) {
  if (!pts.some((p) => p.feasible === false || p.feasible === true)) return schemeGroups(plot, pts);
  return [
    ["feasible", SCHEME_COLORS[0], pts.filter((p) => p.feasible !== false)],
    ["infeasible", "#e15759", pts.filter((p) => p.feasible === false)],
  ];
}

// A campaign that searches the training scheme: one trace (colour, legend entry) per scheme.
function schemeGroups(plot, pts) {
  const scheme = plot.space.scheme;
  if (!scheme || scheme.type !== "categorical") return [["trial", SCHEME_COLORS[0], pts]];
  return scheme.choices.map((c, i) => [String(c), SCHEME_COLORS[i % SCHEME_COLORS.length], pts.filter((p) => p.params.scheme === c)]);
}

/** view: {logY, byTime, clip}; brushed: Set of trial ids inside the parallel-coordinates brush (or null). */
export function renderHistory(plot, view, brushed, openTrial) {
  const pts = plot.points;
  const x = (p) => (view.byTime ? p.finished_at : p.number);
  const byNumber = new Map(pts.map((p) => [p.number, p]));
  const best = plot.best.map((b) => [view.byTime ? (byNumber.get(b.number) || {}).finished_at : b.number, b.value]).filter((b) => b[0] !== undefined);
  if (best.length && pts.length)
    best.push([
      x(pts.reduce((a, p) => (view.byTime ? (p.finished_at > a.finished_at ? p : a) : p.number > a.number ? p : a), pts[0])),
      best[best.length - 1][1],
    ]);
  const positive = pts.every((p) => p.value > 0);
  const groups = pointGroups(plot, pts);
  const log = view.logY && positive;
  const pruned = view.ended ? plot.ended.filter((e) => e.value !== null).map((e) => e.value) : [];
  const r = robustRange(plot, view, [...pts.map((p) => p.value), ...pruned], log);
  const traces = groups.map(([name, color, members]) => {
    const shown = onScale(r, members);
    return {
      type: "scatter",
      mode: "markers",
      name: plain(name),
      x: members.map(x),
      y: shown.y,
      customdata: members.map((p) => p.number),
      text: shown.text,
      error_y: {
        type: "data",
        array: members.map((p) => (r && r.off(p.value) ? 0 : p.value_std || 0)),
        visible: !view.byTime && members.length <= 2000,
        thickness: 1,
        width: 0,
        color: "rgba(80,90,110,.3)",
      },
      marker: { size: 6, color, symbol: shown.symbol, opacity: brushed ? 0.25 : 0.8 },
      hovertext: members.map((p) => (p.broken ? `broke ${plain(p.broken)}` : "")),
      hovertemplate: `trial #%{customdata}${name === "trial" ? "" : ` (${plain(name)})`}<br>%{text}<br>%{hovertext}<extra></extra>`,
    };
  });
  const ended = view.ended ? endedTraces(plot, x, r, log) : [];
  traces.push(...ended);
  traces.push({
    type: "scatter",
    mode: "lines",
    name: `best ${plain(plot.metric)}`,
    x: best.map((b) => b[0]),
    y: best.map((b) => b[1]),
    line: { shape: "hv", color: "#c0392b", width: 2 },
    hoverinfo: "skip",
  });
  if (brushed) {
    const chosen = pts.filter((p) => brushed.has(p.trial_id));
    traces.push({
      type: "scatter",
      mode: "markers",
      name: "brushed",
      x: chosen.map(x),
      y: chosen.map((p) => p.value),
      customdata: chosen.map((p) => p.number),
      marker: { size: 8, color: "#e67e22", line: { color: "#7a3d00", width: 1 } },
      hovertemplate: "trial #%{customdata} (brushed)<br>%{y:.4g}<extra></extra>",
    });
  }
  const yaxis = { title: { text: plain(plot.metric) }, type: log ? "log" : "linear", autorange: !r };
  if (r) yaxis.range = r.range;
  if (log && pts.length) {
    // ticks over what is shown
    const vs = pts.map((p) => p.value);
    const [lo, hi] = r ? r.range.map((e) => 10 ** e) : [Math.min(...vs), Math.max(...vs)];
    Object.assign(yaxis, logAxis(lo, hi));
  }
  const node = draw("plot-history", traces, {
    xaxis: { title: { text: view.byTime ? "finish time" : "trial number" }, type: view.byTime ? "date" : "linear" },
    yaxis,
    yaxis2: { overlaying: "y", range: [0, 1], visible: false, fixedrange: true },
    legend: { orientation: "h", y: 1.12 },
  });
  onClick(node, openTrial);
  const logNote = view.logY && !positive ? " Log scale needs positive values: shown linear." : "";
  const offNote = r ? ` ${offScale(plot)}` : "";
  const endedNote =
    view.ended && plot.ended_total
      ? ` ${plot.partial ? "Partial results (a rung below all folds and epochs: stopped or waiting) as open circles" : "Pruned trials at the value they reached"}; failed ones as × along the bottom${plot.ended.length < plot.ended_total ? ` (${plot.ended.length} of ${plot.ended_total} drawn)` : ""}.`
      : "";
  const note = document.getElementById("history-note");
  note.textContent =
    (plot.downsampled
      ? `Drawn: ${pts.length} of ${plot.completed} completed trials (every improvement, the best tenth, a random sample of the rest); the best line uses all.`
      : `${plot.completed} completed trials${plot.partial ? " (each on all folds and epochs)" : ""}; error bars: std over folds.`) +
    offNote +
    endedNote +
    logNote;
  note.classList.toggle("sampled", !!plot.downsampled);
}

/** "N completed trials are worse than L (off the scale, drawn as ▲ at the edge)." */
export function offScale(plot) {
  const worse = plot.direction === "maximize" ? "below" : "above";
  return `${plot.off_scale} of ${plot.completed} completed trials lie ${worse} ${fmt(plot.limit)}, drawn as ${plot.direction === "maximize" ? "▼" : "▲"} at the edge.`;
}

/** Pruned trials (at the value they reached) and failed ones (× along the bottom). */
function endedTraces(plot, x, r, log) {
  const minimize = plot.direction !== "maximize";
  const reached = (e) => e.state === "PRUNED" || e.state === "PAUSED";
  const pruned = plot.ended.filter((e) => reached(e) && e.value !== null && (!log || e.value > 0));
  const failed = plot.ended.filter((e) => e.state === "FAILED" || e.value === null);
  const shown = onScale(r, pruned);
  // A multi-fidelity campaign's stopped and waiting trials: values at a rung below all
  // folds and epochs, drawn apart from the K-fold results.
  const name = plot.partial ? "partial (fewer folds or epochs)" : "pruned";
  return [
    {
      type: "scatter",
      mode: "markers",
      name,
      x: pruned.map(x),
      y: shown.y,
      text: shown.text,
      customdata: pruned.map((p) => p.number),
      marker: { size: 5, color: "#9aa5b1", symbol: shown.symbol.map((sym) => (sym === "circle" ? "circle-open" : sym)) },
      hovertemplate: `trial #%{customdata} (${name})<br>%{text}<extra></extra>`,
    },
    {
      type: "scatter",
      mode: "markers",
      name: "failed",
      x: failed.map(x),
      y: failed.map(() => (minimize ? 0.02 : 0.98)),
      yaxis: "y2",
      customdata: failed.map((p) => p.number),
      marker: { size: 6, color: "#e15759", symbol: "x-thin", line: { width: 1.5, color: "#e15759" } },
      hovertemplate: "trial #%{customdata} failed<extra></extra>",
    },
  ].filter((t) => t.x.length);
}

// ------------------------------------------------------------ curves ---

export function renderCurves(curves, plot, chosen, openTrial) {
  const traces = [];
  curves.forEach((c, i) => {
    const folds = [...new Set(c.points.map((p) => p.fold))].sort((a, b) => a - b);
    folds.forEach((f, j) => {
      const pts = c.points.filter((p) => p.fold === f);
      traces.push({
        type: "scatter",
        mode: "lines+markers",
        name: `#${c.number}`,
        legendgroup: `t${c.trial_id}`,
        showlegend: j === 0,
        x: pts.map((p) => p.step),
        y: pts.map((p) => p.value),
        customdata: pts.map(() => c.number),
        line: { color: colour(i), dash: DASHES[f % DASHES.length], width: 1.5 },
        marker: { size: 4, color: colour(i) },
        hovertemplate: `trial #${c.number}, fold ${f}<br>epoch %{x}: %{y:.4g}<extra></extra>`,
      });
    });
  });
  const maxStep = Math.max(1, ...curves.flatMap((c) => c.points.map((p) => p.step)));
  const node = draw("plot-curves", traces, {
    xaxis: { title: { text: "epoch" }, tick0: 0, dtick: Math.max(1, Math.ceil(maxStep / 10)) },
    yaxis: { title: { text: plain(plot.metric) } },
    showlegend: curves.length <= 25,
    legend: { title: { text: "trial (folds: line styles)" } },
  });
  onClick(node, openTrial);

  let text =
    chosen && chosen.length
      ? `trials ${curves.map((c) => `#${c.number}`).join(", ")} (ticked in the table)`
      : `the ${curves.length} best trials; tick trials in the table to choose`;
  if (curves.length && !traces.length) text += " — they reported no learning-curve points";
  return text;
}

// ------------------------------------------------------------- front ---

/** The first two objectives against each other, the front on top. Each axis is robust
 * like every value axis (robustRange over that objective's limit): a diverged run is
 * drawn at the edge (▶ or ▲ past a minimized objective's limit) instead of squeezing the
 * front into a corner; `view.all` spans every value. */
export function renderFront(plot, view, openTrial) {
  const card = document.getElementById("card-front");
  const objectives = plot.objectives || [];
  card.hidden = objectives.length < 2 || !plot.completed;
  if (card.hidden) return;
  const [a, b] = objectives;
  const onFront = new Set(plot.front);
  const pts = plot.points.filter((p) => p.values);
  const rx = robustRange(
    forObjective(plot, 0),
    view,
    pts.map((p) => p.values[0]),
  );
  const ry = robustRange(
    forObjective(plot, 1),
    view,
    pts.map((p) => p.values[1]),
  );
  const offX = (p) => !!rx && rx.off(p.values[0]),
    offY = (p) => !!ry && ry.off(p.values[1]);
  const sideways = a.direction === "maximize" ? "triangle-left" : "triangle-right";
  const symbol = (p) => (offX(p) && offY(p) ? "diamond" : offX(p) ? sideways : offY(p) ? ry.symbol : "circle");
  const trace = (ps, extra) =>
    Object.assign(
      {
        type: "scatter",
        x: ps.map((p) => (offX(p) ? rx.edge : p.values[0])),
        y: ps.map((p) => (offY(p) ? ry.edge : p.values[1])),
        customdata: ps.map((p) => p.number),
        text: ps.map((p) => `${plain(a.metric)}=${fmt(p.values[0])}<br>${plain(b.metric)}=${fmt(p.values[1])}${offX(p) || offY(p) ? " (off the scale)" : ""}`),
        hovertemplate: "trial #%{customdata}<br>%{text}<extra></extra>",
      },
      extra,
    );
  const rest = pts.filter((p) => !onFront.has(p.trial_id));
  const front = pts.filter((p) => onFront.has(p.trial_id)).sort((p, q) => p.values[0] - q.values[0]);
  const axis = (o, r) =>
    Object.assign({ title: { text: `${plain(o.metric)} (${o.direction})` } }, r ? { range: r.range, autorange: false } : { autorange: true });
  const node = draw(
    "plot-front",
    [
      trace(rest, { mode: "markers", name: "dominated", marker: { size: 5, color: "#b0b8c4", symbol: rest.map(symbol) } }),
      trace(front, {
        mode: objectives.length === 2 ? "lines+markers" : "markers",
        name: "Pareto front",
        marker: { size: 8, color: "#c0392b", symbol: front.map(symbol) },
        line: { shape: "hv", color: "#c0392b" },
      }),
    ],
    { xaxis: axis(a, rx), yaxis: axis(b, ry), legend: { orientation: "h", y: 1.12 } },
  );
  onClick(node, openTrial);
  const shown = objectives.length > 2 ? `; the plot shows the first two of ${objectives.map((o) => o.metric).join(", ")}` : "";
  const drawn = plot.front_size > front.length ? ` (${front.length} of them drawn)` : "";
  const off = pts.filter((p) => offX(p) || offY(p)).length;
  const edge = off
    ? ` ${off} trial${off === 1 ? " lies" : "s lie"} past the robust limit of an axis, drawn at its edge (show every value above the plots for all).`
    : "";
  document.getElementById("front-note").textContent =
    `${plot.front_size} of ${plot.completed} completed trials are on the front${drawn}: no other completed trial is better in every objective${shown}.${edge} Click a point for its trial.`;
}

// ------------------------------------------------- parallel coordinates ---

/** Tick positions (log10 units) from lo to hi: 1, 2 and 5 of each decade, only the
 * decades past 8 ticks, four even steps when fewer than 3 fall inside. */
function logTickExponents(lo, hi) {
  const ticks = [];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++)
    for (const m of [1, 2, 5]) {
      const t = e + Math.log10(m);
      if (t >= lo - 1e-9 && t <= hi + 1e-9) ticks.push(t);
    }
  const keep = ticks.length > 8 ? ticks.filter((t) => Math.abs(t - Math.round(t)) < 1e-9) : ticks;
  return keep.length >= 3 ? keep : [0, 1, 2, 3].map((i) => lo + (i * (hi - lo)) / 3);
}

function logTicks(spec, lo, hi) {
  const vals = logTickExponents(lo, hi);
  return { tickvals: vals, ticktext: vals.map((t) => fmtParam({ type: "real", scale: "log" }, spec.type === "int" ? Math.round(10 ** t) : 10 ** t)) };
}

/** A log axis over [lo, hi] (data units, lo > 0) whose every tick has its whole value:
 * Plotly's own labels a decade's 2 … 9 as bare digits, so 0.3 read as "3" (and a width
 * axis as "2 5 10² 2 5"). Ticks outside [lo, hi] stretch the range. */
export function logAxis(lo, hi) {
  const a = Math.log10(lo),
    b = Math.log10(hi);
  const vals = logTickExponents(a, b).map((t) => 10 ** t);
  return { type: "log", tickvals: vals, ticktext: vals.map((v) => fmt(Number(v.toPrecision(2)))) };
}

/** A parameter's value in its parallel-coordinates axis's units: a choice's position,
 * a log parameter's log10, or the value. */
export const axisValue = (spec, v) => (spec.type === "categorical" ? spec.choices.map(String).indexOf(String(v)) : spec.scale === "log" ? Math.log10(v) : v);

/** Parallel coordinates draw tick text as plain text (no markup, no entities), unlike
 * their labels and every other plot: the choices go in as they are. */
export function paramAxis(spec, values) {
  const axis = paramAxisOf(
    spec,
    values.map((v) => (v === undefined ? null : axisValue(spec, v))),
  );
  if (!spec.when) return axis;
  // A conditional parameter: the trials where it is inactive sit on a slot of their own
  // below the axis, labelled "inactive" (a brush there selects no trial: the table's
  // filter holds where the parameter has a value).
  const [lo, hi] = axis.range;
  const slot = spec.type === "categorical" ? -1 : lo - 0.12 * (hi - lo || 1);
  return Object.assign(axis, {
    values: axis.values.map((v) => (v === null ? slot : v)),
    range: [spec.type === "categorical" ? -1.25 : slot - 0.03 * (hi - lo || 1), hi],
    tickvals: [slot, ...axis.tickvals],
    ticktext: ["inactive", ...axis.ticktext],
  });
}

function paramAxisOf(spec, shown) {
  if (spec.type === "categorical") {
    const labels = spec.choices.map(String);
    return { values: shown, tickvals: labels.map((_, i) => i), ticktext: labels, range: [-0.25, labels.length - 0.75] };
  }
  if (spec.scale === "log") {
    const lo = Math.log10(spec.low),
      hi = Math.log10(spec.high);
    return Object.assign({ values: shown, range: [lo, hi] }, logTicks(spec, lo, hi));
  }
  return Object.assign(
    { values: shown, range: [spec.low, spec.high] },
    linearTicks(spec.low, spec.high, (v) => fmtParam(spec, spec.type === "int" ? Math.round(v) : v)),
  );
}

/** Ticks from lo to hi, both ends labelled (parallel coordinates' own range labels are off:
 * beside the ticks they read as doubled labels), steps of 1, 2 or 5 between. */
export function linearTicks(lo, hi, label = fmt, top = null) {
  if (!(hi > lo)) return { tickvals: [lo], ticktext: [label(lo)] };
  const raw = (hi - lo) / 5,
    mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw);
  const inner = [];
  for (let t = Math.ceil(lo / step) * step; t < hi; t += step) if (t - lo > 0.4 * step && hi - t > 0.4 * step) inner.push(Number(t.toPrecision(12)));
  const vals = [lo, ...inner, hi];
  return { tickvals: vals, ticktext: vals.map((v, i) => (top && i === vals.length - 1 ? top : label(v))) };
}

/** A brush on an axis (axis units) as a table filter: real units, choice positions. */
export function brushToRange(spec, [lo, hi]) {
  if (!spec) return [lo, hi]; // the objective's axis
  if (spec.type === "categorical") return [Math.ceil(lo - 1e-9), Math.floor(hi + 1e-9)];
  if (spec.scale === "log") return [10 ** lo, 10 ** hi];
  return [lo, hi];
}

const TICK_SHADOW = "1px 1px 2px #fff, -1px -1px 2px #fff, 1px -1px 2px #fff, -1px 1px 2px #fff";

/** The objective's axis in parallel coordinates: values past the robust limit sit at it
 * (its tick reads "≥ limit", or "≤" when maximizing). */
export function objectiveAxis(plot, view, values) {
  const r = robustRange(plot, view, values);
  const shown = r ? values.map((v) => (r.off(v) ? r.limit : v)) : values;
  let lo = Infinity,
    hi = -Infinity;
  for (const v of shown) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (!shown.length) return { values: shown };
  const minimize = plot.direction !== "maximize";
  const ticks = linearTicks(lo, hi, fmt, r && minimize ? `≥ ${fmt(hi)}` : null);
  if (r && !minimize) ticks.ticktext[0] = `≤ ${fmt(lo)}`;
  return Object.assign({ values: shown, range: [lo, hi] }, ticks);
}

/** Line colours for parallel coordinates. Plotly draws the lines of higher colour values
 * on top (their depth is 1 − the colour's place on the scale), so the colour value is
 * how good a trial is: the best lines lie over the rest, dark red; the worst tenth grey. */
function goodnessColours(plot, values, bar, infeasible = []) {
  const good = values.map((v) => sign(plot) * -v);
  const sorted = [...good].sort((a, b) => a - b);
  // An infeasible trial is drawn as the worst: grey, beneath every feasible line.
  infeasible.forEach((off, i) => {
    if (off) good[i] = sorted[0] - 1;
  });
  const cmin = quantile(sorted, 0.1),
    cmax = sorted[sorted.length - 1];
  const ticks = linearTicks(cmin, cmax > cmin ? cmax : cmin + 1e-12, (g) => fmt(Number((sign(plot) * -g).toPrecision(4))));
  return {
    color: good,
    colorscale: BEST_FIRST,
    reversescale: true,
    cmin,
    cmax: cmax > cmin ? cmax : cmin + 1e-12,
    showscale: !!bar,
    colorbar: Object.assign({ tickvals: ticks.tickvals, ticktext: ticks.ticktext }, bar),
  };
}

/** brush: {label: [lo, hi]} in axis units; onBrush(newBrush) when the user brushes. */
export function renderParcoords(plot, view, brush, onBrush) {
  // Conditional parameters too: where one is inactive, its axis's "inactive" slot.
  const names = Object.keys(plot.space);
  const pts = plot.points;
  const values = pts.map((p) => p.value);
  const keys = [...names, plot.metric]; // the brush's keys, axis by axis
  const dims = names.map((n) =>
    Object.assign(
      { label: plain(n) },
      paramAxis(
        plot.space[n],
        pts.map((p) => p.params[n]),
      ),
    ),
  );
  dims.push(Object.assign({ label: plain(plot.metric) }, objectiveAxis(plot, view, values)));
  // One range per axis: a new drag replaces the old one (with several, the table's filter
  // took their span, trials the plot showed as unselected included).
  dims.forEach((d, i) => {
    d.multiselect = false;
    if (brush[keys[i]]) d.constraintrange = brush[keys[i]];
  });
  const node = draw(
    "plot-parcoords",
    [
      {
        type: "parcoords",
        dimensions: dims,
        labelfont: { size: 12 },
        tickfont: { size: 10, shadow: TICK_SHADOW },
        rangefont: { size: 1, color: "rgba(0,0,0,0)" },
        line: goodnessColours(
          plot,
          values,
          {
            title: { text: plain(plot.metric), side: "top" },
            thickness: 10,
            orientation: "h",
            x: 0.5,
            xanchor: "center",
            y: -0.08,
            yanchor: "top",
            len: 0.5,
          },
          pts.map((p) => p.feasible === false),
        ),
      },
    ],
    { margin: { l: 70, r: 70, t: 50, b: 70 } },
  );
  // The handler is bound once; the axes' keys are this render's (the objective's axis
  // changes name when the reader picks another objective).
  if (node) node.brushKeys = keys;
  if (node && node.on && !node.dataset.brush) {
    node.on("plotly_restyle", () => {
      const out = {},
        keys = node.brushKeys;
      for (const [i, d] of node.data[0].dimensions.entries()) {
        let r = d.constraintrange;
        if (!r || !r.length) continue;
        if (Array.isArray(r[0])) r = [Math.min(...r.map((x) => x[0])), Math.max(...r.map((x) => x[1]))]; // several brushes: their span
        out[keys[i]] = [Number(r[0]), Number(r[1])];
      }
      onBrush(out);
    });
    node.dataset.brush = "1";
  }
}

/** The axes' range marks (their highlight lines and shadows). */
const highlights = (node) => [...node.querySelectorAll(".axis-brush .highlight, .axis-brush .highlight-shadow")];

/** Whether an axis draws a range (a dash in its highlight's stroke-dasharray). */
const highlighted = (node) =>
  highlights(node).some((l) => (l.getAttribute("stroke-dasharray") || "").split(",").some((v, k) => k % 2 === 0 && Number(v) > 0.5));

/** Whether Plotly is still tweening a range mark: as a drag ends on an axis with tick
 * values (ours all have them) it snaps the highlight in a 150 ms d3 transition, which
 * marks the line with d3's `__transition__` while it is scheduled or running. */
const tweening = (node) => highlights(node).some((l) => l.__transition__);

/** Removes every range from the parallel coordinates' axes. Plotly.react with the
 * ranges left out keeps them (the axes' brushes hold their own state): a restyle to null
 * clears both. Every axis, not only those whose data holds a range: what an axis draws
 * is its brush's state, which the data need not mirror, and a restyle redraws them all.
 * Its plotly_restyle event reports an empty brush.
 *
 * A clear while a drag's snap is tweening restyles once more when the tween has ended:
 * the tween, still running, draws the old range back over the cleared axis (CI saw it
 * left there, the data without a range and the table unfiltered). Not when a new drag
 * has drawn its own range meanwhile: its data hold it, or the button is still down. */
export function clearParcoords() {
  const node = document.getElementById("plot-parcoords");
  if (!node || !node.data || !node.data[0] || !window.Plotly) return;
  const update = {};
  for (let i = 0; i < node.data[0].dimensions.length; i++) update[`dimensions[${i}].constraintrange`] = null;
  Plotly.restyle(node, update, [0]);
  if (!tweening(node)) return;
  const deadline = performance.now() + 10_000; // a tween that never ends stops the wait
  const again = () => {
    if (tweening(node) && performance.now() < deadline) {
      requestAnimationFrame(again);
      return;
    }
    const ranged = node.data?.[0]?.dimensions.some((d) => d.constraintrange?.length);
    if (node.isConnected && !ranged && !pointerHeld() && highlighted(node)) Plotly.restyle(node, update, [0]);
  };
  requestAnimationFrame(again);
}

/** Trial ids of the drawn points inside every brushed axis (the objective's as drawn:
 * off-scale values at the limit). */
export function brushedIds(plot, view, brush) {
  const labels = Object.keys(brush);
  if (!labels.length) return null;
  const r = robustRange(
    plot,
    view,
    plot.points.map((p) => p.value),
  );
  const drawn = (v) => (r && r.off(v) ? r.limit : v);
  const inside = (p) =>
    labels.every((label) => {
      const [lo, hi] = brush[label];
      if (label === plot.metric && !(label in plot.space)) return drawn(p.value) >= lo && drawn(p.value) <= hi;
      const spec = plot.space[label];
      if (!spec || p.params[label] === undefined) return false;
      const v = axisValue(spec, p.params[label]);
      return v >= lo - 1e-9 && v <= hi + 1e-9;
    });
  return new Set(plot.points.filter(inside).map((p) => p.trial_id));
}

// -------------------------------------------------------------- slices ---

/** Slices at least 280 px wide (240 where that spares one a row of its own), in rows as
 * even as the width allows (7 in rows of 3, 2 and 2 rather than 3, 3 and 1 alone): each
 * row's plots share its width. */
function balanceSlices(box) {
  const n = box.children.length;
  if (!n) return false;
  const gap = parseFloat(getComputedStyle(box).columnGap) || 0;
  const fit = (min) => Math.max(1, Math.floor((box.clientWidth + gap) / (min + gap)));
  let cols = fit(280);
  if (n > cols && n % cols === 1 && fit(240) > cols) cols += 1; // 3 at 800 px: one row of 3, not 2 and 1
  const rows = Math.ceil(n / cols);
  const base = Math.floor(n / rows),
    extra = n % rows; // the first `extra` rows hold one more
  let changed = false,
    i = 0;
  for (let r = 0; r < rows; r++) {
    const k = base + (r < extra ? 1 : 0);
    for (let j = 0; j < k; j++, i++) {
      const basis = `calc((100% - ${(k - 1) * gap}px) / ${k})`;
      const node = box.children[i];
      if (node.style.flexBasis !== basis) {
        node.style.flexBasis = basis;
        changed = true;
      }
    }
  }
  return changed;
}

export function renderSlices(plot, view, openTrial) {
  const box = document.getElementById("slices");
  const names = Object.keys(plot.space);
  if (box.children.length !== names.length) box.replaceChildren(...names.map((n) => el("div", { id: `slice-${n}`, class: "plot small", "data-param": n })));
  balanceSlices(box);
  if (!box.dataset.balanced && window.ResizeObserver) {
    box.dataset.balanced = "1";
    // Only plots still shown: Plotly refuses (a page error) a detached or hidden one.
    const shown = (node) => node.isConnected && node.offsetParent !== null;
    new ResizeObserver(() => {
      if (!shown(box) || !balanceSlices(box) || !window.Plotly) return;
      for (const node of box.querySelectorAll(".js-plotly-plot")) if (shown(node)) Plotly.Plots.resize(node).catch(() => {});
    }).observe(box);
  }
  const r = robustRange(
    plot,
    view,
    plot.points.map((p) => p.value),
  );
  names.forEach((n, i) => {
    const spec = plot.space[n];
    const xaxis = { title: { text: plain(n) } };
    if (spec.type === "categorical") Object.assign(xaxis, { type: "category", categoryorder: "array", categoryarray: spec.choices.map(plain) });
    else if (spec.scale === "log") Object.assign(xaxis, logAxis(spec.low, spec.high));
    // Inactive (conditional) parameters are absent from a trial: its point is left out here.
    const pts = plot.points.filter((p) => p.params[n] !== undefined);
    const xs = (members) => members.map((p) => (spec.type === "categorical" ? plain(p.params[n]) : p.params[n]));
    const groups = plot.space.scheme ? schemeGroups(plot, pts) : null;
    const ordered = bestOnTop(plot, pts);
    const on = onScale(r, ordered);
    const traces = groups
      ? groups.map(([name, color, members]) => {
          const on = onScale(r, members);
          return {
            type: "scatter",
            mode: "markers",
            name: plain(name),
            x: xs(members),
            y: on.y,
            text: on.text,
            customdata: members.map((p) => p.number),
            marker: { size: 5, color, symbol: on.symbol },
            hovertemplate: `trial #%{customdata}<br>${plain(n)}=%{x}<br>${plain(plot.metric)}=%{text} (${plain(name)})<extra></extra>`,
          };
        })
      : [
          {
            type: "scatter",
            mode: "markers",
            x: xs(ordered),
            y: on.y,
            text: on.text,
            customdata: ordered.map((p) => p.number),
            marker: Object.assign(
              { size: 6, symbol: on.symbol, line: { width: 0.5, color: "rgba(0,0,0,.25)" } },
              valueColours(
                plot,
                ordered.map((p) => p.value),
                i === 0 ? { title: { text: plain(plot.metric) }, thickness: 8, len: 0.9 } : null,
              ),
            ),
            hovertemplate: `trial #%{customdata}<br>${plain(n)}=%{x}<br>${plain(plot.metric)}=%{text}<extra></extra>`,
          },
        ];
    const yaxis = r ? { title: { text: plain(plot.metric) }, range: r.range, autorange: false } : { title: { text: plain(plot.metric) } };
    onClick(draw(`slice-${n}`, traces, { xaxis, yaxis, margin: { l: 55, r: i === 0 ? 70 : 10, t: 10, b: 40 }, showlegend: false }), openTrial);
  });
}

// ------------------------------------------------------------- contour ---

const GRID = 20;

/** The best value per cell of a grid over two parameters, contoured, with the trials on top. */
export function renderContour(plot, view, xName, yName, openTrial) {
  const sx = plot.space[xName],
    sy = plot.space[yName];
  if (!sx || !sy) return;
  const axis = (spec) => {
    if (spec.type === "categorical")
      return {
        cells: spec.choices.map(plain),
        at: (v) => spec.choices.map(String).indexOf(String(v)),
        show: plain,
        layout: { type: "category", categoryorder: "array", categoryarray: spec.choices.map(plain) },
      };
    const log = spec.scale === "log";
    const lo = log ? Math.log10(spec.low) : spec.low,
      hi = log ? Math.log10(spec.high) : spec.high;
    const to = (v) => (log ? Math.log10(v) : v);
    const centres = [...Array(GRID)].map((_, i) => lo + ((i + 0.5) * (hi - lo)) / GRID).map((c) => (log ? 10 ** c : c));
    return {
      cells: centres,
      show: (v) => v,
      at: (v) => Math.min(GRID - 1, Math.max(0, Math.floor(((to(v) - lo) / (hi - lo || 1)) * GRID))),
      layout: log ? logAxis(spec.low, spec.high) : {},
    };
  };
  const ax = axis(sx),
    ay = axis(sy);
  const pts = plot.points.filter((p) => p.params[xName] !== undefined && p.params[yName] !== undefined);
  const z = ay.cells.map(() => ax.cells.map(() => null));
  for (const p of pts) {
    const i = ay.at(p.params[yName]),
      j = ax.at(p.params[xName]);
    if (i < 0 || j < 0) continue;
    if (z[i][j] === null || sign(plot) * p.value < sign(plot) * z[i][j]) z[i][j] = p.value;
  }
  const ordered = bestOnTop(plot, pts);
  // A robust colour scale: cells past the limit take the worst colour.
  const cells = z.flat().filter((v) => v !== null);
  const r = robustRange(plot, view, cells);
  const scale = r ? (plot.direction === "maximize" ? { zmin: r.limit, zmax: Math.max(...cells) } : { zmin: Math.min(...cells), zmax: r.limit }) : {};
  if (r) Object.assign(scale, { zauto: false, autocontour: false, contours: { start: scale.zmin, end: scale.zmax, size: (scale.zmax - scale.zmin) / 15 } });
  const node = draw(
    "plot-contour",
    [
      Object.assign(
        {
          type: "contour",
          x: ax.cells,
          y: ay.cells,
          z,
          connectgaps: true,
          colorscale: BEST_FIRST,
          reversescale: plot.direction === "maximize",
          ncontours: 15,
          line: { width: 0.5 },
          colorbar: { title: { text: `best ${plain(plot.metric)}` }, thickness: 10 },
          hovertemplate: `${plain(xName)}=%{x}<br>${plain(yName)}=%{y}<br>best ${plain(plot.metric)}≈%{z:.4g}<extra></extra>`,
        },
        scale,
      ),
      {
        type: "scatter",
        mode: "markers",
        x: ordered.map((p) => ax.show(p.params[xName])),
        y: ordered.map((p) => ay.show(p.params[yName])),
        customdata: ordered.map((p) => p.number),
        marker: { size: 4, color: "rgba(20,33,61,.55)" },
        hovertemplate: `trial #%{customdata}: %{text}<extra></extra>`,
        text: ordered.map((p) => fmt(p.value)),
      },
    ],
    {
      xaxis: Object.assign({ title: { text: plain(xName) } }, ax.layout),
      yaxis: Object.assign({ title: { text: plain(yName) } }, ay.layout),
      showlegend: false,
    },
  );
  onClick(node, openTrial);
}

// ---------------------------------------------------------------- EDF ---

export function renderEdf(plot, view) {
  const v = plot.edf || [];
  const y = v.map((_, i) => (v.length > 1 ? i / (v.length - 1) : 1));
  const r = robustRange(plot, view, v);
  const xaxis = r ? { title: { text: plain(plot.metric) }, range: r.range, autorange: false } : { title: { text: plain(plot.metric) } };
  draw(
    "plot-edf",
    [
      {
        type: "scatter",
        mode: "lines",
        x: v,
        y,
        line: { shape: "hv", color: "#2b5fd9", width: 2 },
        hovertemplate: `${plain(plot.metric)} ≤ %{x:.4g}: %{y:.0%} of trials<extra></extra>`,
      },
    ],
    { xaxis, yaxis: { title: { text: "fraction of completed trials" }, range: [0, 1.02], tickformat: ".0%" }, showlegend: false },
  );
  document.getElementById("edf-note").textContent =
    `The fraction of completed trials at or below each value: a steep rise early means many trials are near the best.${r ? ` The x axis stops at ${fmt(r.limit)}: ${plot.off_scale} trials lie beyond.` : ""}`;
}

// ---------------------------------------------------------- importance ---

export function renderImportance(imp, plot) {
  const note = document.getElementById("importance-note");
  if (!imp.params.length) {
    note.textContent = `Needs at least 10 completed trials (${imp.completed} so far).`;
    draw("plot-importance", [], { xaxis: { visible: false }, yaxis: { visible: false } });
    return;
  }
  const ps = [...imp.params].reverse();
  draw(
    "plot-importance",
    [
      {
        type: "bar",
        orientation: "h",
        y: ps.map((p) => plain(p.name)),
        x: ps.map((p) => p.importance),
        marker: { color: "#4e79a7" },
        text: ps.map((p) => `${(100 * p.importance).toFixed(0)}%`),
        textposition: "outside",
        cliponaxis: false,
        hovertemplate: "%{y}: %{x:.0%} of the explained variance<extra></extra>",
      },
    ],
    {
      xaxis: {
        title: { text: "share of the explained variance" },
        tickformat: ".0%",
        range: [0, Math.min(1.15, Math.max(...ps.map((p) => p.importance)) * 1.2 + 0.05)],
      },
      yaxis: { automargin: true },
      margin: { l: 90, r: 20, t: 10, b: 45 },
    },
  );
  const explained = imp.params.reduce((a, p) => a + p.raw, 0);
  const rank = `${plot && plot.objectives && plot.objectives.length > 1 ? `${plot.metric}'s` : "the objective's"} rank`;
  note.textContent =
    imp.method === "permutation"
      ? `Over ${imp.completed} completed trials: how much a nearest-neighbour model of ${rank} loses when the parameter's values are shuffled among the trials, interactions included; shares of their sum.`
      : `Over ${imp.completed} completed trials: each parameter's first-order share of the variance of ${rank} (binned; chance-corrected; a conditional parameter over the trials where it is active), as a share of their sum. ${explainedNote(explained)}`;
}

/** What the first-order shares' raw sum says: over 100% the parameters varied together
 * among these trials (a search that concentrated them), so their main effects overlap. */
function explainedNote(explained) {
  const pct = (100 * explained).toFixed(0);
  return explained > 1.005
    ? `Their raw shares sum to ${pct}% of the variance, more than all of it: the parameters varied together among these trials (a search concentrates them), so their main effects overlap and the split between correlated parameters is uncertain.`
    : `Main effects explain ${pct}% of it; the rest is interactions and noise (the permutation method sees interactions).`;
}

// ------------------------------------------------------------ timeline ---

const OUTCOME_COLORS = {
  completed: "#59a14f",
  running: "#2b5fd9",
  failed: "#e15759",
  pruned: "#9aa5b1",
  paused: "#76b7b2",
  preempted: "#f28e2b",
  lease_expired: "#b7791f",
  cancelled: "#bab0ac",
};

export function renderTimeline(tl, openTrial) {
  document.getElementById("card-timeline").hidden = !tl.total;
  if (!tl.total) return;
  const now = Date.now();
  // One lane per agent: agents that share a host and job (two on one login node) are told
  // apart by their id, so their spans never merge into one lane. Every lane is labelled
  // (explicit ticks: Plotly's automatic ones skipped every other lane).
  const base = (s) => (s.agent_host ? agentLabel(s.agent_host, s.agent_job) : s.agent_id ? `agent ${s.agent_id.slice(0, 8)}` : "unknown agent");
  const agentsOf = new Map();
  for (const s of tl.spans) {
    if (!agentsOf.has(base(s))) agentsOf.set(base(s), new Set());
    agentsOf.get(base(s)).add(s.agent_id || "");
  }
  const label = (s) => plain(agentsOf.get(base(s)).size > 1 && s.agent_host ? `${base(s)} · ${(s.agent_id || "?").slice(0, 8)}` : base(s));
  const lanes = [...new Set(tl.spans.map(label))];
  const traces = Object.entries(OUTCOME_COLORS)
    .map(([outcome, color]) => {
      const spans = tl.spans.filter((s) => s.outcome === outcome);
      const ms = spans.map((s) => Math.max(500, (s.end ? new Date(s.end) : now) - new Date(s.start)));
      return {
        type: "bar",
        orientation: "h",
        name: outcome.replace("_", " "),
        y: spans.map(label),
        base: spans.map((s) => s.start),
        x: ms,
        customdata: spans.map((s) => s.number),
        text: spans.map((s, i) => `trial #${s.number} attempt ${s.attempt}: ${outcome.replace("_", " ")} after ${seconds(ms[i] / 1000)}`),
        hovertemplate: "%{text}<extra></extra>",
        textposition: "none",
        marker: { color, line: { width: 0 } },
      };
    })
    .filter((t) => t.y.length);
  const node = draw("plot-timeline", traces, {
    barmode: "overlay",
    bargap: 0.3,
    xaxis: { type: "date", title: { text: "wall time" } },
    yaxis: { type: "category", categoryorder: "array", categoryarray: lanes, tickmode: "array", tickvals: lanes, ticktext: lanes, automargin: true },
    legend: { orientation: "h", y: 1.15 },
    height: Math.max(220, 60 + 28 * lanes.length),
  });
  onClick(node, openTrial);
  document.getElementById("timeline-note").textContent =
    tl.total > tl.spans.length
      ? `The latest ${tl.spans.length} of ${tl.total} attempts, one lane per agent. Gaps in a lane: the agent was idle.`
      : `${tl.total} attempts, one lane per agent, coloured by how each ended. Gaps in a lane: the agent was idle.`;
}

// Two more views of the completed trials (issue 65, defect 9): a scatter of any two
// quantities (the trial number, any objective, any parameter), and for a multi-objective
// campaign the hypervolume of its first two objectives, trial by trial.

import { el, fmt } from "./core.js";
import { draw, forObjective, logAxis, plain, rankColours, robustRange, valueColours } from "./plots.js";

/** [key, label] of every quantity the scatter offers. */
export function quantities(plot) {
  const objectives = plot.objectives && plot.objectives.length > 1 ? plot.objectives : [{ metric: plot.metric }];
  return [["number", "trial number"], ...objectives.map((o, k) => [`objective:${k}`, o.metric]), ...Object.keys(plot.space).map((n) => [`param:${n}`, n])];
}

/** The pickers above the scatter; st.scatter = [x key, y key] (`scatter=` in the URL). */
export function scatterPicker(plot, st, onChange) {
  const keys = quantities(plot);
  const known = new Set(keys.map(([k]) => k));
  if (st.scatter.length !== 2 || !st.scatter.every((k) => known.has(k))) st.scatter = [keys[3] ? keys[3][0] : "number", "objective:0"];
  const pick = (i) =>
    el(
      "select",
      {
        id: `scatter-${i ? "y" : "x"}`,
        onchange: (e) => {
          st.scatter[i] = e.target.value;
          onChange();
        },
      },
      ...keys.map(([k, label]) => el("option", { value: k, text: label, selected: st.scatter[i] === k })),
    );
  const rank = el(
    "label",
    { class: "nowrap", title: "colour each trial by its rank (best to worst) instead of its value: a rank plot, which a few diverged runs cannot wash out" },
    el("input", {
      type: "checkbox",
      id: "scatter-rank",
      checked: st.rank,
      onchange: (e) => {
        st.rank = e.target.checked;
        onChange();
      },
    }),
    " colour by rank",
  );
  const box = document.getElementById("scatter-pick");
  const sig = JSON.stringify([keys, st.scatter, st.rank]);
  if (box.dataset.sig !== sig) {
    box.dataset.sig = sig;
    box.replaceChildren("x ", pick(0), " y ", pick(1), " ", rank);
  }
}

/** One axis of the scatter: each point's value (undefined: the trial has none, e.g. an
 * inactive parameter), the axis layout, and where a robust objective axis stops. */
function axisOf(plot, view, key, label) {
  if (key === "number") return { of: (p) => p.number, layout: { title: { text: "trial number" } }, r: null };
  if (key.startsWith("objective:")) {
    const o = forObjective(plot, Number(key.slice(10)));
    const byId = new Map(o.points.map((p) => [p.trial_id, p.value]));
    const r = robustRange(
      o,
      view,
      o.points.map((p) => p.value),
    );
    return { of: (p) => byId.get(p.trial_id), layout: Object.assign({ title: { text: plain(label) } }, r ? { range: r.range, autorange: false } : {}), r };
  }
  const name = key.slice(6),
    spec = plot.space[name];
  const layout = { title: { text: plain(name) } };
  if (spec.type === "categorical") Object.assign(layout, { type: "category", categoryorder: "array", categoryarray: spec.choices.map(plain) });
  else if (spec.scale === "log") Object.assign(layout, logAxis(spec.low, spec.high));
  return { of: (p) => (p.params[name] === undefined ? undefined : spec.type === "categorical" ? plain(p.params[name]) : p.params[name]), layout, r: null };
}

/** `v`: the plot data as the chosen objective sees it (the points' colour). */
export function renderScatter(plot, v, view, st, openTrial) {
  const labels = new Map(quantities(plot));
  const [kx, ky] = st.scatter;
  const ax = axisOf(plot, view, kx, labels.get(kx)),
    ay = axisOf(plot, view, ky, labels.get(ky));
  const colourOf = new Map(v.points.map((p) => [p.trial_id, p.value]));
  // The chosen objective's best on top; trials without one of the two quantities left out.
  const pts = [...plot.points]
    .filter((p) => ax.of(p) !== undefined && ay.of(p) !== undefined)
    .sort((a, b) => (v.direction === "maximize" ? 1 : -1) * (colourOf.get(a.trial_id) - colourOf.get(b.trial_id)));
  const at = (a, p) => (a.r && a.r.off(a.of(p)) ? a.r.edge : a.of(p));
  const off = (p) => (ax.r && ax.r.off(ax.of(p))) || (ay.r && ay.r.off(ay.of(p)));
  const values = pts.map((p) => colourOf.get(p.trial_id));
  const bar = { thickness: 8, len: 0.9 };
  const ranked = st.rank
    ? rankColours(v, values, Object.assign({ title: { text: `rank of ${plain(v.metric)}` }, tickvals: [0, 1], ticktext: ["best", "worst"] }, bar))
    : null;
  const colours = ranked ? ranked.marker : valueColours(v, values, Object.assign({ title: { text: plain(v.metric) } }, bar));
  const rankText = (i) => (ranked ? `<br>rank ${ranked.ranks[i] + 1} of ${pts.length} by ${plain(v.metric)}` : "");
  const node = draw(
    "plot-scatter",
    [
      {
        type: "scatter",
        mode: "markers",
        x: pts.map((p) => at(ax, p)),
        y: pts.map((p) => at(ay, p)),
        customdata: pts.map((p) => p.number),
        text: pts.map(
          (p, i) => `${plain(labels.get(kx))}=${fmt(ax.of(p))}<br>${plain(labels.get(ky))}=${fmt(ay.of(p))}${off(p) ? " (off the scale)" : ""}${rankText(i)}`,
        ),
        hovertemplate: "trial #%{customdata}<br>%{text}<extra></extra>",
        marker: Object.assign({ size: 6, symbol: pts.map((p) => (off(p) ? "diamond" : "circle")), line: { width: 0.5, color: "rgba(0,0,0,.25)" } }, colours),
      },
    ],
    { xaxis: ax.layout, yaxis: ay.layout, showlegend: false },
  );
  if (node && node.on && !node.dataset.clicks) {
    node.on("plotly_click", (e) => {
      const p = e.points && e.points[0];
      if (p) openTrial(p.customdata);
    });
    node.dataset.clicks = "1";
  }
  const left = plot.points.length - pts.length;
  document.getElementById("scatter-note").textContent =
    `${pts.length} completed trials, coloured by ${st.rank ? "their rank in " : ""}${v.metric}${left ? `; ${left} without one of the two (an inactive parameter) left out` : ""}${plot.completed > plot.points.length ? ` (of ${plot.completed}: the plots' sample)` : ""}. Click a point for its trial.`;
}

/** The area the first two objectives' points dominate up to `ref` (both minimized here:
 * maximized ones come negated), over points sorted by the first objective. */
export function hypervolume(points, ref) {
  let hv = 0,
    lowest = ref[1];
  for (const [x, y] of [...points].sort((a, b) => a[0] - b[0] || a[1] - b[1])) {
    if (x >= ref[0] || y >= lowest) continue;
    hv += (ref[0] - x) * (lowest - y);
    lowest = y;
  }
  return hv;
}

/** A multi-objective campaign's hypervolume of its first two objectives after each
 * completed trial (by number), against a reference point at each objective's robust
 * limit (its worst value where none): a diverged run does not set the scale. */
export function renderHypervolume(plot, view) {
  const box = document.getElementById("hypervolume");
  const objectives = plot.objectives || [];
  if (!box || objectives.length < 2) return;
  const [a, b] = [0, 1].map((k) => forObjective(plot, k));
  const s = [a, b].map((o) => (o.direction === "maximize" ? -1 : 1));
  const pts = plot.points.filter((p) => p.values).sort((p, q) => p.number - q.number);
  const worst = (k, o) => {
    const vals = pts.map((p) => s[k] * p.values[k]);
    const lim = view.all ? null : o.limit;
    return lim === null || lim === undefined ? Math.max(...vals) : s[k] * lim;
  };
  const ref = [worst(0, a), worst(1, b)];
  const seen = [],
    xs = [],
    ys = [];
  for (const p of pts) {
    seen.push([s[0] * p.values[0], s[1] * p.values[1]]);
    xs.push(p.number);
    ys.push(hypervolume(seen, ref));
  }
  // The axis spans what the hypervolume did once it was positive, not 0 to its top: from
  // 0 the gains after the first trials read as a flat line.
  const positive = ys.filter((y) => y > 0);
  const lo = positive.length ? Math.min(...positive) : 0;
  const hi = positive.length ? Math.max(...positive) : 1;
  const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1;
  draw(
    "plot-hypervolume",
    [{ type: "scatter", mode: "lines", x: xs, y: ys, line: { shape: "hv", color: "#c0392b" }, hovertemplate: "after trial #%{x}: %{y:.4g}<extra></extra>" }],
    {
      xaxis: { title: { text: "trial number" } },
      yaxis: { title: { text: "hypervolume" }, range: [lo - pad, hi + pad] },
      margin: { l: 60, r: 20, t: 10, b: 45 },
    },
  );
  document.getElementById("hypervolume-note").textContent =
    `The area of ${a.metric} × ${b.metric} that the completed trials dominate, up to the reference point (${fmt(s[0] * ref[0])}, ${fmt(s[1] * ref[1])}): each objective's robust limit, or its worst value; the axis starts near the first positive value, not at 0${plot.completed > pts.length ? `; over the plots' sample of ${pts.length} of ${plot.completed} trials` : ""}.`;
}

// The "Population" card of a population-based training campaign (algorithm pbt): each
// member's value over its epochs, with the copies (exploits) drawn from the member
// copied, and the schedule of each hyper-parameter along the best member's ancestry.

import { el } from "./core.js";
import { colour, draw, logAxis, plain } from "./plots.js";

export function populationCard() {
  return el(
    "div",
    { class: "card", id: "card-population", hidden: true },
    el("h2", { text: "Population (PBT)" }),
    el("div", { id: "plot-population", class: "plot" }),
    el("div", { id: "population-note", class: "note" }),
    el("h3", { text: "Schedule along the best member's ancestry" }),
    el("div", { id: "pbt-schedule", class: "slices" }),
  );
}

/** Draws the card from ``GET /campaigns/{id}/population``; hides it when there is no population. */
export function renderPopulation(doc, spec, openTrial) {
  const box = document.getElementById("card-population");
  box.hidden = !doc.intervals.length;
  if (!doc.intervals.length) return;
  const byNumber = new Map(doc.intervals.map((i) => [i.number, i]));
  const traces = [];
  const members = [...new Set(doc.intervals.map((i) => i.member))].sort((a, b) => a - b);
  const done = (i) => i.value !== null && i.value !== undefined;
  for (const m of members) {
    const mine = doc.intervals.filter((i) => i.member === m && done(i));
    // One segment per interval, from where it started (its parent's value) to its report.
    const x = [],
      y = [],
      text = [],
      ids = [];
    for (const i of mine) {
      const parent = i.parent === null ? null : byNumber.get(i.parent);
      if (parent && done(parent)) {
        x.push(parent.stop_epoch);
        y.push(parent.value);
        text.push("");
        ids.push(null);
      }
      x.push(i.stop_epoch);
      y.push(i.value);
      ids.push(i.number);
      text.push(`member ${m}, trial #${i.number}${i.exploited ? ` (copied #${i.parent})` : ""}`);
      x.push(null);
      y.push(null);
      text.push("");
      ids.push(null);
    }
    traces.push({
      type: "scatter",
      mode: "lines+markers",
      name: `member ${m}`,
      x,
      y,
      text,
      customdata: ids,
      line: { color: colour(m), width: 1.5 },
      marker: { size: 5 },
      hovertemplate: `%{text}<br>epoch %{x}: %{y:.4g}<extra></extra>`,
    });
  }
  // The copies: a dashed line from the member copied to the first report after the copy.
  const cx = [],
    cy = [];
  for (const i of doc.intervals.filter((i) => i.exploited && done(i))) {
    const parent = byNumber.get(i.parent);
    if (parent && done(parent)) {
      cx.push(parent.stop_epoch, i.stop_epoch, null);
      cy.push(parent.value, i.value, null);
    }
  }
  traces.push({ type: "scatter", mode: "lines", name: "copied weights", x: cx, y: cy, hoverinfo: "skip", line: { color: "#555", dash: "dot", width: 1 } });
  const ancestry = doc.ancestry.map((n) => byNumber.get(n)).filter(Boolean);
  traces.push({
    type: "scatter",
    mode: "lines",
    name: "best member's ancestry",
    x: ancestry.map((i) => i.stop_epoch),
    y: ancestry.map((i) => i.value),
    line: { color: "#000", width: 3 },
    hoverinfo: "skip",
  });
  // The same epochs on this plot and the schedules below it (0 to the last), and the
  // legend above the plot: below it, Plotly drew the x title over it.
  const epochs = epochSpan(doc, spec);
  for (const t of traces) t.cliponaxis = false; // a marker at epoch 0 or the last is whole
  const node = draw("plot-population", traces, {
    xaxis: { title: { text: "epoch" }, range: [0, epochs] },
    yaxis: { title: { text: plain(spec.objective.metric) } },
    showlegend: true,
    legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
    margin: { l: 60, r: 20, t: 40, b: 45 },
  });
  if (node && node.on && !node.dataset.clicks) {
    node.on("plotly_click", (e) => {
      const p = e.points && e.points[0];
      if (p && p.customdata) openTrial(p.customdata);
    });
    node.dataset.clicks = "1";
  }
  const copies = doc.intervals.filter((i) => i.exploited).length;
  document.getElementById("population-note").textContent =
    `${members.length} members, ${doc.intervals.length} intervals, ${copies} copies (a member in the bottom share took a top member's weights and perturbed its hyper-parameters). ` +
    `The black line is the best member at the furthest epoch, traced back through the members it copied.${doc.truncated ? " Only the first 20,000 intervals are shown." : ""}`;
  renderSchedule(doc, spec);
}

/** The last epoch the population trains to: the x axes of its plots run 0 to it. */
function epochSpan(doc, spec) {
  const last = Math.max(0, ...doc.intervals.map((i) => i.stop_epoch));
  return last || (spec.training && spec.training.epochs) || 1;
}

function renderSchedule(doc, spec) {
  const holder = document.getElementById("pbt-schedule");
  const names = Object.keys(doc.schedule).filter((n) => doc.schedule[n].length);
  holder.replaceChildren(...names.map((n) => el("div", { id: `pbt-schedule-${names.indexOf(n)}`, class: "plot small" })));
  names.forEach((name, k) => {
    const steps = doc.schedule[name];
    const x = [],
      y = [];
    for (const s of steps) {
      x.push(s.start_epoch, s.stop_epoch);
      y.push(s.value, s.value);
    }
    const p = spec.space[name] || {};
    const yaxis = { title: { text: plain(name) } };
    if (p.scale === "log" && typeof y[0] === "number") Object.assign(yaxis, logAxis(Math.min(...y), Math.max(...y)));
    draw(
      `pbt-schedule-${k}`,
      [{ type: "scatter", mode: "lines", x, y, line: { color: colour(k), width: 2 }, hovertemplate: `${plain(name)} = %{y}<br>epoch %{x}<extra></extra>` }],
      { xaxis: { title: { text: "epoch" }, range: [0, epochSpan(doc, spec)] }, yaxis, showlegend: false, margin: { l: 60, r: 10, t: 10, b: 40 } },
    );
  });
}

// A trial's curvature and loss landscape (the campaign's `analysis`): the largest Hessian
// eigenvalue at each epoch's end with the 2/lr line, the spectral density of each fold,
// and one fold's 2-D loss surface as a contour with the training trajectory on it; and
// the spectra of 2 to 4 trials side by side on the compare page.
// GET /trials/{id}/analysis; the guide "Curvature and loss landscapes" says what they mean.

import { api, cannotChange, el, fmt } from "./core.js";
import { colour, draw } from "./plots.js";

// The learning rate among the trial's parameters, by the names tasks use for it.
const LR_NAMES = ["lr", "learning_rate", "learning-rate", "eta"];
// What was fetched for which trial, so a poll that changed nothing else fetches nothing.
const fetched = { key: "", body: null };

/** The card's shell (filled by `drawCurvature`), or "" when the campaign asks for no analysis. */
export function curvatureCard(c) {
  if (!c.spec.analysis) return "";
  return el(
    "div",
    { class: "card", id: "trial-curvature" },
    el("h2", { text: "Curvature and loss landscape" }),
    el("div", { id: "curvature-note", class: "muted" }),
    el(
      "div",
      { class: "grid three" },
      el("div", { id: "plot-curvature-trace", class: "plot" }),
      el("div", { id: "plot-curvature-spectrum", class: "plot" }),
      el("div", { id: "plot-curvature-surface", class: "plot" }),
    ),
  );
}

/** Fetches the trial's analyses when its finished folds changed, and draws them. */
export async function drawCurvature(t, c) {
  if (!c.spec.analysis || !document.getElementById("trial-curvature")) return;
  const key = `${t.id}:${t.folds.filter((f) => f.finished).length}:${t.attempt}`;
  if (fetched.key !== key) {
    fetched.body = await api(`/trials/${t.id}/analysis`);
    fetched.key = key;
  }
  const { folds, request: asked } = fetched.body;
  const pending = asked && (asked.state === "QUEUED" || asked.state === "RUNNING");
  if (pending) fetched.key = ""; // fetched again at the next poll until an agent ends it
  const note = document.getElementById("curvature-note");
  for (const id of ["plot-curvature-trace", "plot-curvature-spectrum", "plot-curvature-surface"]) {
    document.getElementById(id).hidden = !folds.length;
  }
  const ask = askButton(t, c, asked, pending);
  if (!folds.length) {
    const onBest = (c.spec.analysis.on || "best") === "best";
    const why =
      t.state !== "COMPLETED"
        ? `No fold has finished its analysis yet: each fold computes it at its end${onBest ? " when its result leads (analysis.on: best)" : ""}.`
        : onBest
          ? "Not analysed: with analysis.on: best, a fold is analysed when its result leads as it finishes."
          : "No fold's analysis was stored.";
    note.replaceChildren(why, requestLine(asked), ask);
    return;
  }
  const lrName = LR_NAMES.find((n) => typeof t.params[n] === "number" && t.params[n] > 0);
  const lr = lrName ? t.params[lrName] : null;
  note.replaceChildren(
    `${folds.length} fold(s) analysed. λ_max near 2/${lrName || "lr"} means the learning rate sets the curvature ` +
      "(the edge of stability); it is a diagnostic, not a score." +
      (lr ? "" : " No learning-rate parameter (lr, learning_rate) in this trial: no 2/lr line."),
    requestLine(asked),
    ask,
  );
  drawTrace(folds, lr, lrName);
  drawSpectrum(folds);
  drawSurface(folds[0]);
}

/** " Asked for: QUEUED …" for the trial's latest analysis asked for after the fact, or "". */
function requestLine(asked) {
  if (!asked) return "";
  const said = {
    QUEUED: "the campaign's next agent computes it from the folds' checkpoints",
    RUNNING: "an agent is computing it",
    DONE: "done",
    FAILED: asked.reason,
  }[asked.state];
  return el("span", { id: "curvature-request", text: ` Asked for after the trial finished: ${asked.state}${said ? ` (${said})` : ""}.` });
}

/** The button that asks for a COMPLETED trial's analysis from its checkpoints (submit scope). */
function askButton(t, c, asked, pending) {
  if (t.state !== "COMPLETED" || pending) return "";
  const scope = cannotChange(c.id);
  return el("button", {
    id: "curvature-ask",
    text: asked ? "Compute it again" : "Compute it from the checkpoints",
    disabled: Boolean(scope),
    title: scope || "an agent of the campaign computes it at its next trial boundary (start one on a finished campaign)",
    onclick: async (e) => {
      e.target.disabled = true;
      try {
        await api(`/trials/${t.id}/analysis`, { method: "POST" });
      } catch (err) {
        document.getElementById("curvature-note").append(el("span", { class: "error", text: ` ${err.message}` }));
        return;
      }
      fetched.key = "";
      await drawCurvature(t, c);
    },
  });
}

function drawTrace(folds, lr, lrName) {
  const traces = folds.map((f, i) => {
    const d = f.document;
    const trace = d.hessian && d.hessian.trace;
    const epochs = trace ? d.epochs : [null];
    const values = trace || [d.hessian ? d.hessian.eigenvalues[0] : null];
    return { type: "scatter", mode: "lines+markers", name: `fold ${f.fold}`, x: epochs, y: values, line: { color: colour(i) } };
  });
  const last = Math.max(1, ...folds.flatMap((f) => f.document.epochs || [1]));
  if (lr)
    traces.push({
      type: "scatter",
      mode: "lines",
      name: `2/${lrName} = ${fmt(2 / lr, 4)}`,
      x: [0, last],
      y: [2 / lr, 2 / lr],
      line: { dash: "dash", color: "#888" },
    });
  // Log only where the values span decades and are all positive (a saddle's λ_max can be
  // negative, which a log axis would hide); within one decade Plotly labels a log axis
  // with bare digits (2, 3, 4 for 20, 30, 40). Whole epochs on the x axis.
  const ys = traces.flatMap((t) => t.y).filter((v) => v !== null && Number.isFinite(v));
  const positive = ys.length > 0 && ys.every((v) => v > 0);
  const decades = positive && Math.max(...ys) / Math.min(...ys) > 30;
  draw("plot-curvature-trace", traces, {
    title: { text: "largest Hessian eigenvalue" },
    margin: { t: 40 },
    xaxis: { title: { text: "epoch" }, dtick: Math.max(1, Math.ceil(last / 10)), rangemode: "tozero" },
    yaxis: { title: { text: "λ_max" }, type: decades ? "log" : "linear" },
  });
}

function drawSpectrum(folds) {
  const traces = folds
    .filter((f) => f.document.hessian && f.document.hessian.density)
    .map((f, i) => ({
      type: "scatter",
      mode: "lines",
      name: `fold ${f.fold}`,
      x: f.document.hessian.density.grid,
      y: f.document.hessian.density.density,
      line: { color: colour(i) },
    }));
  draw("plot-curvature-spectrum", traces, {
    title: { text: "spectral density (SLQ)" },
    margin: { t: 40 },
    xaxis: { title: { text: "eigenvalue" } },
    yaxis: { title: { text: "density" }, type: "log" },
  });
}

function drawSurface(f) {
  const land = f.document.landscape;
  const surface = land && land.surface;
  if (!surface) {
    draw("plot-curvature-surface", [], { title: { text: "no 2-D surface (landscape.grid: 0)" } });
    return;
  }
  const traces = [
    {
      type: "contour",
      name: "training loss",
      x: surface.xs,
      y: surface.ys,
      z: surface.loss,
      colorscale: "Viridis",
      contours: { coloring: "heatmap" },
      showscale: true,
    },
  ];
  const path = land.trajectory;
  if (path)
    traces.push({
      type: "scatter",
      mode: "lines+markers",
      name: "trajectory",
      x: path.xs,
      y: path.ys,
      text: (f.document.epochs || []).map((e, i) => `epoch ${e}, ${fmt(100 * path.off_plane[i], 3)}% off the plane`),
      line: { color: "#fff" },
      marker: { color: "#fff", size: 6 },
    });
  draw("plot-curvature-surface", traces, {
    title: { text: `fold ${f.fold}: training loss (${land.directions} directions)` },
    margin: { t: 40 },
    xaxis: { title: { text: "direction 1" } },
    yaxis: { title: { text: "direction 2" } },
  });
}

const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];
// What the compare page fetched, by trials and their finished folds.
const compared = { key: "", bodies: [] };

/** The compare page's spectra card, or "" when the campaign asks for no analysis. */
export function compareSpectraCard(c) {
  if (!c.spec.analysis) return "";
  return el(
    "div",
    { class: "card", id: "compare-spectra" },
    el("h2", { text: "Hessian spectra" }),
    el("div", { id: "compare-spectra-note", class: "note" }),
    el("div", { id: "plot-compare-spectra", class: "plot tall" }),
  );
}

/** The compared trials' spectral densities: a colour per trial, a dash per fold. */
export async function drawCompareSpectra(c, trials) {
  if (!c.spec.analysis || !document.getElementById("compare-spectra")) return;
  const key = trials.map((t) => `${t.id}:${t.folds.filter((f) => f.finished).length}`).join(",");
  if (compared.key !== key) {
    compared.bodies = await Promise.all(trials.map((t) => api(`/trials/${t.id}/analysis`)));
    compared.key = key;
  }
  const traces = [];
  trials.forEach((t, i) => {
    compared.bodies[i].folds.forEach((f, j) => {
      const dens = f.document.hessian && f.document.hessian.density;
      if (!dens) return;
      traces.push({
        type: "scatter",
        mode: "lines",
        name: `#${t.number} fold ${f.fold}`,
        x: dens.grid,
        y: dens.density,
        line: { color: colour(i), dash: DASHES[j % DASHES.length] },
      });
    });
  });
  document.getElementById("plot-compare-spectra").hidden = !traces.length;
  const tops = trials.map((t, i) => {
    const first = compared.bodies[i].folds.map((f) => f.document.hessian && f.document.hessian.eigenvalues[0]).filter((v) => v != null);
    return first.length ? `#${t.number}: λ_max ${first.map((v) => fmt(v, 4)).join(", ")}` : `#${t.number}: none yet`;
  });
  document.getElementById("compare-spectra-note").textContent = traces.length
    ? `A colour per trial, a dash per fold. ${tops.join("; ")}.`
    : "None of these trials has a spectral density yet (analysis.hessian.density_samples: 0, or no fold finished).";
  if (traces.length)
    draw("plot-compare-spectra", traces, {
      xaxis: { title: { text: "eigenvalue" } },
      yaxis: { title: { text: "density" }, type: "log" },
      legend: { orientation: "h" },
    });
}

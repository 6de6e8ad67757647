// 2 to 4 trials side by side (#/campaign/3/compare?trials=4,9,27): their parameters with the
// ones that differ marked, their values and objectives, the fold values, and every fold's
// learning curve overlaid (a colour per trial, a dash per fold), and their Hessian spectra
// when the campaign has an `analysis` (curvature.js).

import { notFound } from "./campaign.js";
import { badge, el, fmt, fmtParam, live, MAX_COMPARED, MIN_COMPARED, poll, ranNow, seconds, session } from "./core.js";
import { compareSpectraCard, drawCompareSpectra } from "./curvature.js";
import { colour, draw, plain } from "./plots.js";

const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];

const app = document.getElementById("app");

/** The trial numbers of a compare query, or an error message saying what is allowed. */
export function comparedNumbers(query) {
  const raw = (new URLSearchParams(query).get("trials") || "").split(",").filter((s) => s !== "");
  const numbers = raw.map(Number);
  if (raw.some((s) => !/^\d+$/.test(s)) || numbers.some((n) => !Number.isSafeInteger(n)))
    return { error: `trials must be trial numbers (0, 1, 2, …) separated by commas, got "${raw.join(",")}".` };
  const unique = [...new Set(numbers)];
  if (unique.length < MIN_COMPARED || unique.length > MAX_COMPARED)
    return {
      error: `Pick ${MIN_COMPARED} to ${MAX_COMPARED} different trials to compare (${unique.length} given): tick them in the campaign's trials table, then Compare.`,
    };
  return { numbers: unique };
}

export function comparePage(cid, query) {
  const picked = comparedNumbers(query);
  if (picked.error) return notFound("Nothing to compare.", picked.error);
  const numbers = picked.numbers;
  app.replaceChildren(
    el(
      "div",
      { class: "row" },
      el("h1", { id: "compare-title", text: `Comparing trials ${numbers.map((n) => `#${n}`).join(", ")}` }),
      el("span", { class: "spacer" }),
      el("a", { class: "button", id: "compare-back", href: `#/campaign/${cid}?curves=${numbers.join(",")}`, text: "← campaign" }),
    ),
    el("div", { class: "card", id: "compare-params" }),
    el(
      "div",
      { class: "card" },
      el("h2", { text: "Learning curves" }),
      el("div", { id: "compare-curves-note", class: "note" }),
      el("div", { id: "plot-compare-curves", class: "plot tall" }),
    ),
    el("div", { class: "card", id: "compare-folds" }),
  );
  let c = null;
  let spectra = false;
  live(
    async (gen) => {
      const answers = await Promise.all([
        c ? Promise.resolve({ body: c, changed: false }) : poll(`/campaigns/${cid}`),
        ...numbers.map((n) => poll(`/campaigns/${cid}/trials/${n}`)),
      ]);
      if (gen !== session.generation) return false;
      c = answers[0].body;
      if (!answers.some((a) => a.changed)) return false;
      if (!spectra) {
        spectra = true;
        const card = compareSpectraCard(c);
        if (card) document.getElementById("compare-folds").before(card);
      }
      render(
        c,
        answers.slice(1).map((a) => a.body),
      );
      return true;
    },
    () =>
      notFound(`Campaign ${cid} has no trial among ${numbers.map((n) => `#${n}`).join(", ")}.`, "Trials are numbered from 0 in the order they were created."),
  );
}

function render(c, trials) {
  document.title = `compare ${trials.map((t) => `#${t.number}`).join(" ")} · ${c.name} · hpcopt`;
  const space = c.spec.space || {};
  const names = [...new Set([...Object.keys(space), ...trials.flatMap((t) => Object.keys(t.params))])];
  const shown = (t, n) => (t.params[n] === undefined ? "–" : fmtParam(space[n], t.params[n]));
  const head = el(
    "tr",
    {},
    el("th", { text: "" }),
    ...trials.map((t, i) =>
      el(
        "th",
        { class: "num" },
        el("span", { class: "swatch", style: `background:${colour(i)}` }),
        el("a", { href: `#/campaign/${c.id}/trial/${t.number}`, text: `#${t.number}` }),
      ),
    ),
  );
  const row = (label, cells, props = {}) => el("tr", props, el("th", { text: label }), ...cells.map((v) => el("td", { class: "num mono", text: v })));
  const paramRows = names.map((n) => {
    const cells = trials.map((t) => shown(t, n));
    return row(n, cells, { class: new Set(cells).size > 1 ? "differs" : "same", "data-param": n });
  });
  const objectives = c.spec.objectives || [{ metric: c.metric, direction: c.direction }];
  const valueRows =
    objectives.length > 1
      ? objectives.map((o, k) =>
          row(
            `${o.metric} (${o.direction})`,
            trials.map((t) => (t.values ? fmt(t.values[k], 6) : "–")),
          ),
        )
      : [
          row(
            `${c.metric} (${c.direction})`,
            trials.map((t) =>
              t.value === null ? "–" : t.value_std !== null && t.value_std !== undefined ? `${fmt(t.value, 6)} ± ${fmt(t.value_std, 3)}` : fmt(t.value, 6),
            ),
          ),
        ];
  const differing = paramRows.filter((r) => r.classList.contains("differs")).length;
  document.getElementById("compare-params").replaceChildren(
    el(
      "div",
      { class: "row" },
      el("h2", { text: "Parameters and values" }),
      el("span", { class: "spacer" }),
      el("span", { id: "compare-diff-note", class: "note", text: `${differing} of ${names.length} parameters differ (marked)` }),
    ),
    el(
      "div",
      { class: "table-wrap" },
      el(
        "table",
        { id: "compare-table" },
        el("thead", {}, head),
        el(
          "tbody",
          {},
          el("tr", { class: "group" }, el("th", { text: "State" }), ...trials.map((t) => el("td", { class: "num" }, badge(t.state)))),
          ...valueRows,
          row(
            "Ran for",
            trials.map((t) => seconds(ranNow(t))),
          ),
          row(
            "Attempt",
            trials.map((t) => String(t.attempt)),
          ),
          ...paramRows,
        ),
      ),
    ),
  );
  // Folds: one row per fold index any of them reported.
  const folds = [...new Set(trials.flatMap((t) => t.folds.map((f) => f.index)))].sort((a, b) => a - b);
  const foldValue = (t, k) => {
    const f = t.folds.find((x) => x.index === k);
    return f ? `${fmt(f.value, 6)}${f.finished ? "" : " (running)"}` : "–";
  };
  document.getElementById("compare-folds").replaceChildren(
    el("h2", { text: "Fold values" }),
    folds.length
      ? el(
          "div",
          { class: "table-wrap" },
          el(
            "table",
            { id: "compare-fold-table" },
            el("thead", {}, head.cloneNode(true)),
            el(
              "tbody",
              {},
              ...folds.map((k) =>
                row(
                  `fold ${k}`,
                  trials.map((t) => foldValue(t, k)),
                  { "data-fold": k },
                ),
              ),
            ),
          ),
        )
      : el("p", { class: "muted", text: "None of these trials reported a fold yet." }),
  );
  // Curves: a colour per trial, a dash per fold; one legend entry per trial.
  const traces = [];
  trials.forEach((t, i) => {
    const byFold = new Map();
    for (const p of t.curves || []) {
      if (!byFold.has(p.fold)) byFold.set(p.fold, []);
      byFold.get(p.fold).push(p);
    }
    [...byFold.keys()]
      .sort((a, b) => a - b)
      .forEach((f, j) => {
        const pts = byFold.get(f).sort((a, b) => a.step - b.step);
        traces.push({
          type: "scatter",
          mode: "lines",
          name: `#${t.number}`,
          legendgroup: `t${t.number}`,
          showlegend: j === 0,
          customdata: pts.map(() => [t.number, f]),
          x: pts.map((p) => p.step),
          y: pts.map((p) => p.value),
          line: { color: colour(i), dash: DASHES[j % DASHES.length] },
          hovertemplate: `#${t.number} fold ${f}<br>epoch %{x}: %{y}<extra></extra>`,
        });
      });
  });
  const plotEl = document.getElementById("plot-compare-curves");
  plotEl.hidden = !traces.length;
  document.getElementById("compare-curves-note").textContent = traces.length
    ? "A colour per trial; folds are told apart by dash (solid: the first)."
    : "None of these trials reported learning-curve points.";
  drawCompareSpectra(c, trials).catch((e) => {
    const note = document.getElementById("compare-spectra-note");
    if (note) note.textContent = `The spectra could not be loaded: ${e.message}`;
  });
  const maxStep = Math.max(1, ...traces.flatMap((tr) => tr.x));
  if (traces.length)
    draw("plot-compare-curves", traces, {
      xaxis: { title: { text: "epoch" }, tick0: 0, dtick: Math.max(1, Math.ceil(maxStep / 10)) },
      yaxis: { title: { text: plain(c.metric) } },
      legend: { orientation: "h" },
    });
}

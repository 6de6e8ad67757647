// 2 to 4 campaigns side by side (#/campaigns/compare?ids=3,7): each one's best value by
// trial and the distribution of its values on one plot (a colour per campaign), and a
// table of what each is: objective, algorithm, budget, progress, best.

import { done, notFound } from "./campaign.js";
import { badge, el, fmt, live, MAX_COMPARED, MIN_COMPARED, poll, session } from "./core.js";
import { colour, draw, forObjective, plain, robustRange } from "./plots.js";

const app = document.getElementById("app");

/** The campaign ids of a compare query, or an error message saying what is allowed. */
export function comparedCampaigns(query) {
  const raw = (new URLSearchParams(query).get("ids") || "").split(",").filter((s) => s !== "");
  const ids = raw.map(Number);
  if (raw.some((s) => !/^\d+$/.test(s)) || ids.some((n) => !Number.isSafeInteger(n) || n < 1))
    return { error: `ids must be campaign ids (1, 2, …) separated by commas, got "${raw.join(",")}".` };
  const unique = [...new Set(ids)];
  if (unique.length < MIN_COMPARED || unique.length > MAX_COMPARED)
    return {
      error: `Pick ${MIN_COMPARED} to ${MAX_COMPARED} different campaigns to compare (${unique.length} given): tick them in the campaign list, then Compare.`,
    };
  return { ids: unique };
}

export function compareCampaignsPage(query) {
  const picked = comparedCampaigns(query);
  if (picked.error) return notFound("Nothing to compare.", picked.error);
  const ids = picked.ids;
  app.replaceChildren(
    el(
      "div",
      { class: "row" },
      el("h1", { id: "compare-title", text: `Comparing campaigns ${ids.join(", ")}` }),
      el("span", { class: "spacer" }),
      el("a", { class: "button", href: "#/", text: "← campaigns" }),
    ),
    el("div", { class: "card", id: "campaigns-compared" }),
    el(
      "div",
      { class: "grid two" },
      el("div", { class: "card" }, el("h2", { text: "Best value by trial" }), el("div", { id: "plot-compare-best", class: "plot" })),
      el("div", { class: "card" }, el("h2", { text: "Distribution of the values" }), el("div", { id: "plot-compare-edf", class: "plot" })),
    ),
    el(
      "label",
      { class: "check", title: "value axes span every completed trial, outliers included" },
      el("input", { type: "checkbox", id: "compare-all", onchange: () => shown && render(shown) }),
      " every value",
    ),
    el("div", { id: "compare-note", class: "note" }),
  );
  let shown = null; // the campaigns last drawn: the checkbox draws them again
  live(
    async (gen) => {
      const answers = await Promise.all(ids.flatMap((id) => [poll(`/campaigns/${id}`), poll(`/campaigns/${id}/plot?max_points=1000`)]));
      if (gen !== session.generation) return false;
      if (!answers.some((a) => a.changed)) return false;
      const campaigns = ids.map((_, i) => ({ c: answers[2 * i].body, plot: answers[2 * i + 1].body }));
      shown = campaigns;
      render(campaigns);
      return true;
    },
    (e) => notFound("A campaign to compare does not exist.", `${(e.body && e.body.detail) || "not found"} (comparing ${ids.join(", ")}).`),
  );
}

function render(campaigns) {
  document.title = `compare ${campaigns.map(({ c }) => c.name).join(" · ")} · hpcopt`;
  const head = el(
    "tr",
    {},
    el("th", { text: "" }),
    ...campaigns.map(({ c }, i) =>
      el("th", {}, el("span", { class: "swatch", style: `background:${colour(i)}` }), el("a", { href: `#/campaign/${c.id}`, text: `${c.name} (${c.id})` })),
    ),
  );
  const row = (label, cells) =>
    el("tr", {}, el("th", { text: label }), ...cells.map((v) => (v instanceof Node ? el("td", {}, v) : el("td", { class: "mono", text: v }))));
  document.getElementById("campaigns-compared").replaceChildren(
    el(
      "div",
      { class: "table-wrap" },
      el(
        "table",
        { id: "compared-campaigns" },
        el("thead", {}, head),
        el(
          "tbody",
          {},
          row(
            "state",
            campaigns.map(({ c }) => badge(c.state)),
          ),
          row(
            "objective",
            campaigns.map(({ c }) => (c.spec.objectives || [c.spec.objective]).map((o) => `${o.direction} ${o.metric}`).join(", ")),
          ),
          row(
            "algorithm",
            campaigns.map(({ c }) => c.spec.algorithm.name),
          ),
          row(
            "trials finished / budget",
            campaigns.map(({ c }) => `${done(c)} / ${c.spec.budget.max_trials}`),
          ),
          row(
            "completed",
            campaigns.map(({ c }) => String(c.trial_counts.COMPLETED || 0)),
          ),
          row(
            "best",
            campaigns.map(({ c }) => (c.best_value === null ? "–" : `${fmt(c.best_value)}${c.best_trial_number !== null ? ` (#${c.best_trial_number})` : ""}`)),
          ),
          row(
            "parameters",
            campaigns.map(({ c }) => Object.keys(c.spec.space).join(", ")),
          ),
        ),
      ),
    ),
  );
  // Each campaign's first objective is what its lines show: the overlay compares
  // directly only when every campaign has the same objectives, all of them.
  const firsts = campaigns.map(({ plot }) => forObjective(plot, 0));
  const goal = (v) => `${v.direction} ${v.metric}`;
  const goals = ({ c }) => (c.spec.objectives || [c.spec.objective]).map((o) => `${o.direction} ${o.metric}`).join(", ");
  const sameFirst = new Set(firsts.map(goal)).size === 1;
  const same = sameFirst && new Set(campaigns.map(goals)).size === 1;
  // One value axis for all, with the outlier handling of every other plot: it stops past
  // the worst value inside any campaign's robust limit (a diverged run at 16 squeezed every
  // line into the left 5%), unless the reader asks for every value.
  const all = document.getElementById("compare-all").checked;
  const axis = sameFirst ? sharedAxis(firsts, all) : { layout: {}, off: [], limit: null }; // one scale only for one objective
  const best = campaigns.map(({ c, plot }, i) => {
    const steps = firsts[i].best || [];
    const last = Math.max(0, ...(plot.points || []).map((p) => p.number));
    const x = [...steps.map((b) => b.number), last],
      y = [...steps.map((b) => b.value), steps.length ? steps[steps.length - 1].value : null];
    return {
      type: "scatter",
      mode: "lines",
      name: plain(`${c.name} (${c.id})`),
      x,
      y,
      line: { shape: "hv", color: colour(i) },
      hovertemplate: `${plain(c.name)}: %{y:.4g} after trial #%{x}<extra></extra>`,
    };
  });
  const title = sameFirst ? plain(firsts[0].metric) : "value (each its own objective)";
  draw("plot-compare-best", best, {
    xaxis: { title: { text: "trial number" } },
    yaxis: Object.assign({ title: { text: sameFirst ? title : "best value (each its own objective)" } }, axis.layout),
    legend: { orientation: "h", y: 1.15 },
  });
  const edf = campaigns.map(({ c }, i) => {
    const q = firsts[i].edf || [];
    return {
      type: "scatter",
      mode: "lines",
      name: plain(`${c.name} (${c.id})`),
      x: q,
      y: q.map((_, k) => (q.length > 1 ? k / (q.length - 1) : 1)),
      line: { shape: "hv", color: colour(i) },
      hovertemplate: `${plain(c.name)}: %{y:.0%} at or below %{x:.4g}<extra></extra>`,
    };
  });
  draw("plot-compare-edf", edf, {
    xaxis: Object.assign({ title: { text: title } }, axis.layout),
    yaxis: { title: { text: "fraction of completed trials" }, range: [0, 1.02] },
    legend: { orientation: "h", y: 1.15 },
  });
  const cut = axis.off.length
    ? ` The value axes stop at ${fmt(axis.limit)}: ${axis.off.map(([k, n]) => `${n} trial${n === 1 ? "" : "s"} of ${campaigns[k].c.name}`).join(", ")} lie beyond (tick every value for all).`
    : "";
  const many = goals(campaigns[0]).includes(","); // the shared objectives are several: the lines show the first
  const others = campaigns.filter((x, k) => goals(x) !== goal(firsts[k])).map((x) => x.c.name); // those with more objectives
  let note;
  if (same)
    note = `All have the same objective${many ? `s (${goals(campaigns[0])}); the lines show the first` : ` (${goals(campaigns[0])})`}: the lines compare directly.`;
  else if (sameFirst)
    note =
      `The lines show ${goal(firsts[0])}, the first objective of each, but the objectives differ (${campaigns.map((x) => `${x.c.name}: ${goals(x)}`).join("; ")}): ` +
      `${others.join(", ")} trade${others.length === 1 ? "s" : ""} it against another, so a worse ${plain(firsts[0].metric)} there may be the price of that, not a worse search.`;
  else
    note = `The campaigns' objectives differ (${campaigns.map(goals).join("; ")}): each line is on its own first objective's scale, so read the shapes, not the levels.`;
  document.getElementById("compare-note").textContent = note + cut;
}

/** The value axis the compared campaigns share: each one's robust range (robustRange:
 * the worse side stops at its limit) joined, when any has values past its limit; the
 * layout for that axis, the widest limit and how many trials of each lie past it. */
function sharedAxis(firsts, all) {
  const view = { all };
  const ranges = firsts.map((v) => ({ v, r: robustRange(v, view, v.edf || []) }));
  if (!ranges.some(({ r }) => r)) return { layout: {}, off: [], limit: null };
  let lo = Infinity,
    hi = -Infinity;
  for (const { v, r } of ranges) {
    const span = r ? r.range : (v.edf || []).length ? [Math.min(...v.edf), Math.max(...v.edf)] : null;
    if (!span) continue;
    lo = Math.min(lo, span[0]);
    hi = Math.max(hi, span[1]);
  }
  const off = [];
  ranges.forEach(({ v }, k) => {
    const n = (v.edf || []).filter((x) => x < lo || x > hi).length;
    if (n) off.push([k, n]);
  });
  const minimize = firsts[0].direction !== "maximize";
  return { layout: { range: [lo, hi], autorange: false }, off, limit: minimize ? hi : lo };
}

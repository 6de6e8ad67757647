// 2 to 4 campaigns side by side (#/campaigns/compare?ids=3,7): each one's best value by
// trial and the distribution of its values on one plot (a colour per campaign), and a
// table of what each is: objective, algorithm, budget, progress, best.

import { done, notFound } from "./campaign.js";
import { badge, el, fmt, live, MAX_COMPARED, MIN_COMPARED, poll, session } from "./core.js";
import { colour, draw, plain } from "./plots.js";

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
    el("div", { id: "compare-note", class: "note" }),
  );
  live(
    async (gen) => {
      const answers = await Promise.all(ids.flatMap((id) => [poll(`/campaigns/${id}`), poll(`/campaigns/${id}/plot?max_points=1000`)]));
      if (gen !== session.generation) return false;
      if (!answers.some((a) => a.changed)) return false;
      const campaigns = ids.map((_, i) => ({ c: answers[2 * i].body, plot: answers[2 * i + 1].body }));
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
  // Each campaign's first objective: the overlay is only a comparison when they agree.
  const goal = ({ plot }) => `${plot.direction} ${plot.metric}`;
  const same = new Set(campaigns.map(goal)).size === 1;
  const best = campaigns.map(({ c, plot }, i) => {
    const steps = plot.best || [];
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
  draw("plot-compare-best", best, {
    xaxis: { title: { text: "trial number" } },
    yaxis: { title: { text: same ? plain(campaigns[0].plot.metric) : "best value (each its own objective)" } },
    legend: { orientation: "h", y: 1.15 },
  });
  const edf = campaigns.map(({ c, plot }, i) => {
    const q = plot.edf || [];
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
    xaxis: { title: { text: same ? plain(campaigns[0].plot.metric) : "value" } },
    yaxis: { title: { text: "fraction of completed trials" }, range: [0, 1.02] },
    legend: { orientation: "h", y: 1.15 },
  });
  document.getElementById("compare-note").textContent = same
    ? `All minimize or maximize the same objective (${goal(campaigns[0])}): the lines compare directly.`
    : `The campaigns' objectives differ (${campaigns.map(goal).join("; ")}): each line is on its own objective's scale, so read the shapes, not the levels.`;
}

// The campaign page's optional cards, behind one interface, so that campaign.js lays out
// and refreshes each of them without knowing it by name. A card is
//   { id, element(), wants(spec), url(id), due(changed), render(doc, ctx) }
// - element(): its (hidden) box, laid out once at the end of the page;
// - wants(spec): whether this campaign has anything for it (else it stays hidden);
// - url(id): the document it draws (polled with its ETag: an unchanged one is not drawn);
// - due(changed): whether to fetch it again, from what this poll saw change
//   ({ summary, agents, running, plot, page }); it is always fetched once;
// - render(doc, ctx): draws it (ctx: { spec, openTrial }).
// A new card is an object here (docs/development.md, "Adding a dashboard card").

import { el, fmt } from "./core.js";
import { populationCard, renderPopulation } from "./population.js";

/** A population-based training campaign's members, copies and schedules. */
const population = {
  id: "card-population",
  element: populationCard,
  wants: (spec) => spec.algorithm.name === "pbt",
  url: (id) => `/campaigns/${id}/population`,
  due: (changed) => changed.summary, // intervals complete: the summary's counts change
  render: (doc, ctx) => renderPopulation(doc, ctx.spec, ctx.openTrial),
};

/** The planner's throughput measurements by layout, and the model it fits. */
const throughput = {
  id: "card-throughput",
  element: () =>
    el(
      "div",
      { class: "card", id: "card-throughput", hidden: true },
      el("h2", { text: "Throughput by layout (the planner's measurements)" }),
      el("div", { class: "table-wrap" }, el("table", { id: "throughput" }, el("thead"), el("tbody"))),
      el("div", { id: "throughput-note", class: "note" }),
    ),
  wants: () => true,
  url: (id) => `/campaigns/${id}/throughput`,
  due: (changed) => changed.summary || changed.agents, // the measurements change as folds finish
  render: (doc) => renderThroughput(doc),
};

/** Every optional card, in the order the page shows them. */
export const CARDS = [population, throughput];

function renderThroughput(doc) {
  const box = document.getElementById("card-throughput");
  box.hidden = !doc.points.length;
  if (!doc.points.length) return;
  const table = document.getElementById("throughput");
  if (!table.tHead.rows.length)
    table.tHead.append(
      el("tr", {}, ...["Scheme", "Ranks per fold", "Nodes", "Samples/s per fold group", "From", "Measurements"].map((h) => el("th", { text: h }))),
    );
  table.tBodies[0].replaceChildren(
    ...doc.points.map((p) =>
      el(
        "tr",
        {},
        el("td", { text: p.scheme }),
        el("td", { class: "num", text: p.ranks }),
        el("td", { class: "num", text: p.nodes }),
        el("td", { class: "num", text: fmt(p.samples_per_second) }),
        el("td", { text: p.source }),
        el("td", { class: "num", text: p.count }),
      ),
    ),
  );
  const lines = Object.entries(doc.models).map(([scheme, m]) => {
    const k = m.seconds_per_sample;
    const extra = m.assumptions.length ? ` (${m.assumptions.join("; ")})` : "";
    return `${scheme}: t(r, n) = ${fmt(k.compute)} / r + ${fmt(k.comm)} · (1 − 1/r) + ${fmt(k.link)} · (1 − 1/n) seconds per sample, median error ${(100 * m.median_relative_error).toFixed(1)}%${extra}`;
  });
  document.getElementById("throughput-note").textContent = `The model the agents' planner (--groups auto) fits: ${lines.join(". ")}.`;
}

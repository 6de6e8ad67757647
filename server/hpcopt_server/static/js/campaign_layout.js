// The campaign page's skeleton: every card's box, laid out once; campaign.js fills them
// as their data arrives, and the optional cards (cards.js) add their own.

import { cancelCampaign } from "./campaign_tables.js";
import { CARDS } from "./cards.js";
import { download, el } from "./core.js";
import { noteCard } from "./notes.js";
import { campaignButtons } from "./steer.js";

const app = document.getElementById("app");

// -------------------------------------------------------------- layout ---

const card = (id, title, props, ...body) => el("div", Object.assign({ class: "card", id }, props), title ? el("h2", { text: title }) : null, ...body);
const plotBox = (id) => el("div", { id, class: "plot" });

export function layout(id) {
  app.replaceChildren(
    el(
      "div",
      { class: "row" },
      el("h1", { id: "campaign-title", text: `Campaign ${id}` }),
      el("span", { class: "spacer" }),
      el("button", { id: "export-json", text: "Export JSON", onclick: () => download(`/campaigns/${id}/export`, `campaign-${id}.json`) }),
      el("button", { id: "export-csv", text: "Export CSV", onclick: () => download(`/campaigns/${id}/export?format=csv`, `campaign-${id}-trials.csv`) }),
      ...campaignButtons(id),
      el("button", { id: "cancel", class: "danger", text: "Cancel campaign", disabled: true, onclick: () => cancelCampaign(id) }),
    ),
    el("div", { class: "banner", id: "paused-banner", role: "status", hidden: true }),
    el("div", { class: "card", id: "summary" }),
    noteCard(`/campaigns/${id}/note`, "campaign"),
    card("empty-state", "No completed trials yet", { hidden: true }, el("div", { id: "empty-text" })),
    el(
      "div",
      { class: "row controls analysis", id: "analysis-controls" },
      el("span", { id: "objective-pick" }),
      el("span", { id: "outliers", class: "note" }),
      el("span", { id: "plots-asof", class: "note" }),
    ),
    card(
      "card-running",
      "Running now",
      { hidden: true },
      el("div", { class: "table-wrap" }, el("table", { id: "running" }, el("thead"), el("tbody"))),
      el("div", { id: "running-note", class: "note" }),
    ),
    el(
      "div",
      { class: "grid two analysis" },
      card(
        "card-history",
        "Optimization history",
        {},
        el("div", { class: "row controls", id: "history-controls" }),
        plotBox("plot-history"),
        el("div", { id: "history-note", class: "note" }),
      ),
      card("card-curves", "Learning curves", {}, el("div", { id: "curve-picker", class: "note" }), plotBox("plot-curves")),
    ),
    el(
      "div",
      { class: "card analysis", id: "card-front", hidden: true },
      el("h2", { text: "Pareto front" }),
      el(
        "div",
        { class: "grid two" },
        el("div", {}, plotBox("plot-front"), el("div", { id: "front-note", class: "note" })),
        el(
          "div",
          { id: "hypervolume" },
          el("h3", { text: "Hypervolume by trial" }),
          plotBox("plot-hypervolume"),
          el("div", { id: "hypervolume-note", class: "note" }),
        ),
      ),
    ),
    el(
      "div",
      { class: "grid two analysis" },
      el(
        "div",
        { class: "card", id: "card-importance" },
        el(
          "div",
          { class: "row" },
          el("h2", { text: "Parameter importance" }),
          el("span", { class: "spacer" }),
          el(
            "label",
            { class: "check" },
            "method ",
            el(
              "select",
              {
                id: "importance-method",
                title:
                  "first-order: each parameter alone (binned variance shares); permutation: how much a surrogate model loses when the parameter is shuffled, interactions included",
              },
              el("option", { value: "first-order", text: "first-order (main effects)" }),
              el("option", { value: "permutation", text: "permutation (with interactions)" }),
            ),
          ),
        ),
        plotBox("plot-importance"),
        el("div", { id: "importance-note", class: "note" }),
      ),
      card("card-edf", "Empirical distribution of the value", {}, plotBox("plot-edf"), el("div", { id: "edf-note", class: "note" })),
    ),
    el(
      "div",
      { class: "card analysis", id: "card-parcoords" },
      el("div", { class: "row" }, el("h2", { text: "Parallel coordinates" }), el("span", { class: "spacer" }), el("span", { id: "brush-note", class: "note" })),
      el("div", { id: "plot-parcoords", class: "plot tall" }),
    ),
    el(
      "div",
      { class: "card analysis", id: "card-contour" },
      el("div", { class: "row" }, el("h2", { text: "Contour" }), el("span", { class: "spacer" }), el("span", { id: "contour-pick" })),
      plotBox("plot-contour"),
      el("div", { class: "note", text: "Best value per cell of a 20 × 20 grid over the two parameters, interpolated across empty cells; dots are trials." }),
    ),
    el(
      "div",
      { class: "card analysis", id: "card-scatter" },
      el(
        "div",
        { class: "row" },
        el("h2", { text: "Scatter and rank: any two quantities" }),
        el("span", { class: "spacer" }),
        el("span", { id: "scatter-pick", class: "controls" }),
      ),
      plotBox("plot-scatter"),
      el("div", { id: "scatter-note", class: "note" }),
    ),
    el(
      "div",
      { class: "card analysis", id: "card-slices" },
      el("h2", { text: "Slices: the value against each parameter" }),
      el("div", { id: "slices", class: "slices" }),
    ),
    el(
      "div",
      { class: "card" },
      el(
        "div",
        { class: "row" },
        el("h2", { text: "Trials" }),
        el("span", { class: "spacer" }),
        el("span", { id: "state-filter" }),
        el("a", { id: "compare", class: "button" }),
        el("button", {
          id: "export-table",
          text: "CSV of these trials",
          title: "every trial the table's state filter and brush select, in its order (all pages)",
        }),
      ),
      el("div", { id: "range-filter", class: "note" }),
      el("details", { id: "table-tools", class: "tools" }),
      el("div", { class: "table-wrap" }, el("table", { id: "trials" }, el("thead"), el("tbody"))),
      el("div", { class: "row pager", id: "pager" }),
    ),
    el(
      "div",
      { class: "card", id: "card-timeline", hidden: true },
      el("h2", { text: "Timeline" }),
      el("div", { id: "plot-timeline", class: "plot" }),
      el("div", { id: "timeline-note", class: "note" }),
    ),
    el(
      "div",
      { class: "card" },
      el("h2", { text: "Agents" }),
      el("div", { class: "table-wrap" }, el("table", { id: "agents" }, el("thead"), el("tbody"))),
      el("div", { id: "agents-note", class: "note" }),
    ),
    ...CARDS.map((c) => c.element()),
  );
}

// A trial's page, addressed by its campaign and campaign-local number (#/campaign/3/trial/27):
// parameters, value, folds, learning curves, the curvature (curvature.js), the attempt
// history, previous/next trial.

import { notFound } from "./campaign.js";
import { agentLabel, api, badge, clockAttrs, el, fmt, fmtParam, HttpError, live, poll, session, when } from "./core.js";
import { curvatureCard, drawCurvature } from "./curvature.js";
import { noteCard } from "./notes.js";
import { colour, draw, plain } from "./plots.js";
import { stopButton } from "./steer.js";

const app = document.getElementById("app");

/** #/trial/ID (a global id, as older links and the API use): find its number, go there. */
export async function trialById(id) {
  const shown = session.generation;
  try {
    const t = await api(`/trials/${id}`);
    if (shown !== session.generation) return; // the reader went elsewhere meanwhile
    history.replaceState(null, "", `#/campaign/${t.campaign_id}/trial/${t.number}`);
    trialPage(t.campaign_id, t.number);
  } catch (e) {
    if (shown !== session.generation) return;
    if (e instanceof HttpError && e.status === 404) notFound(`Trial id ${id} does not exist.`, "The link may be wrong, or its campaign deleted.");
    else notFound(`Trial id ${id} could not be loaded.`, e.message);
  }
}

// The scheme a trial trained with and its knobs: searched ones from its params, fixed ones from training.options.
function schemeRow(training, params) {
  if (!training) return [];
  const scheme = training.scheme === "search" ? params.scheme : training.scheme;
  if (scheme === undefined) return [];
  const searched = Object.entries(params)
    .filter(([k]) => k.startsWith(`${scheme}.`))
    .map(([k, v]) => `${k.slice(scheme.length + 1)}=${fmt(v, 4)}`);
  const options = training.options || {};
  const fixed = Object.entries(options[scheme] || {})
    .concat(
      Object.entries(options)
        .filter(([k]) => k.startsWith(`${scheme}.`))
        .map(([k, v]) => [k.slice(scheme.length + 1), v]),
    )
    .filter(([k]) => !(`${scheme}.${k}` in params))
    .map(([k, v]) => `${k}=${v}`);
  const knobs = [...searched, ...fixed];
  return [el("dt", { text: "Scheme" }), el("dd", { id: "trial-scheme", class: "mono", text: `${scheme}${knobs.length ? ` (${knobs.join(", ")})` : ""}` })];
}

export function trialPage(cid, number) {
  app.replaceChildren(
    el(
      "div",
      { class: "row" },
      el("h1", { id: "trial-title", text: `Trial #${number}` }),
      el("span", { class: "spacer" }),
      el("span", { id: "trial-nav", class: "row" }),
    ),
    el("div", { id: "trial" }),
  );
  let c = null;
  live(
    async (gen) => {
      const [t, cs] = await Promise.all([
        poll(`/campaigns/${cid}/trials/${number}`),
        c ? Promise.resolve({ body: c, changed: false }) : poll(`/campaigns/${cid}`),
      ]);
      if (gen !== session.generation) return false;
      c = cs.body;
      if (!t.changed && !cs.changed) return false;
      render(t.body, c);
      return true;
    },
    () => notFound(`Campaign ${cid} has no trial #${number}.`, "Trials are numbered from 0 in the order they were created."),
  );
}

// A multi-fidelity trial (algorithm mf): the unit it trains or last trained, and why.
function fidelityRows(f, c) {
  if (!f) return [];
  const epochs = (c.spec.training || {}).epochs;
  return [
    el("dt", { text: "Rung" }),
    el("dd", { id: "trial-rung", text: `${f.rung}: ${f.folds} of ${c.spec.folds} folds, ${f.epochs} of ${epochs} epochs` }),
    el("dt", { text: "Why this rung" }),
    el("dd", { id: "trial-rung-why", text: f.why || "–" }),
  ];
}

// The rungs it finished: the mean over its folds at each, and the compute it had used.
function fidelityHistory(f, c) {
  if (!f || !f.history.length) return "";
  const full = (r) => r.folds >= c.spec.folds && r.epochs >= ((c.spec.training || {}).epochs || 0);
  return el(
    "div",
    { class: "section" },
    el("h2", { text: "Rungs finished" }),
    el(
      "table",
      { id: "trial-rungs" },
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          el("th", { text: "Rung" }),
          el("th", { text: "Folds" }),
          el("th", { text: "Epochs" }),
          el("th", { class: "num", text: c.metric }),
          el("th", { class: "num", text: "Seconds" }),
        ),
      ),
      el(
        "tbody",
        {},
        ...f.history.map((r) =>
          el(
            "tr",
            {},
            el("td", { text: r.rung }),
            el("td", { text: r.folds }),
            el("td", { text: r.epochs }),
            el("td", {
              class: "num",
              title: full(r) ? "all folds, all epochs" : "a partial estimate: fewer folds or epochs",
              text: `${fmt(r.value, 6)}${full(r) ? "" : " (partial)"}`,
            }),
            el("td", { class: "num", text: fmt(r.seconds, 3) }),
          ),
        ),
      ),
    ),
  );
}

function render(t, c) {
  session.owners[c.id] = c.owner;
  const total = Object.values(c.trial_counts).reduce((a, n) => a + n, 0);
  document.title = `#${t.number} · ${c.name} · hpcopt`;
  document
    .getElementById("trial-title")
    .replaceChildren(
      `Trial #${t.number} `,
      badge(t.state),
      " ",
      el("span", { class: "note" }, "of ", el("a", { id: "trial-campaign", href: `#/campaign/${c.id}`, text: c.name }), ` (campaign ${c.id}) · id ${t.id}`),
    );
  const nav = (n, label, id) =>
    n >= 0 && n < total
      ? el("a", { class: "button", id, href: `#/campaign/${c.id}/trial/${n}`, text: label })
      : el("button", { id, disabled: true, text: label });
  document
    .getElementById("trial-nav")
    .replaceChildren(
      nav(t.number - 1, `‹ #${t.number - 1}`, "trial-prev"),
      nav(t.number + 1, `#${t.number + 1} ›`, "trial-next"),
      t.state === "QUEUED" || t.state === "RUNNING" || t.state === "PAUSED"
        ? stopButton(c.id, t, "stop-trial", { finished: (t.folds || []).filter((f) => f.finished).length, total: c.spec.folds })
        : "",
    );
  const box = document.getElementById("trial");
  if (!box.children.length) {
    box.append(
      el(
        "div",
        { class: "grid two" },
        el("div", { class: "card", id: "trial-params" }),
        el(
          "div",
          { class: "card" },
          el("h2", { text: "Learning curves" }),
          el("div", { id: "trial-curves-note", class: "muted" }),
          el("div", { id: "plot-trial-curves", class: "plot" }),
        ),
      ),
      noteCard(`/campaigns/${c.id}/trials/${t.number}/note`, "trial"),
      curvatureCard(c),
      el("div", { class: "card", id: "trial-folds" }),
      el("div", { class: "card", id: "trial-events" }),
    );
  }
  const space = c.spec.space || {};
  const value = t.value === null ? "–" : t.state === "PRUNED" || t.value_std === null ? fmt(t.value, 6) : `${fmt(t.value, 6)} ± ${fmt(t.value_std, 3)}`;
  document
    .getElementById("trial-params")
    .replaceChildren(
      el("h2", { text: "Parameters" }),
      el(
        "dl",
        { class: "spec" },
        ...Object.entries(t.params).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { class: "mono", text: fmtParam(space[k], v) })]),
        ...schemeRow(c.spec.training || null, t.params),
        el("dt", { text: t.state === "PRUNED" ? "Value when pruned" : t.state === "PAUSED" ? `${c.metric} at its rung` : c.metric }),
        el("dd", { id: "trial-value", text: value }),
        ...(t.values
          ? [el("dt", { text: "Objectives" }), el("dd", { id: "trial-values", class: "mono", text: t.values.map((v) => fmt(v, 6)).join(", ") })]
          : []),
        el("dt", { text: "Attempt" }),
        el("dd", { text: t.attempt }),
        el("dt", { text: "Ran for" }),
        el("dd", { id: "trial-ran", title: "time on agents, over all attempts", ...clockAttrs(t) }),
        el("dt", { text: "Agent" }),
        el("dd", { title: t.agent_id || "", text: agentLabel(t.agent_host, t.agent_job) }),
        ...fidelityRows(t.fidelity, c),
      ),
      fidelityHistory(t.fidelity, c),
      t.error && t.state === "PRUNED"
        ? el("div", { class: "section" }, el("h2", { text: "Why it was pruned" }), el("p", { id: "trial-pruned", text: t.error }))
        : "",
      t.error && t.state === "CANCELLED"
        ? el("div", { class: "section" }, el("h2", { text: "Why it was stopped" }), el("p", { id: "trial-stopped", text: t.error }))
        : "",
      t.error && t.state !== "PRUNED" && t.state !== "CANCELLED"
        ? el("div", { class: "section" }, el("h2", { text: "Error" }), el("pre", { class: "trace", id: "trial-error", text: t.error }))
        : "",
    );
  const metrics = [...new Set(t.folds.flatMap((f) => Object.keys(f.metrics)))].sort();
  // An unfinished fold has no value yet: its latest learning-curve point, marked as such.
  const latest = (fold) => (t.curves || []).filter((p) => p.fold === fold).reduce((a, p) => (a && a.step >= p.step ? a : p), null);
  const foldValue = (f) => {
    if (f.finished) return el("td", { class: "num", text: fmt(f.value, 6) });
    const p = latest(f.index);
    return el("td", {
      class: "num nowrap reached",
      title: "the fold has not finished: no value yet",
      text: p ? `– (latest ${fmt(p.value, 4)}, epoch ${p.step})` : "–",
    });
  };
  document
    .getElementById("trial-folds")
    .replaceChildren(
      el("h2", { text: "Folds" }),
      el(
        "div",
        { class: "table-wrap" },
        el(
          "table",
          { id: "folds" },
          el(
            "thead",
            {},
            el(
              "tr",
              {},
              el("th", { text: "Fold" }),
              el("th", { text: "Finished" }),
              el("th", { class: "num", text: "Value" }),
              ...metrics.map((m) => el("th", { class: "num", text: m })),
              el("th", { text: "Attempt" }),
              el("th", { text: "Checkpoint" }),
            ),
          ),
          el(
            "tbody",
            {},
            ...(t.folds.length
              ? [...t.folds]
                  .sort((a, b) => a.index - b.index)
                  .map((f) =>
                    el(
                      "tr",
                      {},
                      el("td", { text: f.index }),
                      el("td", { text: f.finished ? "yes" : "no" }),
                      foldValue(f),
                      ...metrics.map((m) => el("td", { class: "num", text: fmt(f.metrics[m], 5) })),
                      el("td", { text: f.attempt }),
                      el("td", { class: "mono", text: f.checkpoint_uri || "–" }),
                    ),
                  )
              : [el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No fold reported anything yet." }))]),
          ),
        ),
      ),
    );
  document.getElementById("trial-events").replaceChildren(
    el("h2", { text: "Attempt history" }),
    el(
      "div",
      { class: "table-wrap" },
      el(
        "table",
        { id: "events" },
        el("thead", {}, el("tr", {}, ...["When", "Attempt", "Event", "Agent", "Reason"].map((h) => el("th", { text: h })))),
        el(
          "tbody",
          {},
          ...(t.events || []).map((e) =>
            el(
              "tr",
              {},
              el("td", { class: "nowrap", text: when(e.at) }),
              el("td", { text: e.attempt }),
              el("td", {}, badge(e.kind.toUpperCase())),
              el("td", {
                class: e.agent_host ? "nowrap" : "mono",
                title: e.agent_id || "",
                text: e.agent_host ? agentLabel(e.agent_host, e.agent_job) : (e.agent_id || "").slice(0, 8) || "–",
              }),
              el("td", {}, e.reason ? el("div", { class: "reason", text: e.reason }) : ""),
            ),
          ),
        ),
      ),
    ),
  );
  drawCurvature(t, c).catch((e) => {
    const note = document.getElementById("curvature-note");
    if (note) note.textContent = `The analysis could not be loaded: ${e.message}`;
  });
  const folds = [...new Set((t.curves || []).map((p) => p.fold))].sort((a, b) => a - b);
  document.getElementById("plot-trial-curves").hidden = !folds.length;
  document.getElementById("trial-curves-note").textContent = folds.length ? "" : "No learning-curve points reported.";
  if (!folds.length) return;
  const maxStep = Math.max(1, ...(t.curves || []).map((p) => p.step));
  draw(
    "plot-trial-curves",
    folds.map((f, i) => {
      const pts = t.curves.filter((p) => p.fold === f);
      return {
        type: "scatter",
        mode: "lines+markers",
        name: `fold ${f}`,
        x: pts.map((p) => p.step),
        y: pts.map((p) => p.value),
        line: { color: colour(i) },
        marker: { color: colour(i) },
      };
    }),
    { xaxis: { title: { text: "epoch" }, tick0: 0, dtick: Math.max(1, Math.ceil(maxStep / 10)) }, yaxis: { title: { text: plain(c.metric) } } },
  );
}

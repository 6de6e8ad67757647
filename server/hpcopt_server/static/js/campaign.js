// The campaign page. Every 2 s it asks each of its data sources whether anything changed
// (ETag → 304) and redraws only the parts whose data did; a sort, filter, page change or
// brush touches only the table (and the brushed highlight). The page's state — sort,
// filter, page, chosen trials, brush, plot options — lives in the URL.

const app = document.getElementById("app");

import { layout } from "./campaign_layout.js";
import { chips, done, progress, renderAgents, renderRunning, renderStateFilter, renderSummary, renderTrials } from "./campaign_tables.js";
import { CARDS } from "./cards.js";
import { download, el, fmt, live, nextFrame, pointerHeld, poll, refreshAgo, STATES, session } from "./core.js";
import {
  brushedIds,
  brushToRange,
  clearParcoords,
  forObjective,
  offScale,
  renderContour,
  renderCurves,
  renderEdf,
  renderFront,
  renderHistory,
  renderImportance,
  renderParcoords,
  renderSlices,
  renderTimeline,
} from "./plots.js";
import { renderHypervolume, renderScatter, scatterPicker } from "./scatter.js";
import { hideable, renderTableTools } from "./tabletools.js";

// ------------------------------------------------------------ URL state ---

function readState(query) {
  const q = new URLSearchParams(query);
  const list = (k) => (q.get(k) ? q.get(k).split(",").filter(Boolean) : []);
  const brush = {};
  for (const part of (q.get("brush") || "").split("|").filter(Boolean)) {
    const [label, lo, hi] = part.split("~");
    if (label && Number.isFinite(Number(lo)) && Number.isFinite(Number(hi))) brush[label] = [Number(lo), Number(hi)];
  }
  const view = list("view");
  return {
    sort: q.get("sort") || "value",
    desc: q.has("order") ? q.get("order") === "desc" : null, // null: best first
    states: list("state").filter((s) => STATES.includes(s)),
    offset: Math.max(0, Number(q.get("offset")) || 0),
    limit: [25, 50, 100].includes(Number(q.get("rows"))) ? Number(q.get("rows")) : 25,
    curves: list("curves")
      .map(Number)
      .filter((n) => Number.isInteger(n) && n >= 0),
    brush,
    // all: value axes over every value (by default they stop at the robust limit);
    // ended: the history also shows pruned and failed trials.
    view: { logY: view.includes("log"), byTime: view.includes("time"), all: view.includes("all"), ended: view.includes("ended") },
    contour: list("contour"),
    objective: Math.max(0, Math.floor(Number(q.get("objective"))) || 0), // the objective the analysis plots show
    importance: q.get("importance") === "permutation" ? "permutation" : "first-order",
    hidden: list("hide"), // the trials table's hidden columns (tabletools.js)
    scatter: list("scatter"), // the scatter's x and y (scatter.js)
    rank: q.get("colour") === "rank", // the scatter coloured by rank rather than value
  };
}

function writeState(id, st) {
  const q = new URLSearchParams();
  if (st.sort !== "value") q.set("sort", st.sort);
  if (st.desc !== null) q.set("order", st.desc ? "desc" : "asc");
  if (st.states.length) q.set("state", st.states.join(","));
  if (st.offset) q.set("offset", st.offset);
  if (st.limit !== 25) q.set("rows", st.limit);
  if (st.curves.length) q.set("curves", st.curves.join(","));
  const brush = Object.entries(st.brush)
    .map(([k, [lo, hi]]) => `${k}~${+lo.toPrecision(6)}~${+hi.toPrecision(6)}`)
    .join("|");
  if (brush) q.set("brush", brush);
  const view = [st.view.logY && "log", st.view.byTime && "time", st.view.all && "all", st.view.ended && "ended"].filter(Boolean);
  if (view.length) q.set("view", view.join(","));
  if (st.contour.length === 2) q.set("contour", st.contour.join(","));
  if (st.objective) q.set("objective", st.objective);
  if (st.importance !== "first-order") q.set("importance", st.importance);
  if (st.hidden.length) q.set("hide", st.hidden.join(","));
  if (st.scatter.length === 2) q.set("scatter", st.scatter.join(","));
  if (st.rank) q.set("colour", "rank");
  const text = q.toString();
  const hash = `#/campaign/${id}${text ? `?${text}` : ""}`;
  if (location.hash !== hash) history.replaceState(null, "", hash);
}

/** The most of the main thread that redrawing the plots of a live campaign may take:
 * after a redraw that took t ms the next waits t / LIVE_SHARE ms (the issue-65 target is
 * the page < 5% busy while a trial completes every 2 s, polls and tables included). */
const storedShare = Number(localStorage.getItem("hpcopt.liveShare")); // a test's knob, as hpcopt.pollMs
const LIVE_SHARE = storedShare >= 1e-4 && storedShare <= 1 ? storedShare : 0.02;
/** How the share is split: the history (redrawn on its own schedule, the best so far
 * being what a reader watches) a quarter, the other plots (whose redraw includes the
 * history) the rest, so that together they stay within LIVE_SHARE. Each with its own
 * share, the history redrew at nearly every completion of a 2,000-trial campaign and
 * the page was 5.7% busy (benchmarks/dashboard_open.py). */
const SHARE = { history: LIVE_SHARE / 4, rest: (LIVE_SHARE * 3) / 4 };
/** The longest a live campaign's plots wait for their share, however slow the machine:
 * the history (the best so far, what a reader watches) redraws at most 60 s after a
 * completion changed it, the other plots at most 5 minutes after (a redraw that cost
 * 12 s made them wait 10 minutes). A test's knob, "hpcopt.liveLagMs", scales both. */
const storedLag = Number(localStorage.getItem("hpcopt.liveLagMs"));
const HISTORY_LAG_MS = storedLag >= 100 && storedLag <= 600_000 ? storedLag : 60_000;
const LAG_MS = { history: HISTORY_LAG_MS, rest: 5 * HISTORY_LAG_MS };

/** What a plot of trials draws, as a key: the trials sampled and the axis limit. The
 * sample stays the same from one answer to the next but for the trial that completed
 * (insights/plots.py), so a completion outside it changes no such plot. */
const keys = new WeakMap();
function drawnKey(v) {
  if (!keys.has(v.points)) keys.set(v.points, v.points.map((p) => p.trial_id).join(","));
  return `${v.limit}|${keys.get(v.points)}`;
}

// ---------------------------------------------------------------- page ---

export function campaignPage(id, query) {
  const st = readState(query);
  const data = { c: null, plot: null, numbers: new Map() };
  // The analysis plots redraw when their data changed, but at most once per LIVE_SHARE
  // of the main thread: after a redraw that took t ms, not for t / LIVE_SHARE ms (on a
  // live campaign of 10,000 trials a new trial every 2 s would otherwise keep the page
  // busy redrawing, and a click waited behind it). Meanwhile a note says how old the
  // plots are, with a link that redraws them now. A click on the table stops a redraw
  // between two plots; the rest follow a second later.
  // The history has a schedule of its own (SHARE.history, LAG_MS.history), and a plot
  // whose data did not change (its key, `drawn`) is not redrawn.
  const plots = {
    dirty: { history: false, rest: false },
    next: { history: 0, rest: 0 },
    wait: { history: 0, rest: 0 },
    drawn: new Map(),
    spans: false,
    asked: -Infinity,
    drawnAt: null,
    drawnCompleted: 0,
    opened: false,
  };
  const openTrial = (number) => {
    location.hash = `#/campaign/${id}/trial/${number}`;
  };
  // Still this page: every continuation after an answer checks it, since the reader may
  // have left while the answer was on its way (a slow server; tests/dashboard/test_slow_server.py).
  const shown = session.generation;
  const here = () => shown === session.generation;
  layout(id);
  const setState = () => writeState(id, st);

  const tableQuery = () => {
    const desc = st.desc === null ? !!(data.c && data.c.direction === "maximize") && st.sort === "value" : st.desc;
    const qs = new URLSearchParams({ sort: st.sort, order: desc ? "desc" : "asc", offset: st.offset, limit: st.limit });
    for (const s of st.states) qs.append("state", s);
    // Brushed axes in table terms (the summary, fetched first, has the space and metric).
    const space = data.c ? data.c.spec.space : {};
    for (const [label, r] of Object.entries(st.brush)) {
      if (label in space) {
        const [lo, hi] = brushToRange(space[label], r);
        qs.append("range", `${label}:${lo}:${hi}`);
        continue;
      }
      if (!data.c || !data.plot) continue;
      const k = (data.plot.objectives || [{ metric: data.c.metric }]).findIndex((o) => o.metric === label);
      if (k < 0) continue;
      let [lo, hi] = r;
      const o = forObjective(data.plot, k),
        lim = st.view.all ? null : o.limit;
      const near = (v) => lim !== null && lim !== undefined && Math.abs(v - lim) <= 1e-5 * Math.max(1, Math.abs(lim));
      // The axis drew the off-scale values at the limit: a brush that reaches it takes them.
      if (o.direction === "maximize" ? lo < lim || near(lo) : hi > lim || near(hi))
        [lo, hi] = o.direction === "maximize" ? [-Number.MAX_VALUE, hi] : [lo, Number.MAX_VALUE];
      qs.append("range", `${k ? `values.${k}` : "value"}:${lo}:${hi}`);
    }
    return qs.toString();
  };
  const curvesPath = () => (st.curves.length ? `/campaigns/${id}/curves?${st.curves.map((n) => `number=${n}`).join("&")}` : `/campaigns/${id}/curves?limit=5`);

  // Only the table: after a sort, filter, page change or brush.
  const refreshTable = async () => {
    const gen = session.generation;
    plots.asked = performance.now(); // a redraw of the plots in progress yields to it
    const qs = tableQuery();
    const page = await poll(`/campaigns/${id}/trials?${qs}`);
    if (gen !== session.generation || qs !== tableQuery() || !data.c) return;
    renderTrials(id, data.c, page.body, st, {
      onChange: () => {
        setState();
        refreshTable();
      },
      onCurves: refreshCurves,
    });
    performance.mark("hpcopt:table");
  };
  const refreshCurves = async () => {
    setState();
    const curves = await poll(curvesPath());
    if (here() && data.plot)
      document.getElementById("curve-picker").replaceChildren(...curvePicker(renderCurves(curves.body, data.plot, st.curves, openTrial), st, refreshCurves));
  };
  const pv = () => forObjective(data.plot, st.objective); // the plot data as the chosen objective sees it
  const redrawHistory = () => {
    if (here() && data.plot && data.plot.completed) {
      const v = pv();
      renderHistory(v, st.view, brushedIds(v, st.view, st.brush), openTrial);
      // How many completed trials the drawn history counts: benchmarks/dashboard_open.py
      // measures the lag from a completion to the history that shows it.
      performance.mark("hpcopt:history-of", { detail: v.completed });
    }
  };
  // The analysis plots of the chosen objective, one per frame (the live refresh, and
  // after the reader changed the objective or the outlier toggle).
  // Each with the key of what it draws (null: always drawn; its own request says whether
  // anything changed, or it is cheap).
  const analysisSteps = () => {
    const v = pv();
    const trials = drawnKey(v);
    return [
      ["history", redrawHistory, `${v.completed}|${v.ended_total}|${JSON.stringify(v.best)}|${trials}`],
      [
        "front",
        () => {
          renderFront(data.plot, st.view, openTrial);
          renderHypervolume(data.plot, st.view);
        },
        `${data.plot.completed}|${JSON.stringify(data.plot.front)}|${trials}`,
      ],
      [
        "scatter",
        () => {
          scatterPicker(data.plot, st, () => {
            setState();
            renderScatter(data.plot, pv(), st.view, st, openTrial);
          });
          renderScatter(data.plot, v, st.view, st, openTrial);
        },
        `${data.plot.completed}|${trials}`,
      ],
      ["importance", redrawImportance, null],
      ["edf", () => renderEdf(v, st.view), JSON.stringify(v.edf)],
      ["slices", () => renderSlices(v, st.view, openTrial), trials],
      [
        "contour",
        () => {
          contourPicker(v, st, () => {
            setState();
            renderContour(pv(), st.view, st.contour[0], st.contour[1], openTrial);
          });
          renderContour(v, st.view, st.contour[0], st.contour[1], openTrial);
        },
        trials,
      ],
      ["parcoords", () => renderParcoords(v, st.view, st.brush, onBrush), trials],
      [
        "controls",
        () => {
          brushNote(st, clearBrush);
          analysisControls(data.plot, v, st, redrawAll);
        },
        null,
      ],
    ];
  };
  let shownImportance = null;
  const redrawImportance = async () => {
    const qs = new URLSearchParams();
    if (st.objective) qs.set("objective", st.objective);
    if (st.importance !== "first-order") qs.set("method", st.importance);
    const path = `/campaigns/${id}/importance${qs.size ? `?${qs}` : ""}`;
    const imp = await poll(path);
    if (here() && (imp.changed || shownImportance !== path)) {
      shownImportance = path;
      renderImportance(imp.body, pv());
    }
  };
  const method = document.getElementById("importance-method");
  method.value = st.importance;
  method.addEventListener("change", () => {
    st.importance = method.value;
    setState();
    redrawImportance();
  });
  const redrawAll = async () => {
    setState();
    const gen = session.generation;
    for (const [name, step, key] of analysisSteps()) {
      await nextFrame();
      if (gen !== session.generation) return;
      await step();
      if (key !== null) plots.drawn.set(name, key);
    }
  };
  // The table first (what the brush asks), then the highlight in the history.
  const onBrush = async (brush) => {
    if (JSON.stringify(brush) === JSON.stringify(st.brush)) return; // a restyle that changed no range
    performance.mark("hpcopt:brushed");
    st.brush = brush;
    st.offset = 0;
    setState();
    // The table's request leaves at the input event; the note and the filters above the
    // table are drawn while it is answered (the review measured 5-10 s from a release to
    // the table under load, where REST took 0.1-0.5 s).
    const table = refreshTable();
    brushNote(st, clearBrush);
    tools();
    performance.mark("hpcopt:brush-noted"); // tests/dashboard/test_brush.py: after the request
    await table;
    await nextFrame();
    redrawHistory();
  };
  const clearBrush = async () => {
    st.brush = {};
    setState();
    const table = refreshTable();
    brushNote(st, clearBrush);
    tools();
    clearParcoords();
    await table;
    await nextFrame();
    redrawHistory();
  };
  // Filters and columns above the table: a filter is the brush on that axis.
  const tools = () => {
    if (!data.c) return;
    renderTableTools(data.c.spec.space, st, {
      onFilter: async (brush) => {
        await onBrush(brush);
        if (here() && data.plot && data.plot.completed) {
          const v = pv();
          renderParcoords(v, st.view, st.brush, onBrush);
        }
      },
      onColumns: () => {
        setState();
        tools();
        refreshTable();
      },
    });
  };
  // The table's selection (state filter, brush), order and columns, every page of it, as
  // CSV (with each fold's value and metrics, which the table does not show).
  document.getElementById("export-table").addEventListener("click", () => {
    const qs = new URLSearchParams(tableQuery());
    qs.delete("offset");
    qs.delete("limit");
    const known = new Set(hideable(data.c ? data.c.spec.space : {}).map(([key]) => key)); // a link's stale key is no column
    for (const key of st.hidden) if (known.has(key)) qs.append("hide", key);
    download(`/campaigns/${id}/export?format=csv&${qs}`, `campaign-${id}-trials-selected.csv`);
  });
  historyControls(st, () => {
    setState();
    redrawHistory();
  });
  renderStateFilter(st, () => {
    st.offset = 0;
    setState();
    refreshTable();
  });

  const fetched = new Set(); // the optional cards (cards.js) fetched at least once
  // Each optional card this campaign wants, fetched when its document may have changed;
  // one that fails stays as it was (the next poll tries again).
  const refreshCards = (changed) => {
    const spec = data.c.spec;
    for (const card of CARDS) {
      if (!card.wants(spec) || (fetched.has(card.id) && !card.due(changed))) continue;
      fetched.add(card.id);
      poll(card.url(id)).then(
        (doc) => {
          if (here() && doc.changed) card.render(doc.body, { spec, openTrial });
        },
        () => fetched.delete(card.id),
      );
    }
  };
  live(
    async (gen) => {
      // The first poll reads the summary first (the table's query needs the space); later
      // ones ask everything at once, so that a poll's changes reach the page in one task
      // (one style, layout and paint; each costs the whole page's layers here).
      const first = data.c ? null : await poll(`/campaigns/${id}`);
      if (gen !== session.generation) return false;
      if (first) data.c = first.body;
      const qs = tableQuery();
      // The plot data only when the plots may redraw: until then a new answer would be
      // parsed for nothing (1,000 points, on every completion of a live campaign).
      const plotsMay = !data.plot || performance.now() >= Math.min(plots.next.history, plots.next.rest);
      const [c, plot, page, agents, running, curves] = await Promise.all([
        first || poll(`/campaigns/${id}`),
        plotsMay ? poll(`/campaigns/${id}/plot?max_points=1000`) : { changed: false, body: data.plot },
        poll(`/campaigns/${id}/trials?${qs}`),
        poll(`/campaigns/${id}/agents`),
        poll(`/campaigns/${id}/running`),
        poll(curvesPath()),
      ]);
      if (gen !== session.generation) return false;
      data.c = c.body;
      if (c.changed) {
        renderSummary(c.body);
        tools();
      }
      data.plot = plot.body;
      const empty = !plot.body.completed;
      if (c.changed || plot.changed) emptyState(id, c.body, empty);
      if (running.changed || agents.changed) {
        for (const r of running.body) data.numbers.set(r.trial_id, r.number);
        renderRunning(id, running.body, c.body);
        renderAgents(id, agents.body, data.numbers);
      }
      refreshCards({ summary: c.changed, agents: agents.changed, running: running.changed, plot: plot.changed, page: page.changed });
      // A sort, filter or page change made meanwhile has fetched and drawn its own table.
      if (page.changed && qs === tableQuery())
        renderTrials(id, c.body, page.body, st, {
          onChange: () => {
            setState();
            refreshTable();
          },
          onCurves: refreshCurves,
        });
      refreshAgo(); // the tables' clocks now, before the plots
      performance.mark("hpcopt:tables"); // benchmarks/dashboard_open.py reads these marks
      // Then the plots whose data changed, one per frame, so the page answers while they draw.
      if (plot.changed) plots.dirty = { history: true, rest: true };
      if (c.changed || running.changed) plots.spans = true;
      const ready = (group) => performance.now() >= plots.next[group];
      const due = ready("rest") && plots.dirty.rest && !empty,
        historyDue = !due && ready("history") && plots.dirty.history && !empty,
        spansDue = ready("rest") && plots.spans;
      // What is due, less the plots whose data did not change since they were drawn.
      const analysis = (due ? analysisSteps() : historyDue ? analysisSteps().slice(0, 1) : []).filter(
        ([name, , key]) => key === null || plots.drawn.get(name) !== key,
      );
      const steps = analysis.slice(0, 2);
      if ((curves.changed || due) && !empty)
        steps.push([
          "curves",
          () =>
            document
              .getElementById("curve-picker")
              .replaceChildren(...curvePicker(renderCurves(curves.body, plot.body, st.curves, openTrial), st, refreshCurves)),
          null,
        ]);
      steps.push(...analysis.slice(2));
      if (spansDue)
        steps.push([
          "timeline",
          async () => {
            const tl = await poll(`/campaigns/${id}/timeline?limit=2000`);
            if (here() && tl.changed) renderTimeline(tl.body, openTrial);
          },
          null,
        ]);
      const cost = { history: 0, rest: 0 };
      const t0 = performance.now();
      if (steps.length) await nextFrame();
      for (const [name, step, key] of steps) {
        if (gen !== session.generation) return false;
        // The reader clicked, or holds a button down (a drag on a plot that a redraw would
        // rebuild under the mouse, losing the drag): the rest later.
        if (plots.asked > t0 || pointerHeld()) {
          for (const group of ["history", "rest"]) plots.next[group] = Math.max(plots.next[group], performance.now() + 1000);
          return true;
        }
        // A step's cost includes the frame that lays out and paints what it drew (counted
        // without it, the plots' redraws took more than their share).
        const t = performance.now();
        await step();
        performance.mark(`hpcopt:${name}`);
        await nextFrame();
        cost[name === "history" ? "history" : "rest"] += performance.now() - t;
        if (key !== null) plots.drawn.set(name, key);
      }
      if (due) {
        plots.dirty.rest = false;
        plots.drawnAt = new Date();
        plots.drawnCompleted = c.body.trial_counts.COMPLETED || 0;
      }
      if (due || historyDue) plots.dirty.history = false;
      if (spansDue) plots.spans = false;
      // The page's first drawing is its opening, not a live redraw: the first trial that
      // finishes after it shows at once; from then on each group waits for its cost, up
      // to its lag bound.
      const wait = (group) => {
        plots.wait[group] = plots.opened ? Math.min(LAG_MS[group], cost[group] / SHARE[group]) : 0;
        plots.next[group] = performance.now() + plots.wait[group];
      };
      if (due || historyDue) wait("history");
      if (due || spansDue) wait("rest");
      if (due) plots.opened = true;
      if (gen !== session.generation) return false;
      staleNote(plots, c.body, () => {
        plots.next = { history: 0, rest: 0 };
        session.refresh();
      });
      return (
        c.changed ||
        plot.changed ||
        page.changed ||
        agents.changed ||
        running.changed ||
        curves.changed ||
        plots.dirty.history ||
        plots.dirty.rest ||
        plots.spans
      );
    },
    () => notFound(`Campaign ${id} does not exist.`, "It may have been deleted, or the link has a wrong id."),
  );
}

export function notFound(title, detail) {
  app.replaceChildren(
    el(
      "div",
      { class: "card notfound", id: "not-found" },
      el("h1", { text: title }),
      el("p", { class: "muted", text: detail }),
      el("a", { href: "#/", text: "← all campaigns" }),
    ),
  );
}

function emptyState(id, c, empty) {
  document.getElementById("empty-state").hidden = !empty;
  // A card its plot turned off (no second objective, fewer than two parameters) stays off.
  for (const node of document.querySelectorAll(".analysis")) node.hidden = empty || node.dataset.off === "1" || (node.id === "card-front" && node.hidden);
  if (!empty) return;
  const server = (session.who && session.who.agent_server) || "HOST:PORT";
  const token = session.who && session.who.auth ? " --token $HPCOPT_TOKEN" : "";
  const command = `mpiexec -n 4 python -m mpi4py -m hpcopt_agent --server ${server} --campaign ${id} --groups 2${token}`;
  const running = (c.trial_counts.RUNNING || 0) > 0;
  document.getElementById("empty-text").replaceChildren(
    el("p", {
      text: running
        ? "Trials are running; the plots appear when the first one completes."
        : c.state !== "RUNNING"
          ? `The campaign is ${c.state} with no completed trial.`
          : "Nothing has run yet. Start an agent where the training should happen (a login node for a test, or inside an sbatch script):",
    }),
    el("pre", { class: "command", id: "agent-command", text: command }),
    el("p", {
      class: "note",
      id: "agent-note",
      text:
        `Each agent registers with this server, takes trials of campaign ${id} and reports every fold. -n is the MPI ranks, --groups the trials trained at once. ` +
        "For a batch job, copy examples/slurm/agent.sbatch from the hpcopt sources: the Slurm guide (docs/guides/slurm.md) walks through it.",
    }),
  );
}

function historyControls(st, onChange) {
  const box = (key, label, title) =>
    el(
      "label",
      { class: "check", title },
      el("input", {
        type: "checkbox",
        id: `history-${key}`,
        checked: st.view[key],
        onchange: (e) => {
          st.view[key] = e.target.checked;
          onChange();
        },
      }),
      ` ${label}`,
    );
  document
    .getElementById("history-controls")
    .replaceChildren(
      box("logY", "log y", "a logarithmic y axis (positive values only)"),
      box("byTime", "x: finish time", "trials by when they finished instead of by number"),
      box("ended", "pruned & failed", "also the pruned trials (at the value they reached) and the failed ones (× along the bottom)"),
    );
}

/** Above the analysis plots: the objective they show (a multi-objective campaign), and
 * how many trials lie past the robust limit of the value axes, with the toggle. */
function analysisControls(plot, v, st, redraw) {
  const objectives = plot.objectives || [];
  const pick = document.getElementById("objective-pick");
  if (objectives.length > 1) {
    const sig = JSON.stringify([objectives.map((o) => o.metric), v.objective]);
    if (pick.dataset.sig !== sig) {
      pick.dataset.sig = sig;
      pick.replaceChildren(
        "Plots show ",
        el(
          "select",
          {
            id: "objective",
            onchange: (e) => {
              st.objective = Number(e.target.value);
              st.brush = {};
              redraw();
            },
          },
          ...objectives.map((o, k) => el("option", { value: k, text: `${o.direction} ${o.metric}`, selected: k === v.objective })),
        ),
        " ",
      );
    }
  } else pick.replaceChildren();
  const box = document.getElementById("outliers");
  const limited = (o) => o.limit !== null && o.limit !== undefined;
  // The Pareto front's axes are the first two objectives': their limits count too.
  const front = objectives.length > 1 ? [0, 1].map((k) => forObjective(plot, k)).filter((o) => o.objective !== v.objective && limited(o)) : [];
  if (!limited(v) && !front.length) {
    box.replaceChildren();
    return;
  }
  const toggle = el(
    "label",
    { class: "check", title: "value axes over every trial, outliers included" },
    el("input", {
      type: "checkbox",
      id: "show-all",
      checked: st.view.all,
      onchange: (e) => {
        st.view.all = e.target.checked;
        redraw();
      },
    }),
    " show every value",
  );
  const rule = `${v.direction === "maximize" ? "Q1 − 3 × IQR" : "Q3 + 3 × IQR"}, adjusted for skew`;
  const also = front.length ? `The Pareto front's ${front.map((o) => `${o.metric} axis stops at ${fmt(o.limit)} (${o.off_scale} past it)`).join(", ")}. ` : "";
  const text = st.view.all
    ? `Value axes span every trial${limited(v) ? `, the ${v.off_scale} past ${fmt(v.limit)} included` : ""}. `
    : limited(v)
      ? `Value axes and colours stop at ${fmt(v.limit)} (${rule} of all completed trials): ${offScale(v)} ${also}`
      : also;
  box.replaceChildren(text, toggle);
}

/** Under the analysis controls while the plots wait for their next redraw: how old they
 * are, how many trials completed since (the summary's count: the plot data itself is
 * fetched only when they may redraw), and a link that redraws them now. */
function staleNote(plots, c, redrawNow) {
  const box = document.getElementById("plots-asof");
  if (!box) return;
  const behind = (c.trial_counts.COMPLETED || 0) - plots.drawnCompleted;
  if (!plots.drawnAt || behind <= 0 || performance.now() >= plots.next.rest) {
    if (box.textContent) {
      box.replaceChildren();
      box.dataset.sig = "";
    }
    return;
  }
  // No countdown: a text that changed on every poll would repaint the page for nothing.
  const every = Math.max(1, Math.round(plots.wait.rest / 1000));
  const lag = Math.round(LAG_MS.history / 1000);
  const text = `Plots as of ${plots.drawnAt.toLocaleTimeString()}, ${behind} completed trial${behind === 1 ? "" : "s"} ago: on this campaign they redraw about every ${every} s while trials finish, so that the page stays light (the history within ${lag} s). `;
  if (box.dataset.sig === text) return;
  box.dataset.sig = text;
  box.replaceChildren(
    text,
    el("a", {
      href: "#",
      id: "redraw-now",
      text: "redraw now",
      onclick: (e) => {
        e.preventDefault();
        redrawNow();
      },
    }),
  );
}

function curvePicker(text, st, refreshCurves) {
  return [
    `Showing ${text}. `,
    st.curves.length
      ? el("a", {
          href: "#",
          text: "show the best instead",
          onclick: (e) => {
            e.preventDefault();
            st.curves = [];
            refreshCurves();
            document.querySelectorAll("#trials input.pick").forEach((x) => {
              x.checked = false;
            });
          },
        })
      : "",
  ];
}

function brushNote(st, clear) {
  const note = document.getElementById("brush-note");
  const labels = Object.keys(st.brush);
  const text = labels.length
    ? `brushed: ${labels.join(", ")} — the table and the history show those trials `
    : "drag along an axis to filter the table and highlight trials in the history";
  const link = labels.length
    ? el("a", {
        href: "#",
        id: "clear-brush",
        text: "clear",
        onclick: (e) => {
          e.preventDefault();
          clear();
        },
      })
    : "";
  note.replaceChildren(text, link);
}

function contourPicker(plot, st, onChange) {
  // Every parameter; a conditional one's contour is over the trials where it is active.
  const names = Object.keys(plot.space);
  const when = (n) =>
    Object.entries(plot.space[n].when || {})
      .map(([k, v]) => `${k} ∈ {${v.join(", ")}}`)
      .join(", ");
  const card = document.getElementById("card-contour");
  card.dataset.off = names.length < 2 ? "1" : "";
  if (names.length < 2) {
    card.hidden = true;
    return;
  }
  if (st.contour.length !== 2 || !st.contour.every((n) => names.includes(n)) || st.contour[0] === st.contour[1]) st.contour = names.slice(0, 2);
  const pick = (i) =>
    el(
      "select",
      {
        id: `contour-${i ? "y" : "x"}`,
        onchange: (e) => {
          st.contour[i] = e.target.value;
          onChange();
        },
      },
      ...names.map((n) => el("option", { value: n, text: plot.space[n].when ? `${n} (when ${when(n)})` : n, selected: st.contour[i] === n })),
    );
  document.getElementById("contour-pick").replaceChildren("x ", pick(0), " y ", pick(1));
}

export { chips, done, progress }; // the campaigns list and the comparison use them too

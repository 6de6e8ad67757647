import {
  agentLabel,
  ago,
  api,
  badge,
  cannotChange,
  clockAttrs,
  el,
  fmt,
  fmtParam,
  MAX_COMPARED,
  MIN_COMPARED,
  patchRows,
  STATES,
  session,
  sortableHeader,
  when,
} from "./core.js";
import { ask } from "./dialog.js";
import { steerCampaign, stopButton } from "./steer.js";

// ------------------------------------------------------------- summary ---

export function renderSummary(c) {
  document.getElementById("campaign-title").textContent = c.name;
  document.title = `${c.name} · hpcopt`;
  const spec = c.spec;
  const cancel = document.getElementById("cancel");
  const open = c.state === "RUNNING" || c.state === "PAUSED";
  session.owners[c.id] = c.owner;
  const why = cannotChange(c.id);
  cancel.disabled = !open || Boolean(why);
  cancel.title = why || (!open ? `the campaign is ${c.state}` : "");
  steerCampaign(c);
  const training = spec.training || {};
  // A conditional parameter says when it is active (`when: {opt: [sgd]}` reads "when opt = sgd").
  const condition = (p) =>
    p.when
      ? ` when ${Object.entries(p.when)
          .map(([name, values]) => `${name} ${values.length === 1 ? "=" : "∈"} ${values.length === 1 ? values[0] : `{${values.join(", ")}}`}`)
          .join(" and ")}`
      : "";
  const space = Object.entries(spec.space).map(
    ([k, p]) =>
      (p.type === "categorical"
        ? `${k} ∈ {${p.choices.join(", ")}}`
        : `${k} ∈ [${fmtParam(p, p.low)}, ${fmtParam(p, p.high)}]${p.scale === "log" ? " log" : ""}${p.type === "int" ? " int" : ""}`) + condition(p),
  );
  const best =
    c.best_trial_number !== null
      ? el("a", { href: `#/campaign/${c.id}/trial/${c.best_trial_number}`, id: "best-link", text: `${fmt(c.best_value)} (trial #${c.best_trial_number})` })
      : "–";
  document.getElementById("summary").replaceChildren(
    el(
      "div",
      { class: "grid two" },
      el(
        "dl",
        { class: "spec" },
        el("dt", { text: "ID" }),
        el("dd", { text: c.id }),
        el("dt", { text: "State" }),
        el("dd", {}, badge(c.state), c.pause_reason ? el("div", { id: "pause-reason", class: "conflict", text: c.pause_reason }) : ""),
        el("dt", { text: spec.objectives ? "Objectives" : "Objective" }),
        el("dd", { id: "campaign-objectives", text: (spec.objectives || [spec.objective]).map((o) => `${o.direction} ${o.metric}`).join(", ") }),
        el("dt", { text: "Algorithm" }),
        el("dd", {
          text: `${c.algorithm}${spec.algorithm && spec.algorithm.seed !== null && spec.algorithm.seed !== undefined ? ` (seed ${spec.algorithm.seed})` : ""}`,
        }),
        ...prunerAndWarmStart(spec),
        el("dt", { text: "Progress" }),
        el("dd", {}, progress(c)),
        el("dt", { text: "Best" }),
        el("dd", {}, best),
        el("dt", { text: "Trials" }),
        el("dd", {}, chips(c.trial_counts)),
        el("dt", { text: "Live agents" }),
        el("dd", { text: c.live_agents }),
      ),
      el(
        "dl",
        { class: "spec" },
        el("dt", { text: "Space" }),
        el("dd", { class: "mono" }, ...space.flatMap((s, i) => [i ? el("br") : null, s])),
        el("dt", { text: "Budget" }),
        el("dd", { text: `${spec.budget.max_trials} trials, ${spec.budget.max_parallel} at once` }),
        el("dt", { text: "Folds" }),
        el("dd", { text: spec.folds }),
        el("dt", { text: "Training" }),
        el("dd", {
          class: "mono",
          text: `${typeof training.task === "string" ? training.task : `script ${training.task.script} ${training.task.args.join(" ")}`.trim()} · ${training.scheme} · ${training.epochs} epochs · ${training.ranks_per_fold ? `${training.ranks_per_fold} rank(s)/fold` : "ranks per fold: planned by the agents"}`,
        }),
        el("dt", { text: "Created" }),
        el("dd", { text: when(c.created_at) }),
        el("dt", { text: "Owner" }),
        el("dd", { id: "campaign-owner", text: c.owner || "none: every submit token may steer it" }),
      ),
    ),
  );
}

export const done = (c) =>
  Object.entries(c.trial_counts)
    .filter(([s]) => s !== "QUEUED" && s !== "RUNNING")
    .reduce((a, [, n]) => a + n, 0);

export function progress(c) {
  const n = done(c);
  const pct = c.max_trials ? Math.min(100, (100 * n) / c.max_trials) : 0;
  return el(
    "span",
    { class: "nowrap" },
    el("span", { class: "progress" }, el("span", { style: `width:${pct}%` })),
    el("span", { class: "progress-label", text: `${n} / ${c.max_trials}` }),
  );
}

export function chips(counts) {
  const present = STATES.filter((s) => counts[s]);
  if (!present.length) return el("span", { class: "muted", text: "none yet" });
  return el(
    "span",
    { class: "chips" },
    present.map((s) => el("span", { class: `badge ${s}`, title: s, text: `${s.toLowerCase()} ${counts[s]}` })),
  );
}

// The pruner, and the earlier campaigns whose trials seeded the optimizer.
function prunerAndWarmStart(spec) {
  const out = [];
  const p = spec.pruner || { name: "none" };
  if (p.name !== "none") {
    const within = p.options && p.options.within;
    const inner = within ? ` within folds: ${typeof within === "string" ? within : within.name}` : "";
    out.push(el("dt", { text: "Pruner" }), el("dd", { id: "campaign-pruner", text: `${p.name}${inner}` }));
  }
  const warm = (spec.warm_start && spec.warm_start.campaigns) || [];
  if (warm.length) {
    out.push(
      el("dt", { text: "Warm start" }),
      el(
        "dd",
        { id: "campaign-warm-start" },
        "completed trials of ",
        ...warm.flatMap((wid, i) => [i ? ", " : "", el("a", { href: `#/campaign/${wid}`, text: `campaign ${wid}` })]),
        " seed the optimizer (not counted here)",
      ),
    );
  }
  return out;
}

export function cancelCampaign(id) {
  ask({
    id: "cancel-dialog",
    title: `Cancel campaign ${id}?`,
    lines: [
      "Its queued and running trials are cancelled, and agents stop them at their next heartbeat; " +
        "finished trials and folds keep their values. A cancelled campaign cannot run again.",
    ],
    ok: "Cancel the campaign",
    run: async () => {
      await api(`/campaigns/${id}/cancel`, { method: "POST" });
      session.refresh();
    },
  });
}

// ------------------------------------------------------------- running ---

export function renderRunning(id, rows, c) {
  document.getElementById("card-running").hidden = !rows.length;
  const table = document.getElementById("running");
  if (!table.tHead.rows.length)
    table.tHead.append(
      el("tr", {}, ...["#", "Agent", "Attempt", "Folds done", "Current fold", "Latest value", "Running for", ""].map((h) => el("th", { text: h }))),
    );
  patchRows(
    table.tBodies[0],
    rows,
    (r) => r.trial_id,
    (r) => JSON.stringify([r.attempt, r.folds_finished, r.steps, r.latest, r.agent_host, r.ran_seconds, r.running_since]),
    (r) => {
      const fold = r.latest ? r.latest.fold : r.folds_finished;
      // The epoch the fold reported last (or how many points it reported).
      const epochs = r.latest && r.latest.fold === fold ? r.latest.step : r.steps[String(fold)] || 0;
      const pct = r.epochs ? Math.min(100, (100 * epochs) / r.epochs) : 0;
      return el(
        "tr",
        { "data-trial": r.trial_id },
        el("td", { class: "nowrap" }, el("a", { href: `#/campaign/${id}/trial/${r.number}`, text: `#${r.number}` })),
        // The host's own name (its first label, not an IP's), the full one on hover: a
        // cluster's FQDN took the column over four lines at 800 px.
        el("td", {
          class: "agent",
          title: agentLabel(r.agent_host, r.agent_job),
          text: agentLabel(r.agent_host && !/^[\d.]+$|:/.test(r.agent_host) ? r.agent_host.split(".")[0] : r.agent_host, r.agent_job),
        }),
        el("td", { class: "num", text: r.attempt }),
        el("td", { class: "nowrap", text: `${r.folds_finished} / ${r.folds}` }),
        el(
          "td",
          { class: "nowrap" },
          `fold ${fold}: epoch ${epochs}${r.epochs ? ` / ${r.epochs}` : ""} `,
          r.epochs ? el("span", { class: "progress small" }, el("span", { style: `width:${pct}%` })) : "",
        ),
        el("td", { class: "num nowrap", text: r.latest ? `${fmt(r.latest.value)} (fold ${r.latest.fold}, epoch ${r.latest.step})` : "–" }),
        el("td", { class: "nowrap running-for", ...clockAttrs(r) }), // its clock ticks in refreshAgo
        el("td", {}, stopButton(id, { number: r.number, state: "RUNNING" }, `stop-${r.number}`, { finished: r.folds_finished, total: r.folds })),
      );
    },
  );
  document.getElementById("running-note").textContent = rows.length
    ? `${rows.length} of at most ${c.spec.budget.max_parallel} at once. Latest value: the most recent learning-curve point (${c.metric}).`
    : "";
}

// -------------------------------------------------------------- trials ---

export function renderStateFilter(st, onChange) {
  document.getElementById("state-filter").replaceChildren(
    "State: ",
    ...STATES.map((s) =>
      el(
        "label",
        { class: "check" },
        el("input", {
          type: "checkbox",
          value: s,
          "data-state": s,
          checked: st.states.includes(s),
          onchange: (e) => {
            st.states = e.target.checked ? [...st.states, s] : st.states.filter((x) => x !== s);
            onChange();
          },
        }),
        ` ${s.toLowerCase()}`,
      ),
    ),
  );
}

export function renderTrials(id, c, page, st, { onChange, onCurves }) {
  const shown = (key) => !st.hidden.includes(key); // the columns the reader did not hide
  const names = Object.keys(c.spec.space).filter((n) => shown(`param:${n}`));
  const others = (c.spec.objectives || []).slice(1); // a multi-objective campaign's further objectives
  const [withAttempt, withDuration, withAgent] = ["attempt", "duration", "agent"].map(shown);
  const withRung = c.algorithm === "mf"; // a multi-fidelity campaign: each trial's rung
  const desc = st.desc === null ? c.direction === "maximize" && st.sort === "value" : st.desc;
  const cur = { key: st.sort, desc };
  const onSort = (key) => {
    const best = key === "value" && c.direction === "maximize";
    st.desc = st.sort === key ? !desc : best;
    if (key === "value" && st.desc === (c.direction === "maximize")) st.desc = null; // best first: the default
    st.sort = key;
    st.offset = 0;
    onChange();
  };
  const table = document.getElementById("trials");
  const head = JSON.stringify([cur, names, others, st.hidden]);
  if (table.tHead.dataset.sig !== head) {
    table.tHead.dataset.sig = head;
    table.tHead.replaceChildren(
      el(
        "tr",
        {},
        el("th", { title: "show the learning curves of these trials", text: "curves" }),
        sortableHeader("#", "number", cur, onSort),
        sortableHeader("State", "state", cur, onSort),
        sortableHeader(c.metric, "value", cur, onSort, "num"),
        withRung && el("th", { title: "the folds and epochs of the rung it trains or last finished", text: "Rung" }),
        ...others.map((o) =>
          el("th", {
            class: "num",
            title: `${o.direction} ${o.metric}: completed trials only (brush its axis on the parallel coordinates to filter)`,
            text: o.metric,
          }),
        ),
        withAttempt && sortableHeader("Attempt", "attempt", cur, onSort, "num"),
        ...names.map((n) => sortableHeader(n, `param:${n}`, cur, onSort)),
        withDuration && sortableHeader("Duration", "duration", cur, onSort, "num"),
        withAgent && sortableHeader("Agent", "agent", cur, onSort),
      ),
    );
  }
  const tbody = table.tBodies[0];
  if (!page.trials.length) {
    tbody.replaceChildren(
      el(
        "tr",
        {},
        el("td", {
          colspan: 4 + withRung + withAttempt + withDuration + withAgent + names.length + others.length,
          class: "muted",
          text: Object.keys(st.brush).length || st.states.length ? "No trials match the filter." : "No trials yet.",
        }),
      ),
    );
  } else {
    patchRows(
      tbody,
      page.trials,
      (t) => t.id,
      (t) =>
        JSON.stringify([
          t.state,
          t.value,
          t.value_std,
          t.values,
          t.attempt,
          t.agent_host,
          t.agent_job,
          t.ran_seconds,
          t.running_since,
          t.fidelity,
          t.broken,
          st.curves.includes(t.number),
          st.hidden,
        ]),
      (t) =>
        el(
          "tr",
          { "data-trial": t.id, "data-number": t.number },
          el(
            "td",
            {},
            el("input", {
              type: "checkbox",
              class: "pick",
              checked: st.curves.includes(t.number),
              title: "show its learning curves",
              onchange: (e) => {
                st.curves = e.target.checked ? [...st.curves.filter((n) => n !== t.number), t.number] : st.curves.filter((n) => n !== t.number);
                compareLink(id, st.curves);
                onCurves();
              },
            }),
          ),
          el("td", { class: "nowrap" }, el("a", { href: `#/campaign/${id}/trial/${t.number}`, title: `trial id ${t.id}`, text: `#${t.number}` })),
          el("td", {}, badge(t.state)),
          valueCell(t),
          withRung && rungCell(t),
          ...others.map((_o, k) =>
            el("td", { class: "num nowrap", text: t.state === "COMPLETED" && t.values && t.values.length > k + 1 ? fmt(t.values[k + 1]) : "–" }),
          ),
          withAttempt && el("td", { class: "num", text: t.attempt }),
          ...names.map((n) => el("td", { class: "mono nowrap", text: t.params[n] === undefined ? "–" : fmtParam(c.spec.space[n], t.params[n]) })),
          // A running trial's clock ticks in its cell alone (refreshAgo): the row, and any
          // selection in it, stays.
          withDuration && el("td", { class: "num nowrap duration", ...clockAttrs(t) }),
          withAgent && el("td", { class: "nowrap", title: t.agent_id || "", text: agentLabel(t.agent_host, t.agent_job) }),
        ),
    );
  }
  compareLink(id, st.curves);
  const filter = Object.keys(st.brush).length ? `Filtered by the brush on ${Object.keys(st.brush).join(", ")}.` : "";
  const rf = document.getElementById("range-filter");
  if (rf.textContent !== filter) rf.textContent = filter;
  const last = Math.max(0, Math.ceil(page.total / st.limit) - 1);
  const at = Math.floor(st.offset / st.limit);
  document.getElementById("pager").replaceChildren(
    el("button", {
      id: "prev",
      text: "‹ Prev",
      disabled: at === 0,
      onclick: () => {
        st.offset = Math.max(0, st.offset - st.limit);
        onChange();
      },
    }),
    el("span", { id: "page-info", class: "muted", text: `page ${at + 1} of ${last + 1} · ${page.total} trials` }),
    el("button", {
      id: "next",
      text: "Next ›",
      disabled: at >= last,
      onclick: () => {
        st.offset += st.limit;
        onChange();
      },
    }),
    el("span", { class: "spacer" }),
    el(
      "label",
      { class: "check" },
      "rows ",
      el(
        "select",
        {
          id: "page-size",
          onchange: (e) => {
            st.limit = Number(e.target.value);
            st.offset = 0;
            onChange();
          },
        },
        ...[25, 50, 100].map((n) => el("option", { value: n, text: n, selected: n === st.limit })),
      ),
    ),
  );
}

/** A trial's value in the table: a result (mean ± spread over the folds) for a COMPLETED
 * trial; for a PRUNED one the value it reached, marked as such (it is not a result and
 * sorts after every completed trial); nothing for the others. */
function rungCell(t) {
  const f = t.fidelity;
  if (!f) return el("td", { text: "–" });
  return el("td", { class: "nowrap rung", title: f.why || "", text: `${f.rung} (${f.folds} fold${f.folds > 1 ? "s" : ""}, ${f.epochs} ep.)` });
}

function valueCell(t) {
  if (t.value === null || t.value === undefined) return el("td", { class: "num", text: "–" });
  if (t.state !== "COMPLETED")
    return el("td", {
      class: "num nowrap reached",
      title: "the value it had reached when it stopped: not a result, so it sorts after every completed trial",
      text: `${fmt(t.value)} ${t.state === "PRUNED" ? "when pruned" : t.state === "PAUSED" ? "at its rung" : "(not a result)"}`,
    });
  const text = t.value_std !== null && t.value_std !== undefined ? `${fmt(t.value)} ± ${fmt(t.value_std, 2)}` : fmt(t.value);
  // Against the campaign's constraints: an infeasible result says what it broke (ranked
  // after every feasible one when sorted by value).
  if (t.broken) return el("td", { class: "num nowrap infeasible", title: `infeasible: ${t.broken}`, text: `${text} ✗ ${t.broken}` });
  return el("td", { class: "num nowrap", text });
}

/** The Compare button: on with 2 to 4 ticked trials, saying why it is off otherwise. */
function compareLink(id, picked) {
  const a = document.getElementById("compare");
  const ok = picked.length >= MIN_COMPARED && picked.length <= MAX_COMPARED;
  a.textContent = `Compare${picked.length ? ` (${picked.length})` : ""}`;
  a.title = ok
    ? `compare trials ${picked.map((n) => `#${n}`).join(", ")} side by side`
    : `tick ${MIN_COMPARED} to ${MAX_COMPARED} trials in the first column to compare them (${picked.length} ticked)`;
  a.classList.toggle("off", !ok);
  a.setAttribute("aria-disabled", String(!ok));
  if (ok) a.href = `#/campaign/${id}/compare?trials=${picked.join(",")}`;
  else a.removeAttribute("href");
}

// -------------------------------------------------------------- agents ---

export function renderAgents(id, agents, numbers) {
  const table = document.getElementById("agents");
  if (!table.tHead.rows.length)
    table.tHead.append(el("tr", {}, ...["Agent", "Ranks", "GPUs", "Current trial", "Last heartbeat", "State"].map((h) => el("th", { text: h }))));
  const rows = agents.length ? agents : null;
  if (!rows) {
    table.tBodies[0].replaceChildren(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No agent has registered for this campaign." })));
  } else {
    patchRows(
      table.tBodies[0],
      rows,
      (a) => a.id,
      (a) => JSON.stringify([a.current_trial_id, a.stale, a.gone, a.last_seen_at, numbers.get(a.current_trial_id), a.exit_reason]),
      (a) => {
        const n = numbers.get(a.current_trial_id);
        // An agent that refused the campaign (its owner does not allow the task, say) shows why.
        const state = a.exit_reason
          ? el("span", { title: a.exit_reason }, badge("refused", "gone"), el("div", { class: "muted agent-reason", text: a.exit_reason }))
          : a.gone
            ? badge("gone", "gone")
            : a.stale
              ? badge("stale", "stale")
              : a.current_trial_id
                ? badge("RUNNING")
                : badge("idle", "idle");
        const prefix = a.exited_at ? "exited " : "";
        return el(
          "tr",
          { "data-agent": a.id },
          el("td", { title: `agent ${a.id}`, text: agentLabel(a.host, a.slurm_job_id) }),
          el("td", { class: "num", text: a.ranks }),
          el("td", { class: "num", text: a.gpus }),
          el(
            "td",
            {},
            a.current_trial_id
              ? el("a", {
                  href: n !== undefined ? `#/campaign/${id}/trial/${n}` : `#/trial/${a.current_trial_id}`,
                  text: n !== undefined ? `#${n}` : `id ${a.current_trial_id}`,
                })
              : "–",
          ),
          el("td", {
            class: "nowrap",
            title: when(a.exited_at || a.last_seen_at),
            "data-ago": a.exited_at || a.last_seen_at,
            "data-prefix": prefix,
            text: `${prefix}${ago(a.exited_at || a.last_seen_at)}`,
          }),
          el("td", { class: "agent-state" }, state),
        );
      },
    );
  }
  const gone = agents.filter((a) => a.gone).length;
  document.getElementById("agents-note").textContent = agents.length
    ? `${agents.length - gone} live, ${gone} gone. Gone: exited, or silent for two heartbeat periods with no trial. Stale: silent while holding a trial (its lease may expire).`
    : "";
}

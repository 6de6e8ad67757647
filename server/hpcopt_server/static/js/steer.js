// Steering a running campaign from the page: pause and resume it, raise its budget,
// stop a trial. Each is a POST that needs the submit scope (the server checks it; the
// buttons say why they are off without it), and the page refreshes from the answer.
// Each asks in an in-page dialog (dialog.js) that says what will change first.

import { api, cannotChange, el, session } from "./core.js";
import { ask, tell } from "./dialog.js";

const post = (path, body) =>
  api(path, body === undefined ? { method: "POST" } : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });

/** The campaign header's buttons: pause/resume and raise the budget (updated by `steerCampaign`). */
export function campaignButtons(id) {
  return [
    el("button", { id: "pause", text: "Pause", disabled: true, onclick: (e) => togglePause(id, e.target) }),
    el("button", { id: "raise-budget", text: "Raise budget…", disabled: true, onclick: (e) => raiseBudget(id, Number(e.target.dataset.max)) }),
  ];
}

/** Enables the header's buttons for campaign summary `c`, with a title saying why one is off. */
export function steerCampaign(c) {
  const scope = cannotChange(c.id);
  const pause = document.getElementById("pause");
  const paused = c.state === "PAUSED";
  // The answer of a pause or resume shows its state at once: for a few seconds after, a
  // poll that read the campaign before it must not flip the button back.
  const fresh = Number(pause.dataset.answeredAt || 0) > Date.now() - 5000;
  if (!fresh || c.state === pause.dataset.state) {
    delete pause.dataset.answeredAt;
    pause.textContent = paused ? "Resume" : "Pause";
    pause.dataset.state = c.state;
  }
  const state = pause.dataset.state;
  pause.disabled = Boolean(scope) || !(state === "PAUSED" || state === "RUNNING");
  pause.title =
    scope ||
    (pause.disabled
      ? `the campaign is ${c.state}`
      : state === "PAUSED"
        ? "agents get trials again at their next poll"
        : "agents get no new trial (they wait, keeping their allocation); running trials go on");
  if (!fresh) showPaused(c);
  const raise = document.getElementById("raise-budget");
  raise.dataset.max = c.max_trials;
  raise.disabled = Boolean(scope) || c.state === "CANCELLED";
  raise.title =
    scope ||
    (c.state === "CANCELLED" ? "the campaign is CANCELLED" : `more trials than ${c.max_trials}${c.state === "COMPLETED" ? "; the campaign runs again" : ""}`);
}

/** The banner of a PAUSED campaign: what a pause means, and why it is paused. */
function showPaused(c) {
  const banner = document.getElementById("paused-banner");
  if (!banner) return;
  banner.hidden = c.state !== "PAUSED";
  if (c.state === "PAUSED")
    banner.textContent =
      `Paused${c.pause_reason ? `: ${c.pause_reason}` : ""}. Agents get no new trial and wait, keeping their allocation; ` +
      "running trials go on to their end. Resume to hand out trials again.";
}

async function togglePause(id, button) {
  const verb = button.dataset.state === "PAUSED" ? "resume" : "pause";
  button.disabled = true;
  try {
    const c = await post(`/campaigns/${id}/${verb}`);
    // The answer is the campaign as it now is: show it at once, not at the next poll.
    button.dataset.answeredAt = String(Date.now());
    button.dataset.state = c.state;
    button.textContent = c.state === "PAUSED" ? "Resume" : "Pause";
    button.disabled = false;
    showPaused(c);
    session.refresh();
  } catch (e) {
    button.disabled = false;
    tell("steer-failed", `Could not ${verb} campaign ${id}`, e.message);
  }
}

function raiseBudget(id, max) {
  const value = (v) => Number(String(v).trim());
  ask({
    id: "raise-dialog",
    title: `Raise the budget of campaign ${id}`,
    input: { type: "number", value: String(max * 2), min: max + 1, label: "trials in all" },
    lines: [
      (v) => {
        const n = value(v);
        return Number.isInteger(n) && n > max
          ? `Adds ${n - max} trial${n - max === 1 ? "" : "s"}: from ${max} to ${n}. Agents get them at their next poll.`
          : `Now ${max} trials.`;
      },
    ],
    check: (v) => (Number.isInteger(value(v)) && value(v) > max ? "" : `The budget can only be raised: give a whole number above ${max}.`),
    ok: "Raise",
    run: async (v) => {
      await post(`/campaigns/${id}/budget`, { max_trials: value(v) });
      session.refresh();
    },
  });
}

/** What stopping a trial does to its folds: `finished` of `total` have a value. */
function foldsLine({ finished, total }) {
  if (!total) return "Its folds that are training stop at their agent's next heartbeat.";
  const going = total - finished;
  return (
    `Of its ${total} fold${total === 1 ? "" : "s"}, ${finished} finished (their values stay in its history) ` +
    `and ${going} stop${going === 1 ? "s" : ""} at the agent's next heartbeat, without a value; the agent goes on with another trial.`
  );
}

/**
 * A "Stop" button for trial `t` (QUEUED, RUNNING or PAUSED) of campaign `cid`; asks for
 * a reason, saying what happens to its folds (`folds`: {finished, total}).
 */
export function stopButton(cid, t, id, folds = { finished: 0, total: 0 }) {
  const open = t.state === "QUEUED" || t.state === "RUNNING" || t.state === "PAUSED";
  const scope = cannotChange(cid);
  return el("button", {
    id,
    class: "danger small",
    text: "Stop",
    disabled: Boolean(scope) || !open,
    title: scope || (open ? `stop trial #${t.number}: its agent stops at its next heartbeat and goes on with another trial` : `the trial is ${t.state}`),
    onclick: (e) => {
      e.stopPropagation();
      ask({
        id: "stop-dialog",
        title: `Stop trial #${t.number}?`,
        lines: ["It becomes CANCELLED and counts against the budget.", foldsLine(folds)],
        input: { type: "text", value: "", label: "why (kept in its history, optional)" },
        ok: "Stop the trial",
        run: async (reason) => {
          await post(`/campaigns/${cid}/trials/${t.number}/stop`, { reason: reason.trim() });
          session.refresh();
        },
      });
    },
  });
}

// Steering a running campaign from the page: pause and resume it, raise its budget,
// stop a trial. Each is a POST that needs the submit scope (the server checks it; the
// buttons say why they are off without it), and the page refreshes from the answer.

import { api, cannotChange, el, session } from "./core.js";

const post = (path, body) =>
  api(path, body === undefined ? { method: "POST" } : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });

async function act(what, call) {
  try {
    await call();
    session.refresh();
  } catch (e) {
    alert(`${what} failed: ${e.message}`);
  }
}

/** The campaign header's buttons: pause/resume and raise the budget (updated by `steerCampaign`). */
export function campaignButtons(id) {
  return [
    el("button", { id: "pause", text: "Pause", disabled: true, onclick: (e) => togglePause(id, e.target.dataset.state) }),
    el("button", { id: "raise-budget", text: "Raise budget…", disabled: true, onclick: (e) => raiseBudget(id, Number(e.target.dataset.max)) }),
  ];
}

/** Enables the header's buttons for campaign summary `c`, with a title saying why one is off. */
export function steerCampaign(c) {
  const scope = cannotChange(c.id);
  const pause = document.getElementById("pause");
  const paused = c.state === "PAUSED";
  pause.textContent = paused ? "Resume" : "Pause";
  pause.dataset.state = c.state;
  pause.disabled = Boolean(scope) || !(paused || c.state === "RUNNING");
  pause.title =
    scope ||
    (pause.disabled
      ? `the campaign is ${c.state}`
      : paused
        ? "agents get trials again at their next poll"
        : "agents get no new trial (they wait, keeping their allocation); running trials go on");
  const raise = document.getElementById("raise-budget");
  raise.dataset.max = c.max_trials;
  raise.disabled = Boolean(scope) || c.state === "CANCELLED";
  raise.title =
    scope ||
    (c.state === "CANCELLED" ? "the campaign is CANCELLED" : `more trials than ${c.max_trials}${c.state === "COMPLETED" ? "; the campaign runs again" : ""}`);
}

function togglePause(id, state) {
  const verb = state === "PAUSED" ? "resume" : "pause";
  act(verb, () => post(`/campaigns/${id}/${verb}`));
}

function raiseBudget(id, max) {
  const answer = prompt(`Raise the budget of campaign ${id} from ${max} trials to:`, String(max * 2));
  if (answer === null) return;
  const n = Number(answer.trim());
  if (!Number.isInteger(n) || n <= max) {
    alert(`The budget can only be raised: give a whole number above ${max}.`);
    return;
  }
  act("raising the budget", () => post(`/campaigns/${id}/budget`, { max_trials: n }));
}

/** A "Stop" button for trial `t` (QUEUED or RUNNING) of campaign `cid`; asks for a reason. */
export function stopButton(cid, t, id) {
  const open = t.state === "QUEUED" || t.state === "RUNNING";
  const scope = cannotChange(cid);
  return el("button", {
    id,
    class: "danger small",
    text: "Stop",
    disabled: Boolean(scope) || !open,
    title: scope || (open ? `stop trial #${t.number}: its agent stops at its next heartbeat and goes on with another trial` : `the trial is ${t.state}`),
    onclick: (e) => {
      e.stopPropagation();
      const reason = prompt(`Stop trial #${t.number}? It becomes CANCELLED and counts against the budget. Why (kept in its history, optional):`, "");
      if (reason === null) return;
      act(`stopping trial #${t.number}`, () => post(`/campaigns/${cid}/trials/${t.number}/stop`, { reason: reason.trim() }));
    },
  });
}

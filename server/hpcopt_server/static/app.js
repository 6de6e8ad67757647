// hpcopt dashboard: a single page over the public REST API (/api/v1), no build step.
// Pages: #/ campaigns, #/campaign/ID[?state], #/campaign/ID/trial/NUMBER,
// #/campaign/ID/compare?trials=N,M[,…], #/campaigns/compare?ids=A,B[,…], #/trial/ID
// (a global id: redirected), #/new. Views ask the server every 2 s whether anything
// changed (ETag → 304) and redraw only what did; polling pauses in hidden tabs.

import { campaignPage, chips, notFound, progress } from "./js/campaign.js";
import { compareCampaignsPage } from "./js/campaigns_compare.js";
import { comparePage } from "./js/compare.js";
import {
  api,
  askToken,
  badge,
  can,
  connection,
  Disconnected,
  el,
  fmt,
  forgetAnswers,
  HttpError,
  live,
  MAX_COMPARED,
  MIN_COMPARED,
  patchRows,
  poll,
  session,
  sortableHeader,
  unsaved,
} from "./js/core.js";
import { newPage } from "./js/newspec.js";
import { trialById, trialPage } from "./js/trial.js";

const app = document.getElementById("app");

// ------------------------------------------------------------- token ---

const dialog = document.getElementById("token-dialog");
document.getElementById("token-form").addEventListener("submit", () => {
  session.token = document.getElementById("token-input").value.trim();
  session.tokenTyped = true;
  localStorage.setItem("hpcopt.token", session.token);
  start();
});
// Esc (or closing the dialog without a token): say what is needed instead of "loading…".
dialog.addEventListener("close", () => {
  if (session.who && (!session.who.auth || session.who.token)) return;
  app.replaceChildren(
    el(
      "div",
      { class: "card", id: "needs-token" },
      el("h1", { text: "This server needs a token" }),
      el(
        "p",
        { class: "muted" },
        "Ask its admin for one, or create it on the server host: ",
        el("code", { text: "hpcopt-server token create --name NAME --scope read" }),
        ".",
      ),
      el("button", { class: "primary", id: "enter-token", text: "Enter a token", onclick: () => dialog.showModal() }),
    ),
  );
});

async function loadWho() {
  session.who = await api("/whoami");
  if (session.who.auth && !session.who.token) {
    askToken();
    throw new HttpError(401, { detail: "a token is needed" });
  }
  if (dialog.open) dialog.close();
  const who = document.getElementById("whoami");
  const banner = document.getElementById("banner");
  if (!session.who.auth) {
    who.textContent = "auth off (loopback)";
  } else {
    who.replaceChildren(
      `token ${session.who.token} · ${session.who.scopes.join(", ")} `,
      el("a", {
        href: "#",
        text: "sign out",
        onclick: (e) => {
          e.preventDefault();
          localStorage.removeItem("hpcopt.token");
          location.reload();
        },
      }),
    );
  }
  banner.textContent = "This token can read but not submit or cancel: viewing only.";
  banner.hidden = can("submit");
}

// -------------------------------------------------------------- router ---

function route(event) {
  // A note being edited: ask before dropping it (its draft stays in this browser either way).
  if (event && event.oldURL && unsaved() && !confirm("Leave this page? Your note is not saved (a draft stays in this browser).")) {
    history.replaceState(null, "", event.oldURL);
    return;
  }
  session.hooks = [];
  session.unsaved = [];
  session.stop();
  session.generation += 1;
  forgetAnswers();
  document.title = "hpcopt";
  // Free the old view's plots (WebGL contexts are few).
  if (window.Plotly) for (const node of document.querySelectorAll(".js-plotly-plot")) Plotly.purge(node);
  const hash = location.hash || "#/";
  const [path, query] = hash.split("?");
  const trial = path.match(/^#\/campaign\/(\d+)\/trial\/(\d+)$/);
  if (trial) return trialPage(Number(trial[1]), Number(trial[2]));
  const campaign = path.match(/^#\/campaign\/(\d+)$/);
  if (campaign) return campaignPage(Number(campaign[1]), query || "");
  const compare = path.match(/^#\/campaign\/(\d+)\/compare$/);
  if (compare) return comparePage(Number(compare[1]), query || "");
  const byId = path.match(/^#\/trial\/(\d+)$/);
  if (byId) return trialById(Number(byId[1]));
  if (path === "#/new") return newPage();
  if (path === "#/campaigns/compare") return compareCampaignsPage(query || "");
  if (path === "#/" || path === "#") return campaignsPage(query || "");
  return notFound(
    "No such page.",
    `The dashboard has no page at ${path}: its pages are the campaign list, a campaign, a trial, a comparison of trials, and New campaign.`,
  );
}

async function start() {
  try {
    await loadWho();
  } catch (e) {
    if (e instanceof Disconnected) {
      connection(false, e.message);
      app.replaceChildren(el("p", { class: "muted", id: "no-server", text: "The server does not answer; retrying…" }));
      setTimeout(start, 2000);
    }
    return;
  }
  document.getElementById("nav-new").hidden = !can("submit");
  route();
}

window.addEventListener("hashchange", route);
start();

// ---------------------------------------------------------- campaigns ---

const CAMPAIGN_PAGE = 100;
// Server-side sorts (GET /campaigns?sort=): the first direction each header sorts in.
const LIST_SORTS = { id: true, name: false, state: false, algorithm: false, progress: true };

/** The campaign list: search by name, filter by state, sorted and paged on the server;
 * the view lives in the URL (#/?q=…&state=…&sort=…&order=…&page=…). */
function campaignsPage(query = "") {
  const url = new URLSearchParams(query);
  const st = {
    q: url.get("q") || "",
    state: url.get("state") || "",
    sort: url.get("sort") in LIST_SORTS ? url.get("sort") : "id",
    page: Math.max(0, Number(url.get("page")) - 1 || 0),
  };
  st.desc = url.has("order") ? url.get("order") === "desc" : LIST_SORTS[st.sort];
  const write = () => {
    const q = new URLSearchParams();
    if (st.q) q.set("q", st.q);
    if (st.state) q.set("state", st.state);
    if (st.sort !== "id" || !st.desc) {
      q.set("sort", st.sort);
      q.set("order", st.desc ? "desc" : "asc");
    }
    if (st.page) q.set("page", st.page + 1);
    const text = q.toString();
    history.replaceState(null, "", `#/${text ? `?${text}` : ""}`);
  };
  const changed = () => {
    write();
    session.refresh();
  };
  let typing = null;
  const search = el("input", {
    type: "search",
    id: "campaign-search",
    placeholder: "name contains…",
    value: st.q,
    "aria-label": "search campaigns by name",
    oninput: (e) => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        st.q = e.target.value.trim();
        st.page = 0;
        changed();
      }, 250);
    },
  });
  const states = el(
    "select",
    {
      id: "campaign-state",
      "aria-label": "campaign state",
      onchange: (e) => {
        st.state = e.target.value;
        st.page = 0;
        changed();
      },
    },
    ...[
      ["", "every state"],
      ["RUNNING", "running"],
      ["PAUSED", "paused"],
      ["COMPLETED", "completed"],
      ["CANCELLED", "cancelled"],
    ].map(([v, t]) => el("option", { value: v, text: t, selected: v === st.state })),
  );
  app.replaceChildren(
    el("h1", { text: "Campaigns" }),
    el(
      "div",
      { class: "card" },
      el(
        "div",
        { class: "row controls" },
        search,
        states,
        el("span", { id: "campaign-count", class: "muted" }),
        el("span", { class: "spacer" }),
        el("a", { id: "compare-campaigns", class: "button" }),
      ),
      el("div", { class: "table-wrap" }, el("table", { id: "campaigns" }, el("thead"), el("tbody"))),
      el("div", { class: "row pager", id: "campaign-pager" }),
    ),
  );
  let rows = [];
  let total = 0;
  let shown = null; // the query whose rows the table shows
  const picked = []; // campaigns ticked for Compare (2 to 4), in the order ticked
  const compareLink = () => {
    const a = document.getElementById("compare-campaigns");
    const ok = picked.length >= MIN_COMPARED && picked.length <= MAX_COMPARED;
    a.textContent = `Compare${picked.length ? ` (${picked.length})` : ""}`;
    a.title = ok ? `campaigns ${picked.join(", ")} side by side` : `tick ${MIN_COMPARED} to ${MAX_COMPARED} campaigns to compare them`;
    a.classList.toggle("off", !ok);
    a.setAttribute("aria-disabled", String(!ok));
    if (ok) a.href = `#/campaigns/compare?ids=${picked.join(",")}`;
    else a.removeAttribute("href");
  };
  const render = () => {
    const s = { key: st.sort, desc: st.desc };
    const onSort = (key) => {
      st.desc = st.sort === key ? !st.desc : LIST_SORTS[key];
      st.sort = key;
      st.page = 0;
      changed();
    };
    const table = document.getElementById("campaigns");
    if (!table) return;
    const head = JSON.stringify(s);
    if (table.tHead.dataset.sig !== head) {
      table.tHead.dataset.sig = head;
      table.tHead.replaceChildren(
        el(
          "tr",
          {},
          sortableHeader("ID", "id", s, onSort),
          sortableHeader("Name", "name", s, onSort),
          sortableHeader("State", "state", s, onSort),
          sortableHeader("Algorithm", "algorithm", s, onSort),
          sortableHeader("Progress", "progress", s, onSort),
          el("th", { class: "num", text: "Best", title: "campaigns' best values are of different metrics: not a sort" }),
          el("th", { text: "Trials by state" }),
          el("th", { class: "num", text: "Live agents" }),
        ),
      );
    }
    const filtered = st.q || st.state;
    document.getElementById("campaign-count").textContent = filtered ? `${total} match${total === 1 ? "" : "es"}` : "";
    if (!rows.length) {
      table.tBodies[0].replaceChildren(
        el(
          "tr",
          {},
          el("td", {
            colspan: 8,
            class: "muted",
            text: filtered ? "No campaign matches." : "No campaigns yet. Submit one with `hpcopt submit` or New campaign.",
          }),
        ),
      );
      return;
    }
    patchRows(
      table.tBodies[0],
      rows,
      (c) => c.id,
      (c) => JSON.stringify([c, picked.includes(c.id)]),
      (c) =>
        el(
          "tr",
          { "data-id": c.id },
          el(
            "td",
            { class: "nowrap" },
            el("input", {
              type: "checkbox",
              class: "pick-campaign",
              checked: picked.includes(c.id),
              "aria-label": `compare campaign ${c.id}`,
              onchange: (e) => {
                const at = picked.indexOf(c.id);
                if (e.target.checked && at < 0) picked.push(c.id);
                if (!e.target.checked && at >= 0) picked.splice(at, 1);
                compareLink();
              },
            }),
            ` ${c.id}`,
          ),
          el("td", {}, el("a", { href: `#/campaign/${c.id}`, text: c.name })),
          el("td", {}, badge(c.state)),
          el("td", { text: c.algorithm }),
          el("td", {}, progress(c)),
          bestCell(c),
          el("td", {}, chips(c.trial_counts)),
          el("td", { class: "num", text: c.live_agents }),
        ),
    );
  };
  // One objective: its best value. Several: the size of the Pareto front (no one trial is best).
  const bestCell = (c) =>
    c.front_size === null || c.front_size === undefined
      ? el("td", { class: "num", title: c.metric, text: c.best_value === null ? "–" : fmt(c.best_value) })
      : el("td", {
          class: "num front-size",
          title: `${c.front_size} completed trial${c.front_size === 1 ? "" : "s"} on the Pareto front of ${c.objectives.join(", ")}: none is best in all`,
          text: c.front_size ? `front of ${c.front_size}` : "–",
        });
  const pager = () => {
    const last = Math.max(0, Math.ceil(total / CAMPAIGN_PAGE) - 1);
    const move = (to) => {
      st.page = to;
      changed();
    };
    document
      .getElementById("campaign-pager")
      .replaceChildren(
        ...(last === 0
          ? []
          : [
              el("button", { id: "newer", text: "‹ Prev", disabled: st.page === 0, onclick: () => move(st.page - 1) }),
              el("span", { id: "campaign-page-info", class: "muted", text: `page ${st.page + 1} of ${last + 1} · ${total} campaigns` }),
              el("button", { id: "older", text: "Next ›", disabled: st.page >= last, onclick: () => move(st.page + 1) }),
            ]),
      );
  };
  const load = async (gen) => {
    const q = new URLSearchParams({ offset: st.page * CAMPAIGN_PAGE, limit: CAMPAIGN_PAGE, sort: st.sort, order: st.desc ? "desc" : "asc" });
    if (st.q) q.set("q", st.q);
    if (st.state) q.set("state", st.state);
    const asked = q.toString();
    const data = await poll(`/campaigns?${asked}`);
    // A 304 for a view shown before (a sort clicked back) still draws that view's rows.
    if (gen !== session.generation || (!data.changed && asked === shown)) return false;
    shown = asked;
    rows = data.body.campaigns;
    total = data.body.total;
    if (st.page > 0 && !rows.length && total) {
      st.page = Math.max(0, Math.ceil(total / CAMPAIGN_PAGE) - 1);
      changed();
      return true;
    }
    render();
    pager();
    compareLink();
    return true;
  };
  live(load);
}

// What every page shares: the session, the REST calls (conditional: an unchanged answer
// is a 304 and nothing is redrawn), the connection status, polling that pauses in hidden
// tabs and stops on "not found", DOM and number-formatting helpers.

// The poll period: 2 s, or this browser's localStorage "hpcopt.pollMs" (250..60000).
const storedPoll = Number(localStorage.getItem("hpcopt.pollMs"));
export const POLL_MS = Number.isInteger(storedPoll) && storedPoll >= 250 && storedPoll <= 60000 ? storedPoll : 2000;
/** How many trials the compare page takes (#/campaign/ID/compare?trials=…). */
export const MIN_COMPARED = 2;
export const MAX_COMPARED = 4;
export const STATES = ["QUEUED", "RUNNING", "PAUSED", "COMPLETED", "PRUNED", "FAILED", "CANCELLED", "PREEMPTED"];

export const session = {
  token: localStorage.getItem("hpcopt.token") || "",
  tokenTyped: false, // the token was just typed in the dialog (not read from storage)
  who: null, // {auth, token, scopes, agent_server}
  owners: {}, // campaign id -> its owner (a token name; null: none), from the summaries seen
  generation: 0, // bumps on every navigation: stale refreshes drop their results
  stop: () => {}, // stops the current view's polling
  refresh: () => {}, // asks the current view for a refresh now
  hooks: [], // more refreshes of the current view, run after each of its polls (a note card)
  unsaved: [], // tests of the current view: true while it holds a text a navigation would drop
};

/** Whether the current view holds an unsaved text (a note being edited). */
export const unsaved = () => session.unsaved.some((test) => test());
window.addEventListener("beforeunload", (e) => {
  if (unsaved()) e.preventDefault();
});

// ---------------------------------------------------------------- API ---

export class HttpError extends Error {
  constructor(status, body) {
    super(body && body.detail ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

/** The server did not answer (down, restarting, a proxy in between): retry. */
export class Disconnected extends Error {}

const etags = new Map(); // path -> {etag, body}

/** A new view starts from fresh answers (its first poll of a path is never a 304). */
export function forgetAnswers() {
  etags.clear();
}

async function request(path, options = {}, conditional = false) {
  const headers = Object.assign({}, options.headers || {});
  if (session.token) headers.Authorization = `Bearer ${session.token}`;
  const cached = conditional ? etags.get(path) : null;
  if (cached) headers["If-None-Match"] = cached.etag;
  let res;
  try {
    res = await fetch(`api/v1${path}`, Object.assign({ cache: "no-store" }, options, { headers }));
  } catch (e) {
    throw new Disconnected(`the server does not answer (${e.message})`);
  }
  if (res.status === 304 && cached) {
    answered();
    return { body: cached.body, changed: false };
  }
  if (res.status >= 502 && res.status <= 504) throw new Disconnected(`the server answered HTTP ${res.status}`);
  answered();
  const text = await res.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch (_) {
    body = text;
  }
  if (res.status === 401) {
    askToken();
    throw new HttpError(401, body);
  }
  if (!res.ok) throw new HttpError(res.status, body);
  const etag = res.headers.get("ETag");
  if (conditional && etag) etags.set(path, { etag, body });
  return { body, changed: true };
}

/** The parsed body of a call (POSTs, one-off reads). */
export async function api(path, options = {}) {
  return (await request(path, options)).body;
}

/** {body, changed}: `changed` is false when the server said 304 (same body as last time). */
export function poll(path) {
  return request(path, {}, true);
}

export async function download(path, filename) {
  const headers = session.token ? { Authorization: `Bearer ${session.token}` } : {};
  const res = await fetch(`api/v1${path}`, { headers });
  if (!res.ok) {
    alert(`download failed: HTTP ${res.status}`);
    return;
  }
  const url = URL.createObjectURL(await res.blob());
  const a = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 5000);
}

export const can = (scope) => !session.who || !session.who.auth || session.who.scopes.includes(scope) || session.who.scopes.includes("admin");

/** Why this token may not change campaign `cid` (steer, cancel, write notes): no submit
 * scope, or another token name owns it (an admin token may). "" when it may. */
export function cannotChange(cid) {
  if (!can("submit")) return "this token has no submit scope";
  const who = session.who;
  const owner = session.owners[cid];
  if (!owner || !who || !who.auth || who.scopes.includes("admin") || who.token === owner) return "";
  return `campaign ${cid} belongs to ${owner}: only a token named ${owner}, or an admin token, may change it`;
}

// ------------------------------------------------------------- token ---

/** Opens the token dialog; a token that was given and refused is named as typed or stored. */
export function askToken() {
  const dialog = document.getElementById("token-dialog");
  const err = document.getElementById("token-error");
  if (session.token) {
    err.textContent = session.tokenTyped
      ? "The token you entered is unknown or revoked."
      : "The token stored in this browser is unknown or revoked: enter another.";
    err.hidden = false;
  }
  if (!dialog.open) dialog.showModal();
}

// -------------------------------------------------------- connection ---

let connected = true;
let paused = false;
let lastUpdate = null;

/** The status line in the top bar: updated at, paused (hidden tab), or disconnected. */
/** An answer came: a lost connection shows as back at once; otherwise the "updated"
 * time is written once per poll (live), not per answer (each write was a frame of its
 * own: the whole page's style, layout and paint). */
function answered() {
  if (connected) lastUpdate = new Date();
  else connection(true);
}

export function connection(ok, why = "") {
  connected = ok;
  if (ok) lastUpdate = new Date();
  const node = document.getElementById("conn");
  if (!node) return;
  const text = !ok
    ? `disconnected — retrying (${why})`
    : paused
      ? "paused while the tab is hidden"
      : lastUpdate
        ? `updated ${lastUpdate.toLocaleTimeString()}`
        : "";
  if (node.textContent !== text) node.textContent = text;
  const cls = !ok ? "conn bad" : paused ? "conn paused" : "conn";
  if (node.className !== cls) node.className = cls;
}

/** Runs `refresh(gen)` now and then every POLL_MS while this view is shown and the tab
 * is visible; `refresh` returns false when nothing changed (all 304s). After 5 quiet
 * polls in a row the period grows to 5 s, after 10 to 10 s; a change, a click or key in
 * the page, or `session.refresh()` brings it back to 2 s. A 404 calls `onMissing` and
 * stops; a lost server shows "disconnected" and is retried every 2 s. */
export function live(refresh, onMissing) {
  const gen = session.generation;
  let busy = false,
    again = false,
    timer = null,
    stopped = false,
    quiet = 0;
  const period = () => (quiet < 5 ? POLL_MS : quiet < 10 ? 2.5 * POLL_MS : 5 * POLL_MS);
  const current = () => gen === session.generation && !stopped;
  const schedule = () => {
    clearTimeout(timer);
    timer = current() && !document.hidden ? setTimeout(() => tick(false), period()) : null;
  };
  const tick = async (asked = true) => {
    if (!current()) return;
    if (asked) quiet = 0;
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const changed = await refresh(gen);
      quiet = changed === false ? quiet + 1 : 0;
      if (current()) {
        connection(true);
        refreshAgo();
        for (const hook of session.hooks) hook().catch(() => {}); // their own errors show in their cards
      }
    } catch (e) {
      quiet = 0;
      if (e instanceof Disconnected) connection(false, e.message);
      else if (e instanceof HttpError && e.status === 404 && onMissing) {
        stop();
        onMissing(e);
      } else if (!(e instanceof HttpError && e.status === 401)) console.warn("refresh failed:", e.message);
    } finally {
      busy = false;
    }
    if (again) {
      again = false;
      tick();
      return;
    }
    schedule();
  };
  const poke = () => {
    if (quiet >= 5) tick();
  };
  const visibility = () => {
    if (gen !== session.generation) {
      document.removeEventListener("visibilitychange", visibility);
      return;
    }
    paused = document.hidden;
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
    } else tick();
    connection(connected);
  };
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    timer = null;
  };
  document.addEventListener("visibilitychange", visibility);
  document.addEventListener("pointerdown", poke);
  document.addEventListener("keydown", poke);
  session.refresh = () => tick(true);
  session.stop = () => {
    stop();
    document.removeEventListener("visibilitychange", visibility);
    document.removeEventListener("pointerdown", poke);
    document.removeEventListener("keydown", poke);
  };
  paused = document.hidden;
  tick();
}

// ------------------------------------------------------------ helpers ---

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

export const badge = (state, extra = "") => el("span", { class: `badge ${state} ${extra}`, text: state });

/** A number for people: 4 significant digits; exponent form when tiny or huge (1e-6,
 * not 0.000001); integers as they are. */
export function fmt(v, digits = 4) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6))
    return v
      .toExponential(Math.max(0, digits - 1))
      .replace(/\.?0+e/, "e")
      .replace("e+", "e");
  return String(Number(v.toPrecision(digits)));
}

/** A parameter's value, formatted for its scale (a log parameter in exponent form). */
export function fmtParam(spec, v) {
  if (typeof v === "number" && spec && spec.scale === "log" && spec.type === "real") {
    return v
      .toExponential(2)
      .replace(/\.?0+e/, "e")
      .replace("e+", "e");
  }
  return fmt(v);
}

export function seconds(s) {
  if (s === null || s === undefined) return "–";
  return s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
}

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
export const ago = (iso) => {
  const s = (Date.now() - new Date(iso)) / 1000;
  return s < 90 ? `${Math.max(0, Math.round(s))} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago` : `${(s / 3600).toFixed(1)} h ago`;
};
/** A trial's time on agents now: the REST answer's ran_seconds (its ended attempts) plus
 * the attempt running since running_since. The server leaves the running attempt out so
 * that its answers change when something happens, not every second. */
export const ranNow = (t) =>
  t.ran_seconds === null || t.ran_seconds === undefined
    ? null
    : t.ran_seconds + (t.running_since ? Math.max(0, (Date.now() - Date.parse(t.running_since)) / 1000) : 0);
/** Attributes of an element that shows ranNow(t) and keeps it current (refreshAgo). */
export const clockAttrs = (t) => ({
  text: seconds(ranNow(t)),
  "data-ran": t.running_since ? t.ran_seconds : undefined,
  "data-since": t.running_since || undefined,
});
/** Brings every "… ago" text (elements with data-ago) and every running clock (data-since)
 * up to now; text only where it changed. Runs after every poll (live), in the same frame
 * as what the poll changed: a timer of its own repainted the page every second. */
export function refreshAgo() {
  for (const node of document.querySelectorAll("[data-ago]")) {
    const text = `${node.dataset.prefix || ""}${ago(node.dataset.ago)}`;
    if (node.textContent !== text) node.textContent = text;
  }
  for (const node of document.querySelectorAll("[data-since]")) {
    const text = seconds(ranNow({ ran_seconds: Number(node.dataset.ran), running_since: node.dataset.since }));
    if (node.textContent !== text) node.textContent = text;
  }
}
export const agentLabel = (host, job) => (host ? `${host}${job ? ` · job ${job}` : ""}` : "–");

// The header a keyboard sort came from: the re-rendered header takes the focus back.
let sortFocus = null;

export function sortableHeader(label, key, current, onSort, cls = "") {
  const on = current.key === key;
  const th = el("th", {
    class: `sortable ${cls} ${on ? "sorted" : ""} ${on && current.desc ? "desc" : ""}`,
    text: label,
    "data-sort": key,
    title: `sort by ${label}`,
    tabindex: 0,
    "aria-sort": on ? (current.desc ? "descending" : "ascending") : "none",
  });
  th.addEventListener("click", () => onSort(key));
  // Sorting needs no mouse: Enter or Space on a focused header sorts by it.
  th.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" && e.key !== " ") return;
    e.preventDefault();
    sortFocus = key;
    onSort(key);
  });
  if (sortFocus === key)
    queueMicrotask(() => {
      if (th.isConnected) {
        th.focus();
        sortFocus = null;
      }
    });
  return th;
}

/** Rows of a tbody from items, touching only rows whose content changed (a row keeps
 * its node, and the reader's text selection in it, while its data stays the same). */
export function patchRows(tbody, items, key, signature, render) {
  const old = new Map([...tbody.rows].filter((r) => r.dataset.key).map((r) => [r.dataset.key, r]));
  const rows = items.map((it) => {
    const k = String(key(it)),
      sig = signature(it);
    const prev = old.get(k);
    if (prev && prev.dataset.sig === sig) return prev;
    const row = render(it);
    row.dataset.key = k;
    row.dataset.sig = sig;
    return row;
  });
  const same = rows.length === tbody.rows.length && rows.every((r, i) => tbody.rows[i] === r);
  if (same) return;
  if (rows.length === tbody.rows.length && rows.every((r, i) => tbody.rows[i].dataset.key === r.dataset.key)) {
    rows.forEach((r, i) => {
      if (tbody.rows[i] !== r) tbody.replaceChild(r, tbody.rows[i]);
    });
    return;
  }
  tbody.replaceChildren(...rows);
}

/** Whether a mouse button or a finger is down in the page: a live redraw waits for its
 * release (benchmarks/dashboard_open.py lost 2 of 7 drags on a categorical axis to
 * redraws that rebuilt the parallel coordinates mid-drag). */
let held = false;
export const pointerHeld = () => held;
document.addEventListener(
  "pointerdown",
  () => {
    held = true;
  },
  true,
);
for (const end of ["pointerup", "pointercancel"])
  document.addEventListener(
    end,
    () => {
      held = false;
    },
    true,
  );

export const nextFrame = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));

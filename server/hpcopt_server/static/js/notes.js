// A note on a campaign or a trial: shown as typed (text, never HTML), edited by a token
// with the submit scope. A save names the version the edit began from; if someone saved
// since, the server answers 409 and the editor keeps the reader's text, shows the stored
// one beside it, and the next save goes over it. Nothing is lost either way: the server
// keeps every version, which the card lists and can restore. The card follows saves made
// elsewhere (it polls with the page), keeps an unsaved draft in this browser, and asks
// before a navigation drops it.

import { api, can, cannotChange, el, HttpError, poll, session, when } from "./core.js";

/** The campaign id a note path names (`/campaigns/ID/…`). */
const campaignOf = (path) => Number(path.split("/")[2]);

const MAX_NOTE = 20000;
const draftKey = (path) => `hpcopt.draft:${path}`;

/** The card for the note at `path` ("/campaigns/3/note", "/campaigns/3/trials/27/note"). */
export function noteCard(path, what) {
  const body = el("div", { id: "note-body" });
  const saved = el("span", { id: "note-meta", class: "note" });
  const history = el("div", { id: "note-history", hidden: true });
  const box = el(
    "div",
    { class: "card", id: "card-note" },
    el("div", { class: "row" }, el("h2", { text: "Notes" }), el("span", { class: "spacer" }), saved),
    body,
    history,
  );
  const shown = session.generation;
  let note = null;
  let editing = null; // {area, base, start}: the open editor
  let shownWhy = null; // why the token may not edit, as last shown (the owner may arrive later)
  const here = () => shown === session.generation;
  const meta = () => {
    if (!note || !note.version) {
      saved.replaceChildren();
      return;
    }
    saved.replaceChildren(
      `version ${note.version}, saved ${when(note.updated_at)}${note.updated_by ? ` by ${note.updated_by}` : ""} · `,
      el("a", {
        href: "#",
        id: "note-history-link",
        text: "history",
        onclick: (e) => {
          e.preventDefault();
          toggleHistory();
        },
      }),
    );
  };
  const view = () => {
    if (!here()) return;
    editing = null;
    meta();
    const text = note.body
      ? el("div", { id: "note-text", class: "note-text", text: note.body })
      : el("p", { id: "note-text", class: "muted", text: `No note on this ${what} yet.` });
    const why = cannotChange(campaignOf(path));
    shownWhy = why;
    const edit = !why
      ? el("button", { id: "note-edit", text: note.body ? "Edit note" : "Add a note", onclick: () => editor(note.body, note.version) })
      : el("span", {
          class: "note",
          text: can("submit") ? `Your token may read notes, not edit them: ${why}.` : "Your token may read notes, not edit them (that needs the submit scope).",
        });
    const kept = localStorage.getItem(draftKey(path));
    const draft =
      kept !== null && !why && kept !== note.body
        ? el(
            "p",
            { id: "note-draft", class: "conflict" },
            "An unsaved draft of this note is kept in this browser. ",
            el("a", {
              href: "#",
              id: "note-draft-open",
              text: "continue editing it",
              onclick: (e) => {
                e.preventDefault();
                editor(kept, note.version);
              },
            }),
            " · ",
            el("a", {
              href: "#",
              id: "note-draft-drop",
              text: "discard it",
              onclick: (e) => {
                e.preventDefault();
                localStorage.removeItem(draftKey(path));
                view();
              },
            }),
          )
        : "";
    body.replaceChildren(draft, text, el("div", { class: "row note-actions" }, edit));
  };
  const dirty = () => editing !== null && editing.area.value !== editing.start;
  const editor = (draft, base, conflict = null) => {
    const area = el("textarea", {
      id: "note-input",
      class: "note-input",
      maxlength: MAX_NOTE,
      rows: 6,
      placeholder: `What you noticed about this ${what} (plain text)`,
    });
    area.value = draft;
    editing = { area, base, start: conflict ? "\u0000" : note ? note.body : "" };
    const count = el("span", { id: "note-count", class: "note" });
    const status = el("span", { id: "note-status", class: "error", role: "status" });
    const counted = () => {
      count.textContent = `${area.value.length} / ${MAX_NOTE}`;
    };
    area.addEventListener("input", () => {
      counted();
      if (dirty()) localStorage.setItem(draftKey(path), area.value);
      else localStorage.removeItem(draftKey(path));
    });
    counted();
    const save = el("button", {
      id: "note-save",
      class: "primary",
      text: conflict ? "Save mine (theirs stays in the history)" : "Save",
      onclick: async () => {
        save.disabled = true;
        status.textContent = "";
        try {
          note = await api(path, {
            method: "PUT",
            headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ body: area.value, base_version: editing.base }),
          });
          localStorage.removeItem(draftKey(path));
          view();
          if (!history.hidden) showHistory();
        } catch (e) {
          if (!here()) return;
          if (e instanceof HttpError && e.status === 409) {
            // Someone saved meanwhile: theirs beside ours, our text kept, the next save goes over theirs.
            try {
              note = await api(path);
            } catch (_) {
              /* shown below as it was */
            }
            editor(area.value, note ? note.version : editing.base, note);
            return;
          }
          status.textContent = `Not saved: ${e.message}`;
          save.disabled = false;
        }
      },
    });
    const cancel = el("button", {
      id: "note-cancel",
      text: "Cancel",
      onclick: () => {
        if (dirty() && !confirm("Drop the changes you made to this note?")) return;
        localStorage.removeItem(draftKey(path));
        view();
      },
    });
    const newer = el("p", { id: "note-newer", class: "error", hidden: true });
    body.replaceChildren(
      conflict
        ? el(
            "div",
            { id: "note-conflict", class: "conflict" },
            el("p", {
              class: "error",
              text: `${conflict.updated_by || "Someone"} saved this note (version ${conflict.version}) while you edited it. Their text is below; yours is still in the editor. Merge, then save: their version stays in the history either way.`,
            }),
            el("div", { class: "note-text", text: conflict.body || "(empty)" }),
          )
        : "",
      newer,
      area,
      el("div", { class: "row note-actions" }, save, cancel, count, status),
    );
    editing.newer = newer;
    area.focus();
  };
  // History: every saved version, newest first; one shown at a time, restorable.
  const toggleHistory = () => {
    history.hidden = !history.hidden;
    if (!history.hidden) showHistory();
  };
  const showHistory = async () => {
    let versions;
    try {
      versions = await api(`${path}/versions`);
    } catch (e) {
      history.replaceChildren(el("p", { class: "error", text: `The history could not be loaded: ${e.message}` }));
      return;
    }
    if (!here()) return;
    const shownText = el("div", { id: "note-version" });
    const open = async (v) => {
      const old = await api(`${path}/versions/${v}`);
      if (!here()) return;
      const restore =
        !cannotChange(campaignOf(path)) && v !== note.version
          ? el("button", { id: "note-restore", text: `Restore version ${v}`, onclick: () => editor(old.body, note.version) })
          : "";
      shownText.replaceChildren(
        el("h3", { text: `Version ${v}${v === note.version ? " (current)" : ""}` }),
        el("div", { class: "note-text", text: old.body || "(empty: the note was cleared)" }),
        restore,
      );
    };
    history.replaceChildren(
      el("h3", {
        text: `History: ${versions.length} version${versions.length === 1 ? "" : "s"}${versions.length >= 100 ? " (a note keeps its newest 100)" : ""}`,
      }),
      el(
        "ul",
        { id: "note-versions" },
        ...versions.map((v) =>
          el(
            "li",
            { "data-version": v.version },
            el("a", {
              href: "#",
              text: `version ${v.version}`,
              onclick: (e) => {
                e.preventDefault();
                open(v.version);
              },
            }),
            ` — ${when(v.saved_at)}${v.saved_by ? ` by ${v.saved_by}` : ""}, ${v.chars} characters`,
          ),
        ),
      ),
      shownText,
    );
  };
  // Saves made elsewhere: polled with the page (a 304 while nothing changed).
  const follow = async () => {
    const res = await poll(path);
    if (here() && !res.changed && editing === null && note && cannotChange(campaignOf(path)) !== shownWhy) view();
    if (!here() || !res.changed) return;
    const fresh = res.body;
    if (editing === null) {
      note = fresh;
      view();
      return;
    }
    if (fresh.version > editing.base && editing.newer) {
      editing.newer.hidden = false;
      editing.newer.textContent = `${fresh.updated_by || "Someone"} saved version ${fresh.version} at ${when(fresh.updated_at)} while you edit: saving will show you their text to merge.`;
    }
  };
  session.hooks.push(follow);
  session.unsaved.push(() => here() && dirty());
  poll(path)
    .then((res) => {
      note = res.body;
      view();
    })
    .catch((e) => {
      if (here()) body.replaceChildren(el("p", { class: "error", text: `The note could not be loaded: ${e.message}` }));
    });
  return box;
}

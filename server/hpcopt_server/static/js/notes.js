// A note on a campaign or a trial: shown as typed (text, never HTML), edited by a token
// with the submit scope. A save names the version the edit began from; if someone saved
// since, the server answers 409 and the editor keeps the reader's text, shows the stored
// one beside it and saves over the new version once they merged.
"use strict";

import { session, api, can, el, when, HttpError } from "./core.js";

const MAX_NOTE = 20000;

/** The card for the note at `path` ("/campaigns/3/note", "/campaigns/3/trials/27/note"). */
export function noteCard(path, what) {
  const body = el("div", { id: "note-body" });
  const saved = el("span", { id: "note-meta", class: "note" });
  const box = el("div", { class: "card", id: "card-note" }, el("div", { class: "row" }, el("h2", { text: "Notes" }), el("span", { class: "spacer" }), saved), body);
  const shown = session.generation;
  let note = null;
  const meta = () => {
    saved.textContent = note && note.version ? `saved ${when(note.updated_at)}${note.updated_by ? ` by ${note.updated_by}` : ""}` : "";
  };
  const view = () => {
    if (shown !== session.generation) return;
    meta();
    const text = note.body ? el("div", { id: "note-text", class: "note-text", text: note.body }) : el("p", { id: "note-text", class: "muted", text: `No note on this ${what} yet.` });
    const edit = can("submit") ? el("button", { id: "note-edit", text: note.body ? "Edit note" : "Add a note", onclick: () => editor(note.body, note.version) }) : el("span", { class: "note", text: "Your token may read notes, not edit them (that needs the submit scope)." });
    body.replaceChildren(text, el("div", { class: "row note-actions" }, edit));
  };
  const editor = (draft, base, conflict = null) => {
    const area = el("textarea", { id: "note-input", class: "note-input", maxlength: MAX_NOTE, rows: 6, placeholder: `What you noticed about this ${what} (plain text)` });
    area.value = draft;
    const count = el("span", { id: "note-count", class: "note" });
    const status = el("span", { id: "note-status", class: "error", role: "status" });
    const counted = () => { count.textContent = `${area.value.length} / ${MAX_NOTE}`; };
    area.addEventListener("input", counted);
    counted();
    const save = el("button", { id: "note-save", class: "primary", text: "Save", onclick: async () => {
      save.disabled = true;
      status.textContent = "";
      try {
        note = await api(path, { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ body: area.value, base_version: base }) });
        view();
      } catch (e) {
        if (shown !== session.generation) return;
        if (e instanceof HttpError && e.status === 409) {
          // Someone saved meanwhile: theirs beside ours, our text kept, the next save goes over theirs.
          try { note = await api(path); } catch (_) { /* shown below as it was */ }
          editor(area.value, note ? note.version : base, note);
          return;
        }
        status.textContent = `Not saved: ${e.message}`;
        save.disabled = false;
      }
    } });
    const cancel = el("button", { id: "note-cancel", text: "Cancel", onclick: () => view() });
    body.replaceChildren(
      conflict ? el("div", { id: "note-conflict", class: "conflict" },
        el("p", { class: "error", text: `${conflict.updated_by || "Someone"} saved this note (version ${conflict.version}) while you edited it. Their text is below; yours is still in the editor. Merge, then save.` }),
        el("div", { class: "note-text", text: conflict.body || "(empty)" })) : "",
      area, el("div", { class: "row note-actions" }, save, cancel, count, status));
    area.focus();
  };
  api(path).then((n) => { note = n; view(); }).catch((e) => {
    if (shown === session.generation) body.replaceChildren(el("p", { class: "error", text: `The note could not be loaded: ${e.message}` }));
  });
  return box;
}

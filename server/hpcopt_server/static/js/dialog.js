// In-page dialogs for steering, in place of the browser's prompt(), confirm() and
// alert(): each says what will change before anything is sent (a budget raise, how
// many trials it adds; a stop, what happens to the trial's folds), checks its input in
// place, and shows a failure in the same dialog rather than a browser box.

import { el } from "./core.js";

let open = null; // the dialog on screen (one at a time)

/**
 * Asks: `title`, `lines` (text, or a function of the input's value giving the text that
 * says what will change), an optional `input` ({type, value, label, min}), and `ok`, the
 * button's text. `check(value)` returns an error to show, or "". Resolves with the
 * input's value (true without an input) once `run(value)` (a promise) succeeded, or
 * null when dismissed; a failure of `run` is shown in the dialog, which stays open.
 */
export function ask({ id, title, lines = [], input = null, ok = "OK", check = () => "", run = async () => {} }) {
  if (open) open.close();
  return new Promise((resolve) => {
    const field = input
      ? el("input", { id: `${id}-input`, type: input.type || "text", value: input.value ?? "", min: input.min, "aria-label": input.label })
      : null;
    const said = el("p", { id: `${id}-effect`, class: "effect" });
    const error = el("p", { id: `${id}-error`, class: "error", hidden: true });
    const okButton = el("button", { id: `${id}-ok`, type: "submit", class: "primary", text: ok });
    const cancel = el("button", { id: `${id}-cancel`, type: "button", text: "Cancel" });
    const describe = () => {
      const value = field ? field.value : true;
      said.textContent = lines.map((l) => (typeof l === "function" ? l(value) : l)).join(" ");
      const problem = check(value);
      okButton.disabled = Boolean(problem);
      error.textContent = problem;
      error.hidden = !problem;
    };
    const form = el(
      "form",
      { method: "dialog" },
      el("h2", { text: title }),
      said,
      input ? el("label", { text: input.label }, field) : null,
      error,
      el("div", { class: "actions" }, cancel, " ", okButton),
    );
    const dialog = el("dialog", { id, class: "steer-dialog" }, form);
    let result = null;
    const finish = (value) => {
      result = value;
      dialog.close();
    };
    dialog.addEventListener("close", () => {
      dialog.remove();
      if (open === dialog) open = null;
      resolve(result);
    });
    cancel.addEventListener("click", () => finish(null));
    field?.addEventListener("input", describe);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const value = field ? field.value : true;
      if (check(value)) return;
      okButton.disabled = true;
      try {
        await run(value);
        finish(value);
      } catch (err) {
        error.textContent = `failed: ${err.message}`;
        error.hidden = false;
        okButton.disabled = false;
      }
    });
    document.body.append(dialog);
    open = dialog;
    describe();
    dialog.showModal();
    (field || okButton).focus();
  });
}

/** Says `text` in a dialog with one button (a failure that has nowhere else to go). */
export function tell(id, title, text) {
  return ask({ id, title, lines: [text], ok: "Close" });
}

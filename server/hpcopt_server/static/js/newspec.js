// New campaign: paste or load a spec, the server validates it, errors are shown under
// the line they concern (a field's line, or the line and column of a syntax error).

import { api, can, el } from "./core.js";

const app = document.getElementById("app");

const EXAMPLE = `name: my-campaign
objective: {metric: val_loss, direction: minimize}
space:
  lr:    {type: real, low: 1.0e-4, high: 0.1, scale: log}
  width: {type: int, low: 16, high: 256, scale: log}
algorithm: bo
budget: {max_trials: 50, max_parallel: 4}
folds: 5
training: {task: examples/digits/task.py:DigitsTask, epochs: 10}
`;

export function newPage() {
  const text = el("textarea", { id: "spec-text", spellcheck: "false" });
  text.value = EXAMPLE;
  const file = el("input", {
    type: "file",
    id: "spec-file",
    accept: ".yaml,.yml,.json",
    onchange: async (e) => {
      if (e.target.files[0]) text.value = await e.target.files[0].text();
    },
  });
  const submit = el("button", {
    id: "submit",
    class: "primary",
    text: "Submit",
    disabled: !can("submit"),
    title: can("submit") ? "" : "this token has no submit scope",
    onclick: () => submitSpec(text.value),
  });
  app.replaceChildren(
    el("h1", { text: "New campaign" }),
    el(
      "div",
      { class: "card" },
      el("p", {
        class: "muted",
        text: "Paste a campaign spec in YAML or JSON, or load a file. The server validates it; errors appear next to the offending lines.",
      }),
      el("div", { class: "row" }, file),
      text,
      el("div", { class: "row", style: "margin-top:.6rem" }, submit, el("span", { id: "submit-status", class: "muted" })),
      el("div", { id: "spec-errors" }),
    ),
  );
}

// The line of a dotted field path (space.lr.low) in a YAML or JSON text: each key is
// looked for after its parent, flow mappings ({low: 1}) included. 0 when not found.
function locate(textValue, path) {
  const lines = textValue.split("\n");
  let line = 0;
  for (const key of path.split(".").filter((k) => k && !/^\d+$/.test(k))) {
    const re = new RegExp(`(^|[\\s{,"'])${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}["']?\\s*:`);
    const found = lines.findIndex((l, i) => i >= line && re.test(l));
    if (found < 0) break;
    line = found;
  }
  return line + 1;
}

/** [line, column] of a syntax error the server reported ("at line:column 4:8" from YAML,
 * "line 2 column 12" from JSON), or null. */
function syntaxPosition(message) {
  const m = /line:column (\d+):(\d+)/.exec(message) || /line (\d+) column (\d+)/.exec(message);
  return m ? [Number(m[1]), Number(m[2])] : null;
}

// Validates first (a 200 answer either way), then submits a valid spec.
async function submitSpec(textValue) {
  const status = document.getElementById("submit-status");
  const box = document.getElementById("spec-errors");
  box.replaceChildren();
  status.textContent = "checking…";
  const json = textValue.trim().startsWith("{");
  const request = { method: "POST", body: textValue, headers: { "Content-Type": json ? "application/json" : "application/yaml" } };
  let errors = [];
  try {
    const check = await api("/campaigns/validate", request);
    if (check.valid) {
      status.textContent = "submitting…";
      const c = await api("/campaigns", request);
      status.textContent = `campaign ${c.id} submitted`;
      location.hash = `#/campaign/${c.id}`;
      return;
    }
    errors = check.errors.length ? check.errors : [{ field: "", message: check.detail }];
  } catch (e) {
    errors = e.body && e.body.errors && e.body.errors.length ? e.body.errors : [{ field: "", message: e.message }];
  }
  status.textContent = "";
  const byLine = {};
  for (const err of errors) {
    const at = syntaxPosition(err.message);
    err.column = at ? at[1] : null;
    const line = at ? at[0] : err.field && err.field !== "body" ? locate(textValue, err.field) : 1;
    byLine[line] = byLine[line] || [];
    byLine[line].push(err);
  }
  box.append(
    el(
      "ul",
      { class: "errors" },
      errors.map((err) => el("li", { class: "field-error-item", "data-field": err.field }, el("code", { text: err.field || "spec" }), `: ${err.message}`)),
    ),
  );
  const lines = textValue.split("\n");
  box.append(
    el(
      "div",
      { class: "annotated", id: "annotated" },
      lines.flatMap((l, i) => [
        el("div", { class: `line ${byLine[i + 1] ? "bad" : ""}`, "data-line": i + 1 }, el("span", { class: "ln", text: i + 1 }), l),
        ...(byLine[i + 1] || []).map((err) =>
          el(
            "div",
            { class: "field-error", "data-field": err.field, "data-column": err.column || "" },
            err.column ? el("span", { class: "caret", text: `${" ".repeat(Math.max(0, err.column - 1))}^` }) : null,
            el("span", { text: `${err.column ? " " : "↑ "}${err.field || "spec"}: ${err.message}` }),
          ),
        ),
      ]),
    ),
  );
}

// The trials table's "Filter and columns" panel: a range or a choice per parameter, which
// is the parallel coordinates' brush in another form (one state: st.brush, in axis units,
// so the plot, the table, the CSV and the URL agree), and which columns the table shows.

import { el, fmtParam } from "./core.js";
import { axisValue, brushToRange } from "./plots.js";

/** Columns the reader may hide (st.hidden, `hide=` in the URL): the parameters, attempt,
 * duration and agent; the number, state and value always show. */
export const hideable = (space) => [...Object.keys(space).map((n) => [`param:${n}`, n]), ["attempt", "Attempt"], ["duration", "Duration"], ["agent", "Agent"]];

/** A filter's bounds (a log parameter's values, or choice positions) as the brush's axis units. */
function toAxis(spec, lo, hi) {
  if (spec.type === "categorical") return [lo - 0.25, hi + 0.25]; // a band the plot can draw around the choice
  return [axisValue(spec, lo), axisValue(spec, hi)];
}

/** The inputs show the brush (st.brush): a select its choice, a range its bounds in the
 * parameter's units; an input the reader is typing in is left alone. */
function sync(box, space, st) {
  for (const [name, spec] of Object.entries(space)) {
    const now = st.brush[name] ? brushToRange(spec, st.brush[name]) : null;
    if (spec.type === "categorical") {
      const select = box.querySelector(`select[data-filter='${name}']`);
      if (select && select !== document.activeElement) select.value = String(now && now[0] === now[1] ? now[0] : -1);
      continue;
    }
    // Inputs that already say it (an empty one: the space's bound) stay as typed.
    const inputs = [...box.querySelectorAll(`input[data-filter='${name}']`)];
    const bounds = [spec.low, spec.high];
    const typed = inputs.map((input, k) => (input.value.trim() ? Number(input.value) : bounds[k]));
    const want = now || bounds;
    const same = typed.every((v, k) => Math.abs(v - want[k]) <= 1e-6 * Math.max(1, Math.abs(want[k])));
    if (!same)
      inputs.forEach((input, k) => {
        if (input !== document.activeElement) input.value = now ? String(+now[k].toPrecision(6)) : "";
      });
  }
}

/** The panel: built again when the space or the hidden columns change, its inputs set
 * from the brush on every call. onFilter(newBrush): a filter changed; onColumns(): the
 * hidden columns changed. */
export function renderTableTools(space, st, { onFilter, onColumns }) {
  const box = document.getElementById("table-tools");
  if (!box) return;
  const sig = JSON.stringify([Object.keys(space), st.hidden]);
  if (box.dataset.sig === sig) {
    sync(box, space, st);
    return;
  }
  box.dataset.sig = sig;
  const set = (name, range) => {
    const brush = Object.assign({}, st.brush);
    if (range) brush[name] = range;
    else delete brush[name];
    onFilter(brush);
  };
  const filters = Object.entries(space).map(([name, spec]) => {
    const now = st.brush[name] ? brushToRange(spec, st.brush[name]) : null;
    if (spec.type === "categorical") {
      const at = now && now[0] === now[1] ? now[0] : -1;
      return el(
        "label",
        { class: "check" },
        `${name} `,
        el(
          "select",
          {
            "data-filter": name,
            onchange: (e) => {
              const k = Number(e.target.value);
              set(name, k < 0 ? null : toAxis(spec, k, k));
            },
          },
          el("option", { value: -1, text: "any (or a brush over several)", selected: at < 0 }),
          ...spec.choices.map((c, k) => el("option", { value: k, text: String(c), selected: k === at })),
        ),
      );
    }
    const read = () => {
      const [lo, hi] = [...box.querySelectorAll(`input[data-filter='${name}']`)].map((i) => i.value.trim());
      if (!lo && !hi) return set(name, null);
      const a = lo ? Number(lo) : spec.low,
        b = hi ? Number(hi) : spec.high;
      const bad = !(Number.isFinite(a) && Number.isFinite(b)) || a > b || (spec.scale === "log" && a <= 0);
      box.querySelector(`[data-error='${name}']`).textContent = bad
        ? `${name}: from ${fmtParam(spec, spec.low)} to ${fmtParam(spec, spec.high)}, min ≤ max`
        : "";
      if (!bad) set(name, toAxis(spec, a, b));
    };
    const input = (k, hint) =>
      el("input", {
        type: "number",
        step: "any",
        "data-filter": name,
        "data-bound": k ? "max" : "min",
        class: "bound",
        placeholder: hint,
        value: now ? String(+now[k].toPrecision(6)) : "",
        onchange: read,
        "aria-label": `${name} ${k ? "at most" : "at least"}`,
      });
    return el(
      "span",
      { class: "filter" },
      `${name} `,
      input(0, fmtParam(spec, spec.low)),
      " – ",
      input(1, fmtParam(spec, spec.high)),
      el("span", { class: "error", "data-error": name }),
    );
  });
  const columns = hideable(space).map(([key, label]) =>
    el(
      "label",
      { class: "check" },
      el("input", {
        type: "checkbox",
        "data-column": key,
        checked: !st.hidden.includes(key),
        onchange: (e) => {
          st.hidden = e.target.checked ? st.hidden.filter((k) => k !== key) : [...st.hidden, key];
          onColumns();
        },
      }),
      ` ${label}`,
    ),
  );
  const open = box.open || Object.keys(st.brush).some((k) => k in space) || st.hidden.length > 0;
  box.replaceChildren(
    el("summary", { text: "Filter and columns" }),
    el("div", { class: "row controls" }, "Filter: ", ...filters),
    el("div", {
      class: "note",
      text: "A filter is the parallel coordinates' brush on that axis: either changes both. Ranges in the parameter's units, inclusive.",
    }),
    el("div", { class: "row controls" }, "Columns: ", ...columns),
  );
  box.open = open;
}

"""``hpcopt plan SPEC --nodes N --ranks-per-node R [--hours H]``: the layouts an
allocation could run a campaign with, ranked by the planner (``hpcopt.core.planner``, the
same code as the agent's ``--groups auto``) before anyone writes an sbatch script.

The throughput model comes from, in this order:

- ``--throughput FILE``: the document ``GET /api/v1/campaigns/{id}/throughput`` serves
  (or a JSON list of points);
- ``--campaign ID``: that campaign's measured points, read from the server: its trained
  folds, and the probes agents stored at widths no fold measured (the points the
  agents' ``--groups auto`` plans from);
- ``--probe``: the agent's probe in this process, on one rank (hpcopt-agent and the
  task must be importable here; wider fold groups are then extrapolated, and the
  table says so).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hpcopt.core.planner import (
    EXTRAPOLATE,
    FEEDBACK,
    Allocation,
    Plan,
    Point,
    Scaling,
    Unit,
    Work,
    epochs_per_trial,
    fit,
    learns_of,
    plan,
    units_of,
)
from hpcopt.errors import Error, PlanError

RANKED = 10  # rows of the text table


class PlanUsage(Error, ValueError):
    """A problem with the command line or the files it names (exit 2)."""


def add_parser(command: Any) -> None:
    p = command("plan", "rank the layouts of an allocation for a campaign spec (trials done in --hours, utilisation)")
    p.add_argument("spec", type=Path, help="the campaign spec (YAML or JSON)")
    p.add_argument("--nodes", type=int, required=True, help="nodes of the allocation")
    p.add_argument("--ranks-per-node", type=int, required=True, help="ranks (GPUs) per node")
    p.add_argument("--hours", type=float, help="the walltime: rank by trials finished in it (default: time to finish)")
    p.add_argument("--trials", type=int, help="trials to plan for (default: the spec's budget.max_trials)")
    p.add_argument(
        "--train-samples",
        type=int,
        help="samples a fold trains per epoch (default: what the campaign's folds or the probe measured)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when no layout finishes a trial within --hours (the table still prints)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--throughput", type=Path, help="measured points: the REST document of a campaign's throughput")
    src.add_argument(
        "--campaign", type=int, help="a campaign on the server: its folds' and probes' throughput, as agents plan from"
    )
    src.add_argument("--probe", action="store_true", help="measure one rank here with the agent's probe")


def _measured(args: argparse.Namespace, client: Any) -> tuple[list[Point], int | None, str]:
    """Points, train samples per epoch if known, and where they came from."""
    if args.throughput is not None:
        try:
            doc = json.loads(args.throughput.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PlanUsage(f"--throughput {args.throughput}: {exc}") from None
        raw = doc.get("points") if isinstance(doc, dict) else doc
        if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
            raise PlanUsage(f"--throughput {args.throughput}: needs a list of points or a document with `points`")
        samples = doc.get("train_samples") if isinstance(doc, dict) else None
        return [Point.from_dict(p) for p in raw], samples, str(args.throughput)
    if args.campaign is not None:
        # The document the agents plan from (their registration carries its points):
        # trained folds, and stored probes at widths no fold measured.
        doc = client().get_throughput(args.campaign)
        points = [Point.from_dict(p) for p in doc.get("points") or []]
        kinds = sorted({p.source for p in points})
        what = " and ".join({"fold": "folds", "probe": "probes"}.get(k, k) for k in kinds) or "throughput"
        return points, doc.get("train_samples"), f"campaign {args.campaign}'s {what}"
    return _probe(args.spec)


def _probe(path: Path) -> tuple[list[Point], int | None, str]:
    """The agent's probe on one rank here, in its own process (``python -m
    hpcopt_agent.probe SPEC``: the client never imports the agent), as a document."""
    import subprocess
    import sys

    try:
        out = subprocess.run(
            [sys.executable, "-m", "hpcopt_agent.probe", str(path)], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        raise PlanUsage("--probe: the probe took over 600 s") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        if "No module named hpcopt_agent" in out.stderr:
            last = "it needs hpcopt-agent here (pip install hpcopt-agent)"
        raise PlanUsage(f"--probe failed: {last}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return [Point.from_dict(p) for p in doc["points"]], doc.get("train_samples"), "a probe of one rank here"


def run_plan(args: argparse.Namespace, client: Any) -> tuple[dict[str, Any], str]:
    """The plan as a JSON document and as text."""
    from hpcopt.core.specfile import load_spec_file

    spec = load_spec_file(args.spec).model_dump(mode="json")
    training = spec.get("training")
    if not training:
        raise PlanUsage(f"{args.spec}: the spec has no `training` section, so no agent trains it")
    try:
        alloc = Allocation(args.nodes * args.ranks_per_node, args.ranks_per_node)
    except PlanError as exc:
        raise PlanUsage(f"--nodes/--ranks-per-node: {exc}") from None
    if args.nodes < 1:
        raise PlanUsage(f"--nodes must be >= 1, got {args.nodes}")
    points, samples, source = _measured(args, client)
    schemes = {str(training.get("scheme"))}
    if "search" in schemes:
        schemes = {str(c) for c in (spec["space"].get("scheme") or {}).get("choices", [])}
    mine = [p for p in points if p.scheme in schemes] or points
    if not mine:
        raise PlanUsage(f"{source} has no throughput measured yet: train a fold, or use --probe")
    model = fit(mine)
    samples = args.train_samples or samples
    if not samples:
        raise PlanUsage(f"{source} does not say how many samples a fold trains per epoch: give --train-samples")
    budget = spec.get("budget") or {}
    if args.hours is not None and args.hours <= 0:
        raise PlanUsage(f"--hours must be > 0, got {args.hours}")
    work = Work(
        trials=args.trials or int(budget.get("max_trials") or 1),
        folds=int(spec.get("folds", 1)),
        epochs=epochs_per_trial(spec),
        train_samples=samples,
        max_parallel=budget.get("max_parallel"),
        deadline=None if args.hours is None else args.hours * 3600,
        units=_units(spec),
        learns=learns_of(spec),
    )
    from hpcopt.core.schemes import fits_ranks

    def fits(r: int) -> bool:
        return fits_ranks(str(training.get("scheme")), training.get("options") or {}, spec["space"], r)

    chosen = plan(alloc, work, model, pinned_ranks=training.get("ranks_per_fold"), valid_ranks=fits)
    return _document(chosen, alloc, work, model, source), _text(chosen, alloc, work, model, source)


def _units(spec: dict[str, Any]) -> tuple[Unit, ...]:
    try:
        return units_of(spec)
    except ValueError as exc:  # the message names the option
        raise PlanUsage(f"algorithm.{exc}") from None


def _document(chosen: Plan, alloc: Allocation, work: Work, model: Scaling, source: str) -> dict[str, Any]:
    return {
        "allocation": {"ranks": alloc.world, "ranks_per_node": alloc.ranks_per_node, "nodes": alloc.nodes},
        "work": {
            "trials": work.trials,
            "folds": work.folds,
            "epochs": work.epochs,
            "train_samples": work.train_samples,
            "max_parallel": work.max_parallel,
            "hours": None if work.deadline is None else work.deadline / 3600,
            "units": [{"folds": u.folds, "epochs": u.epochs, "share": u.share} for u in work.units],
            "learns": work.learns,
        },
        "model": {**model.as_dict(), "source": source},
        "layouts": [p.as_dict() for p in chosen.table],
        "warning": _none_finish(chosen, work),
    }


def _none_finish(chosen: Plan, work: Work) -> str | None:
    """The one line that says no layout finishes a trial by the deadline, or None."""
    best = chosen.best
    if work.deadline is None or best.by_deadline > 0 or work.trials == 0:
        return None
    fastest = min(chosen.table, key=lambda p: p.trial_seconds)
    return (
        f"no layout finishes a trial in {work.deadline / 3600:g} h: the fastest, {fastest.layout.shape()}, takes "
        f"{duration(fastest.trial_seconds)} a trial; ask for more walltime or fewer epochs"
    )


def duration(seconds: float) -> str:
    """One token: ``41s``, ``12.5min``, ``3.2h``, ``2.1d``."""
    if seconds < 90:
        return f"{seconds:.3g}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.3g}min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.3g}h"
    return f"{seconds / 86400:.3g}d"


def _text(chosen: Plan, alloc: Allocation, work: Work, model: Scaling, source: str) -> str:
    lines = [
        f"{alloc.world} ranks ({alloc.nodes} node(s) x {alloc.ranks_per_node}); {work.trials} trials x {work.folds} "
        f"folds x {work.epochs} epochs of {work.train_samples} samples"
        + (f"; {work.deadline / 3600:g} h" if work.deadline else ""),
    ]
    if work.units:
        climbs = ", ".join(f"{u.folds}f x {u.epochs}e by {u.share:.2g}" for u in work.units)
        lines.append(f"each trial a configuration climbing its mf ladder: leases of {climbs} of the configurations")
    lines += [
        f"model from {source}: {model.as_dict()['formula']}, compute {model.compute:.3g} s, comm {model.comm:.3g} s, "
        f"link {model.link:.3g} s; median error {model.error():.1%} on {len(model.points)} point(s)",
    ]
    lines += [f"  assumed: {a}" for a in model.assumptions]
    if work.learns:
        lines.append(
            f"the search learns from finished trials: plans within {FEEDBACK:.0%} of the fastest count as equal, "
            "and the one whose first trials finish soonest ranks first"
        )
    warning = _none_finish(chosen, work)
    if warning:
        lines.append(f"warning: {warning}")
    head = f"{'#':>3} {'trial groups':>12} {'fold groups':>11} {'ranks/fold':>10} {'trials/h':>9} {'first':>9}"
    head += f" {'finish':>9}"
    head += f" {'by deadline':>11} {'busy':>5}" if work.deadline else f" {'busy':>5}"
    lines.append(head)
    for i, p in enumerate(chosen.table[:RANKED], 1):
        row = (
            f"{i:>3} {p.layout.groups:>12} {p.layout.fold_groups:>11} {p.layout.ranks_per_fold:>10} "
            f"{p.trials_per_hour:>9.3g} {duration(p.trial_seconds):>9} {duration(p.makespan):>9}"
        )
        row += f" {p.by_deadline:>11} {p.utilisation:>5.0%}" if work.deadline else f" {p.utilisation:>5.0%}"
        lines.append(row + ("  extrapolated" if p.extrapolated else ""))
    if len(chosen.table) > RANKED:
        lines.append(f"... {len(chosen.table) - RANKED} more (--json lists all)")
    if any(p.extrapolated for p in chosen.table[:RANKED]):
        widths = ", ".join(str(w) for w in sorted({p.ranks for p in model.points})) or "none"
        lines.append(
            f"extrapolated: ranks per fold more than {EXTRAPOLATE}x outside the measured widths ({widths}); their "
            "figures rest on the model's form alone (they rank after every measured width): measure that width first"
        )
    return "\n".join(lines)

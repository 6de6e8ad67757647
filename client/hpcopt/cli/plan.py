"""``hpcopt plan SPEC --nodes N --ranks-per-node R [--hours H]``: the layouts an
allocation could run a campaign with, ranked by the planner (``hpcopt.core.planner``, the
same code as the agent's ``--groups auto``) before anyone writes an sbatch script.

The throughput model comes from, in this order:

- ``--throughput FILE``: the document ``GET /api/v1/campaigns/{id}/throughput`` serves
  (or a JSON list of points);
- ``--campaign ID``: that campaign's folds, read from the server (its export);
- ``--probe``: the agent's probe in this process, on one rank (hpcopt-agent and the
  task must be importable here; wider fold groups are then extrapolated, and the
  table says so).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hpcopt.core.planner import Allocation, Plan, Point, Scaling, Work, epochs_per_trial, fit, plan, points_from_folds
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
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--throughput", type=Path, help="measured points: the REST document of a campaign's throughput")
    src.add_argument("--campaign", type=int, help="a campaign on the server whose folds were measured")
    src.add_argument("--probe", action="store_true", help="measure one rank here with the agent's probe")


def _measured(args: argparse.Namespace, client: Any) -> tuple[list[Point], int | None, str]:
    """Points, train samples per epoch if known, and where they came from."""
    from hpcopt.core.planner import train_samples_of

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
        export = client().export_campaign(args.campaign)
        rows = [(t.get("params") or {}, f.get("metrics") or {}) for t in export["trials"] for f in t.get("folds", [])]
        return points_from_folds(rows, export["spec"]), train_samples_of(rows), f"campaign {args.campaign}'s folds"
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
    )
    from hpcopt.core.schemes import fits_ranks

    def fits(r: int) -> bool:
        return fits_ranks(str(training.get("scheme")), training.get("options") or {}, spec["space"], r)

    chosen = plan(alloc, work, model, pinned_ranks=training.get("ranks_per_fold"), valid_ranks=fits)
    return _document(chosen, alloc, work, model, source), _text(chosen, alloc, work, model, source)


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
        },
        "model": {**model.as_dict(), "source": source},
        "layouts": [p.as_dict() for p in chosen.table],
    }


def _text(chosen: Plan, alloc: Allocation, work: Work, model: Scaling, source: str) -> str:
    lines = [
        f"{alloc.world} ranks ({alloc.nodes} node(s) x {alloc.ranks_per_node}); {work.trials} trials x {work.folds} "
        f"folds x {work.epochs} epochs of {work.train_samples} samples"
        + (f"; {work.deadline / 3600:g} h" if work.deadline else ""),
        f"model from {source}: {model.as_dict()['formula']}, compute {model.compute:.3g} s, comm {model.comm:.3g} s, "
        f"link {model.link:.3g} s; median error {model.error():.1%} on {len(model.points)} point(s)",
    ]
    lines += [f"  assumed: {a}" for a in model.assumptions]
    head = f"{'#':>3} {'trial groups':>12} {'fold groups':>11} {'ranks/fold':>10} {'trials/h':>9} {'finish h':>9}"
    head += f" {'by deadline':>11} {'busy':>5}" if work.deadline else f" {'busy':>5}"
    lines.append(head)
    for i, p in enumerate(chosen.table[:RANKED], 1):
        row = (
            f"{i:>3} {p.layout.groups:>12} {p.layout.fold_groups:>11} {p.layout.ranks_per_fold:>10} "
            f"{p.trials_per_hour:>9.3g} {p.makespan / 3600:>9.3g}"
        )
        row += f" {p.by_deadline:>11} {p.utilisation:>5.0%}" if work.deadline else f" {p.utilisation:>5.0%}"
        lines.append(row)
    if len(chosen.table) > RANKED:
        lines.append(f"... {len(chosen.table) - RANKED} more (--json lists all)")
    return "\n".join(lines)

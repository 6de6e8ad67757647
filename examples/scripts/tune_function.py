"""Tune a plain Python function with hpcopt, no MPI agent: ask/tell from a script.

    hpcopt-server serve &                                   # or any server you can reach
    .venv/bin/python examples/scripts/tune_function.py      # --server HOST:PORT --trials N

The campaign has no `training` section, so it is served to scripts (agents refuse it).
Each trial is held under a lease that `Client.trials` renews in the background; run this
script several times at once (say in a Slurm job array) and the trials spread over them.
"""

from __future__ import annotations

import argparse
import math

import hpcopt

SPEC = {
    "name": "rosenbrock-script",
    "objective": {"metric": "value", "direction": "minimize"},
    "space": {
        "x": {"type": "real", "low": -2.0, "high": 2.0},
        "y": {"type": "real", "low": -1.0, "high": 3.0},
        "noise": {"type": "categorical", "choices": ["none", "small"]},
    },
    "algorithm": {"name": "bo", "seed": 0, "options": {"n_initial": 8}},
    "budget": {"max_trials": 30, "max_parallel": 4},
}


def rosenbrock(x: float, y: float) -> float:
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--server", help="gRPC address (default: HPCOPT_SERVER, else the connection file, else 127.0.0.1:50051)"
    )
    ap.add_argument("--trials", type=int, default=30, help="the campaign's budget (default 30)")
    ap.add_argument("--campaign", type=int, help="work on this existing campaign instead of creating one")
    args = ap.parse_args()

    with hpcopt.Client(args.server) as client:
        if args.campaign is None:
            spec = {**SPEC, "budget": {**SPEC["budget"], "max_trials": args.trials}}  # type: ignore[dict-item]
            campaign_id = client.create_campaign(spec).id
            print(f"campaign {campaign_id}: {args.trials} trials of bo")
        else:
            campaign_id = args.campaign
        for trial in client.trials(campaign_id):
            p = trial.params
            value = rosenbrock(p["x"], p["y"])  # type: ignore[arg-type]
            # Intermediate values, as an iterative solver would report them; False means
            # the server pruned the trial or the campaign was cancelled: stop working on it.
            for step in range(1, 4):
                if not trial.report(step, value * (1 + 1 / step)):
                    break
            else:
                if p["noise"] == "small":
                    value += 0.01 * math.sin(trial.number)
                done = trial.complete(value)
                where = f"x={p['x']:+.3f} y={p['y']:+.3f} noise={p['noise']}"
                print(f"trial #{done.number:<3}  value {done.value:10.4f}  {where}")
        best = client.get_best_trial(campaign_id)
        total = client.get_campaign(campaign_id).finished
        print(f"best: trial #{best.number} of {total} trials, value {best.value:.4f} at {best.params}")


if __name__ == "__main__":
    main()

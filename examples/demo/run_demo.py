"""The demo campaign, end to end: a server on SQLite, the digits campaign (Bayesian
optimization of an MLP, 5-fold cross-validated), a real MPI agent of 4 ranks as 2 trial
groups x 2 fold groups, a progress display and the final leaderboard.

    python examples/demo/run_demo.py [--ranks 4 --groups 2] [--keep]

(`make demo` runs this after setting up the virtual environment.)
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from hpcopt import Campaign, Client

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "examples/digits/campaign.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with code {proc.returncode} (see its output above)")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the server did not answer {url}/healthz within {timeout:.0f} s")


def mpiexec() -> str:
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if not found:
        raise SystemExit("mpiexec not found: `pip install mpich` (or load your cluster's MPI module)")
    return found


def agent_command(target: str, campaign: int, ranks: int, groups: int, workdir: Path) -> list[str]:
    # MPICH's hydra (the mpich wheel) runs more ranks than cores, and as root, without flags.
    return [
        mpiexec(),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "mpi4py",
        "-m",
        "hpcopt_agent",
        "--server",
        target,
        "--campaign",
        str(campaign),
        "--groups",
        str(groups),
        "--checkpoint-dir",
        str(workdir / "checkpoints"),
    ]


def progress(c: Campaign, t0: float, metric: str) -> str:
    done = sum(n for s, n in c.trial_counts.items() if s not in ("QUEUED", "RUNNING"))
    best = "-" if c.best_value is None else f"{c.best_value:.4f}"
    bar = "#" * (30 * done // c.max_trials)
    failed = c.trial_counts.get("FAILED", 0)
    extra = f"  failed {failed}" if failed else ""
    return (
        f"\r  [{bar:<30}] {done:>3}/{c.max_trials} trials  running {c.trial_counts.get('RUNNING', 0)}{extra}"
        f"  best {metric} {best}  {time.monotonic() - t0:5.1f} s"
    )


def leaderboard(client: Client, campaign_id: int, metric: str) -> None:
    c = client.get_campaign(campaign_id)
    trials = sorted(
        client.list_trials(campaign_id, ["COMPLETED"]), key=lambda t: float("inf") if t.value is None else t.value
    )
    if c.direction == "maximize":
        trials.reverse()
    print(f"\ncampaign {c.id} is {c.state}; the five best of {len(trials)} completed trials:")
    print(f"  {'trial':>6}  {metric + ' (mean ± std over folds)':>34}  params")
    for t in trials[:5]:
        params = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items())
        print(f"  {'#' + str(t.number):>6}  {t.value:>24.4f} ± {t.value_std:.4f}  {params}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4, help="MPI ranks of the agent (default 4)")
    ap.add_argument("--groups", type=int, default=2, help="trial groups: trials trained at once (default 2)")
    ap.add_argument("--trials", type=int, help="override the campaign's budget.max_trials")
    ap.add_argument("--workdir", type=Path, default=Path(".demo"))
    ap.add_argument("--keep", action="store_true", help="keep the server running at the end (Ctrl-C stops it)")
    args = ap.parse_args()

    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    spec = yaml.safe_load(CAMPAIGN.read_text())
    if args.trials:
        spec["budget"]["max_trials"] = args.trials
    metric = spec["objective"]["metric"]
    rest, grpc_port = free_port(), free_port()
    url = f"http://127.0.0.1:{rest}"
    print(f"starting the server: SQLite {args.workdir / 'hpcopt.db'}, REST :{rest}, gRPC :{grpc_port}", flush=True)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpcopt_server.cli",
            "serve",
            "--db",
            f"sqlite:///{args.workdir / 'hpcopt.db'}",
            "--port",
            str(rest),
            "--grpc-port",
            str(grpc_port),
            "--log-level",
            "warning",
        ],
        start_new_session=True,  # Ctrl-C reaches the demo only, which then stops the server in order
    )
    agent: subprocess.Popen[bytes] | None = None
    try:
        wait_healthy(url, server)
        target = f"127.0.0.1:{grpc_port}"
        with Client(target) as client:
            campaign = client.create_campaign(spec)
            log_path = args.workdir / "agent.log"
            print(
                f"submitted campaign {campaign.id} {campaign.name!r}: {campaign.max_trials} trials of "
                f"{campaign.algorithm}, {spec['folds']} folds each\n"
                f"agent: mpiexec -n {args.ranks}, {args.groups} trial groups (its output: {log_path})\n"
                f"dashboard: {url}/  (live while the demo runs{'; kept up at the end' if args.keep else ''})",
                flush=True,
            )
            with open(log_path, "wb") as log:
                agent = subprocess.Popen(
                    agent_command(target, campaign.id, args.ranks, args.groups, args.workdir),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                    start_new_session=True,
                )
                t0 = time.monotonic()
                tty, last = sys.stdout.isatty(), ""
                while agent.poll() is None:
                    line = progress(client.get_campaign(campaign.id), t0, metric)
                    if tty:
                        print(line, end="", flush=True)
                    elif line[:-9] != last[:-9]:  # in a log: one line per change, not per tick
                        print(line.lstrip("\r"), flush=True)
                    last = line
                    time.sleep(0.5)
                print(progress(client.get_campaign(campaign.id), t0, metric).lstrip("" if tty else "\r"), flush=True)
            if agent.returncode != 0:
                tail = log_path.read_text().splitlines()[-30:]
                print("\n".join(tail))
                print(f"the agent exited with code {agent.returncode}; its output: {log_path}")
                return 1
            leaderboard(client, campaign.id, metric)
            best = client.get_best_trial(campaign.id)
            print(f"\nbest trial: #{best.number} with {metric} {best.value:.4f} ± {best.value_std:.4f}")
        if args.keep:
            print(f"dashboard: {url}/   API docs: {url}/docs   (the server runs until Ctrl-C)", flush=True)
            server.wait()
        else:
            print("the demo's server has stopped; `make demo ARGS=--keep` (or run_demo.py --keep) keeps it up")
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the agent and the server", flush=True)
    finally:
        stop(agent, server)
    return 0


def stop(*procs: subprocess.Popen[bytes] | None) -> None:
    """Stops the agent, then the server (SIGTERM, then SIGKILL after 30 s); a second
    Ctrl-C meanwhile kills them at once rather than printing a traceback."""
    for proc in procs:
        if proc is None or proc.poll() is not None:
            continue
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())

"""The demo campaign, end to end: start a server on SQLite, submit the random-search
campaign, drive it with simulated agents until it finishes, print the leaderboard.

    python examples/demo/run_demo.py [--agents 4] [--keep]

(`make demo` runs this after setting up the virtual environment.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from simulated_agent import SimulatedAgent

from hpcopt import Client, param_values
from hpcopt.client import campaign_state

HERE = Path(__file__).resolve().parent


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--workdir", type=Path, default=Path(".demo"))
    ap.add_argument("--keep", action="store_true", help="keep the server running at the end (Ctrl-C stops it)")
    args = ap.parse_args()

    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    rest, grpc_port = free_port(), free_port()
    url = f"http://127.0.0.1:{rest}"
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
    )
    try:
        wait_healthy(url, server)
        target = f"127.0.0.1:{grpc_port}"
        with Client(target) as client:
            campaign = client.create_campaign(HERE / "campaign.yaml")
            print(
                f"submitted campaign {campaign.id} {campaign.name!r}: {campaign.max_trials} trials, "
                f"{args.agents} simulated agents",
                flush=True,
            )
            agents = [SimulatedAgent(target, campaign.id, name=f"sim-{i}") for i in range(args.agents)]
            threads = [threading.Thread(target=a.run, daemon=True) for a in agents]
            for t in threads:
                t.start()
            t0 = time.monotonic()
            while any(t.is_alive() for t in threads):
                c = client.get_campaign(campaign.id)
                done = sum(n for s, n in c.trial_counts.items() if s not in ("QUEUED", "RUNNING"))
                best = f"{c.best_value:.4f}" if c.HasField("best_value") else "-"
                bar = "#" * (30 * done // c.max_trials)
                print(
                    f"\r  [{bar:<30}] {done:>3}/{c.max_trials} trials  running {c.trial_counts.get('RUNNING', 0)}"
                    f"  best val_loss {best}  {time.monotonic() - t0:5.1f} s",
                    end="",
                    flush=True,
                )
                time.sleep(0.5)
            print()
            c = client.get_campaign(campaign.id)
            trials = sorted(client.iter_trials(campaign.id, ["COMPLETED"]), key=lambda t: t.value)
            print(f"\ncampaign {c.id} is {campaign_state(c.state)}; the five best of {len(trials)} trials:")
            print(f"  {'trial':>5}  {'val_loss':>17}  params")
            order = list(json.loads(c.spec_json)["space"])
            for t in trials[:5]:
                values = param_values(t)
                params = ", ".join(
                    f"{k}={values[k]:.3g}" if isinstance(values[k], float) else f"{k}={values[k]}" for k in order
                )
                print(f"  {t.id:>5}  {t.value:.4f} ± {t.value_std:.4f}  {params}")
            best = client.get_best_trial(campaign.id)
            print(f"\nbest trial: {best.id} with val_loss {best.value:.4f} ± {best.value_std:.4f}")
            where = "" if args.keep else " (while the server runs: add --keep)"
            print(f"dashboard: {url}/   API docs: {url}/docs{where}")
        if args.keep:
            print("server still running; Ctrl-C to stop")
            server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

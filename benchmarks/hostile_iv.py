# ruff: noqa: E501 - the probes are code run in processes of their own, kept whole
"""The hardening-IV probe's shapes, this tree against another checkout (the main a user
runs today), in one run: each probe runs in a process of its own with that checkout's
packages first on the path, and prints what it found.

    python benchmarks/hostile_iv.py --baseline-src /tmp/base

- ``pbt``: a PBT campaign (4 members x 3 intervals); one interval reports checkpoints
  it never wrote with the best value, then a real 4-rank agent trains the rest:
  intervals COMPLETED and FAILED.
- ``throughput``: an agent of campaign A reports ``8 ranks @ 1e308`` for campaign B:
  whether it is stored, and what ``GET /campaigns/B/throughput`` answers.
- ``owners``: another user's submit token pauses and re-budgets a campaign: the codes.
- ``embedded``: 4 processes open one fresh file with ``max_parallel: 2`` at once and
  run 40 trials: processes that failed, campaigns, trials.
- ``failing``: a task that always raises, 20 trials: how many ran before it stopped.
- ``notes``: 300 saves of 20,000 characters: the database's size.
- ``import``: a 2,000-trial import while an agent of another campaign heartbeats every
  0.5 s: the longest heartbeat, and whether its lease held.
- ``server-file``: a 0666 connection file: whether the client dialled what it names.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import json, os, sys, tempfile, time, socket, threading, copy
sys.path.insert(0, {root!r})
from tests.helpers.specs import make_spec
from tests.helpers.live import free_port
from tests.helpers.process import ServerProcess
from hpcopt_server.storage.migrate import upgrade
tmp = tempfile.mkdtemp()
def out(**kw): print("RESULT " + json.dumps(kw), flush=True)
"""

PROBES: dict[str, str] = {
    "throughput": """
import httpx
from hpcopt import AgentClient, Client
from hpcopt.core.planner import Point
db = f"sqlite:///{tmp}/t.db"; upgrade(db)
with ServerProcess(db, env=ENV) as s:
    with Client(s.grpc_target) as c:
        a = c.create_campaign(make_spec(name="a")).id; b = c.create_campaign(make_spec(name="b")).id
    with AgentClient(s.grpc_target) as ag:
        aid = ag.register(host="h", ranks=8, campaign_id=a).agent_id
        try:
            stored = ag.report_throughput(aid, b, [Point(8, 1, 1e308)], 90); said = "stored"
        except Exception as exc:
            stored, said = 0, str(exc).split(":")[0]
    r = httpx.get(f"{s.http_url}/api/v1/campaigns/{b}/throughput", timeout=30)
    out(report=said, get_status=r.status_code)
""",
    "owners": """
import httpx
from hpcopt_server.service import Service
from hpcopt_server.storage.repository import Storage
db = f"sqlite:///{tmp}/o.db"; upgrade(db)
st = Storage(db); svc = Service(st)
alice = svc.tokens.create("alice", ["submit"])[1]; bob = svc.tokens.create("bob", ["submit"])[1]; st.close()
with ServerProcess(db, env=ENV) as s:
    h = lambda t: {"authorization": f"Bearer {t}"}
    cid = httpx.post(f"{s.http_url}/api/v1/campaigns", json=make_spec(), headers=h(alice), timeout=30).json()["id"]
    p = httpx.post(f"{s.http_url}/api/v1/campaigns/{cid}/pause", headers=h(bob), timeout=30).status_code
    b = httpx.post(f"{s.http_url}/api/v1/campaigns/{cid}/budget", json={"max_trials": 1000000}, headers=h(bob), timeout=30).status_code
    out(pause_by_another=p, budget_by_another=b)
""",
    "embedded": """
import multiprocessing as mp
def work(path, barrier, q):
    try:
        from hpcopt_server import Study
        barrier.wait()
        spec = {"name": "shared", "objective": {"metric": "value", "direction": "minimize"},
                "space": {"x": {"type": "real", "low": 0.0, "high": 1.0}}, "algorithm": {"name": "random", "seed": 7},
                "budget": {"max_trials": 40, "max_parallel": 2}}
        with Study(path, spec) as study:
            study.optimize(lambda t: (t.params["x"] - 0.3) ** 2)
        q.put("ok")
    except BaseException as exc:
        q.put(type(exc).__name__)
if __name__ == "__main__":
    import sqlite3
    ctx = mp.get_context("fork"); path = f"{tmp}/e.db"; b = ctx.Barrier(4); q = ctx.Queue()
    ps = [ctx.Process(target=work, args=(path, b, q)) for _ in range(4)]
    [p.start() for p in ps]; got = [q.get(timeout=300) for _ in ps]; [p.join() for p in ps]
    with sqlite3.connect(path) as c:
        try:
            campaigns = c.execute("SELECT count(*) FROM campaigns").fetchone()[0]
            trials = c.execute("SELECT count(*) FROM trials").fetchone()[0]
        except sqlite3.Error:
            campaigns = trials = -1
    out(failed_processes=sum(g != "ok" for g in got), campaigns=campaigns, trials=trials)
""",
    "failing": """
from hpcopt_server import Study
spec = {"name": "typo", "objective": {"metric": "value", "direction": "minimize"},
        "space": {"x": {"type": "real", "low": 0.0, "high": 1.0}}, "algorithm": {"name": "random", "seed": 1},
        "budget": {"max_trials": 20, "max_parallel": 1}}
def objective(t):
    return undefined_name * t.params["x"]
with Study(f"{tmp}/f.db", spec) as study:
    try:
        study.optimize(objective, catch=(NameError,))
        stopped = "no"
    except RuntimeError as exc:
        stopped = "paused"
    c = study.campaign
    out(failed=c.trial_counts.get("FAILED", 0), state=c.state, stopped=stopped, error_chars=len(study.trials[0].error))
""",
    "notes": """
from hpcopt_server.service import Service
from hpcopt_server.storage.repository import Storage
path = f"{tmp}/n.db"; db = f"sqlite:///{path}"; upgrade(db); st = Storage(db); svc = Service(st)
cid = svc.campaigns.create(make_spec()).id
for v in range(300):
    svc.notes.save(cid, None, f"{v:06d}" + "y" * 19994, v)
st.close()
out(db_mb=round(os.path.getsize(path) / 1e6, 1))
""",
    "import": """
import httpx
from hpcopt import AgentClient
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Lease
from hpcopt_server.storage.repository import Storage
db = f"sqlite:///{tmp}/i.db"; upgrade(db); st = Storage(db); svc = Service(st)
c = svc.campaigns.create(make_spec(name="src", folds=2, budget={"max_trials": 1, "max_parallel": 1}))
ag = svc.agents.register(host="h", ranks=1, gpus=0).agent_id; g = svc.agents.acquire(ag, c.id); l = Lease(ag, g.trial.id, g.lease_id)
for step in range(1, 6): svc.agents.report_intermediate(l, 0, step, 1.0 / step)
svc.agents.report_fold(l, 0, 0.5); svc.agents.report_fold(l, 1, 0.6); svc.agents.complete(l)
doc = svc.export_campaign(c.id); one = doc["trials"][0]
doc["trials"] = [dict(copy.deepcopy(one), number=i) for i in range(2000)]; doc["spec"]["budget"]["max_trials"] = 2000
live = svc.campaigns.create(make_spec(name="live", folds=1)).id; st.close()
with ServerProcess(db, "--lease-seconds", "20", env=ENV) as s:
    with AgentClient(s.grpc_target, timeout=60) as a:
        aid = a.register(host="n", campaign_id=live).agent_id; lease = a.acquire(aid, live).lease
        worst, actions, stop = [0.0], [], threading.Event()
        def beat():
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    actions.append(a.heartbeat(lease))
                except Exception as exc:
                    actions.append(type(exc).__name__)
                worst[0] = max(worst[0], time.monotonic() - t0); stop.wait(0.5)
        th = threading.Thread(target=beat); th.start()
        t0 = time.monotonic(); r = httpx.post(f"{s.http_url}/api/v1/campaigns/import", json=doc, timeout=600); took = time.monotonic() - t0
        stop.set(); th.join()
        held = a.heartbeat(lease) == "continue"
    out(import_status=r.status_code, import_s=round(took, 1), longest_heartbeat_s=round(worst[0], 2), lease_held=held and set(actions) == {"continue"})
""",
    "server-file": """
import subprocess
srv = socket.create_server(("127.0.0.1", 0)); port = srv.getsockname()[1]; srv.settimeout(15)
folder = f"{tmp}/conf"; os.mkdir(folder, 0o700); path = f"{folder}/server.json"
info = {"version": 1, "grpc": f"127.0.0.1:{port}", "rest": f"http://127.0.0.1:{port}/", "host": "h", "pid": 1,
        "database": "sqlite://", "auth": True, "token_file": None, "started_at": "2026-12-01T00:00:00+00:00", "secret": "ab" * 32}
open(path, "w").write(json.dumps(info)); os.chmod(path, 0o666)
env = {**os.environ, **ENV, "HPCOPT_SERVER_FILE": path, "HPCOPT_TOKEN": "hpc_secret"}
cli = subprocess.Popen([sys.executable, "-m", "hpcopt.cli", "list"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
try:
    conn, _ = srv.accept(); dialled = True; conn.close()
except TimeoutError:
    dialled = False
cli.kill(); cli.wait()
out(dialled_the_named_address=dialled)
""",
    "pbt": """
import subprocess, socket as so
from hpcopt import AgentClient, Client
db = f"sqlite:///{tmp}/p.db"; upgrade(db)
spec = make_spec(name="pbt", space={"lr": {"type": "real", "low": 1e-4, "high": 0.3, "scale": "log"}, "width": {"type": "int", "low": 4, "high": 32}},
    algorithm={"name": "pbt", "seed": 5, "options": {"population": 4, "interval": 2, "mutable": ["lr"], "quantile": 0.5}},
    budget={"max_trials": 12, "max_parallel": 4}, folds=2, training={"task": "tests/agent/tasks.py:Regression", "epochs": 6, "ranks_per_fold": 1})
with ServerProcess(db, env=ENV) as s:
    with Client(s.grpc_target) as c:
        cid = c.create_campaign(spec).id
    root = f"{tmp}/ckpt"
    with AgentClient(s.grpc_target) as a:
        reg = a.register(host=so.gethostname(), ranks=1); got = a.acquire(reg.agent_id, cid)
        for k in range(2):
            a.report_fold(got.lease, k, 0.0, {"loss": 0.0}, f"file://{root}/{reg.server_id}/{cid}/{got.trial.id}/fold{k}.pt")
        a.complete(got.lease)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = {**os.environ, **ENV, "OMP_NUM_THREADS": "1"}
    subprocess.run([mpiexec, "-n", "4", sys.executable, "-m", "mpi4py", "-m", "hpcopt_agent", "--server", s.grpc_target,
                    "--campaign", str(cid), "--checkpoint-dir", root, "--threads", "1", "--groups", "4"],
                   env=env, cwd={root!r}, capture_output=True, timeout=600)
    with Client(s.grpc_target) as c:
        counts = c.get_campaign(cid).trial_counts
    out(completed=counts.get("COMPLETED", 0), failed=counts.get("FAILED", 0), of=12)
""",
}


def run(checkout: Path, name: str) -> dict[str, object]:
    path = f"{checkout}/client:{checkout}/server:{checkout}/agent"
    env_here = {"PYTHONPATH": path}
    code = (
        PRELUDE.format(root=str(ROOT))
        + f"ENV = {env_here!r}\n"
        + textwrap.dedent(PROBES[name]).replace("{root!r}", repr(str(ROOT)))
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": f"{path}:{ROOT}"},
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:200]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline-src", type=Path, required=True, help="the peer checkout (git worktree of main)")
    ap.add_argument("--probe", action="append", choices=list(PROBES), help="default: all")
    args = ap.parse_args()
    print(f"{'probe':<12} {'checkout':<10} found")
    for name in args.probe or list(PROBES):
        for who, path in (("baseline", args.baseline_src), ("this tree", ROOT)):
            print(f"running {name} on {who} ...", file=sys.stderr, flush=True)
            found = run(path, name)
            print(f"{name:<12} {who:<10} " + ", ".join(f"{k} {v}" for k, v in found.items()), flush=True)


if __name__ == "__main__":
    main()

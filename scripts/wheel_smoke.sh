#!/usr/bin/env bash
# Builds the three distributions (sdist, then the wheel from it) from this checkout and
# installs the wheels, not editable, into a fresh virtual environment that already holds
# torch, as a cluster's would; then proves pip left that torch alone and runs a smoke:
# `--version` of the three commands, a server, a 2-rank agent campaign, an ask/tell script.
#
#   bash scripts/wheel_smoke.sh [WORKDIR]      (default: a new temporary directory)
#
# The torch is $HPCOPT_SMOKE_TORCH (default torch==2.13.0, the CPU build on this project's
# machines; `torch` alone gives PyPI's newest, a CUDA build of several GB). Our own
# constraints are applied without their torch line, so that only the ranges decide.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d -t hpcopt-wheels.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
PY=${PYTHON:-python3}
step() { echo "== wheel smoke: $*"; }

step "building sdists and wheels into $work/dist"
for part in client server agent; do
  "$repo/.venv/bin/python" -m build --outdir "$work/dist" "$repo/$part" > "$work/build-$part.log" 2>&1 \
    || { tail -30 "$work/build-$part.log"; exit 1; }
done
ls -l "$work/dist"

step "metadata: dependency ranges, no exact pins"
"$repo/.venv/bin/python" - "$work/dist" <<'PYEOF'
import sys, zipfile
from pathlib import Path
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [l.split(":", 1)[1].strip() for l in meta.splitlines() if l.startswith("Requires-Dist:")]
    pinned = [r for r in requires if "==" in r.split(";")[0]]
    assert not pinned, f"{wheel.name} pins {pinned}"
    python = next(l for l in meta.splitlines() if l.startswith("Requires-Python:"))
    print(f"{wheel.name}: {python}; {len(requires)} requirements, all ranges")
PYEOF

step "a fresh venv that already holds torch"
"$PY" -m venv "$work/venv"
v="$work/venv/bin"
"$v/pip" install -q --upgrade pip > "$work/pip.log" 2>&1
grep -v -i '^torch==' "$repo/requirements/constraints.txt" > "$work/constraints.txt"
"$v/pip" install -q "${HPCOPT_SMOKE_TORCH:-torch==2.13.0}" >> "$work/pip.log" 2>&1 || { tail -20 "$work/pip.log"; exit 1; }
torch_before=$("$v/python" -W ignore -c 'import torch, hashlib, pathlib; p = pathlib.Path(torch.__file__); print(torch.__version__, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()[:16])')
echo "torch before: $torch_before"

step "pip's plan for the three wheels (pip install --dry-run --report)"
wheels=("$work"/dist/hpcopt-*.whl "$work"/dist/hpcopt_server-*.whl "$work"/dist/hpcopt_agent-*.whl)
"$v/pip" install --dry-run --quiet --report "$work/report.json" -c "$work/constraints.txt" \
  "${wheels[0]}" "${wheels[1]}[postgres]" "${wheels[2]}[mpich]" >> "$work/pip.log" 2>&1 \
  || { tail -20 "$work/pip.log"; exit 1; }
"$v/python" - "$work/report.json" <<'PYEOF'
import json, sys
plan = [i["metadata"]["name"].lower() for i in json.load(open(sys.argv[1]))["install"]]
assert "torch" not in plan and not any(n.startswith("nvidia-") for n in plan), f"pip would replace torch: {plan}"
print(f"pip would install {len(plan)} distributions, torch not among them")
PYEOF

step "installing the wheels (not editable)"
"$v/pip" install -q -c "$work/constraints.txt" \
  "${wheels[0]}" "${wheels[1]}[postgres]" "${wheels[2]}[mpich]" >> "$work/pip.log" 2>&1 \
  || { tail -20 "$work/pip.log"; exit 1; }
torch_after=$("$v/python" -W ignore -c 'import torch, hashlib, pathlib; p = pathlib.Path(torch.__file__); print(torch.__version__, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()[:16])')
echo "torch after:  $torch_after"
[ "$torch_before" = "$torch_after" ] || { echo "torch changed: $torch_before -> $torch_after"; exit 1; }
"$v/pip" check

step "the commands"
cd "$work"  # nothing of the checkout on sys.path from here on
for cmd in hpcopt hpcopt-server hpcopt-agent; do "$v/$cmd" --version; done
"$v/python" -c 'import hpcopt_agent, hpcopt_server, sys; assert "/site-packages/" in hpcopt_agent.__file__, hpcopt_agent.__file__'

step "server, a 2-rank agent campaign, an ask/tell script"
rest=$("$v/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
grpc=$("$v/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export HPCOPT_SERVER=127.0.0.1:$grpc
"$v/hpcopt-server" serve --db "sqlite:///$work/smoke.db" --port "$rest" --grpc-port "$grpc" --log-level warning \
  > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
"$v/hpcopt" wait --timeout 120
curl -fsS "http://127.0.0.1:$rest/" | grep -q "<title>" || { echo "the dashboard is not served"; exit 1; }
cat > "$work/smoke_task.py" <<'PYEOF'
import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpcopt_agent import Task


class Smoke(Task):
    def dataset(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 4, generator=g)
        return TensorDataset(x, x.sum(1, keepdim=True))

    def build(self, params):
        return nn.Linear(4, 1)

    def optimizer(self, params, model):
        return torch.optim.SGD(model.parameters(), lr=params["lr"])

    def loss(self, output, batch):
        return torch.nn.functional.mse_loss(output, batch[1])

    def evaluate(self, model, batches, params):
        with torch.no_grad():
            errors = [torch.nn.functional.mse_loss(model(x), y) for x, y in batches]
        return {"val_loss": float(torch.stack(errors).mean())}
PYEOF
cat > "$work/smoke.yaml" <<'PYEOF'
name: wheel-smoke
objective: {metric: val_loss, direction: minimize}
space:
  lr: {type: real, low: 0.001, high: 0.1, scale: log}
algorithm: {name: random, seed: 0}
budget: {max_trials: 2, max_parallel: 1}
folds: 2
training: {task: smoke_task.py:Smoke, epochs: 2}
PYEOF
campaign=$("$v/hpcopt" submit -q smoke.yaml)
"$v/mpiexec" -n 2 "$v/python" -m mpi4py -m hpcopt_agent --campaign "$campaign" --checkpoint-dir "$work/ck" \
  > "$work/agent.log" 2>&1 || { tail -30 "$work/agent.log"; exit 1; }
"$v/hpcopt" show "$campaign"
"$v/hpcopt" --json show "$campaign" | "$v/python" -c 'import json, sys; c = json.load(sys.stdin); assert c["state"] == "COMPLETED" and c["trial_counts"] == {"COMPLETED": 2}, c'
grep -q "trial #1 " "$work/agent.log" || { echo "the agent log names trials by number"; exit 1; }
"$v/python" - <<'PYEOF'
import hpcopt

spec = {
    "name": "wheel-smoke-asktell",
    "objective": {"metric": "f", "direction": "minimize"},
    "space": {"x": {"type": "real", "low": -2, "high": 2}},
    "algorithm": {"name": "bo", "seed": 0},
    "budget": {"max_trials": 4, "max_parallel": 1},
}
with hpcopt.Client() as c:
    campaign = c.create_campaign(spec)
    for trial in c.trials(campaign.id):
        trial.complete((trial.params["x"] - 1) ** 2)
    best = c.get_best_trial(campaign.id)
    assert isinstance(best.params, dict) and best.state == "COMPLETED", best
    print(f"ask/tell: best trial #{best.number} f={best.value:.4f} at {best.params}")
PYEOF
step "passed"

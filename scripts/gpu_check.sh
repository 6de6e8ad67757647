#!/usr/bin/env bash
# The GPU check: run on a machine with NVIDIA GPUs, from a checkout whose .venv has a
# CUDA build of torch (scripts/setup.sh, then `pip install torch` for the site's CUDA).
#
#   bash scripts/gpu_check.sh [WORKDIR]
#   bash scripts/gpu_check.sh --cpu [WORKDIR]   # a rehearsal on CPUs (2 ranks): the script's
#                                               # plumbing, not the GPU; the test suite runs it
#
# 1. What torch sees: devices, NCCL, bf16 support.
# 2. The calorimeter example as a campaign on CUDA, bf16 then fp16 (scheme allreduce, one
#    rank per GPU, at most 4): every fold COMPLETED with finite physics_distance; prints
#    each fold's samples/s and peak CUDA memory (the agent's own metrics).
# 3. The scheme equivalence checks (tests/agent/hier_check.py, ps_check.py) with CUDA
#    tensors, NCCL among them: they need a GPU per rank (NCCL refuses two ranks on one
#    GPU), so they run where there are 4 GPUs and are reported as not run elsewhere.
# Exits non-zero on any failure; prints "GPU CHECK OK" at the end.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cpu=0
if [ "${1:-}" = --cpu ]; then cpu=1; shift; fi
PY=${PYTHON:-$repo/.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
work=${1:-$(mktemp -d -t hpcopt-gpu.XXXXXX)}
mkdir -p "$work"
step() { echo "== gpu check: $*"; }

step "devices"
gpus=$(HPCOPT_CPU=$cpu "$PY" - <<'PYEOF'
import os, sys, torch
if os.environ["HPCOPT_CPU"] == "1":
    print("rehearsal on CPUs: 2 ranks, no CUDA metrics", file=sys.stderr)
    print(2)
    sys.exit()
assert torch.cuda.is_available(), "torch.cuda.is_available() is False: a CUDA build of torch and a GPU are needed"
n = torch.cuda.device_count()
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, bf16 {torch.cuda.is_bf16_supported()}", file=sys.stderr)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}", file=sys.stderr)
print(n)
PYEOF
)
ranks=$(( gpus < 4 ? gpus : 4 ))

step "calorimeter showers"
"$PY" examples/calorimeter/generate.py --out "$work/showers" --shards 8 --per-shard $(( cpu ? 24 : 64 )) > /dev/null

rest=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
grpc=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PY" -m hpcopt_server.cli serve --db "sqlite:///$work/gpu.db" --port "$rest" --grpc-port "$grpc" \
  --log-level warning > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
"$PY" -m hpcopt.cli --server "127.0.0.1:$grpc" wait --timeout 60 > /dev/null

for precision in bf16 fp16; do
  step "calorimeter campaign on $ranks GPU rank(s), $precision"
  campaign=$("$PY" - "$precision" "$ranks" "$cpu" "$work/gpu-$precision.yaml" <<'PYEOF'
import sys, yaml
spec = yaml.safe_load(open("examples/calorimeter/campaign.yaml"))
spec["name"] = f"gpu-check-{sys.argv[1]}"
spec["budget"] = {"max_trials": 2, "max_parallel": 1}
spec["folds"] = 2
spec["training"]["epochs"] = 2
spec["training"]["scheme"] = "allreduce"
spec["training"]["ranks_per_fold"] = int(sys.argv[2])
spec["training"]["options"].update(precision=sys.argv[1], cudnn_benchmark=True, loader={"workers": 2})
if sys.argv[3] == "1":  # the rehearsal: one small trial of one epoch
    spec["budget"]["max_trials"] = 1
    spec["training"]["epochs"] = 1
    spec["space"]["width"] = {"type": "categorical", "choices": [8]}
yaml.safe_dump(spec, open(sys.argv[4], "w"))
PYEOF
  "$PY" -m hpcopt.cli --server "127.0.0.1:$grpc" submit -q "$work/gpu-$precision.yaml")
  CALO_DATA="$work/showers" "$MPIEXEC" -n "$ranks" "$PY" -m mpi4py -m hpcopt_agent \
    --server "127.0.0.1:$grpc" --campaign "$campaign" --checkpoint-dir "$work/ckpt" 2> "$work/agent-$precision.log" \
    || { tail -40 "$work/agent-$precision.log"; exit 1; }
  HPCOPT_CPU=$cpu "$PY" - "$rest" "$campaign" <<'PYEOF'
import json, math, os, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}/api/v1"
get = lambda path: json.load(urllib.request.urlopen(base + path, timeout=30))
for t in get(f"/campaigns/{sys.argv[2]}/trials")["trials"]:
    trial = get(f"/trials/{t['id']}")
    assert trial["state"] == "COMPLETED", (trial["state"], trial.get("error"))
    for fold in trial["folds"]:
        m = fold["metrics"]
        assert math.isfinite(m["physics_distance"]), m
        peak = m.get("peak_cuda_memory_mb", 0.0)
        assert peak > 0 or os.environ["HPCOPT_CPU"] == "1", m
        print(f"  trial {t['id']} fold {fold['index']}: physics_distance {m['physics_distance']:.3f}, "
              f"{m['samples_per_second']:.0f} samples/s, peak CUDA memory {peak:.0f} MB")
PYEOF
done

if [ "$cpu" = 1 ]; then
  step "scheme equivalence checks: the test suite runs them on CPUs"
elif [ "$gpus" -ge 4 ]; then
  for check in "hier_check hier" "ps_check tree" "ps_check degenerate"; do
    set -- $check
    step "scheme equivalence on CUDA: $1 $2 (4 ranks, NCCL)"
    "$MPIEXEC" -n 4 "$PY" -m mpi4py "tests/agent/$1.py" "$2" > "$work/$1-$2.log" 2>&1 \
      || { tail -40 "$work/$1-$2.log"; exit 1; }
    grep "^OK\|ALL OK" "$work/$1-$2.log"
  done
else
  step "scheme equivalence checks NOT RUN: they need 4 GPUs (one per rank for NCCL); this machine has $gpus"
fi
echo "GPU CHECK OK"

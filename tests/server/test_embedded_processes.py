"""The embedded mode in several processes on one SQLite file, started at the same moment
(a barrier), as a user runs one script on several cores: 4 and 8 processes, on a fresh
file and on one whose campaign has run already, with ``max_parallel`` below and above
the process count. Afterwards the file holds one campaign with exactly ``max_trials``
trials, every number once, all COMPLETED, and every process ended normally: the schema
was created once, the campaign opened once, and an ``ask()`` that found the slots held
by the others waited instead of failing."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.env import scaled

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAX_TRIALS = 40


def _spec(max_parallel: int) -> dict[str, Any]:
    return {
        "name": "shared",
        "objective": {"metric": "value", "direction": "minimize"},
        "space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
        "algorithm": {"name": "random", "seed": 7},
        "budget": {"max_trials": MAX_TRIALS, "max_parallel": max_parallel},
    }


def _work(path: str, spec: dict[str, Any], barrier: Any, out: Any) -> None:
    """One process: opens the study when every process is ready, asks and tells until
    the budget is spent."""
    try:
        from hpcopt_server import Study

        barrier.wait(timeout=scaled(300))
        told = 0
        with Study(path, spec) as study:
            while True:
                trial = study.ask(timeout=scaled(240))
                if trial is None:
                    break
                time.sleep(0.02)  # hold it a moment, so the processes overlap
                study.tell(trial, (float(trial.params["x"]) - 0.3) ** 2)
                told += 1
        out.put(("ok", told))
    except BaseException as exc:  # reported to the test, whatever it is
        import traceback

        out.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"))


@pytest.mark.parametrize(
    ("processes", "existing", "max_parallel"),
    # Each of 4 and 8 processes, fresh and existing file, max_parallel below (2) and above
    # (16) the process count, with each one twice (half the 8 combinations' time).
    [(4, False, 2), (8, False, 16), (4, True, 16), (8, True, 2)],
    ids=["4-fresh-below", "8-fresh-above", "4-existing-above", "8-existing-below"],
)
def test_processes_on_one_file_share_one_campaign_and_its_budget(
    tmp_path: Path, processes: int, existing: bool, max_parallel: int
) -> None:
    path = str(tmp_path / "shared.db")
    spec = _spec(max_parallel)
    before = 0
    if existing:
        from hpcopt_server import Study

        with Study(path, spec) as study:
            study.optimize(lambda t: float(t.params["x"]), n_trials=5)
        before = 5
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_work, args=(path, spec, barrier, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [out.get(timeout=scaled(540)) for _ in procs]
    for p in procs:
        p.join(timeout=scaled(60))
    errors = [r for r in results if r[0] != "ok"]
    assert not errors, errors
    assert before + sum(int(n) for _, n in results) == MAX_TRIALS
    with sqlite3.connect(path) as db:
        campaigns = db.execute("SELECT id, name FROM campaigns").fetchall()
        assert len(campaigns) == 1, campaigns
        rows = db.execute("SELECT number, state FROM trials WHERE campaign_id = ?", (campaigns[0][0],)).fetchall()
    numbers = sorted(n for n, _ in rows)
    assert numbers == list(range(MAX_TRIALS)), numbers  # exactly the budget, each number once
    assert {s for _, s in rows} == {"COMPLETED"}  # nothing lost or left running

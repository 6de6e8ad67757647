"""``hpcopt plan`` as a user runs it (no server: ``--throughput`` with the digits
example's measured points): what it says when no layout finishes a trial, ``--strict``,
and the finish column in units a person reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpcopt.cli import main
from hpcopt.cli.plan import duration
from tests.helpers.env import ROOT

PLAN = [
    "plan",
    str(ROOT / "examples/digits/campaign.yaml"),
    "--nodes",
    "2",
    "--ranks-per-node",
    "4",
    "--throughput",
    str(ROOT / "examples/digits/throughput.json"),
]


def _run(capsys: Any, *extra: str) -> tuple[int, str, str]:
    rc = main([*PLAN, *extra])
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_a_walltime_no_layout_fits_a_trial_in_says_so_once_and_strict_exits_1(capsys: Any) -> None:
    # The review's case: a plan where no layout finishes a trial by the deadline printed
    # a table of zeros without a word.
    rc, out, _ = _run(capsys, "--hours", "0.0001")
    assert rc == 0
    warnings = [ln for ln in out.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "no layout finishes a trial in 0.0001 h" in warnings[0], out
    assert "fastest" in warnings[0] and "a trial" in warnings[0]
    rc, out, err = _run(capsys, "--hours", "0.0001", "--strict")
    assert rc == 1 and "warning: no layout finishes a trial" in out and "--strict" in err
    rc, out, _ = _run(capsys, "--hours", "0.0001", "--json")
    assert rc == 0 and json.loads(out)["warning"].startswith("no layout finishes a trial")
    # With an hour every layout finishes trials: no warning, and --strict passes.
    rc, out, _ = _run(capsys, "--hours", "1", "--strict")
    assert rc == 0 and "warning" not in out
    assert json.loads(_run(capsys, "--hours", "1", "--json")[1])["warning"] is None


def test_the_finish_column_is_in_units_a_person_reads(capsys: Any) -> None:
    rc, out, _ = _run(capsys)
    assert rc == 0
    rows = [ln.split() for ln in out.splitlines() if ln.strip()[:1].isdigit() and len(ln.split()) == 8]
    assert rows, out
    # Minutes here (about 2 to 5 of them), never thousandths of an hour; the first
    # results come in seconds or minutes.
    assert all(row[6].endswith("min") for row in rows), rows
    assert all(row[5].endswith(("s", "min")) for row in rows), rows


@pytest.mark.parametrize(
    ("seconds", "text"), [(41.0, "41s"), (750.0, "12.5min"), (3 * 3600.0, "3h"), (4 * 86400.0, "4d")]
)
def test_durations_are_one_token_in_the_largest_unit_below_one_and_a_half(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_layouts_far_outside_the_measured_widths_are_labelled_and_rank_after_them(capsys: Any, tmp_path: Path) -> None:
    # The review's case: with one measured width (`plan --probe` measures one rank), the
    # top row was 50-rank folds by assumed perfect scaling.
    spec = yaml.safe_load((ROOT / "examples/digits/campaign.yaml").read_text())
    spec["training"].pop("ranks_per_fold", None)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    one = {"points": [{"ranks": 1, "nodes": 1, "samples_per_second": 9000.0, "source": "probe"}], "train_samples": 1348}
    (tmp_path / "one.json").write_text(json.dumps(one))
    argv = ["plan", str(tmp_path / "spec.yaml"), "--nodes", "8", "--ranks-per-node", "8", "--trials", "4"]
    assert main([*argv, "--throughput", str(tmp_path / "one.json"), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["layouts"]
    far = [p for p in table if p["extrapolated"]]
    assert far and all(p["ranks_per_fold"] > 2 for p in far)  # more than 2x the one rank measured
    assert not table[0]["extrapolated"] and table[0]["ranks_per_fold"] <= 2, table[0]
    first_far = table.index(far[0])
    assert all(p["extrapolated"] for p in table[first_far:])  # every measured width ranks first
    assert main([*argv, "--throughput", str(tmp_path / "one.json")]) == 0
    out = capsys.readouterr().out
    assert "extrapolated: ranks per fold more than 2x outside the measured widths (1)" in out, out
    # Measured at 1 and 8 ranks, 8 and 16 are covered; 64 is not.
    one["points"].append({"ranks": 8, "nodes": 1, "samples_per_second": 40000.0, "source": "probe"})
    (tmp_path / "two.json").write_text(json.dumps(one))
    assert main([*argv, "--throughput", str(tmp_path / "two.json"), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["layouts"]
    assert {p["ranks_per_fold"] for p in table if p["extrapolated"]} == {32, 64}


def test_a_reader_that_leaves_the_pipe_early_is_no_error(capsys: Any, monkeypatch: Any) -> None:
    # `hpcopt show 1 | head` printed "[Errno 32] Broken pipe" (an OSError taken for a
    # bad file). The console script ends quietly instead, with status 0.
    import io
    import os
    import sys

    from hpcopt.cli import entry

    read, write = os.pipe()
    os.close(read)  # the reader is gone: every write raises BrokenPipeError
    broken = io.TextIOWrapper(os.fdopen(write, "wb", buffering=0), write_through=True)
    monkeypatch.setattr(sys, "argv", ["hpcopt", *PLAN])
    monkeypatch.setattr(sys, "stdout", broken)
    with pytest.raises(SystemExit) as done:
        entry()
    assert done.value.code == 0
    err = capsys.readouterr().err
    assert "Broken pipe" not in err and "Errno" not in err and "Traceback" not in err, err

"""Campaign spec validation: what is accepted, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpcopt.spec import SpecError, parse_spec
from hpcopt.specfile import load_spec_file, locate
from tests.conftest import ROOT, make_spec


def _errors(spec: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    return err.value.errors


def test_a_full_spec_gets_its_defaults() -> None:
    spec = parse_spec({**make_spec(), "algorithm": "random"})
    assert spec.algorithm.name == "random" and spec.algorithm.seed is None
    assert spec.training.scheme == "allreduce" and spec.training.ranks_per_fold == 1
    assert spec.space["lr"].scale == "log"  # type: ignore[union-attr]


def test_the_example_specs_are_valid() -> None:
    for path in ROOT.glob("examples/**/*.yaml"):
        load_spec_file(path)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"space": {"lr": {"type": "real", "low": 0, "high": 1, "scale": "log"}}}, "space.lr", "must be > 0"),
        ({"space": {"lr": {"type": "real", "low": 2, "high": 1}}}, "space.lr", "must be smaller than high"),
        ({"space": {"lr": {"type": "float", "low": 0, "high": 1}}}, "space.lr", "'real', 'int', 'categorical'"),
        ({"space": {"a": {"type": "categorical", "choices": []}}}, "space.a.choices", "at least 1"),
        ({"space": {"a": {"type": "categorical", "choices": ["x", "x"]}}}, "space.a", "distinct"),
        ({"space": {"bad name": {"type": "int", "low": 0, "high": 1}}}, "space.bad name.[key]", "pattern"),
        ({"space": {}}, "space", "at least 1"),
        ({"objective": {"metric": "loss", "direction": "up"}}, "objective.direction", "'minimize' or 'maximize'"),
        ({"algorithm": {"name": "magic"}}, "algorithm.name", "'random'"),
        ({"budget": {"max_trials": 5, "max_parallel": 0}}, "budget.max_parallel", "greater than or equal to 1"),
        ({"folds": 0}, "folds", "greater than or equal to 1"),
        ({"training": {"task": "t", "scheme": "magic"}}, "training.scheme", "'allreduce'"),
        ({"colour": "blue"}, "colour", "unknown field"),
    ],
)
def test_errors_name_the_field_and_what_is_allowed(change: dict[str, Any], field: str, message: str) -> None:
    errors = _errors({**make_spec(), **change})
    assert any(f == field and message in m for f, m in errors), errors


def test_a_document_that_is_not_a_mapping_is_refused() -> None:
    assert _errors([1, 2]) == [("", "a campaign spec must be a mapping, not list")]  # type: ignore[arg-type]


def test_locate_finds_the_line_of_a_field(tmp_path: Path) -> None:
    text = "name: x\nspace:\n  lr:\n    type: real\n    low: 5\n"
    assert locate(text, "space.lr.low") == (5, 10)
    assert locate(text, "space.lr.missing") == (4, 5)
    assert locate(text, "budget") == (1, 1)

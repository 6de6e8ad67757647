"""Campaign spec validation: what is accepted, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpcopt.documents import MAX_DEPTH, DocumentError, parse_document
from hpcopt.spec import MAX_SPEC_BYTES, SpecError, parse_spec
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
        # Scheme knobs and the layouts they make, refused at submission (hpcopt.schemes).
        ({"training": {"task": "t", "scheme": "easgd", "ranks_per_fold": 1}}, "training.ranks_per_fold", "at least 2"),
        (
            {
                "training": {
                    "task": "t",
                    "scheme": "easgd",
                    "ranks_per_fold": 4,
                    "options": {"easgd": {"sub_masters": 2}},
                }
            },
            "training.options.easgd.sub_masters",
            "2 sub-masters need at least 5 ranks per fold (a master, 2 sub-masters and a worker each); "
            "ranks_per_fold is 4: use sub_masters <= 1 or ranks_per_fold >= 5",
        ),
        (
            {"training": {"task": "t", "scheme": "easgd", "ranks_per_fold": 3, "options": {"easgd.tau": 0}}},
            "training.options.easgd.tau",
            "must be an integer >= 1 and <= 1e+06, got 0",
        ),
        (
            {"training": {"task": "t", "scheme": "gem", "ranks_per_fold": 3, "options": {"gem": {"kapa": 2}}}},
            "training.options.gem.kapa",
            "unknown knob for gem; allowed: sub_masters, max_staleness, order, sync_every, lr, momentum, kappa",
        ),
        (
            {
                "training": {
                    "task": "t",
                    "scheme": "downpour",
                    "ranks_per_fold": 4,
                    "options": {"downpour": {"max_staleness": 1}},
                }
            },
            "training.options.downpour.max_staleness",
            "1 cannot be kept: a master serving 3 workers sees each push at least 2 updates late",
        ),
        (
            {
                "training": {
                    "task": "t",
                    "scheme": "easgd",
                    "ranks_per_fold": 2,
                    "options": {"easgd": {"order": "fifo"}},
                }
            },
            "training.options.easgd.order",
            "must be one of arrival, round_robin; got 'fifo'",
        ),
        (
            {
                "training": {
                    "task": "t",
                    "scheme": "easgd",
                    "ranks_per_fold": 2,
                    "options": {"easgd": {"beta": float("nan")}},
                }
            },
            "training.options.easgd.beta",
            "must be a finite number, not nan",
        ),
        (
            {"training": {"task": "t", "scheme": "downpour", "ranks_per_fold": 2, "options": {"downpour": 3}}},
            "training.options.downpour",
            "must be a mapping of knobs, got 3",
        ),
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


def _document_errors(text: str, yaml_syntax: bool = True, max_bytes: int = 10**6) -> str:
    with pytest.raises(DocumentError) as err:
        parse_document(text, yaml_syntax=yaml_syntax, max_bytes=max_bytes)
    return str(err.value)


def test_documents_are_refused_before_they_cost_anything() -> None:
    assert "alias" in _document_errors("a: &x [1, 2]\nb: *x\n")
    assert "at most 10 are accepted" in _document_errors("a: 12345678901", max_bytes=10)
    deep_yaml = "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    assert f"deeper than {MAX_DEPTH}" in _document_errors(deep_yaml)
    assert f"deeper than {MAX_DEPTH}" in _document_errors("[" * 100_000 + "]" * 100_000, yaml_syntax=False)
    assert f"deeper than {MAX_DEPTH}" in _document_errors("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), False)
    assert "a.b.0: must be a finite number" in _document_errors('{"a": {"b": [NaN]}}', yaml_syntax=False)
    assert "x: must be a finite number" in _document_errors("x: -.inf")
    assert "must not contain NUL" in _document_errors('{"a": "x\\u0000y"}', yaml_syntax=False)
    assert "not valid JSON" in _document_errors("{", yaml_syntax=False)
    # Within the limits, a document parses as usual (anchors without aliases are harmless).
    assert parse_document("a: &x [1, 2]\n", yaml_syntax=True, max_bytes=100) == {"a": [1, 2]}
    depth_ok = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert parse_document(depth_ok, yaml_syntax=False, max_bytes=1000) is not None


def test_spec_limits_name_the_field() -> None:
    [(field, message)] = _errors(make_spec(space={f"x{i}": {"type": "real", "low": 0, "high": 1} for i in range(101)}))
    assert field == "space" and "at most 100 items" in message
    choices = make_spec(space={"c": {"type": "categorical", "choices": list(range(1001))}})
    assert [p for p, _ in _errors(choices)] == ["space.c.choices"]
    assert [p for p, _ in _errors(make_spec(algorithm={"name": "random", "seed": -1}))] == ["algorithm.seed"]
    big = make_spec(training={"task": "t", "options": {"blob": "x" * MAX_SPEC_BYTES}})
    assert f"at most {MAX_SPEC_BYTES} are accepted" in _errors(big)[0][1]
    long_name = _errors(make_spec(space={"p" * 8000: {"type": "real", "low": 0, "high": 1}}))
    assert all(len(p) < 200 for p, _ in long_name)  # the name is not echoed whole


def test_a_spec_file_with_an_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("a: &a [1, 2]\nname: *a\n")
    with pytest.raises(SpecError, match="alias"):
        load_spec_file(path)

"""The option tables: every algorithm's and pruner's declared option is what submission
checks (a bad value of each is refused, naming its field, before the campaign exists),
what the class reads (its default builds), and nothing else is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from hpcopt.core.options import Option
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.optimizers import REGISTRY as ALGORITHMS
from hpcopt_server.pruners import REGISTRY as PRUNERS
from hpcopt_server.service.campaigns import validate_spec
from tests.helpers.specs import make_spec


def _bad_values(o: Option) -> list[Any]:
    """Values the declaration refuses: past each bound, of the wrong kind, not a choice."""
    if o.kind is bool:
        return [1, "yes"]
    if o.kind is str:
        return ["surely-not-a-choice", 3]
    if o.kind is dict:
        return [[1, 2]] if o.default is None else []  # fold's within also takes a name: its own test
    out: list[Any] = ["ten", True, float("nan")]
    if o.low is not None:
        out.append(o.low if o.open_low else o.low - 1)
    if o.high is not None:
        out.append(o.high + 1)
    if o.kind is int:
        out.append((o.low or 0) + 1.5)
    return out


CASES = [
    ("algorithm", name, option, value)
    for name, cls in ALGORITHMS.items()
    for option, o in getattr(cls, "OPTIONS", {}).items()
    for value in _bad_values(o)
] + [
    ("pruner", name, option, value)
    for name, cls in PRUNERS.items()
    for option, o in cls.OPTIONS.items()
    for value in _bad_values(o)
]


def _spec(where: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
    part = {"name": name, "options": options}
    if where == "algorithm" and name == "pbt":  # its budget is population x intervals: 4 x 2 epochs
        return make_spec(algorithm={**part, "seed": 1}, budget={"max_trials": 8, "max_parallel": 4})
    if where == "algorithm":
        return make_spec(algorithm={**part, "seed": 1})
    return make_spec(pruner=part, training={"task": "tests:task", "epochs": 8})


@pytest.mark.parametrize(("where", "name", "option", "value"), CASES, ids=lambda v: str(v))
def test_a_bad_value_of_every_declared_option_is_refused_by_name(
    where: str, name: str, option: str, value: Any
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        validate_spec(_spec(where, name, {option: value}))
    assert refused.value.errors[0][0] == f"{where}.options.{option}", refused.value.errors


def test_every_declared_default_builds_and_unknown_options_are_refused() -> None:
    assert len(CASES) > 60, "the tables were not found"
    for where, registry in (("algorithm", ALGORITHMS), ("pruner", PRUNERS)):
        for name, cls in registry.items():
            declared: dict[str, Option] = getattr(cls, "OPTIONS", {})
            for option, o in declared.items():
                assert o.doc, f"{where} {name}: option {option} has no doc"
                if o.default is not None and o.kind is not dict:
                    assert o.check(option, o.default) == o.default
            validate_spec(_spec(where, name, {}))  # every default, as the class reads it
            given = {k: o.default for k, o in declared.items() if o.default is not None}
            validate_spec(_spec(where, name, given))  # the defaults, written out
            with pytest.raises(InvalidArgument) as refused:
                validate_spec(_spec(where, name, {"surely_not_an_option": 1}))
            assert refused.value.errors[0][0] == f"{where}.options.surely_not_an_option"

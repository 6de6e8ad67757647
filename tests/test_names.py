"""The names a spec may use are said once (``hpcopt.core.names``) and tied here to the
registries that run them: a new optimizer, pruner or scheme added to its registry but
not to the list (or the other way round) fails with its name."""

from __future__ import annotations

import pytest

from hpcopt.core.names import ALGORITHMS, PRUNERS, SCHEME_CHOICES, SCHEMES
from hpcopt.core.spec import parse_spec
from hpcopt.errors import SpecError
from tests.helpers.specs import make_spec


def _differ(listed: tuple[str, ...], registry: object, where: str) -> str:
    names = set(registry)  # type: ignore[call-overload]
    return f"hpcopt.core.names lacks {sorted(names - set(listed))}; {where} lacks {sorted(set(listed) - names)}"


def test_the_algorithms_are_the_servers_optimizers() -> None:
    from hpcopt_server.optimizers import REGISTRY

    assert set(ALGORITHMS) == set(REGISTRY), _differ(ALGORITHMS, REGISTRY, "hpcopt_server.optimizers.REGISTRY")


def test_the_pruners_are_the_servers_pruners() -> None:
    from hpcopt_server.pruners import REGISTRY

    assert set(PRUNERS) == set(REGISTRY), _differ(PRUNERS, REGISTRY, "hpcopt_server.pruners.REGISTRY")


def test_the_schemes_are_the_agents_schemes() -> None:
    from hpcopt_agent.schemes import SCHEMES as AGENT_SCHEMES

    assert set(SCHEMES) == set(AGENT_SCHEMES), _differ(SCHEMES, AGENT_SCHEMES, "hpcopt_agent.schemes.SCHEMES")
    assert set(SCHEME_CHOICES) == set(SCHEMES) | {"search"}


@pytest.mark.parametrize(
    ("field", "names"), [("algorithm", ALGORITHMS), ("pruner", PRUNERS)], ids=["algorithm", "pruner"]
)
def test_a_spec_takes_each_listed_name_and_refuses_another_naming_the_field(field: str, names: tuple[str, ...]) -> None:
    for name in names:
        options = {"population": 4} if name == "pbt" else {}
        extra = {"training": {"task": "tests:task", "epochs": 4}} if name == "pbt" else {}
        assert (
            parse_spec(make_spec(**{field: {"name": name, "options": options}}, **extra)).model_dump()[field]["name"]
            == name
        )
    with pytest.raises(SpecError) as err:
        parse_spec(make_spec(**{field: {"name": "not-one"}}))
    assert f"{field}.name" in str(err.value) and names[0] in str(err.value), str(err.value)


def test_a_spec_takes_each_scheme_and_refuses_another_naming_the_field() -> None:
    for name in SCHEMES:
        spec = parse_spec(make_spec(training={"task": "tests:task", "epochs": 2, "scheme": name}))
        assert spec.training.scheme == name
    with pytest.raises(SpecError) as err:
        parse_spec(make_spec(training={"task": "tests:task", "scheme": "not-one"}))
    assert "training.scheme" in str(err.value) and SCHEMES[0] in str(err.value), str(err.value)

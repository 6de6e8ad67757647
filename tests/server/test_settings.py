"""``serve``'s flags are the declarations of ServerSettings and RequestLimits: each has
its environment default, a value out of its bounds is refused naming the flag, and no
flag is added by hand beside them."""

from __future__ import annotations

import argparse

import pytest

from hpcopt_server.cli import parser
from hpcopt_server.service.limits import RequestLimits
from hpcopt_server.settings import Flag, OptionError, ServerSettings, env_name, flag_name, flags_of, from_args

DECLARED = [(cls, name, flag) for cls in (ServerSettings, RequestLimits) for name, flag in flags_of(cls)]


def _serve(*argv: str) -> argparse.Namespace:
    return parser().parse_args(["serve", *argv])


def test_no_flag_given_is_every_declared_default() -> None:
    args = _serve()
    assert from_args(ServerSettings, args) == ServerSettings()
    assert from_args(RequestLimits, args) == RequestLimits()


def test_every_serve_flag_is_declared_once() -> None:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    given = {o for a in sub._actions for o in a.option_strings if a.help != argparse.SUPPRESS} - {"-h", "--help"}
    declared = [flag_name(name, flag) for _, name, flag in DECLARED]
    assert sorted(declared) == sorted(given) and len(set(declared)) == len(declared)


@pytest.mark.parametrize(("cls", "name", "flag"), DECLARED, ids=[flag_name(n, f) for _, n, f in DECLARED])
def test_each_flag_reads_its_environment_and_refuses_what_its_declaration_refuses(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, flag: object
) -> None:

    assert isinstance(flag, Flag)
    o, variable = flag.option, env_name(name, flag)
    if o.kind is bool:
        monkeypatch.setenv(variable, "1")
        assert getattr(from_args(cls, _serve()), name) is True
        return
    good = o.choices[-1] if o.choices else ("x.db" if o.kind is str else o.high or (o.low or 0) + 3)
    monkeypatch.setenv(variable, str(good))
    assert getattr(from_args(cls, _serve()), name) == (good if o.kind is str else o.kind(good))
    monkeypatch.delenv(variable)
    if o.kind in (int, float) and o.low is not None:
        below = o.low if o.open_low else o.low - 1
        with pytest.raises(OptionError) as refused:
            from_args(cls, _serve(flag_name(name, flag), str(o.kind(below))))
        assert refused.value.field == flag_name(name, flag)

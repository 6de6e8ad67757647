"""Campaign spec validation: what is accepted, and errors that name the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcopt.core.documents import MAX_DEPTH, parse_document
from hpcopt.core.spec import MAX_SPEC_BYTES, parse_spec, spec_to_json_dict
from hpcopt.core.specfile import load_spec_file, locate
from hpcopt.errors import DocumentError, SpecError
from tests.helpers.env import ROOT, scaled
from tests.helpers.specs import make_spec


def _when(when: dict[str, Any], parent: dict[str, Any] | None = None, missing: bool = False) -> dict[str, Any]:
    """A space whose ``m`` has ``when``, beside a categorical ``opt`` (``parent`` replaces it)."""
    space: dict[str, Any] = {
        "lr": {"type": "real", "low": 0.01, "high": 1},
        "act": {"type": "categorical", "choices": ["relu"]},
        "opt": parent or {"type": "categorical", "choices": ["sgd", "adam"]},
    }
    if missing:
        del space["opt"]
    space["m"] = {"type": "real", "low": 0, "high": 1, "when": when}
    return {"space": space}


def _search(search: dict[str, Any], ranks: int = 4) -> dict[str, Any]:
    return {"training": {"task": "t:T", "ranks_per_fold": ranks, "scheme": {"search": {"allreduce": {}, **search}}}}


def _errors(spec: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    return err.value.errors


def test_a_full_spec_gets_its_defaults() -> None:
    spec = parse_spec({**make_spec(), "algorithm": "random"})
    assert spec.algorithm.name == "random" and spec.algorithm.seed is None
    # ranks_per_fold unset: the agent's planner chooses it (issue 61).
    assert (spec.training.scheme, spec.training.ranks_per_fold) == ("allreduce", None)
    assert spec.space["lr"].scale == "log"  # type: ignore[union-attr]


def test_an_analysis_is_kept_as_given_and_left_out_of_the_canonical_form_when_absent() -> None:
    given = {"hessian": {"top_k": 2}, "max_share": 0.05}
    assert parse_spec({**make_spec(), "analysis": given}).analysis == given
    assert "analysis" not in spec_to_json_dict(parse_spec(make_spec()))


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
        ({"training": {"task": "t:T", "scheme": "magic"}}, "training.scheme", "'allreduce'"),
        ({"colour": "blue"}, "colour", "unknown field"),
        # Scheme knobs and the layouts they make, refused at submission (hpcopt.core.schemes).
        (
            {"training": {"task": "t:T", "scheme": "easgd", "ranks_per_fold": 1}},
            "training.ranks_per_fold",
            "at least 2",
        ),
        (
            {
                "training": {
                    "task": "t:T",
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
            {"training": {"task": "t:T", "scheme": "easgd", "ranks_per_fold": 3, "options": {"easgd.tau": 0}}},
            "training.options.easgd.tau",
            "must be an integer >= 1 and <= 1000000, got 0",
        ),
        (
            {"training": {"task": "t:T", "scheme": "gem", "ranks_per_fold": 3, "options": {"gem": {"kapa": 2}}}},
            "training.options.gem.kapa",
            "unknown knob for gem; allowed: sub_masters, max_staleness, order, worker_ranks, sync_every, lr, "
            "momentum, kappa",
        ),
        (
            {
                "training": {
                    "task": "t:T",
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
                    "task": "t:T",
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
                    "task": "t:T",
                    "scheme": "easgd",
                    "ranks_per_fold": 2,
                    "options": {"easgd": {"beta": float("nan")}},
                }
            },
            "training.options.easgd.beta",
            "must be a finite number, not nan",
        ),
        (
            {
                "training": {
                    "task": "t:T",
                    "scheme": "downpour",
                    "ranks_per_fold": 3,
                    "options": {"downpour": {"synchronous": True, "sync_fraction": 0}},
                }
            },
            "training.options.downpour.sync_fraction",
            "must be a number > 0 and <= 1, got 0",
        ),
        (
            {"training": {"task": "t:T", "scheme": "easgd", "ranks_per_fold": 3, "options": {"easgd.momentum": 1.5}}},
            "training.options.easgd.momentum",
            "must be a number > 0 and <= 1, or null, got 1.5",
        ),
        (
            {"training": {"task": "t:T", "scheme": "downpour", "ranks_per_fold": 2, "options": {"downpour": 3}}},
            "training.options.downpour",
            "must be a mapping of knobs, got 3",
        ),
        # Conditional parameters.
        (_when({"opt": ["sgd"]}, missing=True), "space.m.when.opt", "names no parameter of the space"),
        (_when({"opt": ["rmsprop"]}), "space.m.when.opt", "'rmsprop' is not a choice of opt; choices: ['sgd', 'adam']"),
        (_when({"lr": [0.1]}), "space.m.when.lr", "must name a categorical parameter; lr is real"),
        (_when({"m": [0.5]}), "space.m.when.m", "a parameter cannot depend on itself"),
        (_when({"opt": []}), "space.m.when.opt", "must list at least one of the choices of opt"),
        (
            _when({"opt": ["sgd"]}, parent={"type": "categorical", "choices": ["sgd"], "when": {"act": ["relu"]}}),
            "space.m.when.opt",
            "opt is itself conditional",
        ),
        # The scheme as a searched parameter: layouts that cannot fit, unknown schemes and knobs.
        (
            _search({"daso": {"node_size": {"type": "categorical", "choices": [2, 3]}}}),
            "training.scheme.search.daso.node_size",
            "node_size=3 does not divide ranks_per_fold=4; values that fit: 1, 2, 4",
        ),
        (
            _search({"easgd": {"sub_masters": {"type": "int", "low": 0, "high": 2}}}),
            "training.scheme.search.easgd.sub_masters",
            "2 sub-masters need at least 5 ranks per fold",
        ),
        (
            _search({"easgd": {"worker_ranks": {"type": "categorical", "choices": [1, 3, 2]}}}),
            "training.scheme.search.easgd.worker_ranks",
            "easgd.worker_ranks=2: the 3 ranks left for workers (ranks_per_fold 4 - a master - 0 sub-masters) do not "
            "split into workers of 2 ranks; values that fit: 1, 3",
        ),
        (
            _search({"gem": {"worker_ranks": {"type": "categorical", "choices": [3, 4]}}}),
            "training.scheme.search.gem.worker_ranks",
            "gem.worker_ranks=4: gem needs at least 5 ranks per fold (a master and a worker of worker_ranks=4); got 4",
        ),
        (
            _search({"pipeline": {"stages": {"type": "int", "low": 2, "high": 3}}}),
            "training.scheme.search.pipeline.stages",
            "stages=3 does not divide ranks_per_fold=4",
        ),
        (
            _search({"easgd": {"beta": {"type": "real", "low": 0.0, "high": 1.0}}}),
            "training.scheme.search.easgd.beta",
            "must be a number > 0 and <= 1, got 0.0",
        ),
        (_search({"sgd": {}}), "training.scheme.search.sgd", "unknown scheme; allowed: allreduce, horovod, daso"),
        (
            _search({"daso": {"skips": {"type": "int", "low": 1, "high": 2}}}),
            "training.scheme.search.daso.skips",
            "unknown knob for daso; allowed: node_size, max_global_skips",
        ),
        (
            _search({"easgd": {}}, ranks=1),
            "training.ranks_per_fold",
            "under scheme easgd: easgd needs at least 2 ranks",
        ),
        (_search({"easgd": {"tau": 4}}), "training.scheme.search.easgd.tau", "must be a parameter such as"),
        ({"analysis": {"landscape": {"grid": 41}}}, "analysis.landscape.max_points", "past the bound of 500"),
        (
            {"training": {"task": "t:T", "options": {"allreduce": {"compression": "powersgd", "powersgd_rank": 0}}}},
            "training.options.allreduce.powersgd_rank",
            "must be an integer >= 1",
        ),
        (
            {"training": {"task": "t:T", "options": {"allreduce": {"compression": "powersgd", "backend": "horovod"}}}},
            "training.options.allreduce.compression",
            "the fold trains as horovod, which has its own exchange",
        ),
        (
            {"training": {"task": "t:T", "scheme": "downpour", "options": {"batchnorm": "global"}}},
            "training.options.batchnorm",
            "not in lock-step",
        ),
        (
            {"training": {"task": "t:T", "scheme": "pipeline", "options": {"batchnorm": "node"}}},
            "training.options.batchnorm",
            "micro-batches",
        ),
        (
            {"training": {"task": "t:T", "options": {"batchnorm": "sync"}}},
            "training.options.batchnorm",
            "must be one of local, node, global",
        ),
        (
            {"training": {"task": "t:T", "options": {"allreduce": {"compression": "topk"}}}},
            "training.options.allreduce.compression",
            "must be one of none, bf16, powersgd",
        ),
        ({"analysis": {"hessian": {"top_k": 0}}}, "analysis.hessian.top_k", "must be an integer >= 1"),
        ({"analysis": {"hessian": {}}, "training": None}, "analysis", "needs training"),
        (
            {"analysis": {"hessian": {}}, "training": {"task": {"script": "train.py"}}},
            "analysis",
            "needs a Task subclass",
        ),
        (
            {"analysis": {"hessian": {}}, "training": {"task": "t:T", "scheme": "pipeline"}},
            "analysis",
            "scheme pipeline splits it into stages",
        ),
        (
            {"analysis": {"hessian": {}}, **_search({"pipeline": {}})},
            "analysis",
            "scheme pipeline splits it into stages",
        ),
        ({"training": {"task": "t:T", "scheme": {"grid": ["easgd"]}}}, "training.scheme", "must be a scheme's name or"),
        (
            {
                "training": {
                    "task": "t:T",
                    "scheme": "daso",
                    "options": {"daso": {"global_compression": "powersgd", "global_dtype": "bf16"}},
                }
            },
            "training.options.daso.global_compression",
            "global_dtype: bf16 would round them again",
        ),
        (
            {"training": {"task": "t:T", "scheme": "daso", "options": {"daso": {"global_powersgd_rank": 0}}}},
            "training.options.daso.global_powersgd_rank",
            "must be an integer >= 1",
        ),
        (
            {"objective": {"metric": "seconds_to_target"}},
            "objective.metric",
            "seconds_to_target is measured against training.target, which is not set",
        ),
        (
            {
                "objectives": [{"metric": "val_acc", "direction": "maximize"}, {"metric": "target_reached"}],
                "objective": {"metric": "val_acc", "direction": "maximize"},
                "training": {"task": "t:T", "target": {"metric": "val_acc", "at_least": 0.8}},
            },
            "objectives.1.direction",
            "direction must be maximize",
        ),
        ({"training": {"task": "t:T", "target": {"metric": "val_acc"}}}, "training.target", "exactly one of"),
        (
            {"training": {"task": "t:T", "target": {"metric": "acc", "at_least": 0.8, "at_most": 0.9}}},
            "training.target",
            "exactly one of at_least",
        ),
        (
            {"training": {"task": "t:T", "target": {"metric": "acc", "at_least": "high"}}},
            "training.target.at_least",
            "valid number",
        ),
        (
            {"training": {"task": "t:T", "target": {"metric": "seconds_to_target", "at_most": 9}}},
            "training.target",
            "measured against the target",
        ),
        (
            {
                "space": {"easgd.tau": {"type": "int", "low": 1, "high": 4}},
                "training": {"task": "t:T", "scheme": "daso", "ranks_per_fold": 4},
            },
            "space.easgd.tau",
            "easgd is not a scheme this campaign trains with (daso)",
        ),
    ],
)
def test_errors_name_the_field_and_what_is_allowed(change: dict[str, Any], field: str, message: str) -> None:
    errors = _errors({**make_spec(), **change})
    assert any(f == field and message in m for f, m in errors), errors


@pytest.mark.parametrize(
    ("change", "field", "guess"),
    [
        ({"budgt": {"max_trials": 5}}, "budgt", "budget"),
        ({"budget": {"max_trials": 5, "max_paralel": 2}}, "budget.max_paralel", "max_parallel"),
        ({"space": {"lr": {"type": "real", "low": 0.1, "high": 1, "scael": "log"}}}, "space.lr.scael", "scale"),
        ({"space": {"a": {"type": "categorical", "choices": [1], "choice": [2]}}}, "space.a.choice", "choices"),
        (
            {"objectives": [{"metric": "a"}, {"metric": "b", "Direction": "maximize"}]},
            "objectives.1.Direction",
            "direction",
        ),
        ({"training": {"task": "t:T", "epoch": 3}}, "training.epoch", "epochs"),
        ({"objective": {"metric": "loss", "direction": "max"}}, "objective.direction", "maximize"),
        ({"algorithm": {"name": "BO"}}, "algorithm.name", "bo"),
        ({"pruner": {"name": "ash"}}, "pruner.name", "asha"),
        ({"training": {"task": "t:T", "scheme": "allreduc"}}, "training.scheme", "allreduce"),
        (
            {"training": {"task": "t:T", "options": {"allreduce": {"backen": "gloo"}}}},
            "training.options.allreduce.backen",
            "backend",
        ),
        (_search({"easgd": {"tua": {"type": "int", "low": 1, "high": 4}}}), "training.scheme.search.easgd.tua", "tau"),
        (
            _search({"gem": {}}, ranks=3)
            | {
                "space": {"x": {"type": "real", "low": 0, "high": 1}, "gem.kapa": {"type": "real", "low": 0, "high": 1}}
            },
            "training.scheme.search.gem.kapa",
            "kappa",
        ),
    ],
)
def test_a_slip_in_a_key_or_a_name_says_what_was_meant(change: dict[str, Any], field: str, guess: str) -> None:
    """A misspelt field, knob or name gets "did you mean" with the one it is closest to,
    beside the list of what is allowed there."""
    errors = dict(_errors({**make_spec(), **change}))
    assert errors.get(field, "").endswith(f"; did you mean {guess!r}?"), errors
    assert "allowed" in errors[field] or "must be one of" in errors[field], errors


def test_a_key_like_nothing_allowed_gets_no_guess() -> None:
    errors = dict(_errors({**make_spec(), "colour": "blue", "budget": {"max_trials": 5, "speed": 2}}))
    assert (
        errors["colour"].startswith("unknown field; allowed: name, objective,")
        and "did you mean" not in errors["colour"]
    )
    assert errors["budget.speed"] == "unknown field; allowed: max_trials, max_parallel, curve_points_per_fold"


def test_hpcopt_submit_says_what_a_misspelt_key_meant_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: slip\nobjective: {metric: loss}\nspace: {lr: {type: real, low: 0.1, high: 1}}\n"
        "budget: {max_trials: 5, max_paralel: 2}\n"
    )
    cli = [str(Path(sys.executable).parent / "hpcopt"), "submit", "--dry-run", str(path)]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=scaled(120))
    assert out.returncode == 2, out.stderr
    assert "budget.max_paralel: unknown field; allowed: max_trials, max_parallel, curve_points_per_fold; " in out.stderr
    assert f"did you mean 'max_parallel'? ({path}:4:" in out.stderr, out.stderr


def test_a_scheme_search_is_normalized_into_a_conditional_space() -> None:
    spec = make_spec(
        training={
            "task": "t:T",
            "ranks_per_fold": 4,
            "scheme": {
                "search": {
                    "allreduce": {},
                    "easgd": {
                        "beta": {"type": "real", "low": 0.3, "high": 0.99},
                        "tau": {"type": "int", "low": 1, "high": 16},
                    },
                    "daso": {"max_global_skips": {"type": "categorical", "choices": [4, 8]}},
                }
            },
        }
    )
    canonical = spec_to_json_dict(parse_spec(spec))
    assert canonical["training"]["scheme"] == "search"
    space = canonical["space"]
    assert list(space) == ["lr", "width", "act", "scheme", "easgd.beta", "easgd.tau", "daso.max_global_skips"]
    assert space["scheme"] == {"type": "categorical", "choices": ["allreduce", "easgd", "daso"]}
    assert space["easgd.tau"]["when"] == {"scheme": ["easgd"]} and "when" not in space["lr"]
    assert spec_to_json_dict(parse_spec(canonical)) == canonical  # what the server stores parses to itself


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
    big = make_spec(training={"task": "t:T", "options": {"blob": "x" * MAX_SPEC_BYTES}})
    assert f"at most {MAX_SPEC_BYTES} are accepted" in _errors(big)[0][1]
    long_name = _errors(make_spec(space={"p" * 8000: {"type": "real", "low": 0, "high": 1}}))
    assert all(len(p) < 200 for p, _ in long_name)  # the name is not echoed whole


def test_a_spec_file_with_an_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("a: &a [1, 2]\nname: *a\n")
    with pytest.raises(SpecError, match="alias"):
        load_spec_file(path)


def _pipeline_spec(tmp_path: Path, task: str, searched: bool = False, name: str = "spec.yaml") -> Path:
    """A campaign training with scheme pipeline, or (``searched``) searching it against allreduce."""
    training = f"{{task: {json.dumps(task)}, scheme: pipeline, ranks_per_fold: 2}}"
    space = "{lr: {type: real, low: 0.01, high: 0.05}}"
    if searched:
        training = (
            f"{{task: {json.dumps(task)}, ranks_per_fold: 2, scheme: {{search: {{allreduce: {{}}, pipeline: {{}}}}}}}}"
        )
    path = tmp_path / name
    path.write_text(
        f"name: p\nspace: {space}\nobjective: {{metric: loss, direction: minimize}}\n"
        f"budget: {{max_trials: 2}}\ntraining: {training}\n"
    )
    return path


def test_a_pipeline_over_a_task_with_its_own_train_step_is_refused_at_submission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The task file is read with ast (never imported), relative to the working directory as the agent does.
    monkeypatch.chdir(ROOT)
    cases = {
        "tests/agent/tasks.py:PlainBackward": "PlainBackward (line",  # a class that overrides train_step
        "tests/agent/tasks.py:TinyGan": "TinyGan (line",
    }
    for task, named in cases.items():
        for searched in (False, True):
            with pytest.raises(SpecError) as err:
                load_spec_file(_pipeline_spec(tmp_path, task, searched))
            [(field, message)] = err.value.errors
            assert field == "training.task" and f"cannot use the custom train_step of {named}" in message, message
            assert ("the scheme search includes pipeline" in message) == searched, message
    # An instance of a class with the default step, and a file this machine cannot read, pass.
    (tmp_path / "mine").mkdir()
    monkeypatch.chdir(tmp_path)  # a task file is relative (to the agent's task root): an absolute one is refused
    fine = tmp_path / "mine" / "task_ok.py"
    fine.write_text(
        "from hpcopt_agent import Task\n\nclass Net(Task):\n    def loss(self, o, b):\n        return o\n\n"
        "class Mine(Net):\n    pass\n\ntask = Mine()\n"
    )
    load_spec_file(_pipeline_spec(tmp_path, "mine/task_ok.py:task"))
    load_spec_file(_pipeline_spec(tmp_path, "elsewhere/task.py:Task"))
    # A base class in the same file that overrides it is found through the instance.
    fine.write_text(
        fine.read_text().replace(
            "        return o\n", "        return o\n\n    def train_step(self):\n        return 0.0\n"
        )
    )
    with pytest.raises(SpecError, match="custom train_step of Net"):
        load_spec_file(_pipeline_spec(tmp_path, "mine/task_ok.py:task"))
    # As a user meets it: hpcopt submit refuses before anything reaches a server.
    cli = [str(Path(sys.executable).parent / "hpcopt"), "submit", "--dry-run"]
    out = subprocess.run(
        [*cli, str(_pipeline_spec(tmp_path, "tests/agent/tasks.py:PlainBackward"))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=scaled(120),
    )
    assert out.returncode == 2 and "custom train_step of PlainBackward" in out.stderr, out.stderr

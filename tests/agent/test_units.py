"""Layout arithmetic, fold splits, settings and task loading: no MPI needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpcopt_agent.folds import kfold, splits, train_indices
from hpcopt_agent.layout import LayoutError, fitting_groups, plan
from hpcopt_agent.runtime import parse_duration
from hpcopt_agent.settings import SettingsError, TrainingSettings
from hpcopt_agent.task import TaskError, load_task
from hpcopt_agent.trust import TaskPolicy
from tests.helpers.agents import agent_spec


def test_layout_splits_world_into_groups_and_fold_groups() -> None:
    layout = plan(world=8, groups=2, ranks_per_fold=2, folds=5)
    assert (layout.group_size, layout.fold_groups) == (4, 2)
    assert [layout.group_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [layout.fold_group_of(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert layout.fold_ranks(1, 1) == [6, 7]
    # Folds go round-robin to fold groups; those already finished are skipped.
    assert layout.folds_for(0, [0, 1, 2, 3, 4]) == [0, 2, 4]
    assert layout.folds_for(1, [0, 1, 2, 3, 4]) == [1, 3]
    assert layout.folds_for(1, [2, 4]) == [4]


@pytest.mark.parametrize(
    ("world", "groups", "rpf", "folds", "needle"),
    [
        (4, 3, 1, 5, "do not split into 3 equal trial groups"),
        (6, 1, 4, 5, "does not split into fold groups of training.ranks_per_fold=4"),
        (8, 1, 1, 5, "only 5 folds"),
        (3, 1, 2, 5, "use a multiple of 2 ranks"),
        (4, 0, 1, 5, "--groups must be >= 1"),
    ],
)
def test_a_layout_that_does_not_divide_is_refused_with_what_fits(
    world: int, groups: int, rpf: int, folds: int, needle: str
) -> None:
    with pytest.raises(LayoutError, match=needle) as err:
        plan(world, groups, rpf, folds)
    for g in fitting_groups(world, rpf, folds):
        assert f"--groups {g} " in str(err.value)
        plan(world, g, rpf, folds)  # every suggestion is valid


def test_fitting_groups() -> None:
    assert fitting_groups(8, 2, 5) == [1, 2, 4]
    assert fitting_groups(8, 1, 2) == [4, 8]
    assert fitting_groups(3, 2, 5) == []


@pytest.mark.parametrize("n,k", [(10, 2), (11, 3), (1797, 5), (5, 5)])
def test_folds_are_disjoint_covering_and_deterministic(n: int, k: int) -> None:
    folds = kfold(n, k, seed=7)
    joined = np.concatenate(folds)
    assert sorted(joined.tolist()) == list(range(n))
    assert max(len(f) for f in folds) - min(len(f) for f in folds) <= 1
    again = kfold(n, k, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(folds, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(folds, kfold(n, k, seed=8), strict=True)) or k == n
    for f in folds:
        train = train_indices(n, f)
        assert len(train) + len(f) == n and not set(train.tolist()) & set(f.tolist())


def test_stratified_folds_keep_class_proportions() -> None:
    labels = np.array([0] * 50 + [1] * 30 + [2] * 20)
    folds = kfold(100, 5, seed=1, labels=labels)
    assert sorted(np.concatenate(folds).tolist()) == list(range(100))
    for f in folds:
        counts = np.bincount(labels[f], minlength=3)
        assert counts.tolist() == [10, 6, 4]


def test_one_fold_holds_out_a_fifth() -> None:
    [(train, validation)] = splits(100, 1, seed=2)
    assert len(validation) == 20 and len(train) == 80 and not set(train.tolist()) & set(validation.tolist())
    assert [len(v) for _, v in splits(100, 4)] == [25] * 4


def test_fold_errors() -> None:
    with pytest.raises(ValueError, match="cannot split 3 samples into 5 folds"):
        kfold(3, 5)
    with pytest.raises(ValueError, match="one entry per sample"):
        kfold(10, 2, labels=[0, 1])


def test_settings_from_spec_and_their_errors() -> None:
    spec = agent_spec(training={"task": "x.py:T", "epochs": 3, "options": {"checkpoint_every": 2, "stratified": True}})
    s = TrainingSettings.from_spec(spec)
    assert (s.epochs, s.folds, s.metric, s.checkpoint_every, s.stratified) == (3, 2, "loss", 2, True)
    assert TrainingSettings.from_spec(spec, task_override="y.py:U").task == "y.py:U"
    with pytest.raises(SettingsError, match=r"training.options.chekpoint_every: unknown option.*checkpoint_every"):
        TrainingSettings.from_spec(agent_spec(training={"task": "x", "options": {"chekpoint_every": 1}}))
    with pytest.raises(SettingsError, match=r"training\.options\.checkpoint_every: must be an integer from 0"):
        TrainingSettings.from_spec(agent_spec(training={"task": "x", "options": {"checkpoint_every": -1}}))


def test_task_loading_by_path_and_module(tmp_path: Path) -> None:
    from hpcopt_agent import Task

    assert isinstance(load_task("tests/agent/tasks.py:Regression"), Task)
    assert isinstance(load_task("tests.agent.tasks:Exploding"), Task)
    with pytest.raises(TaskError, match="must look like"):
        load_task("tests/agent/tasks.py")
    with pytest.raises(TaskError, match="no file"):
        load_task("nope.py:T", TaskPolicy.of(tmp_path))
    with pytest.raises(TaskError, match="has no attribute 'Missing'"):
        load_task("tests.agent.tasks:Missing")
    with pytest.raises(TaskError, match=r"not an hpcopt_agent\.Task"):
        load_task("tests.agent.tasks:F")


def test_durations() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("01:30") == 90
    assert parse_duration("2:00:00") == 7200
    assert parse_duration("1-00:00:10") == 86410
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_walltime_stops_taking_trials_that_would_not_fit() -> None:
    from hpcopt_agent.runtime import Walltime

    unlimited = Walltime(None)
    unlimited.record(1e6)
    assert unlimited.fits_another()
    w = Walltime(100.0)
    assert w.fits_another()  # nothing measured yet: 100 s > 5 s margin
    w.record(80.0)
    assert w.fits_another()  # 1.1 * 80 + 5 = 93 < 100
    w.record(90.0)
    assert not w.fits_another()  # 1.1 * 90 + 5 = 104 > 100
    w.record(30.0)
    assert w.longest == 90.0
    assert not Walltime(4.0).fits_another()


def test_evaluation_batches_stay_within_a_byte_budget_for_large_samples() -> None:
    """256 showers of 25^3 floats would be 16 MB a batch, workers x prefetch of them in
    flight: evaluation batches of large samples are cut to EVAL_BYTES (never below the
    training batch); small samples keep EVAL_BATCH."""
    import torch
    from torch.utils.data import TensorDataset

    from hpcopt_agent.data import EVAL_BATCH, EVAL_BYTES, Data

    cpu = torch.device("cpu")
    showers = Data(lambda: TensorDataset(torch.zeros(300, 25, 25, 25), torch.zeros(300)), cpu)
    rows = Data(lambda: TensorDataset(torch.zeros(300, 8)), cpu)
    for data in (showers, rows):
        data.open(0)
        assert data.eval_size(16) == EVAL_BATCH  # nothing read yet: the sample size is unknown
        assert len(list(data.read([np.arange(8)]))) == 1
    per_shower = 25**3 * 4 + 4
    assert showers.eval_size(16) == EVAL_BYTES // per_shower
    assert showers.eval_size(100) == 100  # never below the training batch
    assert rows.eval_size(16) == EVAL_BATCH
    for data in (showers, rows):
        data.close()

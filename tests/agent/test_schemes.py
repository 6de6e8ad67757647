"""The schemes under the real mpiexec at 2 to 5 ranks.

``scheme_conformance.py`` checks what every scheme in ``SCHEMES`` promises, in one
launch; ``ps_check.py``, ``hier_check.py`` and ``hvd_check.py`` check each scheme's own
rules (``import torch`` costs seconds per rank here, so each batches its checks). The
agent tests below run schemes through the whole agent: a real server, SIGTERM
mid-epoch, a checkpoint, and a later agent that resumes."""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys

import pytest

from hpcopt.core.schemes import TRAITS
from tests.agent.scheme_variants import VARIANTS
from tests.helpers.agents import (
    AgentServer,
    agent_spec,
    dump,
    final_state,
    mpi_env,
    mpiexec_path,
    preempt_after_first_epoch,
    require_horovod,
    trial_json,
)
from tests.helpers.env import IN_CI, ROOT, scaled, timeout_scale

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]


def _launch(ranks: int, script: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` under the real mpiexec at ``ranks`` ranks."""
    cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "mpi4py", script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env(), cwd=ROOT)


@pytest.mark.parametrize(
    "ranks,check,expected",
    [
        (
            2,
            "degenerate",
            ["OK degenerate downpour", "OK degenerate easgd", "OK degenerate eamsgd", "OK degenerate gem"],
        ),
        (3, "gan", ["OK gan downpour", "OK gan easgd", "OK gan gem", "OK examples/gan gem"]),
        (
            4,
            "tree",
            [
                "OK staleness downpour",
                "OK staleness easgd",
                "OK synchronous downpour",
                "OK sub-master gem",
                "OK allreduce resume from each of the last 6 batches of an epoch, bit for bit",
            ],
        ),
        # A master and workers that are data-parallel groups (NNLO's hybrid layout).
        (
            5,
            "hybrid",
            [
                "OK degenerate gem (one worker of 4 ranks)",
                "OK hybrid digits",
                "OK hybrid sub-master",
                "OK hybrid resume",
                "OK overlap downpour (one worker of 4 ranks) = gradients one block late",
                "OK overlap downpour digits",
                "OK overlap easgd digits",
                "OK overlap sub-master downpour",
                "OK overlap resume",
            ],
        ),
        # DASO and pipeline in one launch (each launch pays the ranks' torch import).
        (
            4,
            "hier",
            [
                "OK daso one node",
                "OK daso blocking",
                "OK daso one check per epoch",
                "OK daso checks the loss within epochs",
                "OK daso local skips",
                "OK daso digits within 3 points of allreduce with bf16",
                "OK pipeline 4 stages x 1 gpipe",
                "OK pipeline 2 stages x 2 1f1b",
                "OK pipeline 2 stages x 2 1f1b with recompute",
                "OK pipeline resume with 4",
                "OK pipeline memory falls as 1/stages",
                "OK pipeline refuses a dict of models",
            ],
        ),
        # Horovod against DDP in two fold groups (two process sets); with the fold group
        # as the world (Horovod's global set) it runs in the conformance suite below.
        (4, "horovod 2", ["OK horovod regression 2x2", "OK horovod gan 2x2"]),
    ],
)
def test_schemes_under_mpiexec(ranks: int, check: str, expected: list[str]) -> None:
    check, *args = check.split()
    script = {"hier": "hier_check", "horovod": "hvd_check"}.get(check, "ps_check")
    if script == "hvd_check":
        require_horovod()
    out = _launch(ranks, f"tests/agent/{script}.py", check, *args, timeout=scaled(240))
    text = out.stdout + out.stderr
    assert out.returncode == 0 and f"ALL OK {check}" in out.stdout, text
    for line in expected:
        assert line in out.stdout, text


#: Every scheme the agent registers (``hpcopt.core.schemes.TRAITS`` is the same table; the
#: conformance script checks the two agree, and this keeps mpi4py out of pytest).
SCHEME_NAMES = list(TRAITS)


@functools.cache
def conformance_run(ranks: int) -> tuple[str, bool]:
    """One launch of the conformance script at ``ranks`` ranks (each launch pays every
    rank's torch import): its output, and whether Horovod's schemes ran in it."""
    with_horovod = IN_CI or importlib.util.find_spec("horovod") is not None
    if with_horovod:
        require_horovod()
    extra = ["horovod"] if with_horovod else []
    out = _launch(ranks, "tests/agent/scheme_conformance.py", *extra, timeout=scaled(420) * timeout_scale())
    return out.stdout + out.stderr + f"\n(exit status {out.returncode})", with_horovod


@pytest.mark.timeout(900)
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_every_scheme_keeps_the_scheme_contract(name: str, ranks: int) -> None:
    """Coverage, agreement, mid-epoch resume bit for bit, digits, several models,
    BatchNorm's running statistics and batch counts averaged before evaluation, and
    (at 4 ranks) separate fold groups, for each scheme the agent registers (Horovod's
    where it is installed; under CI it must be). A failure names its scheme: the script
    prints ``FAIL <scheme>`` with the traceback and stops."""
    text, with_horovod = conformance_run(ranks)
    if TRAITS[name].horovod and not with_horovod:
        assert f"not run: {name}" in text, text
        pytest.skip(f"{name}: Horovod is not installed (make horovod); CI runs it")
    failed = re.search(r"^FAIL (\S+)", text, re.M)
    for check in ("coverage", "resume", "several models", "batchnorm", "digits"):
        if f"OK {name} {check}" not in text:
            why = f"the launch stopped at a failure of {failed.group(1)}" if failed else "no failure was printed"
            pytest.fail(f"{name} at {ranks} ranks: no {check} check ({why})\n{text}")
    if ranks >= 4 and not TRAITS[name].horovod:
        assert f"OK {name} in 2 fold groups of 2" in text, text
    assert "ALL OK conformance" in text or (failed is not None and failed.group(1) != name), text


@pytest.mark.timeout(900)
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("label", list(VARIANTS))
def test_every_scheme_variant_keeps_the_scheme_contract(label: str, ranks: int) -> None:
    """A knob that changes the exchange (allreduce's PowerSGD, its error feedback in the
    checkpoint; its bf16 hook) keeps what its scheme promises: coverage, mid-epoch resume
    bit for bit (so the error-feedback state survives a preemption), a model of several
    gradient buckets trained to the end (torch's PowerSGD hook hung there under gloo), a
    GAN's two models (each its own PowerSGD state), digits within 3 points of the plain
    scheme. The same launch as the schemes' own checks."""
    text, _ = conformance_run(ranks)
    for check in ("coverage", "resume", "resume (wide model)", "several gradient buckets", "several models", "digits"):
        assert f"OK {label} {check}" in text, f"{label} at {ranks} ranks: no {check} check\n{text}"


def test_a_parameter_server_fold_preempted_mid_epoch_resumes_to_where_an_uninterrupted_one_ends(
    agent_server: AgentServer,
) -> None:
    spec = agent_spec(
        folds=1,
        budget={"max_trials": 1, "max_parallel": 1},
        training={
            "task": "tests/agent/tasks.py:Regression",
            "scheme": "downpour",
            "ranks_per_fold": 4,
            "epochs": 3,
            "options": {"downpour": {"sub_masters": 1, "order": "round_robin", "sync_every": 2}},
        },
    )
    slow = {"HPCOPT_TEST_STEP_SLEEP": "0.1"}
    whole = agent_server.submit(spec)
    result = agent_server.run_agent(4, whole)
    assert result.returncode == 0, dump(result)
    [reference] = agent_server.client().list_trials(whole)
    folds = trial_json(agent_server, reference.id)["folds"]
    assert {"staleness_mean", "staleness_max", "train_loss", "loss"} <= set(folds[0]["metrics"]), folds

    cut = agent_server.submit(spec)
    preempt_after_first_epoch(agent_server, cut, **slow)
    [trial] = agent_server.client().list_trials(cut)
    assert trial_json(agent_server, trial.id)["state"] == "QUEUED"
    resumed = agent_server.run_agent(4, cut)
    assert resumed.returncode == 0, dump(resumed)
    assert "resuming fold 0 at " in resumed.stderr, dump(resumed)
    assert trial_json(agent_server, trial.id)["state"] == "COMPLETED"
    want, got = final_state(agent_server, reference.id, 3), final_state(agent_server, trial.id, 3)
    assert want["scheme"] == got["scheme"] == spec["training"]["scheme"]
    for name, tensor in want["models"]["model"].items():
        assert got["models"]["model"][name].equal(tensor), f"{name} differs after the preemption and resume"


def test_the_daso_schedule_follows_heat_for_a_scripted_loss() -> None:
    from hpcopt_agent.schemes.daso import Schedule

    # 14 epochs: warm-up 2, cool-down 2; patience 1: a second epoch without a 5% gain is a plateau.
    s = Schedule(epochs=14, max_global_skips=8, warmup_epochs=2, cooldown_epochs=2, stability_level=0.05, patience=1)
    losses = [5.0, 4.0, 3.0, 2.0, 1.99, 1.98, 1.97, 1.96, 1.95, 1.94, 1.5, 1.4, 1.3]
    seen = [(s.global_skip, s.batches_to_wait)]
    local = [s.local_skip]
    for epoch, loss in enumerate(losses):
        s.end_epoch(epoch, loss)
        seen.append((s.global_skip, s.batches_to_wait))
        local.append(s.local_skip)
    # HeAT's local skip: 1 once cycling, max_global_skips // local_skip_factor at a reset.
    assert local == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 0, 0], local
    assert seen == [
        (0, 0),
        (0, 0),  # warm-up: a blocking average after every batch
        (4, 1),
        (4, 1),
        (4, 1),  # cycling starts at skip 4, S 1; 3.0 and 2.0 improve
        (4, 1),  # 1.99: no 5% gain, 1 bad epoch
        (2, 1),  # 1.98: a plateau, the skip halves (S stays >= 1)
        (2, 1),
        (1, 1),  # 1.97, 1.96: the next plateau, skip 1
        (1, 1),
        (8, 2),  # 1.95, 1.94: a plateau at skip 1: the cycle resets to 8, S = 8 // 4
        (8, 2),  # 1.5 improves on the reset tracker
        (0, 0),
        (0, 0),  # cool-down
    ]
    assert Schedule(epochs=10).warmup == 2 and Schedule(epochs=10).cooldown == 2  # min(4, epochs // 4)
    assert Schedule(epochs=3, warmup_epochs=0, cooldown_epochs=0).global_skip == 4


def test_short_daso_trials_check_the_loss_within_epochs_so_the_skips_move() -> None:
    from hpcopt_agent.schemes.daso import Schedule

    # 6 epochs: warm-up 1, cool-down 1, 4 cycling epochs: 4 checks each (about 16 in all).
    s = Schedule(epochs=6)
    assert (s.warmup, s.cooldown, s.checks_per_epoch(None), s.checks_per_epoch(1)) == (1, 1, 4, 1)
    assert Schedule(epochs=100).checks_per_epoch(None) == 1  # long trainings: HeAT's once per epoch
    s.end_epoch(0, 5.0)
    assert (s.global_skip, s.batches_to_wait) == (4, 1)
    seen = []
    for loss in [3.0, 2.99, 2.98, 2.97, 2.96, 2.95, 2.94, 2.93, 2.92]:  # improves, then a plateau
        s.check(loss)
        seen.append(s.global_skip)
    assert seen == [4, 4, 4, 2, 2, 2, 1, 1, 1], seen
    s.check(2.91)  # a plateau at skip 1: the cycle starts over
    assert (s.global_skip, s.batches_to_wait) == (8, 2)
    s.end_epoch(4, 2.9)  # the next epoch is cool-down
    assert s.global_skip == 0


def test_a_pipeline_refuses_a_task_with_its_own_train_step() -> None:
    from hpcopt_agent.schemes import check_task
    from hpcopt_agent.settings import SettingsError
    from tests.agent.tasks import PlainBackward

    check_task("allreduce", PlainBackward())
    refusal = "pipeline runs the task's loss through its schedule, so it cannot use the custom train_step of"
    with pytest.raises(SettingsError, match=f"{refusal} PlainBackward"):
        check_task("pipeline", PlainBackward())


def test_a_campaign_searching_the_scheme_trains_each_trial_with_its_scheme_and_only_its_knobs(
    agent_server: AgentServer,
) -> None:
    # Grid: the branches take turns, so 3 trials are one per scheme.
    spec = agent_spec(
        space={"lr": {"type": "real", "low": 0.01, "high": 0.05, "scale": "log"}},
        algorithm={"name": "grid", "options": {"points": 1}},
        folds=1,
        budget={"max_trials": 3, "max_parallel": 1},
        training={
            "task": "tests/agent/tasks.py:Regression",
            "ranks_per_fold": 4,
            "epochs": 2,
            "scheme": {
                "search": {
                    "allreduce": {},
                    "easgd": {
                        "beta": {"type": "real", "low": 0.5, "high": 0.9},
                        "tau": {"type": "int", "low": 1, "high": 4},
                    },
                    "daso": {"max_global_skips": {"type": "categorical", "choices": [4, 8]}},
                }
            },
            "options": {"daso": {"node_size": 2, "warmup_epochs": 0, "cooldown_epochs": 0}},
        },
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(4, campaign)
    assert result.returncode == 0, dump(result)
    assert "scheme searched among allreduce, easgd, daso" in result.stderr, dump(result)
    knobs = {"allreduce": set(), "easgd": {"easgd.beta", "easgd.tau"}, "daso": {"daso.max_global_skips"}}
    trials = [trial_json(agent_server, t.id) for t in agent_server.client().list_trials(campaign)]
    assert sorted(t["params"]["scheme"] for t in trials) == ["allreduce", "daso", "easgd"]
    for t in trials:
        scheme = t["params"]["scheme"]
        assert t["state"] == "COMPLETED" and set(t["params"]) == {"lr", "scheme"} | knobs[scheme], t
        metrics = t["folds"][0]["metrics"]
        # Each trained with its own scheme: the schemes' own figures are in its metrics.
        own = {"daso": "daso_global_skip", "easgd": "staleness_max"}
        assert {m for m in own.values() if m in metrics} == {own.get(scheme)} - {None}, metrics


def test_horovod_trains_a_campaign_whose_fold_group_is_the_whole_agent(agent_server: AgentServer) -> None:
    # The most common layout (ranks_per_fold = ranks), where hvd.init used to fail on every rank.
    require_horovod()
    spec = agent_spec(
        folds=2,
        budget={"max_trials": 1, "max_parallel": 1},
        training={"task": "tests/agent/tasks.py:Regression", "scheme": "horovod", "ranks_per_fold": 4, "epochs": 2},
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(4, campaign)
    assert result.returncode == 0, dump(result)
    [trial] = agent_server.client().list_trials(campaign)
    got = trial_json(agent_server, trial.id)
    assert got["state"] == "COMPLETED" and len(got["folds"]) == 2, got
    assert all(f["metrics"]["loss"] < 1e3 for f in got["folds"]), got["folds"]


def test_a_parameter_server_whose_workers_are_data_parallel_groups_trains_a_campaign(agent_server: AgentServer) -> None:
    # 5 ranks: a master and two workers of 2 ranks (DDP inside, the leader exchanges),
    # each exchange on the leader's communication thread while the worker trains on.
    spec = agent_spec(
        space={"lr": {"type": "real", "low": 0.04, "high": 0.05}},
        folds=1,
        budget={"max_trials": 1, "max_parallel": 1},
        training={
            "task": "tests/agent/tasks.py:Regression",
            "scheme": "downpour",
            "ranks_per_fold": 5,
            "epochs": 2,
            "options": {"downpour": {"worker_ranks": 2, "overlap": True}},
        },
    )
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(5, campaign)
    assert result.returncode == 0, dump(result)
    [trial] = agent_server.client().list_trials(campaign)
    got = trial_json(agent_server, trial.id)
    assert got["state"] == "COMPLETED", got
    metrics = got["folds"][0]["metrics"]
    assert metrics["loss"] < 1.0 and "staleness_max" in metrics, metrics


def test_daso_on_one_host_without_node_size_says_it_runs_as_allreduce_once(agent_server: AgentServer) -> None:
    spec = agent_spec(
        folds=2,
        budget={"max_trials": 1, "max_parallel": 1},
        training={"task": "tests/agent/tasks.py:Regression", "scheme": "daso", "ranks_per_fold": 4, "epochs": 1},
    )
    result = agent_server.run_agent(4, agent_server.submit(spec))
    assert result.returncode == 0, dump(result)
    said = "share one host and training.options.daso.node_size is not set"
    assert result.stderr.count(said) == 1 and "DASO runs as allreduce" in result.stderr, dump(result)

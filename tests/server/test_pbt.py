"""Population-based training through the real service and SQLite: the population, the
exploit from a checkpointed interval, the lineage in SQL, and the refusals by field."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument, NotFound
from hpcopt_server.service import Service
from hpcopt_server.service.agents import AcquireStatus, Lease
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.seed import checkpoint_uri
from tests.helpers.specs import make_spec

SPACE = {
    "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
    "dropout": {"type": "real", "low": 0.0, "high": 0.5},
}


def _pbt(**options: Any) -> dict[str, Any]:
    opts = {"population": 4, "interval": 2, **options}
    return make_spec(
        space=SPACE,
        algorithm={"name": "pbt", "seed": 3, "options": opts},
        budget={"max_trials": 12, "max_parallel": 4},
        folds=2,
        training={"task": "tests:task", "epochs": 6},
    )


def _acquire(service: Service, agent: str, cid: int) -> tuple[d.Trial, Lease] | None:
    got = service.agents.acquire(agent, cid)
    if got.status != AcquireStatus.GRANTED:
        return None
    assert got.trial is not None
    return got.trial, Lease(agent, got.trial.id, got.lease_id)


def _finish(service: Service, trial: d.Trial, lease: Lease, value: float, *, checkpoint: bool = True) -> None:
    sid = service.agents.server_id()
    for k in range(2):
        uri = checkpoint_uri(sid, trial.campaign_id, trial.id, k) if checkpoint else ""
        service.agents.report_fold(lease, k, value + 0.01 * k, {"loss": value + 0.01 * k}, uri)
    service.agents.complete(lease)


def test_the_worst_member_copies_a_checkpointed_top_member_and_the_rest_continue(service: Service) -> None:
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    first = [_acquire(service, agent, campaign.id) for _ in range(4)]
    assert all(f is not None for f in first)
    held = [f for f in first if f is not None]
    assert sorted(t.lineage.member for t, _ in held if t.lineage) == [0, 1, 2, 3]
    assert all(t.lineage == d.Lineage(t.lineage.member, 0, 2) for t, _ in held if t.lineage)
    # Every member is busy: nothing is ready, so the next agent waits.
    assert _acquire(service, agent, campaign.id) is None
    values = {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9}
    for t, lease in held:
        assert t.lineage is not None
        _finish(service, t, lease, values[t.lineage.member])
    nxt = [_acquire(service, agent, campaign.id) for _ in range(4)]
    by_member = {t.lineage.member: t for t, _ in (n for n in nxt if n) if t.lineage}
    assert sorted(by_member) == [0, 1, 2, 3]
    numbers = {t.lineage.member: t.number for t, _ in held if t.lineage}
    ids = {t.lineage.member: t.id for t, _ in held if t.lineage}
    params = {t.lineage.member: t.params for t, _ in held if t.lineage}
    for m in (0, 1, 2):  # continued: its own checkpoint, its own params
        lin = by_member[m].lineage
        assert lin == d.Lineage(m, 2, 4, numbers[m], numbers[m], {}, ids[m])
        assert by_member[m].params == params[m]
    worst = by_member[3].lineage
    assert worst is not None and worst.exploited
    assert worst.parent == numbers[0] and worst.parent_id == ids[0] and worst.previous == numbers[3]
    assert worst.changed and set(worst.changed) <= {"lr", "dropout"}
    for name, (before, after) in worst.changed.items():
        assert before == params[0][name] and after == by_member[3].params[name]
    # The lineage is in SQL: a fresh read of the trial has it.
    stored = service.campaigns.trial(by_member[3].id)
    assert stored.lineage == worst


def test_an_interval_without_its_checkpoints_is_never_a_parent(service: Service) -> None:
    campaign = service.campaigns.create(_pbt(quantile=0.5))
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    held = [h for h in (_acquire(service, agent, campaign.id) for _ in range(4)) if h]
    for t, lease in held:
        assert t.lineage is not None
        # The best member reported no checkpoint: it cannot be copied.
        _finish(service, t, lease, 0.1 * (t.lineage.member + 1), checkpoint=t.lineage.member != 0)
    nxt = [h for h in (_acquire(service, agent, campaign.id) for _ in range(4)) if h]
    no_ck = next(t.number for t, _ in held if t.lineage and t.lineage.member == 0)
    for t, _ in nxt:
        assert t.lineage is not None and t.lineage.parent != no_ck
    # Member 0 trained, but nothing can start from it: it copies the best checkpointed
    # interval at its epoch (member 1's) and keeps its schedule.
    moved = next(t for t, _ in nxt if t.lineage and t.lineage.member == 0)
    member_1 = next(t.number for t, _ in held if t.lineage and t.lineage.member == 1)
    assert moved.lineage is not None and moved.lineage.parent == member_1
    assert moved.lineage.previous == no_ck and moved.lineage.start_epoch == 2


def test_a_new_optimizer_cache_makes_the_same_decisions(service: Service) -> None:
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    held = [h for h in (_acquire(service, agent, campaign.id) for _ in range(4)) if h]
    for i, (t, lease) in enumerate(held):
        _finish(service, t, lease, [0.5, 0.4, 0.3, 0.2][i])
    service.ctx.optimizers.forget(campaign.id)  # as after a restart: rebuilt from SQL
    again = [h for h in (_acquire(service, agent, campaign.id) for _ in range(4)) if h]
    assert len(again) == 4
    exploited = [t for t, _ in again if t.lineage and t.lineage.exploited]
    assert len(exploited) == 1 and exploited[0].lineage is not None
    assert exploited[0].lineage.previous == held[0][0].number  # the worst, 0.5


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"algorithm": {"name": "pbt", "options": {"population": 8, "interval": 2}}}, "algorithm.options.population"),
        ({"budget": {"max_trials": 10, "max_parallel": 4}}, "budget.max_trials"),
        ({"algorithm": {"name": "pbt", "options": {"population": 4, "interval": 6}}}, "algorithm.options.interval"),
        ({"pruner": {"name": "median"}}, "pruner"),
        ({"training": None}, "training"),
        (
            {"algorithm": {"name": "pbt", "options": {"population": 4, "interval": 2, "mutable": ["lr", "width"]}}},
            "algorithm.options.mutable[1]",
        ),
    ],
)
def test_bad_pbt_specs_are_refused_by_field_and_store_nothing(
    service: Service, change: dict[str, Any], field: str
) -> None:
    spec = {**_pbt(), **change}
    if spec["training"] is None:
        del spec["training"]
    with pytest.raises(InvalidArgument) as err:
        service.campaigns.create(spec)
    assert field in [f for f, _ in err.value.errors], err.value
    assert service.campaigns.page()[1] == 0


def test_the_lineage_survives_export_and_import_and_a_forged_one_is_refused(service: Service) -> None:
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    held = [h for h in (_acquire(service, agent, campaign.id) for _ in range(4)) if h]
    for i, (t, lease) in enumerate(held):
        _finish(service, t, lease, [0.1, 0.2, 0.3, 0.9][i])
    second = [h for h in (_acquire(service, agent, campaign.id) for _ in range(4)) if h]
    original = {t.number: t.lineage for t, _ in held + second}
    doc = service.export_campaign(campaign.id)
    exported = {t["number"]: t["lineage"] for t in doc["trials"]}
    assert all("parent_id" not in lin for lin in exported.values())
    copy = service.import_campaign(doc)
    trials = {t.number: t for t in service.campaigns.trials(copy.id)[0]}
    for number, lin in original.items():
        got = trials[number].lineage
        assert lin is not None and got is not None
        assert (got.member, got.start_epoch, got.stop_epoch, got.parent, got.previous, got.changed) == (
            lin.member,
            lin.start_epoch,
            lin.stop_epoch,
            lin.parent,
            lin.previous,
            lin.changed,
        )
        # The parent id names the copy's trial of that number, not the original's.
        assert got.parent_id == (None if got.parent is None else trials[got.parent].id)
    before = service.campaigns.page()[1]
    forged = [dict(t) for t in doc["trials"]]
    late = max(range(len(forged)), key=lambda i: forged[i]["number"])
    forged[late] = {**forged[late], "lineage": {**forged[late]["lineage"], "parent": forged[late]["number"]}}
    with pytest.raises(InvalidArgument) as err:
        service.import_campaign({**doc, "trials": forged})
    assert f"trials.{late}.lineage.parent" in [f for f, _ in err.value.errors]
    assert service.campaigns.page()[1] == before


def test_agents_wait_while_every_member_is_busy_even_with_parallel_room(service: Service) -> None:
    spec = _pbt(population=2)
    spec["budget"] = {"max_trials": 6, "max_parallel": 4}
    campaign = service.campaigns.create(spec)
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    held = [_acquire(service, agent, campaign.id) for _ in range(2)]
    assert all(held)
    # max_parallel has room for two more, but both members are training.
    assert _acquire(service, agent, campaign.id) is None
    assert _acquire(service, agent, campaign.id) is None
    t, lease = held[0]  # type: ignore[misc]
    _finish(service, t, lease, 0.5)
    nxt = _acquire(service, agent, campaign.id)
    assert nxt is not None and nxt[0].number == 2  # numbers stay dense after the waits
    assert nxt[0].lineage is not None and nxt[0].lineage.member == t.lineage.member  # type: ignore[union-attr]


def test_with_fewer_trials_at_once_than_members_the_member_furthest_behind_goes_first(service: Service) -> None:
    """Two trials at a time for a population of 4: no member starts an interval while
    another has not started the one before it (offered in index order, members 0 and 1
    trained every epoch before member 2 started, and the late ones copied stale
    checkpoints)."""
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=2, gpus=0).agent_id
    started: dict[int, int] = {}  # member -> the epoch its latest interval starts at
    order: list[tuple[int, int]] = []
    while True:
        batch = [g for g in (_acquire(service, agent, campaign.id) for _ in range(2)) if g is not None]
        if not batch:
            break
        for trial, _ in batch:
            lin = trial.lineage
            assert lin is not None
            behind = min(started.get(m, -2) for m in range(4) if m != lin.member)
            assert behind >= lin.start_epoch - 2, (lin.member, lin.start_epoch, started, order)
            started[lin.member] = lin.start_epoch
            order.append((lin.member, lin.start_epoch))
        for k, (trial, lease) in enumerate(batch):
            _finish(service, trial, lease, 1.0 + 0.1 * trial.number + 0.01 * k)
    assert sorted(order) == [(m, e) for m in range(4) for e in (0, 2, 4)], order


def test_a_bad_member_that_reports_late_copies_a_better_member_at_its_own_epoch(service: Service) -> None:
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    first = {
        t.lineage.member: (t, lease)
        for t, lease in filter(None, (_acquire(service, agent, campaign.id) for _ in range(4)))
        if t.lineage
    }
    for m, value in ((0, 0.1), (1, 0.2), (2, 0.3)):
        _finish(service, *first[m], value)
    second = {
        t.lineage.member: (t, lease)
        for t, lease in filter(None, (_acquire(service, agent, campaign.id) for _ in range(3)))
        if t.lineage
    }
    # Ranked by the latest scores (members 0-2 at epoch 2), member 2 is the bottom quarter.
    assert sorted(second) == [0, 1, 2]
    assert [m for m, (t, _) in second.items() if t.lineage and t.lineage.exploited] == [2]
    for m, value in ((0, 0.05), (1, 0.06)):
        _finish(service, *second[m], value)
    # Member 3 reports its first interval after 0 and 1 reached epoch 4: ranked by
    # everyone's latest score it is the worst, so it copies member 0's epoch-2 weights.
    _finish(service, *first[3], 0.9)
    got = [t for t, _ in filter(None, (_acquire(service, agent, campaign.id) for _ in range(3)))]
    lin = next(t.lineage for t in got if t.lineage and t.lineage.member == 3)
    assert lin.exploited and lin.start_epoch == 2
    assert lin.parent == first[0][0].number


def test_the_example_pbt_campaign_is_accepted(service: Service) -> None:
    import yaml

    from tests.helpers.env import ROOT

    spec = yaml.safe_load((ROOT / "examples/pbt/campaign.yaml").read_text())
    campaign = service.campaigns.create(spec)
    assert campaign.spec["algorithm"]["name"] == "pbt" and campaign.max_trials == 64


def test_the_population_document_follows_the_best_member_back_to_epoch_0(service: Service) -> None:
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    for value in ([0.4, 0.3, 0.2, 0.9], [0.3, 0.2, 0.1, 0.5], [0.2, 0.1, 0.05, 0.4]):
        held = sorted(
            filter(None, (_acquire(service, agent, campaign.id) for _ in range(4))),
            key=lambda h: h[0].lineage.member,  # type: ignore[union-attr]
        )
        for (t, lease), v in zip(held, value, strict=True):
            _finish(service, t, lease, v)
    doc = service.population.document(campaign.id)
    assert len(doc["intervals"]) == 12 and not doc["truncated"]
    by = {i["number"]: i for i in doc["intervals"]}
    chain = [by[n] for n in doc["ancestry"]]
    assert chain[0]["start_epoch"] == 0 and chain[-1]["stop_epoch"] == 6
    assert [c["parent"] for c in chain[1:]] == [c["number"] for c in chain[:-1]]
    assert chain[-1]["value"] == min(i["value"] for i in doc["intervals"] if i["stop_epoch"] == 6)
    assert [s["value"] for s in doc["schedule"]["lr"]] == [c["params"]["lr"] for c in chain]
    # Another algorithm's campaign has no population.
    other = service.campaigns.create(make_spec())
    assert service.population.document(other.id)["intervals"] == []


def test_the_campaigns_best_is_its_best_member_at_the_last_epoch_not_its_best_interval(service: Service) -> None:
    """An early interval that scored best (a model that then trained on and got worse)
    is not the campaign's best: what the summary, ``best`` and the front report is a
    member trained to all 6 epochs."""
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=2, gpus=0).agent_id
    finals: list[d.Trial] = []
    while (got := _acquire(service, agent, campaign.id)) is not None:
        trial, lease = got
        lin = trial.lineage
        assert lin is not None
        if lin.stop_epoch < 6:
            with pytest.raises(NotFound, match="no member that has trained all 6 epochs yet"):
                service.campaigns.best(campaign.id)
        # Early intervals look best (0.1 at epoch 2); the final ones are worse (>= 0.5).
        value = 0.1 + 0.01 * lin.member if lin.stop_epoch == 2 else 0.5 + 0.1 * lin.member
        _finish(service, trial, lease, value)
        if lin.stop_epoch == 6:
            finals.append(service.campaigns.trial(trial.id))
    best = service.campaigns.best(campaign.id)
    assert best.lineage is not None and best.lineage.stop_epoch == 6
    assert best.value == min(t.value for t in finals if t.value is not None)
    summary = service.campaigns.get(campaign.id)
    assert summary.best_value == best.value and summary.best_trial_id == best.id
    assert [t.id for t in service.campaigns.front(campaign.id)] == [best.id]


def test_hpcopt_trials_and_trial_show_each_interval_s_member_epochs_and_parent(live_server: LiveServer) -> None:
    service = live_server.service
    campaign = service.campaigns.create(_pbt())
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    held = [got for got in (_acquire(service, agent, campaign.id) for _ in range(4)) if got]
    values = {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.9}
    for t, lease in held:
        assert t.lineage is not None
        _finish(service, t, lease, values[t.lineage.member])
    second = {t.lineage.member: t for t, _ in (_acquire(service, agent, campaign.id) for _ in range(4)) if t.lineage}
    worst, best = second[3].lineage, second[0].lineage
    assert worst is not None and worst.exploited and best is not None and not best.exploited

    def cli(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "hpcopt.cli", "--server", live_server.grpc_target, *args],
            capture_output=True,
            text=True,
            timeout=scaled(60),
            env={**os.environ, "COLUMNS": "200"},
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    table = cli("trials", str(campaign.id))
    header = table.splitlines()[0].split()
    assert header[:6] == ["#", "state", "attempt", "member", "epochs", "from"], table
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:] if line.strip()}
    assert rows[str(second[3].number)][3:7] == ["3", "2-4", f"#{worst.parent}", "copied"], table
    assert rows[str(second[0].number)][3:6] == ["0", "2-4", f"#{best.parent}"], table
    assert rows[str(held[0][0].number)][3:6] == [str(held[0][0].lineage.member), "0-2", "-"], table
    changed = ", ".join(f"{k} {a:.4g} -> {b:.4g}" for k, (a, b) in worst.changed.items())  # as the table rounds
    shown = cli("trial", "--id", str(second[3].id))
    assert f"  lineage member 3, epochs 2-4, copied #{worst.parent} ({changed})" in shown, shown
    assert f"  lineage member 0, epochs 2-4, continues #{best.parent}" in cli("trial", "--id", str(second[0].id))
    assert "  lineage member" in cli("trial", "--id", str(held[0][0].id)) and ", fresh" in cli(
        "trial", "--id", str(held[0][0].id)
    )
    # A campaign without PBT has no such columns.
    plain = service.campaigns.create(make_spec())
    assert "member" not in cli("trials", str(plain.id)).splitlines()[0]

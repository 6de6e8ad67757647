"""No code runs from a checkpoint: planted pickles, traversal URIs and imported URIs are
refused, the fold restarts, the trial completes and its events say why.

The attacker holds an agent registration of its own: it acquires the trial, plants a
pickle whose ``__reduce__`` writes a marker file, reports the URI, and gives the trial
back as PREEMPTED; a real 2-rank agent then resumes it."""

from __future__ import annotations

import json
import os
import pickle
import random
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hpcopt import ApiError
from hpcopt.core.checkpoints import check_reported, local_path
from hpcopt.errors import CheckpointRefused
from hpcopt_agent import checkpoint
from tests.helpers.agents import AgentServer, agent_spec, dump, trial_json
from tests.helpers.clients import AgentClient
from tests.helpers.env import scaled

pytestmark = pytest.mark.mpi


SID = "0123456789abcdef0123456789abcdef"


class Evil:
    """Unpickling this runs ``touch MARKER``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def plant(path: Path, marker: Path, *, zipped: bool) -> str:
    """A malicious checkpoint at ``path`` (torch's zip format or a bare pickle)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"models": {}, "evil": Evil(marker), "server": SID, "campaign": 1, "trial": 2, "fold": 0}
    if zipped:
        torch.save(state, path)
    else:
        path.write_bytes(pickle.dumps(state))
    return path.as_uri()


# -- the loader, alone ---------------------------------------------------------------


@pytest.mark.parametrize("zipped", [True, False])
# The bare pickle is protocol 4 (Python's default), on which torch's weights_only loader
# warns before it refuses the payload: expected for this input.
@pytest.mark.filterwarnings("ignore:Detected pickle protocol 4:UserWarning")
def test_a_pickle_with_code_at_the_agents_own_path_is_refused_and_nothing_runs(tmp_path: Path, zipped: bool) -> None:
    root, marker = tmp_path / "ckpt", tmp_path / "pwned"
    uri = plant(checkpoint.fold_path(root, SID, 1, 2, 0), marker, zipped=zipped)
    state, why = checkpoint.load(uri, root, SID, 1, 2, 0)
    assert state is None and "cannot be read as plain data" in why, why
    assert not marker.exists()


@pytest.mark.parametrize(
    "uri",
    [
        "../../etc/passwd",
        "file:///etc/shadow",
        "/ROOT/" + SID + "/1/2/fold0.pt",  # a plain path, even the right one
        "file:///ROOT/../ROOT/" + SID + "/1/2/fold0.pt",
        "file:///ROOT/./" + SID + "/1/2/fold0.pt",
        "file:///ROOT//" + SID + "/1/2/fold0.pt",
        "file://otherhost/ROOT/" + SID + "/1/2/fold0.pt",
        "http://127.0.0.1/ROOT/" + SID + "/1/2/fold0.pt",
        "file:///ROOT/" + SID + "/1/2/fold0.pt?x=1",
        "file:///ROOT/" + SID + "/1/3/fold0.pt",  # another trial
        "file:///ROOT/" + SID + "/9/2/fold0.pt",  # another campaign
        "file:///ROOT/" + "f" * 32 + "/1/2/fold0.pt",  # another server
        "file:///ROOT/" + SID + "/1/2/fold1.pt",  # another fold
        "file:///ROOT/" + SID + "/1/2/fold0.pt%0a",
        "file:///elsewhere/" + SID + "/1/2/fold0.pt",  # the right tail outside the root
    ],
)
def test_only_the_agents_own_file_for_the_fold_is_accepted(tmp_path: Path, uri: str) -> None:
    root = tmp_path / "ckpt"
    target = checkpoint.fold_path(root, SID, 1, 2, 0)
    checkpoint.save(target, {"server": SID, "campaign": 1, "trial": 2, "fold": 0})
    uri = uri.replace("ROOT", str(root.resolve()).lstrip("/"))
    with pytest.raises(CheckpointRefused):
        local_path(uri, root, SID, 1, 2, 0)
    state, why = checkpoint.load(uri, root, SID, 1, 2, 0)
    assert state is None and "refused" in why
    assert checkpoint.load(target.resolve().as_uri(), root, SID, 1, 2, 0)[0] is not None


def test_a_symbolic_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root, marker = tmp_path / "ckpt", tmp_path / "pwned"
    outside = tmp_path / "outside" / "evil.pt"
    plant(outside, marker, zipped=True)
    link = checkpoint.fold_path(root, SID, 1, 2, 0)
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    state, why = checkpoint.load(link.as_uri(), root, SID, 1, 2, 0)
    assert state is None and "symbolic link" in why, why
    assert not marker.exists()


def test_a_plain_checkpoint_of_another_fold_copied_into_place_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    path = checkpoint.fold_path(root, SID, 1, 2, 0)
    checkpoint.save(path, {"server": SID, "campaign": 1, "trial": 7, "fold": 0})
    state, why = checkpoint.load(path.as_uri(), root, SID, 1, 2, 0)
    assert state is None and "not this fold's" in why


def test_rng_states_and_numpy_values_round_trip_exactly_through_plain_data(tmp_path: Path) -> None:
    np.random.seed(5)
    random.seed(5)
    torch.manual_seed(5)
    state = {
        "server": SID,
        "campaign": 1,
        "trial": 2,
        "fold": 0,
        "rng": [(torch.get_rng_state(), np.random.get_state(), random.getstate())],
        "metrics": {"train_loss": np.float64(0.25), "n": np.int64(3)},
        "acc": np.arange(4, dtype=np.float32),
    }
    path = checkpoint.fold_path(tmp_path, SID, 1, 2, 0)
    checkpoint.save(path, state)
    back, why = checkpoint.load(path.as_uri(), tmp_path, SID, 1, 2, 0)
    assert back is not None, why
    expected = (np.random.rand(3), random.random(), torch.rand(3))
    torch_state, np_state, py_state = back["rng"][0]
    torch.set_rng_state(torch_state)
    np.random.set_state(checkpoint.numpy_rng(np_state))
    random.setstate(py_state)
    again = (np.random.rand(3), random.random(), torch.rand(3))
    assert np.array_equal(expected[0], again[0]) and expected[1] == again[1] and torch.equal(expected[2], again[2])
    assert back["metrics"] == {"train_loss": 0.25, "n": 3} and type(back["metrics"]["n"]) is int
    assert torch.equal(back["acc"], torch.arange(4, dtype=torch.float32))


def test_saving_an_object_that_is_not_plain_data_names_where_it_is(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"state\['schemes'\]\[0\]\['x'\] is a .*Evil"):
        checkpoint.save(tmp_path / "f.pt", {"schemes": [{"x": Evil(tmp_path / "m")}]})
    assert not (tmp_path / "f.pt").exists()


def test_the_server_accepts_only_uris_for_the_reporting_trial_and_fold() -> None:
    check_reported("", SID, 2, 0)
    check_reported(f"file:///scratch/u/{SID}/1/2/fold0.pt", SID, 2, 0)
    for bad in (
        "file:///tmp/x/evil.pt",
        "../../etc/passwd",
        f"file:///scratch/{SID}/1/3/fold0.pt",
        f"file:///scratch/{SID}/1/2/fold1.pt",
        f"file:///scratch/../{SID}/1/2/fold0.pt",
        f"file:///scratch/\x1b[31m/{SID}/1/2/fold0.pt",
        f"file:///scratch/\u202e/{SID}/1/2/fold0.pt",
        f"file:///scratch/u/{'e' * 32}/1/2/fold0.pt",
    ):
        with pytest.raises(CheckpointRefused):
            check_reported(bad, SID, 2, 0)


# -- a real agent resumes a trial an attacker released --------------------------------


def _events(server: AgentServer, trial_id: int, kind: str) -> list[str]:
    return [e["reason"] for e in trial_json(server, trial_id)["events"] if e["kind"] == kind]


def test_a_planted_pickle_never_runs_and_the_trial_completes(agent_server: AgentServer) -> None:
    campaign = agent_server.submit(agent_spec(folds=2, budget={"max_trials": 1, "max_parallel": 1}))
    marker = agent_server.workdir / "pwned"
    victim_root = (agent_server.workdir / "ckpt").resolve()
    with AgentClient(agent_server.target) as attacker:
        reg = attacker.register(host="attacker", campaign_id=campaign)
        got = attacker.acquire(reg.agent_id, campaign)
        assert got.status == "granted"
        lease, tid = got.lease, got.trial.id
        # Planted anywhere: the server refuses the URI outright, and stores nothing.
        for uri in (plant(agent_server.workdir / "x" / "evil.pt", marker, zipped=True), "file:///etc/shadow"):
            with pytest.raises(ApiError) as refused:
                attacker.report_intermediate(lease, 0, 1, 0.5, uri)
            assert refused.value.code == "INVALID_ARGUMENT" and "checkpoint_uri" in refused.value.message
        # Fold 0: the right name, under the attacker's own directory.
        mine = agent_server.workdir / "attacker" / reg.server_id / str(campaign) / str(tid) / "fold0.pt"
        attacker.report_intermediate(lease, 0, 1, 0.5, plant(mine, marker, zipped=True))
        # Fold 1: the exact file the victim would write (a shared, writable root).
        theirs = checkpoint.fold_path(victim_root, reg.server_id, campaign, tid, 1)
        attacker.report_intermediate(lease, 1, 1, 0.5, plant(theirs, marker, zipped=False))
        attacker.release(lease, "PREEMPTED", "planted")
    assert {f["checkpoint_uri"] for f in trial_json(agent_server, tid)["folds"]} == {mine.as_uri(), theirs.as_uri()}

    result = agent_server.run_agent(2, campaign)
    assert result.returncode == 0, dump(result)
    assert not marker.exists(), "a planted checkpoint ran code"
    done = trial_json(agent_server, tid)
    assert done["state"] == "COMPLETED", done
    reasons = _events(agent_server, tid, "checkpoint_refused")
    assert any(r.startswith("fold 0:") and "refused" in r for r in reasons), reasons
    assert any(r.startswith("fold 1:") and "cannot be read as plain data" in r for r in reasons), reasons
    assert "training the fold from the start" in result.stderr, dump(result)


def test_an_imported_checkpoint_uri_is_dropped_and_never_loaded(agent_server: AgentServer) -> None:
    source = agent_server.submit(agent_spec(folds=2, budget={"max_trials": 1, "max_parallel": 1}))
    with AgentClient(agent_server.target) as a:
        reg = a.register(host="exporter", campaign_id=source)
        lease = (a.acquire(reg.agent_id, source)).lease
        a.report_intermediate(lease, 0, 1, 0.5)
        a.release(lease, "PREEMPTED", "to export")
    with urllib.request.urlopen(f"{agent_server.url}/api/v1/campaigns/{source}/export", timeout=scaled(30)) as r:
        doc = json.loads(r.read())
    marker = agent_server.workdir / "pwned"
    evil = plant(agent_server.workdir / "x" / "evil.pt", marker, zipped=True)
    for uri in (evil, "file:///../../etc/passwd"):
        doc["trials"][0]["folds"][0]["checkpoint_uri"] = uri
        req = urllib.request.Request(
            f"{agent_server.url}/api/v1/campaigns/import",
            data=json.dumps(doc).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=scaled(60)) as r:
            copy = json.loads(r.read())["id"]
        [trial] = agent_server.client().list_trials(copy)
        assert [f["checkpoint_uri"] for f in trial_json(agent_server, trial.id)["folds"]] == [""]
    result = agent_server.run_agent(2, copy)
    assert result.returncode == 0, dump(result)
    assert not marker.exists()
    assert trial_json(agent_server, trial.id)["state"] == "COMPLETED"

"""Notes on campaigns and trials over real HTTP, on SQLite and PostgreSQL: saved in SQL
with a version, refused (409, nothing lost) when someone saved in between, bounded and
named field by field when the input is bad, and carried through export and import."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from hpcopt_server.service.agents import Lease
from hpcopt_server.service.limits import MAX_NOTE
from tests.helpers import web
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec


def _api(server: LiveServer) -> httpx.Client:
    return web.http(base_url=f"{server.http_url}/api/v1", timeout=scaled(60))


def _campaign_with_trials(service: Any, n: int = 3) -> int:
    cid = int(service.campaigns.create(make_spec(folds=1)).id)
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    for i in range(n):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, 0.5 + i)
        service.agents.complete(lease)
    return cid


def test_a_note_is_saved_versioned_and_read_back_by_campaign_and_trial(live_server: LiveServer) -> None:
    cid = _campaign_with_trials(live_server.service)
    api = _api(live_server)
    empty = api.get(f"/campaigns/{cid}/note").json()
    assert empty == {
        "campaign_id": cid,
        "trial_number": None,
        "body": "",
        "version": 0,
        "updated_at": None,
        "updated_by": "",
    }
    text = "lr > 1e-2 diverges on this data.\n<b>not bold</b> & kept as typed\n"
    saved = api.put(f"/campaigns/{cid}/note", json={"body": text, "base_version": 0})
    assert saved.status_code == 200, saved.text
    assert saved.json()["version"] == 1 and saved.json()["updated_at"] is not None
    assert api.get(f"/campaigns/{cid}/note").json()["body"] == text
    again = api.put(f"/campaigns/{cid}/note", json={"body": text + "more", "base_version": 1}).json()
    assert again["version"] == 2 and api.get(f"/campaigns/{cid}/note").json()["body"] == text + "more"

    assert api.get(f"/campaigns/{cid}/trials/1/note").json()["version"] == 0
    t = api.put(f"/campaigns/{cid}/trials/1/note", json={"body": "odd curve", "base_version": 0}).json()
    assert t["trial_number"] == 1 and t["body"] == "odd curve"
    assert api.get(f"/campaigns/{cid}/trials/2/note").json()["body"] == ""  # notes are per trial
    assert api.get(f"/campaigns/{cid}/note").json()["body"] == text + "more"
    assert api.get(f"/campaigns/{cid}/notes").json() == [1]
    # Cleared: empty again, and no longer listed; its version goes on counting.
    cleared = api.put(f"/campaigns/{cid}/trials/1/note", json={"body": "", "base_version": 1}).json()
    assert cleared["version"] == 2 and api.get(f"/campaigns/{cid}/notes").json() == []


def test_a_save_over_a_stale_version_is_refused_and_the_stored_note_survives(live_server: LiveServer) -> None:
    cid = _campaign_with_trials(live_server.service)
    api = _api(live_server)
    api.put(f"/campaigns/{cid}/note", json={"body": "base", "base_version": 0}).raise_for_status()
    # Two people opened version 1; the first saves, the second is told, not overwritten.
    assert api.put(f"/campaigns/{cid}/note", json={"body": "alice", "base_version": 1}).status_code == 200
    late = api.put(f"/campaigns/{cid}/note", json={"body": "bob", "base_version": 1})
    assert late.status_code == 409 and "version 2" in late.json()["detail"], late.text
    assert api.get(f"/campaigns/{cid}/note").json() | {"updated_at": None} == {
        "campaign_id": cid,
        "trial_number": None,
        "body": "alice",
        "version": 2,
        "updated_at": None,
        "updated_by": "",
    }
    # A version from the future is stale too.
    assert api.put(f"/campaigns/{cid}/note", json={"body": "x", "base_version": 7}).status_code == 409


def test_every_version_is_kept_so_a_save_over_someone_else_loses_nothing(live_server: LiveServer) -> None:
    """The review: a second Save after the conflict message overwrote the other person's
    note, and notes had no history. Every save is a version; each can be read back."""
    cid = _campaign_with_trials(live_server.service)
    api = _api(live_server)
    for path in (f"/campaigns/{cid}/note", f"/campaigns/{cid}/trials/2/note"):
        assert api.get(f"{path}/versions").json() == []
        api.put(path, json={"body": "base", "base_version": 0}).raise_for_status()
        api.put(path, json={"body": "alice's finding", "base_version": 1}).raise_for_status()
        assert api.put(path, json={"body": "bob", "base_version": 1}).status_code == 409
        # Bob saves his text over Alice's after the conflict, then someone clears the note.
        api.put(path, json={"body": "bob", "base_version": 2}).raise_for_status()
        api.put(path, json={"body": "", "base_version": 3}).raise_for_status()
        versions = api.get(f"{path}/versions").json()
        assert [(v["version"], v["chars"]) for v in versions] == [(4, 0), (3, 3), (2, 15), (1, 4)], versions
        assert all(v["saved_at"] and v["saved_by"] == "" for v in versions)
        assert api.get(f"{path}/versions/2").json()["body"] == "alice's finding", "hers is kept"
        assert api.get(f"{path}/versions/4").json()["body"] == ""
        # Restoring is saving an old version's text as the next one.
        old = api.get(f"{path}/versions/2").json()["body"]
        assert api.put(path, json={"body": old, "base_version": 4}).json()["version"] == 5
        assert api.get(path).json()["body"] == "alice's finding"
        missing = api.get(f"{path}/versions/9")
        assert missing.status_code == 404 and "no version 9" in missing.json()["detail"], missing.text
        for bad in ("0", "-1", "99999999999999999999"):
            r = api.get(f"{path}/versions/{bad}")
            assert r.status_code == 422 and r.json()["errors"][0]["field"] == "version", (bad, r.text)
    assert api.get(f"/campaigns/{cid}/trials/77/note/versions").status_code == 404


def test_concurrent_first_saves_store_exactly_one(live_server: LiveServer) -> None:
    cid = _campaign_with_trials(live_server.service)
    codes: list[int] = []
    start = threading.Barrier(6)

    def save(i: int) -> None:
        with _api(live_server) as api:
            start.wait()
            codes.append(
                api.put(f"/campaigns/{cid}/trials/0/note", json={"body": f"w{i}", "base_version": 0}).status_code
            )

    threads = [threading.Thread(target=save, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(scaled(120))
    assert sorted(codes) == [200] + [409] * 5
    note = _api(live_server).get(f"/campaigns/{cid}/trials/0/note").json()
    assert note["version"] == 1 and note["body"] in {f"w{i}" for i in range(6)}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"base_version": 0}, "body"),
        ({"body": "x"}, "base_version"),
        ({"body": 3, "base_version": 0}, "body"),
        ({"body": "x", "base_version": "one"}, "base_version"),
        ({"body": "x", "base_version": -1}, "base_version"),
        ({"body": "x", "base_version": 0, "extra": 1}, "extra"),
        ({"body": "a\x00b", "base_version": 0}, "body"),
        ({"body": "x" * (MAX_NOTE + 1), "base_version": 0}, "body"),
    ],
)
def test_bad_saves_name_the_field_and_store_nothing(live_server: LiveServer, body: Any, field: str) -> None:
    cid = _campaign_with_trials(live_server.service, 1)
    api = _api(live_server)
    got = api.put(f"/campaigns/{cid}/note", json=body)
    assert got.status_code == 422, got.text
    assert field in {e["field"] for e in got.json()["errors"]}, got.json()
    assert api.get(f"/campaigns/{cid}/note").json()["version"] == 0


def test_notes_of_missing_things_are_404_and_huge_or_broken_bodies_cost_little(live_server: LiveServer) -> None:
    cid = _campaign_with_trials(live_server.service, 1)
    api = _api(live_server)
    ok = {"body": "x", "base_version": 0}
    assert api.get(f"/campaigns/{cid + 99}/note").status_code == 404
    assert api.put(f"/campaigns/{cid + 99}/note", json=ok).status_code == 404
    assert api.get(f"/campaigns/{cid}/trials/5/note").status_code == 404
    assert api.put(f"/campaigns/{cid}/trials/5/note", json=ok).status_code == 404
    assert api.put(f"/campaigns/{cid}/trials/99999999999/note", json=ok).status_code in (404, 422)
    assert api.put(f"/campaigns/{cid}/note", content=b"{not json").status_code == 422
    huge = api.put(f"/campaigns/{cid}/note", content=b"x" * (50 * 1024 * 1024))
    assert huge.status_code == 413
    assert api.get(f"/campaigns/{cid}/note").json()["version"] == 0


def test_the_saving_tokens_name_is_kept(service: Any) -> None:
    cid = _campaign_with_trials(service, 1)
    token, _ = service.tokens.create("alice-laptop", ["submit"])
    assert service.notes.save(cid, 0, "seen", 0, token).updated_by == "alice-laptop"
    assert service.notes.get(cid, 0).updated_by == "alice-laptop"


def test_export_and_import_keep_the_notes(service: Any) -> None:
    cid = _campaign_with_trials(service, 3)
    service.notes.save(cid, None, "campaign note", 0)
    service.notes.save(cid, 2, "trial two: \u00e9\u6f22 \u2014 fine", 0)
    doc = service.export_campaign(cid)
    assert doc["campaign"]["note"] == "campaign note" and [t["note"] for t in doc["trials"]][2].startswith("trial two")
    copy = service.import_campaign(doc).id
    assert service.notes.get(copy).body == "campaign note"
    assert service.notes.get(copy, 2).body == doc["trials"][2]["note"] and service.notes.noted_trials(copy) == [2]
    # An export from before notes existed imports as it did.
    for t in doc["trials"]:
        del t["note"]
    del doc["campaign"]["note"]
    assert service.notes.noted_trials(service.import_campaign(doc).id) == []


def test_a_notes_history_keeps_its_newest_versions_within_the_caps_and_pages(live_server: LiveServer) -> None:
    from hpcopt_server.storage.notes import MAX_VERSION_CHARS, MAX_VERSIONS

    cid = _campaign_with_trials(live_server.service, 1)
    svc = live_server.service
    for v in range(MAX_VERSIONS + 50):
        svc.notes.save(cid, None, f"note {v + 1}", v)
    api = _api(live_server)
    r = api.get(f"/campaigns/{cid}/note/versions")
    assert r.status_code == 200 and r.headers["X-Total-Count"] == str(MAX_VERSIONS)
    assert [v["version"] for v in r.json()] == list(range(MAX_VERSIONS + 50, 50, -1))  # the newest 100
    page = api.get(f"/campaigns/{cid}/note/versions", params={"offset": 10, "limit": 5})
    assert [v["version"] for v in page.json()] == [140, 139, 138, 137, 136]
    assert page.headers["X-Total-Count"] == str(MAX_VERSIONS)
    for bad in ({"limit": 0}, {"limit": MAX_VERSIONS + 1}, {"offset": -1}):
        refused = api.get(f"/campaigns/{cid}/note/versions", params=bad)
        assert refused.status_code == 422 and next(iter(bad)) in refused.text, refused.text
    gone = api.get(f"/campaigns/{cid}/note/versions/1")
    assert gone.status_code == 404 and "older than what a note keeps" in gone.json()["detail"]
    assert api.get(f"/campaigns/{cid}/note").json()["body"] == f"note {MAX_VERSIONS + 50}"  # the note itself stays
    # Long texts: the versions kept hold at most MAX_VERSION_CHARS characters together.
    long = "x" * MAX_NOTE
    base = api.get(f"/campaigns/{cid}/trials/0/note").json()["version"]
    for v in range(base, base + 80):
        svc.notes.save(cid, 0, long, v)
    kept, total = svc.notes.versions(cid, 0)
    assert total == MAX_VERSION_CHARS // MAX_NOTE and sum(v.chars for v in kept) <= MAX_VERSION_CHARS
    assert kept[0].version == base + 80


def test_a_flood_of_saves_keeps_the_database_bounded(tmp_path: Any) -> None:
    from hpcopt_server.service import Service
    from hpcopt_server.storage.migrate import upgrade
    from hpcopt_server.storage.repository import Storage

    path = tmp_path / "notes.db"
    upgrade(f"sqlite:///{path}")
    storage = Storage(f"sqlite:///{path}")
    try:
        service = Service(storage)
        cid = int(service.campaigns.create(make_spec()).id)
        for v in range(600):  # 12 MB of text before the caps
            service.notes.save(cid, None, f"{v:06d}" + "y" * (MAX_NOTE - 6), v)
    finally:
        storage.close()
    assert path.stat().st_size < 4 * 1024 * 1024, path.stat().st_size

"""Team sync without a server: the outbox (what may leave, redacted, queued once) and the
merge (the same events in any order give the same current set; replay changes nothing)."""

import json
import random
import uuid

import pytest

from recalld import memories
from recalld.bench.planted import PLANTED
from recalld.core import db, scope
from recalld.team import config, inbox, outbox, remote


def _store(tmp_path, name, project="/src/app", key="example.com/acme/app"):
    conn = db.connect(tmp_path / f"{name}.db")
    config.record(conn, "join", team="core", conninfo="host=db.example dbname=t", machine=f"{name}-machine")
    config.record(conn, "share", team="core", project=project, project_key=key)
    return conn, config.current(conn)


def _current(conn) -> set:
    return {r[0] for r in conn.execute(
        "SELECT u.uid FROM team_uids u JOIN memories m ON m.id = u.memory_id WHERE m.invalid_at IS NULL")}


def _all(conn) -> set:
    return {r[0] for r in conn.execute("SELECT uid FROM team_uids")}


def _events(n_memories=30, seed=7) -> list:
    """A team history from two machines: memories, supersedes (two of the same memory: a
    conflict), retracts (one of an already superseded memory), and edges to memories that
    arrive later."""
    rng = random.Random(seed)
    uids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(n_memories)]
    evs = []
    for i, u in enumerate(uids):
        evs.append({"kind": "remember", "memory_uid": u, "other_uid": None, "project_key": None,
                    "body": {"text": f"fact {i} about the build cache", "kind": "fact", "scope": "shared"}})
    evs.append({"kind": "supersede", "memory_uid": uids[0], "other_uid": uids[1], "project_key": None, "body": {}})
    evs.append({"kind": "supersede", "memory_uid": uids[0], "other_uid": uids[2], "project_key": None, "body": {}})
    evs.append({"kind": "retract", "memory_uid": uids[3], "other_uid": None, "project_key": None, "body": {"why": "x"}})
    evs.append({"kind": "supersede", "memory_uid": uids[4], "other_uid": uids[5], "project_key": None, "body": {}})
    evs.append({"kind": "retract", "memory_uid": uids[4], "other_uid": None, "project_key": None, "body": {"why": "y"}})
    evs.append({"kind": "supersede", "memory_uid": uids[5], "other_uid": uids[6], "project_key": None, "body": {}})
    for seq, e in enumerate(evs, 1):
        e.update(seq=seq, event_id=str(uuid.UUID(int=rng.getrandbits(128))), origin_machine=f"m{seq % 2}",
                 origin_user=f"u{seq % 2}", origin_time=None)
    return evs, uids


def test_any_order_gives_the_same_current_set_and_replay_changes_nothing(tmp_path):
    evs, uids = _events()
    want_current = set(uids) - {uids[0], uids[3], uids[4], uids[5]}
    for trial in range(12):
        conn, m = _store(tmp_path, f"s{trial}")
        order = list(evs)
        random.Random(trial).shuffle(order)
        i = 0
        while i < len(order):  # batches of any size, as pulls come
            k = random.Random(trial * 31 + i).randint(1, 6)
            inbox.apply(conn, m, order[i:i + k], upto=0)
            i += k
        assert _current(conn) == want_current, trial
        assert _all(conn) == set(uids)
        before = conn.execute("SELECT count(*) FROM memory_changes").fetchone()[0]
        counts = inbox.apply(conn, m, order, upto=0)
        assert counts == {"duplicate": len(order)}
        assert conn.execute("SELECT count(*) FROM memory_changes").fetchone()[0] == before
        # nothing that came from the team is queued back to it
        assert outbox.scan(conn, m)[0] == 0
        conn.close()


def test_a_clock_skew_of_minutes_changes_nothing(tmp_path):
    """The writers' times travel for people only: one machine's clock 10 minutes ahead, the
    other's 10 behind, gives the same current set and the same supersession links."""
    evs, uids = _events()
    results = []
    for skew, name in ((None, "true"), (600, "skewed")):
        conn, m = _store(tmp_path, name)
        batch = []
        for e in evs:
            e = dict(e, body=dict(e["body"]))
            if skew is not None:
                e["body"]["written_at"] = f"2026-12-02T{'05:20' if e['seq'] % 2 else '05:00'}:00.000000+00:00"
                e["origin_time"] = e["body"]["written_at"]
            batch.append(e)
        inbox.apply(conn, m, batch, upto=len(batch))
        links = sorted(tuple(r) for r in conn.execute(
            "SELECT a.uid, b.uid FROM memories x JOIN team_uids a ON a.memory_id = x.id "
            "JOIN team_uids b ON b.memory_id = x.superseded_by"))
        results.append((_current(conn), links))
    assert results[0] == results[1]


def test_a_conflict_keeps_both_successors_and_history_says_so(tmp_path):
    evs, uids = _events()
    conn, m = _store(tmp_path, "h")
    inbox.apply(conn, m, evs, upto=len(evs))
    ids = {u: conn.execute("SELECT memory_id FROM team_uids WHERE uid = ?", (u,)).fetchone()[0] for u in uids[:3]}
    chain = memories.history(conn, ids[uids[0]], scope.Scope("/elsewhere", "main"))
    assert {c["id"] for c in chain} == set(ids.values())
    reasons = " ".join(c["reason"] or "" for c in chain[0]["changes"])
    assert "conflict: also superseded by" in reasons and "both are kept" in reasons
    assert config.cursor(conn, "core", "pull") == len(evs)


def _bodies(conn) -> list:
    return [json.loads(r["body"]) | {"kind_": r["kind"], "key": r["project_key"]}
            for r in conn.execute("SELECT * FROM team_outbox ORDER BY id")]


def test_only_shared_scopes_leave_and_every_text_is_redacted(tmp_path):
    conn, m = _store(tmp_path, "o", project="/src/app")
    here = scope.Scope("/src/app", "main")
    other = scope.Scope("/src/private", "main")
    memories.remember(conn, "a shared decision about franz-go", here, scope="shared", check_similar=False)
    memories.remember(conn, "a project fact of the shared project", here, scope="project", check_similar=False)
    memories.remember(conn, "an agent note never leaves zebra", here, scope="agent", check_similar=False)
    memories.remember(conn, "a fact of a project not shared", other, scope="project", check_similar=False)
    memories.remember(conn, f"the key is {PLANTED['aws']} for the bucket", here, scope="shared", check_similar=False,
                   allow_secrets=True)
    queued, more = outbox.scan(conn, m)
    assert (queued, more) == (3, False)
    bodies = _bodies(conn)
    texts = [b["text"] for b in bodies]
    assert texts[:2] == ["a shared decision about franz-go", "a project fact of the shared project"]
    assert PLANTED["aws"] not in json.dumps(bodies) and "[REDACTED:" in texts[2]
    assert [b["key"] for b in bodies] == [None, "example.com/acme/app", None]
    # kept as written locally (the user said --allow-secrets), never in the outbox
    assert conn.execute("SELECT count(*) FROM memories WHERE text LIKE ?", (f"%{PLANTED['aws']}%",)).fetchone()[0] == 1
    # a second scan, and a reset cursor (as a share does), queue nothing twice
    assert outbox.scan(conn, m)[0] == 0
    config.record(conn, "share", team="core", project="/src/app", project_key="example.com/acme/app")
    assert outbox.scan(conn, config.current(conn))[0] == 0
    assert len(_bodies(conn)) == 3


def test_supersede_and_retract_of_team_memories_become_edges(tmp_path):
    conn, m = _store(tmp_path, "e")
    here = scope.Scope("/src/app", "main")
    old = memories.remember(conn, "deploys go out on friday", here, scope="shared", check_similar=False).memory
    memories.remember(conn, "deploys never go out on friday", here, scope="shared", supersedes=[old["id"]],
                   check_similar=False)
    gone = memories.remember(conn, "the staging host is stg1", here, scope="shared", check_similar=False).memory
    memories.retract(conn, gone["id"], "stg1 was retired", here)
    private = memories.remember(conn, "a private note", here, scope="agent", check_similar=False).memory
    memories.retract(conn, private["id"], "not needed", here)
    outbox.scan(conn, m)
    kinds = [(r["kind"], r["other_uid"] is not None) for r in conn.execute("SELECT * FROM team_outbox ORDER BY id")]
    assert kinds == [("remember", False), ("remember", False), ("supersede", True), ("remember", False),
                     ("retract", False)]


@pytest.mark.parametrize("url, key", [
    ("git@github.com:Acme/app.git", "github.com/Acme/app"),
    ("https://github.com/Acme/app", "github.com/Acme/app"),
    ("ssh://git@GitHub.com:22/Acme/app.git/", "github.com/Acme/app"),
    ("https://user:pw@github.com/Acme/app.git", "github.com/Acme/app"),
])
def test_a_project_is_named_by_its_normalized_remote(url, key):
    assert remote.normalize(url) == key


def test_a_password_in_the_connection_string_is_refused():
    pytest.importorskip("psycopg", reason="psycopg (the team extra) parses libpq connection strings")
    for bad in ("postgresql://alice:s3cret@db.example/team", "host=db.example user=alice password=s3cret"):
        with pytest.raises(config.TeamError, match="PGPASSFILE"):
            config.check_conninfo(bad)
    assert config.check_conninfo("service=recalld") == "service=recalld"

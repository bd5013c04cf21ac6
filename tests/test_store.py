"""The store: durable writes that return what they changed; supersede marks, never deletes."""

import sqlite3

import pytest

from recalld.core import scope
from recalld import memories
from recalld.core.search import search


@pytest.fixture
def sc(project):
    return scope.resolve(str(project))


def test_remember_returns_the_record(conn, sc):
    res = memories.remember(conn, "We pin sqlite-utils to 3.x because 4.0 changed upsert.", sc,
                         kind="decision", tell="sqlite-utils pinned to 3.x", session="s1")
    m = res.memory
    assert m["id"] > 0 and m["kind"] == "decision" and m["scope"] == "project"
    assert m["project"] == sc.project and m["agent"] == "main" and m["session"] == "s1"
    assert m["valid_from"] == m["created_at"] and m["invalid_at"] is None
    assert res.superseded == []


def test_supersede_marks_links_and_hides(conn, sc):
    old = memories.remember(conn, "Deploys go through the Jenkins pipeline on port 8080.", sc, check_similar=False).memory
    new = memories.remember(conn, "Deploys go through GitHub Actions; Jenkins is gone.", sc,
                         supersedes=[str(old["id"])], check_similar=False)
    assert [m["id"] for m in new.superseded] == [old["id"]]
    sup = new.superseded[0]
    assert sup["invalid_at"] == new.memory["valid_from"]
    assert sup["superseded_by"] == new.memory["id"]
    assert [h.id for h in search(conn, "deploys jenkins pipeline", sc, limit=10)] == [new.memory["id"]]
    chain = memories.history(conn, old["id"], sc)
    assert [m["id"] for m in chain] == [old["id"], new.memory["id"]]
    assert [c["action"] for c in chain[0]["changes"]] == ["created", "superseded"]
    # still there, never deleted
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 2


def test_cannot_supersede_twice_or_out_of_scope(conn, sc, tmp_path):
    a = memories.remember(conn, "alpha fact", sc, check_similar=False).memory
    memories.remember(conn, "alpha fact v2", sc, supersedes=[a["id"]], check_similar=False)
    with pytest.raises(memories.StoreError, match="already invalid"):
        memories.remember(conn, "alpha fact v3", sc, supersedes=[a["id"]], check_similar=False)
    other = scope.Scope(str(tmp_path / "elsewhere"), "main")
    b = memories.remember(conn, "beta fact", sc, check_similar=False).memory
    # out of scope reads exactly like missing: existence does not leak
    with pytest.raises(memories.StoreError, match=f"^m{b['id']} does not exist$"):
        memories.remember(conn, "beta fact from elsewhere", other, supersedes=[b["id"]], check_similar=False)
    with pytest.raises(memories.StoreError, match="does not exist"):
        memories.remember(conn, "gamma", sc, supersedes=[9999], check_similar=False)
    # a failed write wrote nothing
    assert conn.execute("SELECT count(*) FROM memories WHERE text LIKE 'alpha fact v3%' OR text LIKE 'gamma%'").fetchone()[0] == 0


def test_retract(conn, sc):
    m = memories.remember(conn, "The staging DB is at db-staging-2", sc, check_similar=False).memory
    r = memories.retract(conn, m["id"], "staging was decommissioned", sc)
    assert r["invalid_at"] and r["invalid_reason"] == "staging was decommissioned" and r["superseded_by"] is None
    assert search(conn, "staging DB", sc) == []
    with pytest.raises(memories.StoreError):
        memories.retract(conn, m["id"], "again", sc)
    with pytest.raises(memories.StoreError, match="reason"):
        memories.retract(conn, m["id"], "  ", sc)


def test_dates_in_text_are_never_validity(conn, sc):
    m = memories.remember(conn, "Until 2024-01-01 the rule was X; from 12:00 on 2031-05-05 it is Y.", sc, check_similar=False).memory
    assert m["invalid_at"] is None
    assert m["valid_from"].startswith(m["created_at"][:10])


def test_memories_are_immutable_and_never_deleted(conn, sc):
    m = memories.remember(conn, "immutable words", sc, check_similar=False).memory
    with pytest.raises(sqlite3.DatabaseError, match="immutable"):
        conn.execute("UPDATE memories SET text = 'rewritten' WHERE id = ?", (m["id"],))
    with pytest.raises(sqlite3.DatabaseError, match="never deleted"):
        conn.execute("DELETE FROM memories WHERE id = ?", (m["id"],))
    memories.retract(conn, m["id"], "wrong", sc)
    with pytest.raises(sqlite3.DatabaseError, match="cannot change again"):
        conn.execute("UPDATE memories SET invalid_at = NULL WHERE id = ?", (m["id"],))


def test_validation_errors_are_clear(conn, sc):
    for kwargs, msg in [({"text": ""}, "empty"), ({"text": "x" * 9000}, "limit"),
                        ({"text": "ok", "kind": "rumour"}, "unknown kind"),
                        ({"text": "ok", "scope": "global"}, "unknown scope")]:
        text = kwargs.pop("text")
        with pytest.raises(memories.StoreError, match=msg):
            memories.remember(conn, text, sc, check_similar=False, **kwargs)


def test_similar_is_printed_not_applied(conn, sc):
    a = memories.remember(conn, "Always run the migrations with alembic upgrade head before tests.", sc, check_similar=False).memory
    res = memories.remember(conn, "Never run the migrations with alembic upgrade head before tests.", sc)
    assert [s["id"] for s in res.similar] == [a["id"]]
    assert res.similar[0]["relation"] == "may contradict"
    assert memories.get(conn, a["id"])["invalid_at"] is None


def test_import_is_all_or_nothing(conn, sc, tmp_path):
    good = ['{"text": "imported one", "kind": "decision"}', '{"text": "imported two", "tell": "two"}']
    res = memories.import_jsonl(conn, good, sc)
    assert [r.memory["text"] for r in res] == ["imported one", "imported two"]
    before = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    bad = ['{"text": "fine"}', '{"text": "bad kind", "kind": "gossip"}']
    with pytest.raises(memories.StoreError, match="line 2"):
        memories.import_jsonl(conn, bad, sc)
    with pytest.raises(memories.StoreError, match="line 1: not JSON"):
        memories.import_jsonl(conn, ["{nope"], sc)
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == before


def test_import_supersedes_and_names_the_failing_line(conn, sc):
    a = memories.remember(conn, "old import target", sc, check_similar=False).memory
    res = memories.import_jsonl(conn, [f'{{"text": "new import target", "supersedes": [{a["id"]}]}}'], sc)
    assert res[0].superseded[0]["superseded_by"] == res[0].memory["id"]
    with pytest.raises(memories.StoreError, match="line 3: m.* already invalid"):
        memories.import_jsonl(conn, ['{"text": "fine"}', "", f'{{"text": "again", "supersedes": [{a["id"]}]}}'], sc)
    assert [c["action"] for c in memories.history(conn, a["id"], sc)[1]["changes"]] == ["imported"]


def test_threads_link_each_memory_to_the_previous_one_in_its_project(conn, sc, tmp_path):
    other = scope.Scope(project=str(tmp_path / "elsewhere"), agent="main")
    a = memories.remember(conn, "first turn", sc, thread="chat-1", check_similar=False).memory
    elsewhere = memories.remember(conn, "same thread name, other project", other, thread="chat-1",
                               check_similar=False).memory
    loose = memories.remember(conn, "no thread", sc, check_similar=False).memory
    b = memories.remember(conn, "second turn", sc, thread="  chat-1 ", check_similar=False).memory
    c = memories.remember(conn, "another thread", sc, thread="chat-2", check_similar=False).memory
    assert (a["thread"], a["follows"]) == ("chat-1", None)
    assert (b["thread"], b["follows"]) == ("chat-1", a["id"])
    assert elsewhere["follows"] is None and loose["thread"] is None and loose["follows"] is None
    assert c["follows"] is None
    # imports thread line by line, inside their one transaction
    res = memories.import_jsonl(conn, ['{"text": "third turn", "thread": "chat-1"}',
                                    '{"text": "fourth turn", "thread": "chat-1"}'], sc)
    assert [r.memory["follows"] for r in res] == [b["id"], res[0].memory["id"]]
    with pytest.raises(sqlite3.DatabaseError, match="immutable"):
        conn.execute("UPDATE memories SET follows = NULL WHERE id = ?", (b["id"],))
    with pytest.raises(sqlite3.DatabaseError, match="immutable"):
        conn.execute("UPDATE memories SET thread = 'moved' WHERE id = ?", (b["id"],))


def test_bad_threads_are_clear_errors_and_write_nothing(conn, sc):
    before = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    with pytest.raises(memories.StoreError, match="line 2: thread must be a string"):
        memories.import_jsonl(conn, ['{"text": "fine", "thread": "t"}', '{"text": "bad", "thread": 7}'], sc)
    with pytest.raises(memories.StoreError, match="thread name is 201 characters"):
        memories.remember(conn, "fine", sc, thread="x" * 201, check_similar=False)
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == before


def test_every_field_a_write_stores_is_redacted_and_logged(conn, sc):
    key = "ghp_" + "Q7" * 18
    res = memories.remember(conn, f"CI reads {key} for tags.", sc, tell=f"tag token {key}", thread=f"ci {key}",
                         session=f"s {key}", source=f"cli {key}", check_similar=False)
    assert res.redacted == {"github-token": 5} and res.secrets_kept == {}
    assert res.as_dict()["redacted"] == {"github-token": 5}
    row = conn.execute("SELECT * FROM memories WHERE id = ?", (res.memory["id"],)).fetchone()
    assert not any(key in str(v) for v in tuple(row))
    assert [c["reason"] for c in memories.history(conn, res.memory["id"], sc)[0]["changes"]] == ["redacted github-token 5"]
    kept = memories.remember(conn, f"CI reads {key} for tags.", sc, allow_secrets=True, check_similar=False)
    assert kept.memory["text"] == f"CI reads {key} for tags." and kept.secrets_kept == {"github-token": 1}
    assert [c["reason"] for c in memories.history(conn, kept.memory["id"], sc)[0]["changes"]] == [
        "allow-secrets: kept github-token 1"]
    plain = memories.remember(conn, "Tags are cut from main only.", sc, allow_secrets=True, check_similar=False)
    assert plain.secrets_kept == {} and memories.history(conn, plain.memory["id"], sc)[0]["changes"][0]["reason"] == (
        "allow-secrets: nothing detected")


def test_a_write_inside_the_callers_transaction_is_redacted_too(conn, sc):
    conn.execute("BEGIN IMMEDIATE")
    res = memories.remember_in_transaction(conn, "The webhook is https://hooks.slack.com/services/T0/B0/abcdef123", sc)
    conn.execute("COMMIT")
    assert "abcdef123" not in res.memory["text"] and res.redacted == {"slack-webhook": 1}

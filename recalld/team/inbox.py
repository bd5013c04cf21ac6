"""The team's events -> the local store, deterministically and once.

Each event is applied at most once (team_inbox.event_id is unique) in the transaction that
also moves the pull cursor, so a kill or a lost connection at any moment repeats nothing and
loses nothing: the next pass reads from the cursor again.

The merge needs no clock. A memory is current here exactly when its `remember` has arrived and
no `retract` of it and no `supersede` from it has: both are edges recorded as they arrive,
never deletes, so the same events in any order leave the same current set. An edge that
arrives before the memory it names waits in the inbox and is applied when the memory comes.
Two machines superseding the same memory keep both successors current; the second edge is
written to the old memory's change log as a conflict, which `recalld history` shows.
"""

import json
import sqlite3

from recalld import memories
from recalld.core import receipts
from recalld.core.query_terms import Stemmer
from recalld.core.redact import redact
from recalld.core.scope import Scope
from recalld.memories import KINDS, MAX_TELL, MAX_TEXT
from recalld.team import config

TEAM_AGENT = "team"


def _who(ev: dict) -> str:
    return f"{ev.get('origin_user') or '?'} on {ev.get('origin_machine') or '?'}"


def _local_id(conn, uid: "str | None") -> "int | None":
    if not uid:
        return None
    row = conn.execute("SELECT memory_id FROM team_uids WHERE uid = ?", (uid,)).fetchone()
    return row[0] if row else None


def _change(conn, eid: str, memory_id, action, other_id=None, reason=None) -> int:
    """A change to a memory, recorded as the team's (event `eid`), so it is never queued back."""
    cid = conn.execute("INSERT INTO memory_changes (time, memory_id, action, other_id, reason) VALUES (?,?,?,?,?)",
                       (receipts.now_iso(), memory_id, action, other_id, reason)).lastrowid
    conn.execute("INSERT INTO team_changes (change_id, event_id) VALUES (?,?)", (cid, eid))
    return cid


def _invalidate(conn, eid: str, memory_id: int, reason: str, action: str, successor=None) -> int:
    conn.execute("UPDATE memories SET invalid_at = ?, superseded_by = ?, invalid_reason = ? "
                 "WHERE id = ? AND invalid_at IS NULL", (receipts.now_iso(), successor, reason, memory_id))
    return _change(conn, eid, memory_id, action, successor, reason)


def _link(conn, eid: str, old_id: int, new_id: "int | None", new_uid: str, who: str) -> tuple:
    """The edge old -> new (new may not be here yet). Returns (outcome, change id)."""
    old = conn.execute("SELECT invalid_at, superseded_by, invalid_reason FROM memories WHERE id = ?",
                       (old_id,)).fetchone()
    if old["invalid_at"] is None:
        return "applied", _invalidate(conn, eid, old_id, f"superseded by team memory {new_uid} ({who})", "superseded",
                                      new_id)
    if new_id is None:
        return "pending", None
    if old["superseded_by"] == new_id:
        return "applied", None
    if old["superseded_by"] is None and new_uid in (old["invalid_reason"] or ""):
        # the edge came first and invalidated it; its successor has arrived now
        conn.execute("UPDATE memories SET superseded_by = ? WHERE id = ? AND superseded_by IS NULL", (new_id, old_id))
        return "applied", _change(conn, eid, old_id, "superseded", new_id, f"successor arrived ({who})")
    first = f"m{old['superseded_by']} superseded it first here" if old["superseded_by"] else \
        f"it was already invalid here ({old['invalid_reason']})"
    return "conflict", _change(conn, eid, old_id, "superseded", new_id,
                               f"conflict: also superseded by m{new_id} ({who}); {first}; both are kept")


def _retract(conn, eid: str, memory_id: int, why: str, who: str) -> tuple:
    cur = conn.execute("SELECT invalid_at FROM memories WHERE id = ?", (memory_id,)).fetchone()
    if cur["invalid_at"] is None:
        return "applied", _invalidate(conn, eid, memory_id, f"{why} ({who})", "retracted")
    return "already-invalid", _change(conn, eid, memory_id, "retracted", None,
                                      f"{why} ({who}; it was already invalid here)")


def _valid_body(body: dict) -> "str | None":
    text = body.get("text")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT or "\x00" in text:
        return "text"
    if body.get("kind") not in KINDS:
        return "kind"
    if body.get("scope") not in ("shared", "project"):
        return "scope"
    tell = body.get("tell")
    if tell is not None and (not isinstance(tell, str) or len(tell) > MAX_TELL):
        return "tell"
    return None


def _remember(conn, m, ev: dict, stemmer: Stemmer) -> tuple:
    uid = ev["memory_uid"]
    if _local_id(conn, uid) is not None:
        return "duplicate", _local_id(conn, uid), None
    body = ev["body"]
    bad = _valid_body(body)
    if bad:
        return f"rejected: {bad}", None, None
    if body["scope"] == "project":
        paths = sorted(p for p, k in m.projects.items() if k == ev.get("project_key"))
        if not paths:
            return None, None, None  # not shared here (any more): read again when it is
        project = paths[0]
    else:
        project = f"team:{m.team}"
    # Text from anyone else is redacted here too: their client may be another version.
    text, tell = redact(body["text"].strip())[0], (redact(body["tell"])[0] if body.get("tell") else None)
    who = _who(ev)
    mid, change = memories.insert_replica(
        conn, text, Scope(project, TEAM_AGENT), scope=body["scope"], kind=body["kind"], tell=tell,
        always=bool(body.get("always")), source=f"team:{ev.get('origin_user')}@{ev.get('origin_machine')}",
        reason=f"from the team: {who}, written {body.get('written_at') or '?'}", stemmer=stemmer)
    conn.execute("INSERT INTO team_changes (change_id, event_id) VALUES (?,?)", (change, ev["event_id"]))
    conn.execute("INSERT INTO team_uids (memory_id, uid, team, local, machine, user, origin_time) "
                 "VALUES (?,?,?,0,?,?,?)", (mid, uid, m.team, ev.get("origin_machine"), ev.get("origin_user"),
                                            body.get("written_at")))
    # Edges that arrived before this memory: from it (it is the old one) ...
    for e in conn.execute("SELECT * FROM team_inbox WHERE memory_uid = ? AND kind IN ('supersede', 'retract') "
                          "ORDER BY id", (uid,)).fetchall():
        w = f"{e['user']} on {e['machine']}"
        if e["kind"] == "retract":
            _retract(conn, ev["event_id"], mid, json.loads(e["body"] or "{}").get("why") or "retracted", w)
        else:
            _link(conn, ev["event_id"], mid, _local_id(conn, e["other_uid"]), e["other_uid"], w)
    # ... and to it (it is the successor)
    for e in conn.execute("SELECT * FROM team_inbox WHERE other_uid = ? AND kind = 'supersede' ORDER BY id",
                          (uid,)).fetchall():
        old = _local_id(conn, e["memory_uid"])
        if old is not None:
            _link(conn, ev["event_id"], old, mid, uid, f"{e['user']} on {e['machine']}")
    return "applied", mid, change


def _edge(conn, m, ev: dict) -> tuple:
    target = _local_id(conn, ev["memory_uid"])
    if target is None:
        return "pending", None, None
    if ev["kind"] == "retract":
        outcome, change = _retract(conn, ev["event_id"], target, (ev["body"] or {}).get("why") or "retracted", _who(ev))
    else:
        outcome, change = _link(conn, ev["event_id"], target, _local_id(conn, ev.get("other_uid")), ev["other_uid"],
                                _who(ev))
    return outcome, target, change


def apply(conn: sqlite3.Connection, m: config.Membership, events: list, upto: int,
          user: "str | None" = None) -> dict:
    """Apply `events` (dicts in the server's order) and move the pull cursor to `upto`, in one
    transaction. Returns counts by outcome. An event is this machine's own when it names this
    machine and, if `user` (this machine's role) is given, was written by that role: the
    server vouches for the role, not for the machine id a member writes."""
    counts: dict = {}
    stemmer = Stemmer(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for ev in events:
            if conn.execute("SELECT 1 FROM team_inbox WHERE event_id = ?", (ev["event_id"],)).fetchone():
                outcome, mid, change = "duplicate", None, None
            elif ev.get("origin_machine") == m.machine and (user is None or ev.get("origin_user") == user):
                outcome, mid, change = "own", _local_id(conn, ev["memory_uid"]), None
            elif ev["kind"] == "remember":
                outcome, mid, change = _remember(conn, m, ev, stemmer)
            else:
                outcome, mid, change = _edge(conn, m, ev)
            counts[outcome or "not-shared-here"] = counts.get(outcome or "not-shared-here", 0) + 1
            if outcome in (None, "duplicate"):
                continue
            conn.execute(
                "INSERT INTO team_inbox (time, team, seq, event_id, kind, memory_uid, other_uid, machine, user, "
                "origin_time, outcome, memory_id, body) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (receipts.now_iso(), m.team, ev["seq"], ev["event_id"], ev["kind"], ev["memory_uid"],
                 ev.get("other_uid"), ev.get("origin_machine"), ev.get("origin_user"), ev.get("origin_time"),
                 outcome, mid,
                 json.dumps(ev["body"] or {}, ensure_ascii=False) if ev["kind"] == "retract" else None))
        config.advance(conn, m.team, "pull", upto)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return counts

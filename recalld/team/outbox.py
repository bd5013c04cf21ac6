"""Local writes -> team events, queued in the append-only outbox until the server has them.

The change log (memory_changes) is the source: every write path (CLI, MCP, import, approvals)
already records there inside its own transaction, so the outbox is filled from it after the
fact, in one transaction with its cursor, and a kill at any moment loses nothing and queues
nothing twice (the outbox's unique (team, change, kind, memory)).

What becomes an event: a memory created in the `shared` scope or in a shared project
(`remember`, with `supersede` edges to each memory it replaced that the team has), and the
retraction of a memory the team has (`retract`). Nothing else: agent-scope notes, memories of
projects not shared, receipts, transcripts and proposals have no path here. Every text is
redacted again on the way (a memory kept with --allow-secrets still leaves without them).
"""

import json
import sqlite3
import uuid

from recalld.core import receipts
from recalld.core.redact import redact
from recalld.team import config

SCAN_BATCH = 500


def _clean(value):
    return redact(value)[0] if isinstance(value, str) and value else value


def _key_of(mem, m: config.Membership) -> "tuple[bool, str | None]":
    """(whether the team may have this memory, its project key: None for the shared scope)."""
    if mem["scope"] == "shared":
        return True, None
    if mem["scope"] == "project" and mem["project"] in m.projects:
        return True, m.projects[mem["project"]]
    return False, None


def _uid(conn, memory_id: int):
    return conn.execute("SELECT uid, local FROM team_uids WHERE memory_id = ?", (memory_id,)).fetchone()


def _queue(conn, m, change_id, kind, memory_uid, other_uid, key, body) -> int:
    cur = conn.execute(
        "INSERT OR IGNORE INTO team_outbox (time, event_id, team, change_id, kind, memory_uid, other_uid, "
        "project_key, body) VALUES (?,?,?,?,?,?,?,?,?)",
        (receipts.now_iso(), str(uuid.uuid4()), m.team, change_id, kind, memory_uid, other_uid, key,
         json.dumps(body, ensure_ascii=False, separators=(",", ":"))))
    return cur.rowcount


def _remember(conn, m, change, mem) -> int:
    ok, key = _key_of(mem, m)
    if not ok:
        return 0
    have = _uid(conn, mem["id"])
    if have is not None and not have["local"]:
        return 0  # it came from the team
    if have is None:
        uid = str(uuid.uuid4())
        conn.execute("INSERT INTO team_uids (memory_id, uid, team, local, machine, origin_time) VALUES (?,?,?,1,?,?)",
                     (mem["id"], uid, m.team, m.machine, mem["created_at"]))
    else:
        uid = have["uid"]
    body = {"text": _clean(mem["text"]), "kind": mem["kind"], "scope": mem["scope"], "tell": _clean(mem["tell"]),
            "always": bool(mem["always"]), "written_at": mem["created_at"]}
    n = _queue(conn, m, change["id"], "remember", uid, None, key, body)
    for old in conn.execute("SELECT * FROM memories WHERE superseded_by = ?", (mem["id"],)).fetchall():
        old_uid = _uid(conn, old["id"])
        if old_uid is None:
            continue  # the team never had it: the edge would name nothing there
        old_key = _key_of(old, m)[1] if old_uid["local"] else _pulled_key(old, m)
        n += _queue(conn, m, change["id"], "supersede", old_uid["uid"], uid, old_key,
                    {"written_at": mem["created_at"]})
    return n


def _pulled_key(mem, m) -> "str | None":
    return m.projects.get(mem["project"]) if mem["scope"] == "project" else None


def _retract(conn, m, change, mem) -> int:
    have = _uid(conn, mem["id"])
    if have is None:
        return 0
    key = _key_of(mem, m)[1] if have["local"] else _pulled_key(mem, m)
    return _queue(conn, m, change["id"], "retract", have["uid"], None, key,
                  {"why": _clean(change["reason"] or ""), "written_at": change["time"]})


def scan(conn: sqlite3.Connection, m: config.Membership) -> tuple[int, bool]:
    """Queue the events of the changes since the scan cursor (at most SCAN_BATCH changes).
    Returns (events queued, whether more changes wait)."""
    pos = config.cursor(conn, m.team, "scan")
    top = conn.execute("SELECT max(id) FROM memory_changes").fetchone()[0] or 0
    if top <= pos:
        return 0, False
    queued = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        top = conn.execute("SELECT max(id) FROM memory_changes").fetchone()[0] or 0
        changes = conn.execute(
            "SELECT c.id, c.time, c.memory_id, c.action, c.reason FROM memory_changes c WHERE c.id > ? "
            "AND c.action IN ('created', 'imported', 'retracted') "
            "AND c.id <= ? AND NOT EXISTS (SELECT 1 FROM team_changes t WHERE t.change_id = c.id) "
            "ORDER BY c.id LIMIT ?",
            (pos, top, SCAN_BATCH)).fetchall()
        last = changes[-1]["id"] if len(changes) == SCAN_BATCH else top
        for ch in changes:
            mem = conn.execute("SELECT * FROM memories WHERE id = ?", (ch["memory_id"],)).fetchone()
            queued += (_retract if ch["action"] == "retracted" else _remember)(conn, m, ch, mem)
        config.advance(conn, m.team, "scan", last)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return queued, last < top


def pending(conn: sqlite3.Connection, team: str, limit: int) -> list:
    return conn.execute(
        "SELECT o.* FROM team_outbox o WHERE o.team = ? AND NOT EXISTS "
        "(SELECT 1 FROM team_pushed p WHERE p.outbox_id = o.id) ORDER BY o.id LIMIT ?", (team, limit)).fetchall()


def mark_pushed(conn: sqlite3.Connection, pushed: list) -> None:
    """[(outbox id, server seq or None)]: one transaction; a row already marked stays as it was."""
    now = receipts.now_iso()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany("INSERT OR IGNORE INTO team_pushed (time, outbox_id, seq) VALUES (?,?,?)",
                         [(now, oid, seq) for oid, seq in pushed])
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def queued(conn: sqlite3.Connection, team: str) -> dict:
    """How many events wait for the server, and the oldest one's time."""
    row = conn.execute(
        "SELECT count(*), min(o.time) FROM team_outbox o WHERE o.team = ? AND NOT EXISTS "
        "(SELECT 1 FROM team_pushed p WHERE p.outbox_id = o.id)", (team,)).fetchone()
    return {"queued": row[0], "oldest": row[1]}

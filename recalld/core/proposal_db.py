"""The proposer's side of the store: read what it needs, write drafts, never a memory.

This module (and everything the proposer imports) has no import path to recalld.memories, and
`connect()` hands out a handle whose authorizer refuses any write to the memory tables. A
proposer that can write once invented a statistic that was served back as fact; this one
cannot reach the store even by mistake (tests/test_proposer.py checks both).

Standard library only: the hook reads pending drafts through the same SQL.
"""

import _sqlite3 as sqlite3  # the C module: the package's dbapi2 imports datetime (the hook)

from recalld.core import db, jsonio, receipts

# Tables the proposer may read but never change (FTS5 shadow tables included by prefix).
PROTECTED = ("memories", "memories_fts", "memory_changes")
_WRITE_ACTIONS = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
_SCHEMA_ACTIONS = {sqlite3.SQLITE_DROP_TABLE, sqlite3.SQLITE_DROP_TRIGGER, sqlite3.SQLITE_DROP_INDEX,
                   sqlite3.SQLITE_DROP_VIEW, sqlite3.SQLITE_ALTER_TABLE, sqlite3.SQLITE_CREATE_TRIGGER,
                   sqlite3.SQLITE_DROP_VTABLE, sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH}

# A proposal is undecided while no approved/rejected event exists for it.
UNDECIDED = ("NOT EXISTS (SELECT 1 FROM proposal_events e WHERE e.proposal_id = p.id "
             "AND e.to_state IN ('approved', 'rejected'))")
STATE_SQL = ("coalesce((SELECT e.to_state FROM proposal_events e WHERE e.proposal_id = p.id "
             "ORDER BY e.id DESC LIMIT 1), 'pending')")


def _protected(table: "str | None") -> bool:
    if not table:
        return False
    t = table.lower()
    return t in PROTECTED or t.startswith("memories_fts_")


def _authorizer(action, arg1, arg2, db_name, trigger):
    if action in _WRITE_ACTIONS and _protected(arg1):
        return sqlite3.SQLITE_DENY
    # Schema changes on the main database (the stemmer's temp tables stay allowed).
    if action in _SCHEMA_ACTIONS and db_name != "temp":
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in ("writable_schema", "trusted_schema"):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def guard(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Make `conn` unable to write memories (reads, drafts and receipts still work)."""
    conn.set_authorizer(_authorizer)
    return conn


def connect(path=None) -> sqlite3.Connection:
    """The proposer's database handle: migrated, then guarded."""
    return guard(db.connect(path))


# --- reading ------------------------------------------------------------------------------


def cursor(conn: sqlite3.Connection, source: str) -> int:
    """The last transcript line of `source` a pass has consumed (0: none)."""
    row = conn.execute("SELECT max(to_line) FROM proposal_passes WHERE source = ?", (source,)).fetchone()
    return int(row[0] or 0)


def last_boundary(conn: sqlite3.Connection, session: "str | None") -> int:
    if not session:
        return 0
    row = conn.execute("SELECT max(boundary_id) FROM proposal_passes WHERE session = ?", (session,)).fetchone()
    return int(row[0] or 0)


def boundaries_since(conn: sqlite3.Connection, session: "str | None", after_id: int) -> list[dict]:
    if not session:
        return []
    return [dict(r) for r in conn.execute(
        "SELECT * FROM proposal_boundaries WHERE session = ? AND id > ? ORDER BY id", (session, after_id))]


def sessions_with_new_boundaries(conn: sqlite3.Connection) -> list[dict]:
    """Sessions whose latest stop-hook boundary no pass has consumed yet (for the daemon)."""
    return [dict(r) for r in conn.execute(
        """SELECT b.session, max(b.id) AS boundary_id, max(b.transcript_path) AS transcript_path
           FROM proposal_boundaries b
           GROUP BY b.session
           HAVING max(b.id) > coalesce((SELECT max(boundary_id) FROM proposal_passes s
                                        WHERE s.session = b.session), 0)""")]


def memory_texts(conn: sqlite3.Connection, project: str, agent: str) -> list[str]:
    """Current memories the session may see (for the duplicate check)."""
    return [r[0] for r in conn.execute(
        """SELECT text FROM memories WHERE invalid_at IS NULL AND (scope = 'shared' OR (project = ? AND
           (scope = 'project' OR (scope = 'agent' AND agent = ?))))""", (project, agent))]


def pending_rows(conn: sqlite3.Connection, project: str) -> list[dict]:
    """The project's undecided proposals, oldest first: id, kind, text (as drafted), current
    (the latest edit's text, else the draft's), confidence (of the current wording when the
    proposer reworded it), line, state."""
    return [dict(r) for r in conn.execute(
        f"""SELECT p.id, p.kind, p.text, p.window_from AS line, {STATE_SQL} AS state,
                   coalesce((SELECT e.text FROM proposal_events e WHERE e.proposal_id = p.id AND e.text IS NOT NULL
                             ORDER BY e.id DESC LIMIT 1), p.text) AS current,
                   coalesce((SELECT s.confidence FROM proposal_sightings s WHERE s.proposal_id = p.id
                             AND s.reworded = 1 ORDER BY s.id DESC LIMIT 1), p.confidence) AS confidence
            FROM proposals p WHERE p.project = ? AND {UNDECIDED} ORDER BY p.id""", (project,))]


def sightings(conn: sqlite3.Connection, proposal_id: int) -> list[dict]:
    """Where a proposal was said again in later passes (append-only, oldest first)."""
    return [dict(r) for r in conn.execute(
        "SELECT * FROM proposal_sightings WHERE proposal_id = ? ORDER BY id", (int(proposal_id),))]


def pending_for_session(conn: sqlite3.Connection, session: str, limit: int = 20) -> list[dict]:
    return [dict(r) for r in conn.execute(
        f"""SELECT p.id, p.kind, p.text, p.why, p.pass_id, p.source, p.window_from, p.window_to,
                   {STATE_SQL} AS state,
                   (SELECT e.text FROM proposal_events e WHERE e.proposal_id = p.id AND e.text IS NOT NULL
                    ORDER BY e.id DESC LIMIT 1) AS edited_text
            FROM proposals p WHERE p.session = ? AND {UNDECIDED} ORDER BY p.id LIMIT ?""",
        (session, limit))]


def session_use(conn: sqlite3.Connection, session: str) -> "tuple[int, int]":
    """(substantive turns the session's passes read, proposals drafted from the session): what
    the session's proposal budget is worked out from. Decided proposals count: they were shown."""
    turns = conn.execute("SELECT coalesce(sum(turns), 0) FROM proposal_passes WHERE session = ?",
                         (session,)).fetchone()[0]
    drafted = conn.execute("SELECT count(*) FROM proposals WHERE session = ?", (session,)).fetchone()[0]
    return int(turns), int(drafted)


# --- writing drafts -----------------------------------------------------------------------


def store_pass(conn: sqlite3.Connection, r: dict, *, session, source: str, from_line: int, to_line: int,
               boundary_id, window_chars: int, drafts: list, project: str, agent: str,
               model: "str | None", again: "list | tuple" = (), turns: int = 0, settle=None) -> list[int]:
    """One transaction: the pass (which advances the cursor), its surviving drafts as pending
    proposals, the pass's receipt, and `again`: (proposal id, draft, reword) for each draft
    that says what a pending proposal of an earlier pass says. Each is kept as a sighting of
    that proposal (its line, uuid and wording); with `reword` (the later wording is the better
    one) an 'edited' event by the proposer carries it, while nobody has touched the proposal
    yet. `turns`: the substantive turns the pass read (the session's budget, `session_use`).
    `settle(conn, drafts) -> drafts`, called inside the transaction before anything is written,
    decides what is stored from what is stored already (the session's budget), so two passes
    over one session cannot both spend its last room. Returns the new proposal ids."""
    now = receipts.now_iso()
    conn.execute("BEGIN IMMEDIATE")
    try:
        if settle is not None:
            drafts = settle(conn, list(drafts))
        cur = conn.execute(
            """INSERT INTO proposal_passes (time, session, source, from_line, to_line, boundary_id,
                                            window_chars, drafts, stored, receipt_uid, turns)
               VALUES (?,?,?,?,?,?,?,?,?,?,?)""",
            (now, session, source, from_line, to_line, boundary_id, window_chars,
             int(r.get("candidates") or 0), len(drafts), r["uid"], int(turns)))
        pass_id = cur.lastrowid
        ids = []
        for d in drafts:
            # A mined draft says where it was said (its line, or an error's line to its fix's);
            # anything else keeps the pass's range.
            line = getattr(d, "line", None)
            w_from, w_to = (line, getattr(d, "line_to", None) or line) if line else (from_line, to_line)
            c = conn.execute(
                """INSERT INTO proposals (time, session, project, agent, kind, text, why, confidence, model,
                                         pass_id, source, window_from, window_to, receipt_uid)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
                (now, session, project, agent, d.kind, d.text, d.why or "", d.confidence, model, pass_id,
                 source, w_from, w_to, r["uid"]))
            ids.append(c.lastrowid)
        seen = 0
        for pid, d, reword in again:
            state = conn.execute(f"SELECT {STATE_SQL} FROM proposals p WHERE p.id = ?", (pid,)).fetchone()
            if state is None or state[0] not in ("pending", "edited"):
                continue  # decided meanwhile: nothing to add to
            line = getattr(d, "line", None)
            reworded = bool(reword) and state[0] == "pending"
            if reworded:
                conn.execute(
                    """INSERT INTO proposal_events (proposal_id, time, from_state, to_state, actor, session,
                                                    reason, text, kind) VALUES (?,?,?,?,?,?,?,?,?)""",
                    (pid, now, "pending", "edited", "proposer", session,
                     f"better worded when said again (pass {pass_id}, line {line})", d.text, d.kind))
            conn.execute(
                """INSERT INTO proposal_sightings (time, proposal_id, pass_id, session, source, window_from,
                                                   window_to, uuid, kind, text, confidence, reworded)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""",
                (now, pid, pass_id, session, source, line, getattr(d, "line_to", None) or line,
                 getattr(d, "uuid", None), d.kind, d.text, d.confidence, int(reworded)))
            seen += 1
        if seen:
            r["detail"]["said_again"] = seen
        r["delivered"] = len(ids)
        r["delivered_ids"] = [f"p:{i}" for i in ids]
        r["detail"]["pass_id"] = pass_id
        r["detail"]["stored_ids"] = ids
        receipts.insert(conn, r)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        r["delivered"], r["delivered_ids"] = 0, []
        r["detail"].pop("pass_id", None)
        r["detail"].pop("stored_ids", None)
        raise
    return ids


def record_boundary(conn: sqlite3.Connection, *, session: str, project, agent, origin: str,
                    native_event=None, transcript_path=None, text: str = "", receipt_uid=None) -> int:
    """Append one turn boundary. `text` must already be redacted (policies.redact)."""
    cur = conn.execute(
        """INSERT INTO proposal_boundaries (time, session, project, agent, origin, native_event,
                                            transcript_path, text, receipt_uid) VALUES (?,?,?,?,?,?,?,?,?)""",
        (receipts.now_iso(), session, project, agent, origin, native_event, transcript_path, text or "",
         receipt_uid))
    return cur.lastrowid


def as_json(obj) -> str:
    return jsonio.dumps(obj, separators=(",", ":"), ensure_ascii=False)

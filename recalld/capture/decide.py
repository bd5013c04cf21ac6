"""Deciding on proposals: the agent's side, and the only path from a draft to a memory.

States: pending -> approved | rejected, pending -> edited (-> edited ...) -> approved | rejected.
Every transition is an append-only row in proposal_events; the current state is the latest
row's, else pending. Only pending or edited proposals move; a decided one never moves again.

Approval writes the memory and the `approved` event in ONE BEGIN IMMEDIATE transaction, and
the schema allows one decision per proposal (a unique index), so two concurrent approvals of
the same proposal write one memory: the second waits for the lock, then finds it decided.
"""

import sqlite3
from dataclasses import dataclass

from recalld.core import proposal_db, receipts
from recalld.capture import policies
from recalld import memories
from recalld.core.scope import SCOPES, Scope

STATES = ("pending", "edited", "approved", "rejected")
OPEN = ("pending", "edited")
COLUMNS = ("id", "time", "session", "project", "agent", "kind", "text", "why", "confidence", "model",
           "pass_id", "source", "window_from", "window_to", "receipt_uid")


class ProposalError(ValueError):
    """An illegal or impossible transition; one clear line, nothing changed."""


@dataclass
class Decision:
    proposal: dict  # the proposal after the transition
    event: dict  # the event row written
    memory: "dict | None" = None  # approval: the memory written
    superseded: list = None  # approval: memories it superseded
    similar: list = None  # approval: current memories that look related (printed, not applied)
    redacted: dict = None  # kind -> count of secrets replaced in what this transition stored

    def as_dict(self) -> dict:
        out = {"proposal": self.proposal, "event": self.event, "redacted": self.redacted or {}}
        if self.memory is not None:
            out["memory"] = self.memory
            out["superseded"] = self.superseded or []
            out["changed"] = [self.memory, *(self.superseded or [])]
            out["similar"] = self.similar or []
        return out


def parse_id(value) -> int:
    s = str(value).strip().lower()
    if s.startswith("p"):
        s = s[1:]
    if not s.isdigit():
        raise ProposalError(f"not a proposal id: {value!r}")
    return int(s)


def _events(conn, pid: int) -> list[dict]:
    return [dict(r) for r in conn.execute(
        "SELECT * FROM proposal_events WHERE proposal_id = ? ORDER BY id", (pid,))]


def get(conn: sqlite3.Connection, pid) -> "dict | None":
    pid = parse_id(pid)
    row = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM proposals WHERE id = ?", (pid,)).fetchone()
    if row is None:
        return None
    p = {k: row[k] for k in COLUMNS}
    p["events"] = _events(conn, pid)
    p["state"] = p["events"][-1]["to_state"] if p["events"] else "pending"
    p["memory_id"] = next((e["memory_id"] for e in p["events"] if e["to_state"] == "approved"), None)
    # Where later passes said the same claim again (each with its line and wording).
    p["said_again"] = proposal_db.sightings(conn, pid)
    # What approval would write: the draft overlaid by its latest edits.
    eff = {"text": p["text"], "kind": p["kind"], "scope": None, "tell": None}
    for e in p["events"]:
        for k in eff:
            if e.get(k) is not None:
                eff[k] = e[k]
    p["effective"] = eff
    return p


def list_(conn: sqlite3.Connection, *, project: "str | None" = None, session: "str | None" = None,
          states=OPEN, limit: int = 50) -> list[dict]:
    where, params = [], []
    if project:
        where.append("p.project = ?")
        params.append(project)
    if session:
        where.append("p.session = ?")
        params.append(session)
    if states:
        where.append(f"{proposal_db.STATE_SQL} IN ({', '.join('?' * len(states))})")
        params.extend(states)
    sql = "SELECT p.id FROM proposals p" + (" WHERE " + " AND ".join(where) if where else "")
    ids = [r[0] for r in conn.execute(sql + " ORDER BY p.id DESC LIMIT ?", (*params, int(limit)))]
    return [get(conn, i) for i in reversed(ids)]


def _require_open(p: "dict | None", pid: int, verb: str) -> None:
    if p is None:
        raise ProposalError(f"p{pid} does not exist")
    if p["state"] not in OPEN:
        extra = f" as m{p['memory_id']}" if p["memory_id"] else ""
        raise ProposalError(f"cannot {verb} p{pid}: it is already {p['state']}{extra}; "
                            "a decided proposal never moves again")


def _insert_event(conn, pid: int, from_state: str, to_state: str, *, actor, session, memory_id=None,
                  reason=None, text=None, kind=None, scope=None, tell=None) -> dict:
    cur = conn.execute(
        """INSERT INTO proposal_events (proposal_id, time, from_state, to_state, actor, session, memory_id,
                                        reason, text, kind, scope, tell) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""",
        (pid, receipts.now_iso(), from_state, to_state, actor, session, memory_id, reason, text, kind, scope, tell))
    return dict(conn.execute("SELECT * FROM proposal_events WHERE id = ?", (cur.lastrowid,)).fetchone())


def _clean(value: "str | None", found: dict) -> "str | None":
    """Agents' own words are redacted too: a secret never reaches the store by this path.
    What was replaced is counted into `found` (kind -> count)."""
    if value is None:
        return None
    red, counts = policies.redact(" ".join(str(value).split()))
    for k, n in counts.items():
        found[k] = found.get(k, 0) + n
    return red or None


def _transition(conn, pid, verb: str, body) -> Decision:
    pid = parse_id(pid)
    conn.execute("BEGIN IMMEDIATE")
    try:
        p = get(conn, pid)
        _require_open(p, pid, verb)
        decision = body(p)
        conn.execute("COMMIT")
    except sqlite3.IntegrityError as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise ProposalError(f"cannot {verb} p{pid}: {e}; nothing changed") from None
    except memories.StoreError as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise ProposalError(f"cannot {verb} p{pid}: {e}") from None
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    decision.proposal = get(conn, pid)
    return decision


def approve(conn: sqlite3.Connection, pid, *, scope: "str | None" = None, kind: "str | None" = None,
            supersedes=(), actor: str = "cli", session: "str | None" = None,
            check_similar: bool = True) -> Decision:
    """Write the proposal's (edited) text as a memory, durably, and mark it approved."""
    if scope is not None and scope not in SCOPES:
        raise ProposalError(f"unknown scope {scope!r}; use one of: {', '.join(SCOPES)}")
    if kind is not None and kind not in memories.KINDS:
        raise ProposalError(f"unknown kind {kind!r}; use one of: {', '.join(memories.KINDS)}")

    def body(p):
        eff = p["effective"]
        k, sc_name = kind or eff["kind"], scope or eff["scope"] or "project"
        # The draft's own project and agent: the scope the hook resolved for that session.
        sc = Scope(project=p["project"], agent=p["agent"])
        # The store's write redacts the text and tell (drafts and edits were redacted already;
        # this holds for a draft row written by anything else).
        res = memories.remember_in_transaction(
            conn, eff["text"], sc, scope=sc_name, kind=k, tell=eff["tell"],
            supersedes=supersedes, session=session or p["session"], source=f"proposal:p{p['id']}")
        ev = _insert_event(conn, p["id"], p["state"], "approved", actor=actor, session=_clean(session, {}),
                           memory_id=res.memory["id"], kind=k, scope=sc_name)
        return Decision(proposal=p, event=ev, memory=res.memory, superseded=res.superseded,
                        redacted=res.redacted)

    d = _transition(conn, pid, "approve", body)
    if check_similar:
        sc = Scope(project=d.proposal["project"], agent=d.proposal["agent"])
        d.similar = memories.similar(conn, d.memory["text"], sc,
                                  exclude={d.memory["id"], *(m["id"] for m in d.superseded)})
    return d


def edit(conn: sqlite3.Connection, pid, *, text: "str | None" = None, kind: "str | None" = None,
         scope: "str | None" = None, tell: "str | None" = None, reason: "str | None" = None,
         actor: str = "cli", session: "str | None" = None) -> Decision:
    """Change what approval would write (the draft row itself is never rewritten)."""
    found: dict = {}
    text, tell, reason, session = _clean(text, found), _clean(tell, found), _clean(reason, found), _clean(session, found)
    if text is None and kind is None and scope is None and tell is None:
        raise ProposalError("edit needs at least one of --text, --kind, --scope, --tell")
    if text is not None and len(text) > memories.MAX_TEXT:
        raise ProposalError(f"text is {len(text)} characters; the limit is {memories.MAX_TEXT}")
    if kind is not None and kind not in memories.KINDS:
        raise ProposalError(f"unknown kind {kind!r}; use one of: {', '.join(memories.KINDS)}")
    if scope is not None and scope not in SCOPES:
        raise ProposalError(f"unknown scope {scope!r}; use one of: {', '.join(SCOPES)}")
    if tell is not None and len(tell) > memories.MAX_TELL:
        raise ProposalError(f"tell is {len(tell)} characters; keep it under {memories.MAX_TELL}")

    def body(p):
        ev = _insert_event(conn, p["id"], p["state"], "edited", actor=actor, session=session, reason=reason,
                           text=text, kind=kind, scope=scope, tell=tell)
        return Decision(proposal=p, event=ev, redacted=found)

    return _transition(conn, pid, "edit", body)


def reject(conn: sqlite3.Connection, pid, reason: str, *, actor: str = "cli",
           session: "str | None" = None) -> Decision:
    found: dict = {}
    reason, session = _clean(reason, found), _clean(session, found)
    if not reason:
        raise ProposalError("reject needs a reason (--reason): it is how the proposer's misses are studied")

    def body(p):
        ev = _insert_event(conn, p["id"], p["state"], "rejected", actor=actor, session=session, reason=reason)
        return Decision(proposal=p, event=ev, redacted=found)

    return _transition(conn, pid, "reject", body)

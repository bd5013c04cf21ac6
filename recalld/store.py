"""Writing and reading memories (the slow path: CLI, MCP, import, approvals).

A write returns only after it is durable (WAL + synchronous=FULL, one transaction) and returns
every record it changed. Superseding marks, never deletes; validity comes from the write's
own clock, never from dates inside the text (seed 002: a date in the prose back-dated a rule).
"""

import json
import re
import sqlite3
from dataclasses import dataclass, field

from recalld.core import receipts
from recalld.core.db import StoreError
from recalld.core.scope import SCOPES, Scope
from recalld.core.textproc import Stemmer, aux_text

KINDS = ("decision", "constraint", "fact", "procedure", "preference")
MAX_TEXT = 8000
MAX_TELL = 300
NEGATIONS = {"not", "never", "no", "don't", "dont", "avoid", "instead", "stop", "without",
             "isn't", "doesn't", "can't", "cannot", "shouldn't", "mustn't", "deprecated", "removed"}

MEMORY_COLUMNS = ("id", "text", "kind", "scope", "project", "agent", "tell", "always", "session",
                  "source", "created_at", "valid_from", "invalid_at", "superseded_by", "invalid_reason",
                  "thread", "follows")
MAX_THREAD = 200


@dataclass
class WriteResult:
    memory: dict
    superseded: list = field(default_factory=list)
    similar: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """The one shape of a write's result, for `--json` and MCP alike: every record it changed
        (the new memory first), the ids it superseded, and the related memories it only shows."""
        return {"id": self.memory["id"], "superseded": [m["id"] for m in self.superseded],
                "changed": [self.memory, *self.superseded], "similar": self.similar}


def parse_id(value) -> int:
    s = str(value).strip().lower()
    if s.startswith("m"):
        s = s[1:]
    if not s.isdigit():
        raise StoreError(f"not a memory id: {value!r}")
    return int(s)


def get(conn: sqlite3.Connection, mid: int) -> "dict | None":
    row = conn.execute(f"SELECT {', '.join(MEMORY_COLUMNS)} FROM memories WHERE id = ?", (mid,)).fetchone()
    return _public(row) if row else None


def _public(row) -> dict:
    d = {k: row[k] for k in MEMORY_COLUMNS}
    d["always"] = bool(d["always"])
    return d


def visible(mem: dict, sc: Scope) -> bool:
    if mem["scope"] == "shared":
        return True
    if mem["project"] != sc.project:
        return False
    return mem["scope"] == "project" or mem["agent"] == sc.agent


def _validate_thread(thread) -> "str | None":
    if thread is None:
        return None
    if not isinstance(thread, str):
        raise StoreError("thread must be a string")
    thread = " ".join(thread.split())
    if len(thread) > MAX_THREAD:
        raise StoreError(f"thread name is {len(thread)} characters; the limit is {MAX_THREAD}")
    return thread or None


def _validate(text, kind, scope_name, tell) -> tuple[str, "str | None"]:
    if not isinstance(text, str) or not text.strip():
        raise StoreError("memory text is empty")
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise StoreError(f"memory text is {len(text)} characters; the limit is {MAX_TEXT} (one knowing per memory)")
    if "\x00" in text:
        raise StoreError("memory text contains a NUL byte")
    if kind not in KINDS:
        raise StoreError(f"unknown kind {kind!r}; use one of: {', '.join(KINDS)}")
    if scope_name not in SCOPES:
        raise StoreError(f"unknown scope {scope_name!r}; use one of: {', '.join(SCOPES)}")
    if tell is not None:
        tell = " ".join(str(tell).split())
        if not tell:
            tell = None
        elif len(tell) > MAX_TELL:
            raise StoreError(f"tell is {len(tell)} characters; keep it to one line under {MAX_TELL}")
    return text, tell


def similar(conn: sqlite3.Connection, text: str, sc: Scope, *, exclude=(), limit: int = 3) -> list[dict]:
    """Current memories that may say the same or the opposite (printed, never applied)."""
    from rapidfuzz import fuzz

    from recalld.core.search import search

    out = []
    for h in search(conn, text, sc, limit=10, floor=0.35):
        if h.id in exclude:
            continue
        ratio = fuzz.token_set_ratio(text.lower(), h.text.lower())
        if ratio < 55 and h.score < 0.6:
            continue
        a = set(re.findall(r"[\w']+", text.lower())) & NEGATIONS
        b = set(re.findall(r"[\w']+", h.text.lower())) & NEGATIONS
        relation = "same" if ratio >= 90 and a == b else ("may contradict" if a != b else "related")
        out.append({"id": h.id, "text": h.text, "relation": relation, "similarity": round(ratio / 100, 3),
                    "score": round(h.score, 3)})
        if len(out) >= limit:
            break
    return out


def remember(conn: sqlite3.Connection, text: str, sc: Scope, *, scope: str = "project",
             kind: str = "fact", tell: "str | None" = None, always: bool = False,
             supersedes=(), session: "str | None" = None, source: str = "cli",
             thread: "str | None" = None, check_similar: bool = True) -> WriteResult:
    """Write one memory. `thread` names the conversation or line of work it continues: it then
    follows the thread's previous memory in this project, and search reads it with that one's
    words (docs/architecture.md, "Threads")."""
    text, tell = _validate(text, kind, scope, tell)
    thread = _validate_thread(thread)
    old_ids = [parse_id(s) for s in supersedes]
    aux, terms = _index_terms(conn, text, tell)
    conn.execute("BEGIN IMMEDIATE")
    try:
        new_id = _insert_memory(conn, text, sc, scope, kind, tell, always, old_ids, session, source, aux, terms,
                                thread=thread)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    result = WriteResult(memory=get(conn, new_id), superseded=[get(conn, o) for o in old_ids])
    if check_similar:
        result.similar = similar(conn, text, sc, exclude={new_id, *old_ids})
    return result


def remember_in_transaction(conn: sqlite3.Connection, text: str, sc: Scope, *, scope: str = "project",
                            kind: str = "fact", tell: "str | None" = None, always: bool = False,
                            supersedes=(), session: "str | None" = None, source: str = "cli") -> WriteResult:
    """remember()'s write inside the caller's open BEGIN IMMEDIATE transaction. The caller
    commits, so the memory and the caller's own rows (a proposal's approval) land together or
    not at all. Durable once the caller's COMMIT returns."""
    if not conn.in_transaction:
        raise StoreError("remember_in_transaction needs the caller's open transaction")
    text, tell = _validate(text, kind, scope, tell)
    old_ids = [parse_id(s) for s in supersedes]
    aux, terms = _index_terms(conn, text, tell)
    new_id = _insert_memory(conn, text, sc, scope, kind, tell, always, old_ids, session, source, aux, terms)
    return WriteResult(memory=get(conn, new_id), superseded=[get(conn, o) for o in old_ids])


def _index_terms(conn: sqlite3.Connection, text: str, tell: "str | None",
                 stemmer: "Stemmer | None" = None) -> tuple[str, str]:
    aux = aux_text(text + " " + (tell or ""))
    terms = " ".join(sorted((stemmer or Stemmer(conn)).terms_of(" ".join([text, tell or "", aux]))))
    return aux, terms


def _insert_memory(conn, text, sc, scope, kind, tell, always, old_ids, session, source, aux, terms,
                   action: str = "created", thread: "str | None" = None) -> int:
    """The rows of one write; the caller holds the transaction."""
    for oid in old_ids:
        old = get(conn, oid)
        if old is None:
            raise StoreError(f"m{oid} does not exist")
        if not visible(old, sc):
            raise StoreError(f"m{oid} is not in this scope (project {sc.project}, agent {sc.agent})")
        if old["invalid_at"] is not None:
            raise StoreError(f"m{oid} is already invalid since {old['invalid_at']}"
                               + (f" (superseded by m{old['superseded_by']})" if old["superseded_by"] else ""))
    now = receipts.now_iso()
    # Read inside the write transaction, so two writers cannot both follow the same memory.
    follows = conn.execute("SELECT max(id) FROM memories WHERE project = ? AND thread = ?",
                           (sc.project, thread)).fetchone()[0] if thread else None
    cur = conn.execute(
        """INSERT INTO memories (text, kind, scope, project, agent, tell, always, session, source,
                                 created_at, valid_from, aux, terms, thread, follows)
           VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
        (text, kind, scope, sc.project, sc.agent, tell, int(bool(always)), session, source, now, now, aux, terms,
         thread, follows))
    new_id = cur.lastrowid
    conn.execute("INSERT INTO memory_changes (time, memory_id, action, session) VALUES (?,?,?,?)",
                 (now, new_id, action, session))
    for oid in old_ids:
        conn.execute("UPDATE memories SET invalid_at = ?, superseded_by = ?, invalid_reason = ? WHERE id = ?",
                     (now, new_id, f"superseded by m{new_id}", oid))
        conn.execute("INSERT INTO memory_changes (time, memory_id, action, other_id, session) VALUES (?,?,?,?,?)",
                     (now, oid, "superseded", new_id, session))
    return new_id


def retract(conn: sqlite3.Connection, mid, why: str, sc: Scope, session: "str | None" = None) -> dict:
    mid = parse_id(mid)
    why = " ".join((why or "").split())
    if not why:
        raise StoreError("retract needs a reason (--why)")
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = get(conn, mid)
        if old is None:
            raise StoreError(f"m{mid} does not exist")
        if not visible(old, sc):
            raise StoreError(f"m{mid} is not in this scope (project {sc.project}, agent {sc.agent})")
        if old["invalid_at"] is not None:
            raise StoreError(f"m{mid} is already invalid since {old['invalid_at']}")
        now = receipts.now_iso()
        conn.execute("UPDATE memories SET invalid_at = ?, invalid_reason = ? WHERE id = ?", (now, why, mid))
        conn.execute("INSERT INTO memory_changes (time, memory_id, action, reason, session) VALUES (?,?,?,?,?)",
                     (now, mid, "retracted", why, session))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return get(conn, mid)


def history(conn: sqlite3.Connection, mid) -> list[dict]:
    """Every memory connected to `mid` by supersession (both directions), oldest first, each
    with its append-only change log."""
    mid = parse_id(mid)
    if get(conn, mid) is None:
        raise StoreError(f"m{mid} does not exist")
    seen, todo = set(), [mid]
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        row = conn.execute("SELECT superseded_by FROM memories WHERE id = ?", (cur,)).fetchone()
        if row and row[0]:
            todo.append(row[0])
        todo.extend(r[0] for r in conn.execute("SELECT id FROM memories WHERE superseded_by = ?", (cur,)))
    chain = []
    for m_id in sorted(seen):
        m = get(conn, m_id)
        m["changes"] = [dict(r) for r in conn.execute(
            "SELECT time, action, other_id, reason FROM memory_changes WHERE memory_id = ? ORDER BY id", (m_id,))]
        chain.append(m)
    return chain


IMPORT_FIELDS = {"text", "scope", "kind", "tell", "always", "supersedes", "session", "source", "cwd", "thread"}


def import_jsonl(conn: sqlite3.Connection, lines, default_scope_for, *, source: str = "import") -> list[WriteResult]:
    """Validate every line first, then write them all in one transaction: nothing half-written."""
    from recalld.core import scope as scope_mod

    parsed = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise StoreError(f"line {n}: not JSON ({e.msg})")
        if not isinstance(obj, dict):
            raise StoreError(f"line {n}: expected a JSON object")
        unknown = set(obj) - IMPORT_FIELDS
        if unknown:
            raise StoreError(f"line {n}: unknown field(s) {', '.join(sorted(unknown))}")
        sc = scope_mod.resolve(obj["cwd"]) if obj.get("cwd") else default_scope_for
        try:
            text, tell = _validate(obj.get("text"), obj.get("kind", "fact"), obj.get("scope", "project"), obj.get("tell"))
            sup = obj.get("supersedes") or []
            sup = [parse_id(s) for s in (sup if isinstance(sup, list) else [sup])]
            obj["thread"] = _validate_thread(obj.get("thread"))
        except StoreError as e:
            raise StoreError(f"line {n}: {e}")
        parsed.append((n, obj, text, tell, sc, sup))
    stemmer = Stemmer(conn)
    rows = [(n, obj, text, tell, sc, sup, *_index_terms(conn, text, tell, stemmer))
            for n, obj, text, tell, sc, sup in parsed]
    results = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for n, obj, text, tell, sc, sup, aux, terms in rows:
            try:
                nid = _insert_memory(conn, text, sc, obj.get("scope", "project"), obj.get("kind", "fact"), tell,
                                     obj.get("always"), sup, obj.get("session"), obj.get("source") or source,
                                     aux, terms, action="imported", thread=obj["thread"])
            except StoreError as e:
                raise StoreError(f"line {n}: {e}") from None
            results.append((nid, sup))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return [WriteResult(memory=get(conn, nid), superseded=[get(conn, o) for o in sup]) for nid, sup in results]

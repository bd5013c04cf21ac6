"""Memories outside the hook: write, supersede, retract, import, show, history (the slow path:
CLI, MCP, approvals). The store itself is recalld.core.db.

A write returns only after it is durable (WAL + synchronous=FULL, one transaction) and returns
every record it changed. Superseding marks, never deletes; validity comes from the write's
own clock, never from dates inside the text (a date in the prose once back-dated a rule).
"""

import json
import re
import sqlite3
from dataclasses import dataclass, field

from recalld.core import receipts
from recalld.core.db import StoreError
from recalld.core.redact import redact
from recalld.core.scope import SCOPES, Scope
from recalld.core.query_terms import Stemmer, aux_text

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
    redacted: dict = field(default_factory=dict)  # kind -> count replaced by [REDACTED:kind]
    secrets_kept: dict = field(default_factory=dict)  # kind -> count stored as written (allow_secrets)

    def as_dict(self) -> dict:
        """The one shape of a write's result, for `--json` and MCP alike: every record it changed
        (the new memory first), the ids it superseded, the related memories it only shows, and
        what was redacted (kinds and counts, never the values)."""
        return {"id": self.memory["id"], "superseded": [m["id"] for m in self.superseded],
                "changed": [self.memory, *self.superseded], "similar": self.similar,
                "redacted": self.redacted, "secrets_kept": self.secrets_kept}


def describe_secrets(counts: dict) -> str:
    """'aws-access-key 1, jwt 2': the kinds and counts of a redaction, never the values."""
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


def _redact_write(values: tuple, allow_secrets: bool) -> tuple:
    """The strings a write stores from its caller (text, tell, thread, provenance), with secrets
    replaced (the patterns the daemon applies to transcripts), or kept as written when the caller
    passed allow_secrets. Returns (values, found: kind -> count, the change log's reason)."""
    found: dict = {}
    out = []
    for value in values:
        red, counts = redact(value) if isinstance(value, str) and value else (value, None)
        for k, n in (counts or {}).items():
            found[k] = found.get(k, 0) + n
        out.append(value if allow_secrets else red)
    if allow_secrets:
        reason = "allow-secrets: " + (f"kept {describe_secrets(found)}" if found else "nothing detected")
    else:
        reason = f"redacted {describe_secrets(found)}" if found else None
    return tuple(out), found, reason


def _result_secrets(res: "WriteResult", found: dict, allow_secrets: bool) -> "WriteResult":
    if allow_secrets:
        res.secrets_kept = found
    else:
        res.redacted = found
    return res


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
    return sc.sees(mem["scope"], mem["project"], mem["agent"])


def _readable(conn: sqlite3.Connection, mid: int, sc: Scope) -> dict:
    """The memory `mid` if `sc` may read it (current or not). One that exists but is not
    readable is reported exactly like a missing one: ids are sequential, so a different
    answer would let any caller map every project's and agent's memories."""
    m = get(conn, mid)
    if m is None or not visible(m, sc):
        raise StoreError(f"m{mid} does not exist")
    return m


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
             thread: "str | None" = None, check_similar: bool = True,
             allow_secrets: bool = False) -> WriteResult:
    """Write one memory. `thread` names the conversation or line of work it continues: it then
    follows the thread's previous memory in this project, and search reads it with that one's
    words (docs/architecture.md, "Threads"). Secrets in the text, tell and thread are replaced
    by `[REDACTED:kind]` unless `allow_secrets`, which the memory's change log records."""
    text, tell = _validate(text, kind, scope, tell)
    thread = _validate_thread(thread)
    (text, tell, thread, session, source), found, reason = _redact_write((text, tell, thread, session, source),
                                                                         allow_secrets)
    old_ids = [parse_id(s) for s in supersedes]
    aux, terms = _index_terms(conn, text, tell)
    # Looked up before the write, not after: a read that fails (a damaged page) then fails the
    # command with nothing written, instead of after a write the user is told did not happen.
    near = similar(conn, text, sc, exclude=set(old_ids)) if check_similar else []
    conn.execute("BEGIN IMMEDIATE")
    try:
        new_id, _ = _insert_memory(conn, text, sc, scope, kind, tell, always, old_ids, session, source, aux, terms,
                                   thread=thread, reason=reason)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    result = _result_secrets(WriteResult(memory=get(conn, new_id), superseded=[get(conn, o) for o in old_ids]),
                             found, allow_secrets)
    result.similar = near
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
    (text, tell, session), found, reason = _redact_write((text, tell, session), False)
    old_ids = [parse_id(s) for s in supersedes]
    aux, terms = _index_terms(conn, text, tell)
    new_id, _ = _insert_memory(conn, text, sc, scope, kind, tell, always, old_ids, session, source, aux, terms,
                               reason=reason)
    return _result_secrets(WriteResult(memory=get(conn, new_id), superseded=[get(conn, o) for o in old_ids]),
                           found, False)


def insert_replica(conn: sqlite3.Connection, text: str, sc: Scope, *, scope: str, kind: str, tell: "str | None",
                   always: bool, source: str, reason: str, stemmer: "Stemmer | None" = None) -> tuple[int, int]:
    """A memory written on another machine (the team's), inside the caller's open transaction:
    the same rows remember() writes, so the store has one writer of them. The caller has
    checked and redacted the text (it came through the team's server, not a local agent).
    Returns (memory id, the id of its 'created' change)."""
    if not conn.in_transaction:
        raise StoreError("insert_replica needs the caller's open transaction")
    aux, terms = _index_terms(conn, text, tell, stemmer)
    return _insert_memory(conn, text, sc, scope, kind, tell, always, [], None, source, aux, terms, reason=reason)


def _index_terms(conn: sqlite3.Connection, text: str, tell: "str | None",
                 stemmer: "Stemmer | None" = None) -> tuple[str, str]:
    aux = aux_text(text + " " + (tell or ""))
    terms = " ".join(sorted((stemmer or Stemmer(conn)).terms_of(" ".join([text, tell or "", aux]))))
    return aux, terms


def _insert_memory(conn, text, sc, scope, kind, tell, always, old_ids, session, source, aux, terms,
                   action: str = "created", thread: "str | None" = None,
                   reason: "str | None" = None) -> tuple[int, int]:
    """The rows of one write; the caller holds the transaction. Returns (memory id, change id)."""
    for oid in old_ids:
        old = _readable(conn, oid, sc)
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
    change_id = conn.execute("INSERT INTO memory_changes (time, memory_id, action, reason, session) "
                             "VALUES (?,?,?,?,?)", (now, new_id, action, reason, session)).lastrowid
    for oid in old_ids:
        conn.execute("UPDATE memories SET invalid_at = ?, superseded_by = ?, invalid_reason = ? WHERE id = ?",
                     (now, new_id, f"superseded by m{new_id}", oid))
        conn.execute("INSERT INTO memory_changes (time, memory_id, action, other_id, session) VALUES (?,?,?,?,?)",
                     (now, oid, "superseded", new_id, session))
    return new_id, change_id


def retract(conn: sqlite3.Connection, mid, why: str, sc: Scope, session: "str | None" = None) -> dict:
    mid = parse_id(mid)
    why = " ".join((why or "").split())
    if not why:
        raise StoreError("retract needs a reason (--why)")
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = _readable(conn, mid, sc)
        if old["invalid_at"] is not None:
            raise StoreError(f"m{mid} is already invalid since {old['invalid_at']}")
        now = receipts.now_iso()
        conn.execute("UPDATE memories SET invalid_at = ?, invalid_reason = ? WHERE id = ?", (now, why, mid))
        conn.execute("INSERT INTO memory_changes (time, memory_id, action, reason, session) VALUES (?,?,?,?,?)",
                     (now, mid, "retracted", why, session))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return get(conn, mid)


def show(conn: sqlite3.Connection, mid, sc: Scope, *, via: str, session: "str | None" = None) -> dict:
    """The memory `mid` whole, if `sc` may read it: how the agent opens a tell. Writes one
    receipt (hook `show`, act `open`, the memory in delivered_ids) either way, so `recalld
    receipts` can say which tells were opened; a superseded memory is shown with its state
    and successor, never as current."""
    r = receipts.new(via, "show")
    r.update(act="open", project=sc.project, agent=sc.agent, session=session)
    t0 = receipts.timer()
    try:
        m = _readable(conn, parse_id(mid), sc)
    except StoreError as e:
        r.update(outcome="error", error=str(e)[:200], duration_ms=round((receipts.timer() - t0) * 1000, 3))
        receipts.record(conn, r)
        raise
    r.update(outcome="injected", delivered=1, delivered_ids=[f"m:{m['id']}"], candidates=1, above_floor=1,
             delivered_chars=len(m["text"]), duration_ms=round((receipts.timer() - t0) * 1000, 3))
    receipts.record(conn, r)
    return m


def history(conn: sqlite3.Connection, mid, sc: Scope) -> list[dict]:
    """Every memory connected to `mid` by supersession (both directions) that `sc` may read,
    oldest first, each with its append-only change log. The walk does not pass through a
    memory `sc` may not read, so the chain holds only what the caller could read on its own."""
    mid = parse_id(mid)
    _readable(conn, mid, sc)
    seen, chain_ids, todo = set(), [], [mid]
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        m = get(conn, cur)
        if m is None or not visible(m, sc):
            continue
        chain_ids.append(cur)
        if m["superseded_by"]:
            todo.append(m["superseded_by"])
        todo.extend(r[0] for r in conn.execute("SELECT id FROM memories WHERE superseded_by = ?", (cur,)))
        # a memory two machines superseded has one superseded_by and a second edge in its change
        # log (recalld/team/inbox.py): both successors belong to its chain
        todo.extend(r[0] for r in conn.execute("SELECT other_id FROM memory_changes WHERE memory_id = ? AND "
                                               "action = 'superseded' AND other_id IS NOT NULL", (cur,)))
        todo.extend(r[0] for r in conn.execute("SELECT memory_id FROM memory_changes WHERE other_id = ? AND "
                                               "action = 'superseded'", (cur,)))
    chain = []
    for m_id in sorted(chain_ids):
        m = get(conn, m_id)
        m["changes"] = [dict(r) for r in conn.execute(
            "SELECT time, action, other_id, reason FROM memory_changes WHERE memory_id = ? ORDER BY id", (m_id,))]
        chain.append(m)
    return chain


IMPORT_FIELDS = {"text", "scope", "kind", "tell", "always", "supersedes", "session", "source", "cwd", "thread"}


def import_jsonl(conn: sqlite3.Connection, lines, default_scope_for, *, source: str = "import",
                 allow_secrets: bool = False) -> list[WriteResult]:
    """Validate every line first, then write them all in one transaction: nothing half-written.
    Each line is redacted as remember() redacts (unless `allow_secrets`)."""
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
        (text, tell, obj["thread"], obj["session"], obj["source"]), found, reason = _redact_write(
            (text, tell, obj["thread"], obj.get("session"), obj.get("source")), allow_secrets)
        parsed.append((n, obj, text, tell, sc, sup, found, reason))
    stemmer = Stemmer(conn)
    rows = [(n, obj, text, tell, sc, sup, found, reason, *_index_terms(conn, text, tell, stemmer))
            for n, obj, text, tell, sc, sup, found, reason in parsed]
    results = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for n, obj, text, tell, sc, sup, found, reason, aux, terms in rows:
            try:
                nid, _ = _insert_memory(conn, text, sc, obj.get("scope", "project"), obj.get("kind", "fact"), tell,
                                        obj.get("always"), sup, obj.get("session"), obj.get("source") or source,
                                        aux, terms, action="imported", thread=obj["thread"], reason=reason)
            except StoreError as e:
                raise StoreError(f"line {n}: {e}") from None
            results.append((nid, sup, found))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return [_result_secrets(WriteResult(memory=get(conn, nid), superseded=[get(conn, o) for o in sup]), found,
                            allow_secrets) for nid, sup, found in results]

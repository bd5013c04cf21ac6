"""Receipts: one append-only record per hook run or background pass (standard library only).

"Never ran", "ran and found nothing" and "ran and failed" must stay distinguishable: every run
writes exactly one receipt, to the database when it can take it, else as one line appended to
RECALLD_HOME/receipts-fallback.jsonl. Readers merge both (by uid).
"""

import os
import time

import _sqlite3 as sqlite3  # not the sqlite3 package: its dbapi2 imports datetime (the hook)

from recalld.core import jsonio, paths

OUTCOMES = ("injected", "nothing", "error", "timeout", "skipped")
FIELDS = ("uid", "time", "source", "hook", "act", "agent", "session", "project", "outcome",
          "duration_ms", "candidates", "above_floor", "delivered", "cut", "withheld",
          "delivered_ids", "delivered_chars", "cut_chars", "withheld_chars", "error", "detail")


def now_iso() -> str:
    """UTC, ISO 8601 with microseconds (sortable as text). Written without `datetime`
    because this runs in the hook, where every import is paid on every prompt."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}+00:00"


def new(source: str, hook: "str | None" = None) -> dict:
    return {
        "uid": os.urandom(16).hex(), "time": now_iso(), "source": source, "hook": hook, "act": None,
        "agent": None, "session": None, "project": None, "outcome": "error", "duration_ms": None,
        "candidates": 0, "above_floor": 0, "delivered": 0, "cut": 0, "withheld": 0,
        "delivered_ids": [], "delivered_chars": 0, "cut_chars": 0, "withheld_chars": 0,
        "error": None, "detail": {},
    }


def _row(r: dict) -> tuple:
    out = []
    for f in FIELDS:
        v = r.get(f)
        if f in ("delivered_ids", "detail"):
            v = jsonio.dumps(v if v is not None else ([] if f == "delivered_ids" else {}),
                           separators=(",", ":"), ensure_ascii=False)
        out.append(v)
    return tuple(out)


INSERT_SQL = f"INSERT INTO receipts ({', '.join(FIELDS)}) VALUES ({', '.join('?' * len(FIELDS))})"


def insert(conn: sqlite3.Connection, r: dict) -> None:
    conn.execute(INSERT_SQL, _row(r))


def append_fallback(r: dict, reason: str = "") -> None:
    """One line, one write(2) on an O_APPEND descriptor: concurrent writers never tear it."""
    rec = dict(r)
    rec["detail"] = dict(rec.get("detail") or {}, fallback_reason=reason)
    line = (jsonio.dumps(rec, separators=(",", ":"), ensure_ascii=False, default=str) + "\n").encode()
    path = paths.fallback_receipts_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def record(conn: "sqlite3.Connection | None", r: dict, extra=None) -> str:
    """Append a receipt (and, in the same transaction, `extra(conn)`'s rows). Returns where it
    went: "db" or "fallback", or "duplicate" when a receipt with its uid is already stored
    (nothing written). Never raises for a store problem."""
    if conn is not None:
        try:
            if extra is None:
                # Nothing else to write: the INSERT is its own transaction, so the write lock is
                # held inside that one statement. Between a BEGIN and a COMMIT, a process the
                # scheduler sets aside (30 hooks on 2 cores) holds it while every writer waits.
                insert(conn, r)
                return "db"
            conn.execute("BEGIN IMMEDIATE")
            try:
                insert(conn, r)
                if extra is not None:
                    extra(conn)
                conn.execute("COMMIT")
                return "db"
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.IntegrityError as e:
            if "receipts.uid" in str(e):
                # A served run's receipt, written once by the daemon or, when the daemon did not
                # confirm it, by the hook process (recalld/hook/served.py): the first one stands.
                return "duplicate"
            reason = f"{type(e).__name__}: {e}"[:200]
        except Exception as e:  # locked, corrupt, read-only, missing table...
            reason = f"{type(e).__name__}: {e}"[:200]
    else:
        reason = "no_database"
    try:
        append_fallback(r, reason)
    except OSError:
        return "lost"
    return "fallback"


def read_fallback() -> list[dict]:
    out = []
    try:
        with open(paths.fallback_receipts_path(), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = jsonio.loads(line)
                except ValueError:
                    continue  # a line cut by a crash mid-write: skip, keep the rest
                if isinstance(rec, dict) and rec.get("uid"):
                    out.append(rec)
    except OSError:
        pass
    return out


def read(conn: "sqlite3.Connection | None", *, session=None, hook=None, source=None,
         limit: "int | None" = None) -> list[dict]:
    """Receipts from the database and the fallback file, newest first."""
    rows: dict = {}
    if conn is not None:
        where, params = [], []
        if session:
            where.append("session = ?")
            params.append(session)
        if hook:
            where.append("hook = ?")
            params.append(hook)
        if source:
            where.append("source = ?")
            params.append(source)
        sql = "SELECT * FROM receipts" + (" WHERE " + " AND ".join(where) if where else "")
        try:
            for r in conn.execute(sql + " ORDER BY id", params):
                d = dict(r)
                d.pop("id", None)
                d["delivered_ids"] = jsonio.loads(d["delivered_ids"] or "[]")
                d["detail"] = jsonio.loads(d["detail"] or "{}")
                rows[d["uid"]] = d
        except sqlite3.Error:
            pass
    for r in read_fallback():
        if session and r.get("session") != session:
            continue
        if hook and r.get("hook") != hook:
            continue
        if source and r.get("source") != source:
            continue
        rows.setdefault(r["uid"], dict(r, stored="fallback"))
    out = sorted(rows.values(), key=lambda r: r.get("time") or "", reverse=True)
    return out[:limit] if limit else out


def mark_opened(conn: "sqlite3.Connection | None", recs: list[dict]) -> None:
    """Add `opened` to every receipt that told memories (`detail.told`): those of its told
    memories that were later opened (`recalld show`, the MCP tool `show`) in the same project,
    the evidence that a tell was worth its line."""
    told = [r for r in recs if (r.get("detail") or {}).get("told")]
    if not told or conn is None:
        return
    ids = sorted({k for r in told for k in r["detail"]["told"]})
    opens: dict = {}
    try:
        for t, project, delivered in conn.execute(
                "SELECT time, project, delivered_ids FROM receipts WHERE hook = 'show' AND outcome = 'injected' "
                f"AND act = 'open' AND json_extract(delivered_ids, '$[0]') IN ({','.join('?' * len(ids))})", ids):
            for k in jsonio.loads(delivered or "[]"):
                opens.setdefault((project, k), []).append(t)
    except sqlite3.Error:
        return
    for r in told:
        r["opened"] = [k for k in r["detail"]["told"]
                       if any(t > (r.get("time") or "") for t in opens.get((r.get("project"), k), ()))]


def percentile(values: list, q: float) -> "float | None":
    if not values:
        return None
    s = sorted(values)
    idx = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[idx]


def summary(recs: list[dict]) -> list[dict]:
    groups: dict = {}
    for r in recs:
        groups.setdefault((r.get("source"), r.get("hook")), []).append(r)
    out = []
    for (source, hook), rs in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        durs = [r["duration_ms"] for r in rs if isinstance(r.get("duration_ms"), (int, float))]
        shares = {o: 0 for o in OUTCOMES}
        for r in rs:
            shares[r.get("outcome")] = shares.get(r.get("outcome"), 0) + 1
        out.append({
            "source": source, "hook": hook, "runs": len(rs),
            "outcomes": {k: round(v / len(rs), 4) for k, v in shares.items() if v},
            "p50_ms": percentile(durs, 0.5), "p99_ms": percentile(durs, 0.99),
            "delivered": sum(r.get("delivered") or 0 for r in rs),
            "cut": sum(r.get("cut") or 0 for r in rs),
            "withheld": sum(r.get("withheld") or 0 for r in rs),
            "withheld_chars": sum(r.get("withheld_chars") or 0 for r in rs),
            "told": sum(len((r.get("detail") or {}).get("told") or ()) for r in rs),
            "opened": sum(len(r.get("opened") or ()) for r in rs),
        })
    return out


def timer() -> float:
    return time.perf_counter()

"""What `recalld team status` and `recalld doctor` say about team sync, from the store and the
replicator's status file (no server connection: it answers offline too)."""

import calendar
import os
import sqlite3
import time

from recalld.core import db, paths
from recalld.team import config, outbox, replicator


def _age_s(iso: "str | None") -> "float | None":
    if not iso:
        return None
    try:
        t = calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) + float("0." + (iso[20:26] or "0"))
    except (ValueError, OverflowError):
        return None
    return round(time.time() - t, 1)


def of(conn: sqlite3.Connection) -> dict:
    m = config.current(conn)
    if m is None:
        left = conn.execute("SELECT time, team FROM team_log WHERE action = 'leave' "
                            "ORDER BY id DESC LIMIT 1").fetchone()
        return {"joined": False, "left": dict(left) if left else None}
    st = replicator.read_status()
    fresh = st.get("team") == m.team
    q = outbox.queued(conn, m.team)
    inbox_counts = {r[0]: r[1] for r in conn.execute(
        "SELECT outcome, count(*) FROM team_inbox WHERE team = ? GROUP BY outcome", (m.team,))}
    # written here since the replicator last looked (some may be private: those never go out)
    unscanned = conn.execute(
        "SELECT count(*) FROM memory_changes c WHERE c.id > ? AND c.action IN ('created', 'imported', 'retracted') "
        "AND NOT EXISTS (SELECT 1 FROM team_changes t WHERE t.change_id = c.id)",
        (config.cursor(conn, m.team, "scan"),)).fetchone()[0]
    local = conn.execute("SELECT count(*) FROM team_uids WHERE team = ? AND local = 1", (m.team,)).fetchone()[0]
    last_err = conn.execute("SELECT time, error FROM receipts WHERE hook = 'sync' AND source = 'team' "
                            "AND outcome = 'error' ORDER BY id DESC LIMIT 1").fetchone()
    last_ok = conn.execute("SELECT time FROM receipts WHERE hook = 'sync' AND source = 'team' AND outcome != 'error' "
                           "ORDER BY id DESC LIMIT 1").fetchone()
    return {
        "joined": True, "team": m.team, "conninfo": m.conninfo, "machine": m.machine, "joined_at": m.joined_at,
        "read_conninfo": m.read_conninfo,
        "projects": m.projects, "queued": q["queued"], "oldest_queued": q["oldest"],
        "unscanned_changes": unscanned,
        "lag_s": _age_s(q["oldest"]) if q["queued"] else 0.0,
        "shared_by_me": local, "from_team": inbox_counts,
        "last_pull": st.get("last_pull") if fresh else None, "last_push": st.get("last_push") if fresh else None,
        "last_sync_age_s": _age_s(st.get("last_pull")) if fresh else None,
        "replicator": {k: st.get(k) for k in ("running", "pid", "connected", "server", "reader", "written_at",
                                                "errors")}
        if fresh else None,
        "last_error": (st.get("last_error") if fresh else None) or (dict(last_err) if last_err else None),
        "last_ok_pass": last_ok[0] if last_ok else None,
    }


def summary() -> dict:
    """For `recalld doctor`: the same, read-only, or that the store has none yet."""
    if not os.path.exists(paths.db_path()):
        return {"joined": False}
    conn = db.connect(readonly=True)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'team_log'").fetchone():
            return {"joined": False, "note": "the store predates team sync"}
        return of(conn)
    finally:
        conn.close()

"""`recalld daemon status`, from any process: the running daemon's own report (the status file
it writes) plus what the store shows (offsets, sessions, queue, pass receipts)."""

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from recalld.core import db, receipts, settings
from recalld.daemon import tailer
from recalld.daemon.log import log_path
from recalld.hook import autostart


def status(conn: "sqlite3.Connection | None" = None, cfg: "dict | None" = None) -> dict:
    """What `recalld daemon status` shows: the running daemon's own report plus the store's view."""
    cfg = cfg if cfg is not None else settings.load()
    pid = autostart.running_pid()
    try:
        snap = json.loads(Path(autostart.status_path()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        snap = {}
    running = pid is not None
    out = {"running": running, "pid": (pid if pid > 0 else snap.get("pid")) if running else None}
    if running and snap:
        out.update({k: v for k, v in snap.items() if k not in ("running", "pid")})
        try:
            started = datetime.fromisoformat(snap["started_at"])
            out["uptime_s"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
        except (KeyError, TypeError, ValueError):
            pass
    else:
        out["roots"] = [{"path": str(p), "agent": k, "exists": p.is_dir()} for p, k in tailer.default_roots(cfg)]
        if snap:
            out["last_run"] = {k: snap.get(k) for k in ("started_at", "written_at", "passes", "last_error",
                                                        "store_reopened", "store")}
        from recalld.daemon import lastrun, models

        out["died"] = lastrun.died()
        try:
            out["models"] = models.role_report(cfg)
        except Exception as e:
            out["models"] = {"judge": {"state": "unknown", "reason": f"{type(e).__name__}: {e}"}}
        try:
            from recalld.model.resolve import resolve

            ch = resolve("judge", cfg)
            out["judge"] = {"model": ch.path, "source": ch.source, "available": ch.available,
                            "reason": ch.reason, "loaded": False}
        except Exception as e:
            out["judge"] = {"available": False, "reason": f"{type(e).__name__}: {e}"}
    if running:
        from recalld.daemon import lastrun

        out["last_death"] = lastrun.last_death()
    out["autostart"] = bool((cfg.get("daemon") or {}).get("autostart"))
    out["log"] = str(log_path())
    own = conn is None
    try:
        if own:
            conn = db.connect()
        out.update(_store_view(conn))
    except sqlite3.Error as e:
        out["store_error"] = str(e)[:200]
    finally:
        if own and conn is not None:
            conn.close()
    return out


def _store_view(conn) -> dict:
    offs = tailer.offsets(conn, limit=20)
    files = conn.execute("SELECT count(DISTINCT path) FROM tail_offsets").fetchone()[0]
    tot = conn.execute(
        """SELECT coalesce(sum(t.lines),0), coalesce(sum(t.events),0), coalesce(sum(t.malformed),0)
           FROM tail_offsets t JOIN (SELECT path, max(id) AS id FROM tail_offsets GROUP BY path) l ON l.id = t.id"""
    ).fetchone()
    sessions = conn.execute(
        """SELECT session, count(*) AS events, max(time) AS last_time, max(project) AS project
           FROM transcript_events GROUP BY session ORDER BY max(id) DESC LIMIT 10""").fetchall()
    n_sessions = conn.execute("SELECT count(DISTINCT session) FROM transcript_events").fetchone()[0]
    now = receipts.now_iso()
    depth = conn.execute(
        """SELECT count(*) FROM queue q WHERE NOT EXISTS (SELECT 1 FROM queue_delivered d WHERE d.queue_id = q.id)
           AND (q.expires_at IS NULL OR q.expires_at > ?)""", (now,)).fetchone()[0]
    passes = conn.execute("SELECT count(*) FROM receipts WHERE source = 'daemon'").fetchone()[0]
    last_err = conn.execute(
        "SELECT time, error FROM receipts WHERE source = 'daemon' AND error IS NOT NULL ORDER BY id DESC LIMIT 1"
    ).fetchone()
    return {
        "files": files, "lines": tot[0], "events": tot[1], "malformed": tot[2],
        "offsets": [{k: o[k] for k in ("path", "offset", "lines", "events", "malformed", "generation", "reason", "time")}
                    for o in offs],
        "sessions": n_sessions,
        "recent_sessions": [dict(s) for s in sessions],
        "queue_depth": depth,
        "passes_recorded": passes,
        "last_pass_error": dict(last_err) if last_err else None,
    }

"""Which team this store syncs with: the append-only team_log, read as the current membership.

The latest 'join' after the last 'leave' is the team; the 'share' rows since name the projects
whose project-scoped memories go to it, each under its normalized remote URL. The conninfo is
libpq's (a URL, `key=value` pairs or `service=NAME`) and never holds a password.
"""

import os
import socket
import sqlite3
from dataclasses import dataclass, field

from recalld.core import receipts

# libpq reads these: a password in the conninfo would be a secret in plain text in the store.
SECRET_KEYS = ("password",)


class TeamError(ValueError):
    """A clear, one-line problem with the team's configuration or server."""


@dataclass
class Membership:
    team: str
    conninfo: str
    machine: str  # this store's id in the team (random at join), with the host name for people
    joined_at: str
    read_conninfo: "str | None" = None  # a read replica for pulls, or None: the primary
    projects: dict = field(default_factory=dict)  # local project path -> project key

    def keys(self) -> list:
        return sorted(set(self.projects.values()))


def current(conn: sqlite3.Connection) -> "Membership | None":
    rows = conn.execute("SELECT * FROM team_log ORDER BY id").fetchall()
    m = None
    for r in rows:
        if r["action"] == "join":
            m = Membership(team=r["team"], conninfo=r["conninfo"], machine=r["machine"], joined_at=r["time"],
                           read_conninfo=r["read_conninfo"])
        elif r["action"] == "leave":
            m = None
        elif r["action"] == "share" and m is not None and r["team"] == m.team:
            m.projects[r["project"]] = r["project_key"]
    return m


def check_conninfo(conninfo: str) -> str:
    """The conninfo as given, refused when it carries a password (libpq takes it from
    PGPASSFILE, ~/.pgpass or a service file instead)."""
    from psycopg import conninfo as ci

    try:
        parts = ci.conninfo_to_dict(conninfo)
    except Exception as e:  # psycopg.ProgrammingError: not a conninfo at all
        raise TeamError(f"not a PostgreSQL connection string: {e}") from None
    for k in SECRET_KEYS:
        if parts.get(k):
            raise TeamError("the connection string holds a password; recalld stores no password in plain "
                            "text: put it in PGPASSFILE (~/.pgpass) or a libpq service file and join without it")
    return conninfo


def new_machine_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:40] or "host"
    return f"{host}-{os.urandom(4).hex()}"


def record(conn: sqlite3.Connection, action: str, *, team=None, conninfo=None, machine=None, project=None,
           project_key=None, read_conninfo=None) -> None:
    """One row of the log, with a cursor reset to 0 on join and share: the change log is then
    scanned again (what was already queued is not queued twice) and the team's log read again
    (what was already applied is not applied twice), so memories written before the share go
    out and the team's memories of a newly shared project come in."""
    now = receipts.now_iso()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO team_log (time, action, team, conninfo, read_conninfo, machine, project, project_key) "
                     "VALUES (?,?,?,?,?,?,?,?)", (now, action, team, conninfo, read_conninfo, machine, project,
                                                  project_key))
        if action in ("join", "share"):
            for cursor in ("scan", "pull"):
                conn.execute("INSERT INTO team_cursors (time, team, cursor, position, reason) VALUES (?,?,?,0,?)",
                             (now, team, cursor, action))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def cursor(conn: sqlite3.Connection, team: str, which: str) -> int:
    row = conn.execute("SELECT position FROM team_cursors WHERE team = ? AND cursor = ? ORDER BY id DESC LIMIT 1",
                       (team, which)).fetchone()
    return row[0] if row else 0


def advance(conn: sqlite3.Connection, team: str, which: str, position: int, reason: str = "") -> None:
    """Inside the caller's transaction: the cursor moves only forward (a row only when it moves)."""
    if position > cursor(conn, team, which):
        conn.execute("INSERT INTO team_cursors (time, team, cursor, position, reason) VALUES (?,?,?,?,?)",
                     (receipts.now_iso(), team, which, position, reason or None))

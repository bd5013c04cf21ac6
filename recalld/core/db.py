"""Opening the SQLite store (standard library only: the hook uses this too).

WAL so hooks read while the daemon writes; synchronous=FULL so a write that returned is on
disk; a busy timeout so concurrent writers wait instead of failing.
"""

import os
import time

# The C module itself: the `sqlite3` package adds only dbapi2's date adapters and aliases, and
# imports datetime and collections.abc for them, on every hook run. Same classes and errors.
import _sqlite3 as sqlite3

from recalld.core import paths
from recalld.core.migrations import MIGRATIONS

SCHEMA_VERSION = max(n for n, _, _ in MIGRATIONS)


class StoreError(ValueError):
    """A clear, one-line problem with a write or a lookup (shown to the user as it is)."""


# (device, inode) of each store file this process created from nothing: the daemon tells a
# store deleted under it (recreated here, by whichever of its threads got there first) from one
# put in its place.
_CREATED: set = set()


def created_here(ident: "tuple | None") -> bool:
    return ident is not None and ident in _CREATED


def connect(path: "str | os.PathLike | None" = None, *, busy_ms: int = 10_000, migrate: bool = True,
            readonly: bool = False) -> sqlite3.Connection:
    path = os.fspath(path) if path else paths.db_path()
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_ms / 1000,
                               isolation_level=None, check_same_thread=False)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        conn = sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None,
                               check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
    if not readonly:
        _enter_wal(conn, busy_ms)
        conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    if migrate and not readonly and ensure_schema(conn) == 0:
        try:
            st = os.stat(path)
            _CREATED.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    return conn


def _enter_wal(conn: sqlite3.Connection, busy_ms: int) -> None:
    """Switch a new store to WAL. Two processes doing this on a fresh file at once can get
    "database is locked" at once: SQLite skips the busy handler when waiting could deadlock
    (both hold SHARED, both want EXCLUSIVE), so the wait is done here, up to busy_ms."""
    deadline = time.monotonic() + busy_ms / 1000
    delay = 0.002
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def ensure_schema(conn: sqlite3.Connection) -> "int | None":
    """Migrate to SCHEMA_VERSION; returns the version this call migrated from, None if none."""
    if schema_version(conn) >= SCHEMA_VERSION:
        return None
    # BEGIN IMMEDIATE serialises concurrent first-runs; re-check inside the lock.
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = schema_version(conn)
        if current >= SCHEMA_VERSION:
            conn.execute("COMMIT")
            return None
        for number, _name, sql in MIGRATIONS:
            if number <= current:
                continue
            for statement in _split(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
        return current
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _split(sql: str) -> list[str]:
    """Split a migration into statements; sqlite3.complete_statement keeps triggers whole."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        if not buf and (not line.strip() or line.strip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out

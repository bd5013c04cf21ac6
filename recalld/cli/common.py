"""What every command module shares: the one-line failure, the store, scope, JSON output."""

import errno
import json
import os
import sqlite3
from urllib.parse import quote

import click

from recalld.core import db, paths, scope


class Fail(click.ClickException):
    def show(self, file=None):
        click.echo(f"recalld: {self.message}", err=True)


def open_db(readonly: bool = False, reading: bool = False) -> sqlite3.Connection:
    """The store. `reading`: the command only reads, so a store that is not writable (a
    read-only file, directory or file system) is opened read-only instead of failing."""
    path = paths.db_path()
    if (readonly or reading) and os.path.isfile(path) and not _writable(path):
        return _open_readonly(path)
    try:
        return db.connect(readonly=readonly)
    except (sqlite3.Error, OSError) as e:
        raise Fail(explain(e)) from None


def _writable(path: str) -> bool:
    # The -wal and -shm files live next to the store: a read-write open needs the directory too.
    return os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)) or ".", os.W_OK)


def _open_readonly(path: str) -> sqlite3.Connection:
    """A read-only connection to a store that cannot be written. mode=ro still needs the -shm
    file (creating it when absent); where the directory cannot take it either, immutable=1
    reads the file as it is (nothing can be writing it: nothing can write there)."""
    last = None
    for flag in ("mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?{flag}", uri=True, timeout=10,
                                   isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 10000")
            version = db.schema_version(conn)  # the first read: a store that cannot be read fails here
        except sqlite3.Error as e:
            last = e
            continue
        if version < db.SCHEMA_VERSION:
            raise Fail(f"the store at {path} is read-only and older than this recalld (schema {version}, "
                       f"needs {db.SCHEMA_VERSION}): run any command once with write access to upgrade it")
        return conn
    raise Fail(explain(last)) from None


def explain(e: BaseException) -> str:
    """One line for a store or file-system failure: what is wrong, where, and what to do."""
    dbp, home = paths.db_path(), paths.home()
    if os.path.exists(home) and not os.path.isdir(home):
        return f"RECALLD_HOME ({home}) is a file, not a directory: point RECALLD_HOME at a directory or move the file"
    msg = str(e).strip() or type(e).__name__
    if isinstance(e, sqlite3.Error):
        name = getattr(e, "sqlite_errorname", "") or ""
        low = msg.lower()
        if (name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB" or "malformed" in low
                or "not a database" in low):
            return (f"the store at {dbp} is damaged ({msg}); nothing was changed. Move it aside to start a new "
                    f"one, or try `sqlite3 {dbp} .recover` to save what it holds")
        if name.startswith("SQLITE_FULL") or "disk is full" in low:
            return f"the disk holding {dbp} is full ({msg}); nothing was written. Free some space and run it again"
        if name.startswith("SQLITE_READONLY") or "readonly" in low or "read-only" in low:
            return (f"the store at {dbp} is not writable ({msg}); search still works. Writes need write access "
                    f"to the file and its directory")
        if name.startswith("SQLITE_BUSY") or "locked" in low:
            return (f"the store at {dbp} stayed locked by another process past the 10 s wait; nothing was "
                    f"written. Run it again")
        if name.startswith("SQLITE_CANTOPEN") or "unable to open" in low:
            if os.path.exists(dbp):
                if not _writable(dbp):
                    return (f"the store at {dbp} is not writable (read-only file or directory); search still "
                            f"works. Writes need write access to the file and its directory")
                return f"cannot open the store at {dbp} ({msg}): check its permissions and the disk"
            return (f"cannot create the store at {dbp}: its directory is not writable; point RECALLD_HOME at "
                    f"a writable directory")
        if name.startswith("SQLITE_IOERR") or "i/o error" in low:
            return f"the store at {dbp} could not be read or written ({msg}): check the disk and its free space"
        return f"the store at {dbp}: {msg}"
    if isinstance(e, OSError):
        where = e.filename or home
        if e.errno == errno.ENOSPC:
            return f"the disk holding {where} is full; nothing was written. Free some space and run it again"
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return (f"{where} is not writable ({e.strerror}); point RECALLD_HOME at a writable directory"
                    + ("; search still works" if os.path.isfile(dbp) else ""))
        if e.errno in (errno.ENOTDIR, errno.EEXIST):
            return f"{where} is in the way: a file where recalld needs a directory ({e.strerror})"
        return f"{where}: {e.strerror or msg}"
    return f"{type(e).__name__}: {msg}"


def resolve_scope(cwd) -> scope.Scope:
    return scope.resolve(cwd)


def echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def fmt_memory(m: dict) -> str:
    state = "current" if m["invalid_at"] is None else (
        f"superseded by m{m['superseded_by']}" if m["superseded_by"] else f"retracted: {m['invalid_reason']}")
    flags = " always" if m.get("always") else ""
    head = f"m{m['id']} [{m['kind']}, {m['scope']}{flags}] ({state})"
    tell = f"\n    tell: {m['tell']}" if m.get("tell") else ""
    return f"{head}\n    {m['text']}{tell}"

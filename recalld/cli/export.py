"""`recalld export memories|receipts`: the store as JSON or CSV, for reading it elsewhere
(a spreadsheet, jq, a backup). Slow path: it reads through sqlite_utils on a read-only
connection, so an export never writes to the store, never migrates it, and can run while the
daemon writes.

Memories: the current ones this project and agent may read by default; `--all` adds the
superseded and retracted ones, each row saying which (`status`, `superseded_by`,
`invalid_reason`); `--whole-store` drops the scope filter. Receipts: the database's and the
fallback file's (`stored` says which), oldest first, payload-free as they are stored.
"""

import csv
import json
import os
import sqlite3
import sys

import click

# The memory's own fields; `aux` and `terms` are search index data derived from the text.
MEMORY_COLUMNS = ("id", "status", "text", "kind", "scope", "project", "agent", "tell", "always", "thread",
                  "follows", "session", "source", "created_at", "valid_from", "invalid_at", "superseded_by",
                  "invalid_reason")
RECEIPT_COLUMNS = ("uid", "stored", "time", "source", "hook", "act", "agent", "session", "project", "outcome",
                   "duration_ms", "candidates", "above_floor", "delivered", "cut", "withheld", "delivered_ids",
                   "delivered_chars", "cut_chars", "withheld_chars", "error", "detail")
JSON_FIELDS = ("delivered_ids", "detail")  # stored as JSON text; exported as JSON values


def status(m: dict) -> str:
    if m["invalid_at"] is None:
        return "current"
    return "superseded" if m["superseded_by"] is not None else "retracted"


def _database(path: str):
    """A sqlite_utils Database over a read-only connection to the store at `path`."""
    import sqlite_utils

    from recalld.core import db

    conn = db.connect(path, readonly=True)
    # Plugins could change the connection; recursive_triggers would set a pragma: neither is
    # wanted on a read.
    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


def memories(path: str, scope, *, include_invalid: bool = False, whole_store: bool = False) -> list:
    """The memories to export, by id. `scope` filters to what it may read unless whole_store."""
    database = _database(path)
    try:
        select = ", ".join(c for c in MEMORY_COLUMNS if c != "status")
        rows = database["memories"].rows_where(None if include_invalid else "invalid_at IS NULL",
                                               select=select, order_by="id")
        out = []
        for m in rows:
            if whole_store or scope.sees(m["scope"], m["project"], m["agent"]):
                m["status"] = status(m)
                m["always"] = bool(m["always"])
                out.append({c: m[c] for c in MEMORY_COLUMNS})
        return out
    finally:
        database.conn.close()


def receipt_rows(path: "str | None", *, session=None, hook=None, source=None) -> list:
    """Receipts from the store (when there is one) and the fallback file, oldest first."""
    from recalld.core import receipts

    wanted = {k: v for k, v in (("session", session), ("hook", hook), ("source", source)) if v}
    rows: dict = {}
    if path is not None:
        database = _database(path)
        try:
            where = " AND ".join(f"{k} = ?" for k in wanted) or None
            for r in database["receipts"].rows_where(where, list(wanted.values()), order_by="id"):
                for f in JSON_FIELDS:
                    r[f] = json.loads(r[f] or ("[]" if f == "delivered_ids" else "{}"))
                rows[r["uid"]] = dict(r, stored="db")
        finally:
            database.conn.close()
    for r in receipts.read_fallback():
        if all(r.get(k) == v for k, v in wanted.items()):
            rows.setdefault(r["uid"], dict(r, stored="fallback"))
    out = sorted(rows.values(), key=lambda r: r.get("time") or "")
    return [{c: r.get(c) for c in RECEIPT_COLUMNS} for r in out]


def write(rows: list, columns: tuple, fmt: str, out) -> None:
    if fmt == "json":
        json.dump(rows, out, indent=2, ensure_ascii=False, default=str)
        out.write("\n")
        return
    w = csv.writer(out)
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r[c]) for c in columns])


def _cell(v):
    """CSV cells are text: nested values as compact JSON, booleans as 1/0, None as empty."""
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return int(v) if isinstance(v, bool) else v


def register(cli):
    from recalld.cli.common import Fail, resolve_scope
    from recalld.core import paths

    def store_path() -> "str | None":
        """The store's file, or None (said on stderr, so standard output stays parseable)."""
        path = paths.db_path()
        if os.path.exists(path):
            return path
        click.echo(f"recalld: no store at {path} yet", err=True)
        return None

    def emit(rows, columns, fmt, output):
        if output is None:
            write(rows, columns, fmt, sys.stdout)
            return
        try:
            with open(output, "w", encoding="utf-8", newline="") as f:
                write(rows, columns, fmt, f)
        except OSError as e:
            raise Fail(f"cannot write {output}: {e.strerror or e}")
        click.echo(f"exported {len(rows)} rows to {output}", err=True)

    fmt_option = click.option("--format", "fmt", type=click.Choice(["json", "csv"]), default="json",
                              show_default=True, help="A JSON array of objects, or CSV with a header row "
                              "(nested values as JSON text).")
    output_option = click.option("--output", "-o", type=click.Path(dir_okay=False),
                                 help="Write to this file instead of standard output.")

    @cli.group()
    def export():
        """Write memories or receipts as JSON or CSV (read-only: the store is not changed)."""

    @export.command("memories")
    @fmt_option
    @click.option("--all", "include_invalid", is_flag=True,
                  help="Include superseded and retracted memories (their `status` says which).")
    @click.option("--cwd", type=click.Path(file_okay=False), help="Read as this project (default: current directory).")
    @click.option("--whole-store", is_flag=True,
                  help="Every project's and agent's memories, not only those this project and agent may read.")
    @output_option
    def export_memories(fmt, include_invalid, cwd, whole_store, output):
        """Current memories this project and agent may read, by id; --all adds the superseded and
        retracted ones, marked."""
        path = store_path()
        try:
            rows = [] if path is None else memories(path, resolve_scope(cwd), include_invalid=include_invalid,
                                                     whole_store=whole_store)
        except sqlite3.Error as e:
            raise Fail(f"cannot read the store at {path}: {e}")
        emit(rows, MEMORY_COLUMNS, fmt, output)

    @export.command("receipts")
    @fmt_option
    @click.option("--session", help="Only this session's receipts.")
    @click.option("--hook", help="Only this hook's (prompt-submit, pre-tool, ...).")
    @click.option("--source", type=click.Choice(["hook", "daemon", "proposer", "cli"]), help="Only this source's.")
    @output_option
    def export_receipts(fmt, session, hook, source, output):
        """Every receipt (database and fallback file, `stored` says which), oldest first."""
        path = store_path()
        try:
            rows = receipt_rows(path, session=session, hook=hook, source=source)
        except sqlite3.Error as e:
            raise Fail(f"cannot read the store at {path}: {e}")
        emit(rows, RECEIPT_COLUMNS, fmt, output)

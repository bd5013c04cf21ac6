"""What every command module shares: the one-line failure, the store, scope, JSON output."""

import json
import sqlite3

import click

from recalld.core import db, paths, scope


class Fail(click.ClickException):
    def show(self, file=None):
        click.echo(f"recalld: {self.message}", err=True)


def open_db(readonly: bool = False) -> sqlite3.Connection:
    try:
        return db.connect(readonly=readonly)
    except sqlite3.DatabaseError as e:
        raise Fail(f"cannot open the store at {paths.db_path()}: {e}")


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

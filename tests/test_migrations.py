"""Schema migrations: numbered 1..N in order (a gap or a late lower number would be skipped
by every store already past it), and a store at any earlier version upgrades to the latest,
all pending steps in one transaction."""

import sqlite3

import pytest

from recalld.core import db
from recalld.core.migrations import MIGRATIONS


def store_at(path, version):
    """A store as the release with schema `version` left it."""
    c = sqlite3.connect(path, isolation_level=None)
    for number, _, sql in MIGRATIONS[:version]:
        for statement in db._split(sql):
            c.execute(statement)
        c.execute(f"PRAGMA user_version = {number}")
    c.close()


def schema(conn):
    return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger', 'index')"))


def test_numbers_are_contiguous_and_in_order():
    assert [n for n, _, _ in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def test_every_intermediate_version_upgrades(tmp_path):
    want = schema(db.connect(tmp_path / "fresh.db"))
    for stop in range(1, len(MIGRATIONS)):
        path = tmp_path / f"v{stop}.db"
        store_at(path, stop)
        up = db.connect(path)
        assert db.schema_version(up) == db.SCHEMA_VERSION
        assert schema(up) == want, stop


def test_a_failing_step_leaves_the_store_at_its_old_version_with_no_step_applied(tmp_path, monkeypatch):
    path = tmp_path / "v3.db"
    store_at(path, 3)
    before = schema(sqlite3.connect(path))
    failing = (db.SCHEMA_VERSION + 1, "fails after a statement that worked",
               "CREATE TABLE half_done (x INTEGER);\nINSERT INTO no_such_table VALUES (1);\n")
    monkeypatch.setattr(db, "MIGRATIONS", [*MIGRATIONS, failing])
    monkeypatch.setattr(db, "SCHEMA_VERSION", failing[0])
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        db.connect(path)
    raw = sqlite3.connect(path)
    # Not 5 (the steps before the failing one) and not half of the failing one: still 3.
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 3
    assert schema(raw) == before
    assert "term_stats" not in before and "half_done" not in before
    assert "thread" not in [r[1] for r in raw.execute("PRAGMA table_info(memories)")]
    raw.close()
    monkeypatch.undo()  # the failing step fixed: the same store upgrades
    assert db.schema_version(db.connect(path)) == db.SCHEMA_VERSION

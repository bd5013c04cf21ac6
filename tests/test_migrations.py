"""Schema migrations: numbered 1..N in order (a gap or a late lower number would be skipped
by every store already past it), and a store at any earlier version upgrades to the latest."""

import sqlite3

from recalld.core import db
from recalld.core.migrations import MIGRATIONS


def test_numbers_are_contiguous_and_in_order():
    assert [n for n, _, _ in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def test_every_intermediate_version_upgrades(tmp_path):
    fresh = db.connect(tmp_path / "fresh.db")
    want = sorted(r[0] for r in fresh.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger', 'index')"))
    for stop in range(1, len(MIGRATIONS)):
        path = tmp_path / f"v{stop}.db"
        c = sqlite3.connect(path, isolation_level=None)
        for number, _, sql in MIGRATIONS[:stop]:
            for statement in db._split(sql):
                c.execute(statement)
            c.execute(f"PRAGMA user_version = {number}")
        c.close()
        up = db.connect(path)
        assert db.schema_version(up) == db.SCHEMA_VERSION
        got = sorted(r[0] for r in up.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger', 'index')"))
        assert got == want, stop

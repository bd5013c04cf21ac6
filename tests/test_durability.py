"""A write that returned is on disk: SIGKILL right after `remember` returns loses nothing; 20
processes writing and hooking at once lose nothing and leak no "database is locked"."""

import json
import os
import signal
import subprocess
import sys
import time

from recalld.core import db, receipts
from tests.helpers import REPO, run_recalld

WRITER = r"""
import sys, time
from recalld.core import db, scope
from recalld import memories
conn = db.connect()
sc = scope.resolve(sys.argv[1])
for i in range(int(sys.argv[2])):
    res = memories.remember(conn, f"durable fact number {i} about the kill test", sc, check_similar=False)
    print(res.memory["id"], flush=True)
time.sleep(60)
"""


def test_sigkill_after_remember_returns_loses_nothing(home, project):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for round_ in range(3):
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(project), "5"], stdout=subprocess.PIPE, env=env)
        ids = [int(p.stdout.readline()) for _ in range(5)]
        os.kill(p.pid, signal.SIGKILL)  # no chance to flush, checkpoint or close
        p.wait()
        conn = db.connect()
        found = {r[0] for r in conn.execute(f"SELECT id FROM memories WHERE id IN ({','.join('?' * len(ids))})", ids)}
        conn.close()
        assert found == set(ids), f"round {round_}: lost {set(ids) - found}"


def test_cli_remember_json_reports_changes(home, project):
    p = run_recalld(["remember", "The payments service retries 3 times.", "--kind", "fact", "--cwd", str(project), "--json"])
    assert p.returncode == 0, p.stderr
    first = json.loads(p.stdout)
    p = run_recalld(["remember", "The payments service retries 5 times since the outage review.",
                     "--supersedes", str(first["id"]), "--cwd", str(project), "--json"])
    second = json.loads(p.stdout)
    assert second["superseded"] == [first["id"]]
    changed = {m["id"]: m for m in second["changed"]}
    assert changed[first["id"]]["superseded_by"] == second["id"]
    assert changed[first["id"]]["invalid_at"] == changed[second["id"]]["valid_from"]


def test_twenty_processes_at_once(home, project):
    # create the schema first, as the first hook or remember would
    db.connect().close()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = []
    for i in range(10):
        procs.append(("remember", i, subprocess.Popen(
            [sys.executable, "-m", "recalld", "remember", f"concurrent memory {i} about zebra crossings",
             "--cwd", str(project), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)))
    hook_payload = json.dumps({"session_id": "conc", "transcript_path": "/t", "cwd": str(project),
                               "hook_event_name": "UserPromptSubmit", "prompt": "zebra crossings"}).encode()
    for i in range(10):
        p = subprocess.Popen([sys.executable, "-m", "recalld", "hook", "prompt-submit", "--deadline-ms", "5000"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        procs.append(("hook", i, p))
        p.stdin.write(hook_payload)
        p.stdin.close()
    ids = []
    for kind, i, p in procs:
        out = p.stdout.read()
        err = p.stderr.read()
        assert p.wait(timeout=120) == 0, (kind, i, err)
        assert b"locked" not in err, err
        if kind == "remember":
            ids.append(json.loads(out)["id"])
        else:
            assert out == b"" or json.loads(out)["hookSpecificOutput"]
    conn = db.connect()
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 10 == len(set(ids))
    hook_receipts = [r for r in receipts.read(conn, session="conc")]
    assert len(hook_receipts) == 10
    assert len({r["uid"] for r in hook_receipts}) == 10


OPEN_FRESH = """
import sys, time
from recalld.core import db
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all open at the same instant
try:
    db.connect(sys.argv[1]).execute("SELECT count(*) FROM memories").fetchone()
except Exception as e:
    print(repr(e))
"""


def test_processes_opening_a_store_that_does_not_exist_yet_all_get_it(tmp_path):
    # Seen in CI: the daemon and the MCP server opening a fresh store together, and one got
    # "database is locked" from the switch to WAL (SQLite skips its busy handler there).
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for trial in range(10):
        path = tmp_path / f"fresh{trial}" / "recalld.db"
        at = str(time.time() + 0.6)
        procs = [subprocess.Popen([sys.executable, "-c", OPEN_FRESH, str(path), at], stdout=subprocess.PIPE,
                                  text=True, env=env) for _ in range(6)]
        outs = [p.communicate(timeout=60)[0].strip() for p in procs]
        assert not any(outs), (trial, outs)


def test_the_switch_to_wal_waits_out_an_immediate_lock():
    class Conn:
        calls = 0

        def execute(self, sql):
            Conn.calls += 1
            if Conn.calls <= 3:
                raise db.sqlite3.OperationalError("database is locked")
            return self

        def fetchone(self):
            return ["wal"]

    db._enter_wal(Conn(), busy_ms=2000)
    assert Conn.calls == 4

    class Broken(Conn):
        def execute(self, sql):
            raise db.sqlite3.OperationalError("disk I/O error")

    try:
        db._enter_wal(Broken(), busy_ms=2000)
    except db.sqlite3.OperationalError as e:
        assert "disk" in str(e)
    else:
        raise AssertionError("a real error was swallowed")

"""`recalld export memories|receipts`: what each exports (current by default, superseded and
retracted ones marked with --all, this caller's scope unless --whole-store), JSON and CSV
agreeing, fallback receipts included, and the store left exactly as it was."""

import csv
import io
import json
import os

import pytest

from recalld import memories
from recalld.cli import export
from recalld.core import paths, receipts, scope
from recalld.hook import run as hook
from tests.helpers import run_recalld


def ok(args, **kw):
    p = run_recalld(args, **kw)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


@pytest.fixture
def stocked(conn, project, tmp_path):
    sc = scope.resolve(str(project))
    old = memories.remember(conn, "We pin sqlite-utils to 3.x.", sc, kind="decision", check_similar=False).memory
    new = memories.remember(conn, "We moved to sqlite-utils 4, upsert fixed.", sc, supersedes=[old["id"]],
                         check_similar=False).memory
    gone = memories.remember(conn, "The staging box is staging-3.", sc, check_similar=False).memory
    memories.retract(conn, gone["id"], "staging-3 was shut down", sc)
    mine = memories.remember(conn, "Reviewer note, mine alone.", sc, scope="agent", check_similar=False).memory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = memories.remember(conn, "Another project's fact.", scope.resolve(str(elsewhere)), check_similar=False).memory
    theirs = memories.remember(conn, "Another agent's private note.", scope.Scope(sc.project, "reviewer"),
                            scope="agent", check_similar=False).memory
    return {"old": old["id"], "new": new["id"], "gone": gone["id"], "mine": mine["id"], "other": other["id"],
            "theirs": theirs["id"]}


def by_id(rows):
    return {int(r["id"]): r for r in rows}


def test_current_memories_this_caller_may_read_by_default(stocked, project):
    rows = json.loads(ok(["export", "memories", "--cwd", str(project)]))
    assert [r["id"] for r in rows] == [stocked["new"], stocked["mine"]]
    assert list(rows[0]) == list(export.MEMORY_COLUMNS)
    assert rows[0]["status"] == "current" and rows[0]["kind"] == "fact" and rows[0]["always"] is False


def test_all_marks_superseded_and_retracted(stocked, project):
    got = by_id(json.loads(ok(["export", "memories", "--all", "--cwd", str(project)])))
    assert sorted(got) == sorted([stocked["old"], stocked["new"], stocked["gone"], stocked["mine"]])
    old, gone = got[stocked["old"]], got[stocked["gone"]]
    assert (old["status"], old["superseded_by"], old["invalid_at"] is not None) == ("superseded", stocked["new"], True)
    assert (gone["status"], gone["superseded_by"], gone["invalid_reason"]) == ("retracted", None, "staging-3 was shut down")
    assert got[stocked["new"]]["status"] == "current"


def test_whole_store_drops_the_scope_filter(stocked, project):
    got = by_id(json.loads(ok(["export", "memories", "--all", "--whole-store", "--cwd", str(project)])))
    assert sorted(got) == sorted(stocked.values())


def text(v) -> str:
    """What a CSV cell holds for a JSON value."""
    return "" if v is None else str(int(v)) if isinstance(v, bool) else str(v)


def test_csv_holds_the_same_rows_as_json(stocked, project):
    as_json = json.loads(ok(["export", "memories", "--all", "--cwd", str(project)]))
    out = ok(["export", "memories", "--all", "--format", "csv", "--cwd", str(project)])
    table = list(csv.DictReader(io.StringIO(out, newline="")))
    assert out.splitlines()[0] == ",".join(export.MEMORY_COLUMNS)
    assert table == [{c: text(r[c]) for c in export.MEMORY_COLUMNS} for r in as_json]


def test_export_writes_nothing_to_the_store(stocked, project, tmp_path):
    files = [paths.db_path() + ext for ext in ("", "-wal")]
    before = [open(f, "rb").read() for f in files if os.path.exists(f)]
    out = tmp_path / "m.csv"
    p = run_recalld(["export", "memories", "--all", "--format", "csv", "-o", str(out), "--cwd", str(project)])
    assert p.returncode == 0 and p.stdout == b"" and b"exported 4 rows" in p.stderr
    ok(["export", "receipts"])
    assert [open(f, "rb").read() for f in files if os.path.exists(f)] == before
    assert out.read_text(encoding="utf-8").splitlines()[0] == ",".join(export.MEMORY_COLUMNS)


def test_receipts_from_the_store_and_the_fallback_file(home, project, conn):
    data = {"session_id": "s-1", "cwd": str(project), "hook_event_name": "UserPromptSubmit", "prompt": "hello"}
    _, first = hook.run(["prompt-submit"], json.dumps(data).encode())
    late = receipts.new("daemon", "pass")
    late["outcome"], late["detail"] = "nothing", {"why": "a locked store"}
    receipts.append_fallback(late, "locked")
    rows = json.loads(ok(["export", "receipts"]))
    assert [(r["uid"], r["stored"]) for r in rows] == [(first["uid"], "db"), (late["uid"], "fallback")]
    assert list(rows[0]) == list(export.RECEIPT_COLUMNS)
    assert rows[0]["detail"] == first["detail"] and rows[0]["delivered_ids"] == []
    assert rows[1]["detail"] == {"why": "a locked store", "fallback_reason": "locked"}
    assert [r["uid"] for r in json.loads(ok(["export", "receipts", "--source", "daemon"]))] == [late["uid"]]
    table = list(csv.DictReader(io.StringIO(ok(["export", "receipts", "--format", "csv"]), newline="")))
    assert [r["uid"] for r in table] == [first["uid"], late["uid"]]
    assert json.loads(table[0]["detail"]) == first["detail"] and table[0]["error"] == ""


def test_no_store_yet_exports_nothing_and_says_so(home):
    p = run_recalld(["export", "memories"])
    assert p.returncode == 0 and json.loads(p.stdout) == []
    assert b"no store at" in p.stderr
    assert not os.path.exists(paths.db_path())

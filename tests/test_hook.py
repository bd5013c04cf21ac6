"""The hook hot path, fed the documented payloads of every agent and every kind of bad input.
It must always exit 0, print valid output or nothing, and leave exactly one receipt."""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from recalld.core import db, receipts, scope
from recalld.hook import run as hook
from recalld import memories
from tests.helpers import REPO, payload, run_recalld


@pytest.fixture
def seeded(conn, project):
    sc = scope.resolve(str(project))
    m1 = memories.remember(conn, "Run `alembic downgrade -1` before editing a migration; OperationalError here "
                        "means the dev server holds the SQLite lock.", sc, kind="procedure", check_similar=False).memory
    m2 = memories.remember(conn, "Team prefers small pure functions and no classes for helpers.", sc,
                        kind="preference", always=True, check_similar=False).memory
    return {"project": project, "scope": sc, "m1": m1, "m2": m2}


def receipts_count(conn):
    return conn.execute("SELECT count(*) FROM receipts").fetchone()[0]


def last_receipt(conn):
    return dict(conn.execute("SELECT * FROM receipts ORDER BY id DESC LIMIT 1").fetchone())


# Documented payloads (../shared/reference/agent-hooks.md), per agent.
def claude_prompt(cwd, prompt="alembic downgrade fails with OperationalError, why?"):
    return {"session_id": "abc123", "transcript_path": "/home/u/.claude/projects/-x/abc123.jsonl", "cwd": str(cwd),
            "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": prompt}


def codex_prompt(cwd, prompt="alembic downgrade fails with OperationalError, why?"):
    return {"session_id": "019a-codex", "transcript_path": None, "cwd": str(cwd), "hook_event_name": "UserPromptSubmit",
            "model": "gpt-5-codex", "turn_id": "t-1", "prompt": prompt}


def gemini_prompt(cwd, prompt="alembic downgrade fails with OperationalError, why?"):
    return {"session_id": "g-1", "transcript_path": "/home/u/.gemini/tmp/chats/x.json", "cwd": str(cwd),
            "hook_event_name": "BeforeAgent", "timestamp": "2026-11-29T10:00:00Z", "prompt": prompt}


@pytest.mark.parametrize("make,native", [(claude_prompt, "UserPromptSubmit"), (codex_prompt, "UserPromptSubmit"),
                                         (gemini_prompt, "BeforeAgent")])
def test_prompt_submit_injects_for_each_agent(seeded, conn, make, native):
    out, r = hook.run(["prompt-submit"], json.dumps(make(seeded["project"])).encode())
    data = json.loads(out)
    assert set(data) == {"hookSpecificOutput"}
    hso = data["hookSpecificOutput"]
    assert hso["hookEventName"] == native
    assert f"[m{seeded['m1']['id']} procedure]" in hso["additionalContext"]
    assert "systemMessage" not in out
    assert r["outcome"] == "injected" and r["delivered_ids"] == [f"m:{seeded['m1']['id']}"]
    assert r["project"] == seeded["scope"].project
    stored = last_receipt(conn)
    assert stored["uid"] == r["uid"] and stored["outcome"] == "injected"
    assert "alembic" not in json.dumps(stored)  # payload-free by default


def test_unrelated_prompt_injects_nothing(seeded, conn):
    out, r = hook.run(["prompt-submit"], json.dumps(claude_prompt(seeded["project"], "write a haiku about autumn leaves")).encode())
    assert out == "" and r["outcome"] == "nothing"


def test_session_start_delivers_always_set(seeded):
    p = {"session_id": "abc", "transcript_path": "/t.jsonl", "cwd": str(seeded["project"]),
         "hook_event_name": "SessionStart", "source": "startup", "model": "claude-opus"}
    out, r = hook.run(["session-start"], json.dumps(p).encode())
    ctx = json.loads(out)["hookSpecificOutput"]
    assert ctx["hookEventName"] == "SessionStart"
    assert f"m{seeded['m2']['id']} preference" in ctx["additionalContext"]
    assert f"[m{seeded['m1']['id']} " not in ctx["additionalContext"]
    assert r["act"] == "boot"


def test_superseded_memory_is_never_injected(seeded, conn):
    new = memories.remember(conn, "alembic downgrade is forbidden; OperationalError means restore from backup.",
                         seeded["scope"], supersedes=[seeded["m1"]["id"]], check_similar=False).memory
    out, r = hook.run(["prompt-submit"], json.dumps(claude_prompt(seeded["project"])).encode())
    assert f"[m{seeded['m1']['id']} " not in out and f"[m{new['id']} " in out


def test_budget_is_respected_and_cut_is_counted(seeded, conn, home):
    (home / "settings.json").write_text(json.dumps({"budget_chars": 600, "item_cap_chars": 300}))
    memories.remember(conn, "alembic downgrade OperationalError " + "detail " * 200, seeded["scope"], check_similar=False)
    out, r = hook.run(["prompt-submit"], json.dumps(claude_prompt(seeded["project"])).encode())
    ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    body = ctx.split("\n", 2)[2].rsplit("\n", 1)[0]
    assert len(body) <= 600
    assert r["cut"] == 1 and r["cut_chars"] > 0


def test_tool_events_and_stop_answer_validly(seeded):
    cwd = str(seeded["project"])
    pre = {"session_id": "abc", "transcript_path": "/t", "cwd": cwd, "permission_mode": "default",
           "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git reset --hard"},
           "tool_use_id": "toolu_1"}
    post = dict(pre, hook_event_name="PostToolUse", tool_response={"stdout": "", "exit_code": 0}, duration_ms=12)
    stop = {"session_id": "abc", "transcript_path": "/t", "cwd": cwd, "hook_event_name": "Stop",
            "stop_hook_active": False, "last_assistant_message": "Done."}
    for ev, p in (("pre-tool", pre), ("post-tool", post), ("stop", stop)):
        out, r = hook.run([ev], json.dumps(p).encode())
        assert r["outcome"] in ("nothing", "injected"), r
        assert out == "" or json.loads(out)["hookSpecificOutput"]["hookEventName"] == p["hook_event_name"]


BAD_INPUTS = [
    (b"", "skipped", "empty_input"),
    (b"   \n", "skipped", "empty_input"),
    (b"{not json", "error", "bad_json"),
    (bytes(range(256)) * 4, "error", "bad_json"),
    (b"[1, 2, 3]", "error", "payload_not_object"),
    (b'"a string"', "error", "payload_not_object"),
    (b'{"prompt": 42, "cwd": "/tmp"}', "error", "bad_field_type:prompt"),
    (b'{"prompt": "x", "cwd": ["/tmp"]}', "error", "bad_field_type:cwd"),
    (b'{"tool_input": "rm -rf /", "tool_name": "Bash"}', "error", "bad_field_type:tool_input"),
]


@pytest.mark.parametrize("data,outcome,error", BAD_INPUTS)
def test_bad_input_gives_receipt_and_no_output(home, conn, data, outcome, error):
    before = receipts_count(conn)
    ev = "pre-tool" if b"tool_input" in data else "prompt-submit"
    out, r = hook.run([ev], data)
    assert out == ""
    assert (r["outcome"], r["error"]) == (outcome, error)
    assert receipts_count(conn) == before + 1


def test_unknown_event_is_skipped_with_receipt(home, conn):
    out, r = hook.run(["frobnicate"], b"{}")
    assert out == "" and r["outcome"] == "skipped" and r["error"] == "unknown_event"
    assert receipts_count(conn) == 1


def test_huge_input_10mb(seeded, conn):
    big = claude_prompt(seeded["project"], "alembic downgrade OperationalError " + "lorem ipsum " * 900_000)
    data = json.dumps(big).encode()
    assert len(data) > 10_000_000
    out, r = hook.run(["prompt-submit", "--deadline-ms", "5000"], data)
    assert r["outcome"] in ("injected", "nothing", "timeout")
    assert out == "" or json.loads(out)


def test_deadline_gives_timeout_receipt(seeded, conn, monkeypatch):
    import recalld.core.search as search_mod

    real = search_mod.search

    def slow(*a, **k):
        time.sleep(1)
        return real(*a, **k)

    monkeypatch.setattr(search_mod, "search", slow)
    t = time.perf_counter()
    out, r = hook.run(["prompt-submit", "--deadline-ms", "100"], json.dumps(claude_prompt(seeded["project"])).encode())
    assert time.perf_counter() - t < 0.9
    assert out == "" and r["outcome"] == "timeout"
    assert last_receipt(conn)["outcome"] == "timeout"


def test_corrupt_database_falls_back_to_receipt_file(home, project):
    home.mkdir(parents=True, exist_ok=True)
    (home / "recalld.db").write_bytes(b"this is not a database" * 100)
    out, r = hook.run(["prompt-submit"], json.dumps(claude_prompt(project)).encode())
    assert out == "" and r["outcome"] == "error"
    lines = (home / "receipts-fallback.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["uid"] == r["uid"]
    assert [x["uid"] for x in receipts.read(None)] == [r["uid"]]


def test_locked_database_never_escapes(seeded, conn, home):
    locker = sqlite3.connect(str(home / "recalld.db"), isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        out, r = hook.run(["prompt-submit", "--deadline-ms", "200"], json.dumps(claude_prompt(seeded["project"])).encode())
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    # WAL readers are not blocked by a writer's lock, so the hook may still inject; the receipt
    # cannot go to the locked database and must land, once, in the fallback file.
    assert r["outcome"] in ("injected", "timeout", "error")
    assert out == "" or json.loads(out)
    fallback = [x for x in receipts.read(conn) if x["uid"] == r["uid"]]
    assert len(fallback) == 1 and fallback[0]["stored"] == "fallback"


def test_missing_database_is_created_and_says_nothing(home, project):
    assert not (home / "recalld.db").exists()
    out, r = hook.run(["prompt-submit"], json.dumps(claude_prompt(project)).encode())
    assert out == "" and r["outcome"] == "nothing"
    c = db.connect()
    assert c.execute("SELECT outcome FROM receipts").fetchall()[0][0] == "nothing"


def test_real_entry_point_exits_zero_on_garbage(home, project):
    for data in (b"", b"\x00\xff garbage", b"{}", json.dumps(claude_prompt(project)).encode()):
        p = run_recalld(["hook", "prompt-submit"], data)
        assert p.returncode == 0, p.stderr
        assert p.stdout == b"" or json.loads(p.stdout)
    p = run_recalld(["hook"], b"{}")
    assert p.returncode == 0
    c = db.connect()
    assert c.execute("SELECT count(*) FROM receipts").fetchone()[0] == 5


def test_hook_imports_standard_library_only(seeded):
    code = (
        "import sys, json\n"
        "from recalld.hook import run as hook\n"
        "out, r = hook.run(['prompt-submit'], sys.stdin.buffer.read())\n"
        "assert r['outcome'] == 'injected', r\n"
        "names = {m.split('.')[0] for m in sys.modules}\n"
        "print(json.dumps(sorted(n for n in names if n not in sys.stdlib_module_names and n != 'recalld')))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # Whatever a bare interpreter already imports (site hooks, .pth files) is not ours.
    bare = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, env=env, check=True)
    baseline = {m.split(".")[0] for m in json.loads(bare.stdout)}
    p = subprocess.run([sys.executable, "-c", code], input=json.dumps(claude_prompt(seeded["project"])).encode(),
                       capture_output=True, env=env)
    assert p.returncode == 0, p.stderr.decode()
    third_party = [n for n in json.loads(p.stdout) if not n.startswith("_") and n not in baseline]
    assert third_party == []


def test_subagent_reads_its_own_agent_notes(seeded, conn):
    reviewer = scope.Scope(seeded["scope"].project, "main/reviewer")
    memories.remember(conn, "Reviewer note: flag every alembic downgrade in PRs.", reviewer, scope="agent", check_similar=False)
    p = claude_prompt(seeded["project"], "review this alembic downgrade change")
    out_main, _ = hook.run(["prompt-submit"], json.dumps(p).encode())
    p_sub = dict(p, agent_id="agent-7", agent_type="reviewer")
    out_sub, r = hook.run(["prompt-submit"], json.dumps(p_sub).encode())
    assert "Reviewer note" not in out_main and "Reviewer note" in out_sub
    assert r["agent"] == "main/reviewer"


def test_stdin_that_never_ends_is_cut_by_the_deadline(home, project):
    """A git hook under an agent's shell may inherit a stdin that never reaches EOF."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "recalld", "hook", "commit", "--deadline-ms", "300"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(project))
    try:
        assert p.wait(timeout=30) == 0
    finally:
        p.stdin.close()
    recs = receipts.read(db.connect())
    assert [(r["hook"], r["outcome"]) for r in recs] == [("commit", "timeout")]


HEAVY = {"dataclasses", "inspect", "pathlib", "typing", "uuid", "threading", "hashlib", "asyncio",
         "logging", "email", "urllib"}


@pytest.mark.parametrize("event,data", [
    ("prompt-submit", lambda cwd: claude_prompt(cwd)),
    ("pre-tool", lambda cwd: {"session_id": "s", "cwd": str(cwd), "hook_event_name": "PreToolUse",
                              "tool_name": "Bash", "tool_input": {"command": "git status"}}),
    ("stop", lambda cwd: {"session_id": "s", "cwd": str(cwd), "hook_event_name": "Stop",
                          "stop_hook_active": False, "last_assistant_message": "Fixed: token=abc123456 rotated."}),
])
def test_hook_path_avoids_heavy_stdlib_modules(seeded, event, data):
    """Every import on this path is paid on every prompt and tool call; these cost the most."""
    code = (
        "import sys, json\n"
        "from recalld.hook import run as hook\n"
        f"out, r = hook.run([{event!r}], sys.stdin.buffer.read())\n"
        "assert r['outcome'] in ('injected', 'nothing'), r\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-S", "-c", code], input=json.dumps(data(seeded["project"])).encode(),
                       capture_output=True, env=env)
    assert p.returncode == 0, p.stderr.decode()
    assert HEAVY & set(json.loads(p.stdout)) == set()


def _grow_wal(home, project, pages):
    """Leave a WAL of `pages` commits behind, the way hooks do (no close, no checkpoint)."""
    code = ("import os, sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('PRAGMA wal_autocheckpoint = 0')\n"
            "for i in range(int(sys.argv[2])):\n"
            "    c.execute(\"INSERT INTO served (time, session, item, outcome, receipt_uid) VALUES "
            "('t', 'wal', 'x', 'whole', randomblob(3000))\")\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(home / "recalld.db"), str(pages)], check=True)
    return os.path.getsize(str(home / "recalld.db") + "-wal")


def test_hook_that_finds_a_large_wal_leaves_it_checkpointed(home, project, conn):
    """Hooks exit without closing; alone, each next process would recover (re-read) the whole
    WAL and never restart it. Past WAL_CLOSE_BYTES the run closes its connection, and the last
    one out checkpoints and removes the WAL."""
    conn.close()  # this test's connection would keep the WAL alive: the hook must be alone
    wal = str(home / "recalld.db") + "-wal"
    assert _grow_wal(home, project, 20) < hook.WAL_CLOSE_BYTES
    p = run_recalld(["hook", "pre-tool"], payload(session_id="w", cwd=str(project), hook_event_name="PreToolUse",
                                                   tool_name="Read", tool_input={"file_path": "a"}))
    assert p.returncode == 0
    assert os.path.getsize(wal) > 0  # small: kept, no close and no checkpoint
    assert _grow_wal(home, project, 400) > hook.WAL_CLOSE_BYTES
    p = run_recalld(["hook", "pre-tool"], payload(session_id="w", cwd=str(project), hook_event_name="PreToolUse",
                                                   tool_name="Read", tool_input={"file_path": "a"}))
    assert p.returncode == 0
    assert not os.path.exists(wal) or os.path.getsize(wal) == 0
    c = db.connect()
    assert c.execute("SELECT count(*) FROM served WHERE session = 'wal'").fetchone()[0] == 420
    assert [r["hook"] for r in receipts.read(c)][:2] == ["pre-tool", "pre-tool"]


def test_a_held_call_and_an_undelivered_event_stay_light(seeded):
    """The gate's deny and the dropped-channel path are hook paths too (tests/test_delivery.py
    for what they do); the crystal cache is warm, as it is after the first act."""
    from recalld.cli.crystals import trust_folder

    project = seeded["project"]
    d = project / ".recalld" / "crystals"
    d.mkdir(parents=True)
    (d / "reset.md").write_text("crystal:\non: bash\nmatch: git reset\n\n<!-- crystal:essence -->\n⛔ stash first\n"
                                "<!-- /crystal:essence -->\n")
    trust_folder(str(project))
    warm = {"session_id": "warm", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "git reset --hard"}}
    hook.run(["pre-tool"], json.dumps(warm).encode())
    code = ("import sys, json\n"
            "from recalld.hook import run as hook\n"
            "held, r = hook.run(['pre-tool'], json.dumps(json.loads(sys.argv[1])).encode())\n"
            "assert 'permissionDecision' in held and r['detail']['gated'] == ['reset'], (held, r)\n"
            "out, r = hook.run(['stop'], json.dumps(json.loads(sys.argv[2])).encode())\n"
            "assert out == '' and r['outcome'] == 'nothing', r\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    held = dict(warm, session_id="cold")
    codex_stop = {"session_id": "c1", "cwd": str(project), "hook_event_name": "Stop", "turn_id": "t",
                  "model": "gpt-5.5", "stop_hook_active": False, "last_assistant_message": "done"}
    p = subprocess.run([sys.executable, "-S", "-c", code, json.dumps(held), json.dumps(codex_stop)],
                       capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr.decode()
    assert HEAVY & set(json.loads(p.stdout.decode().splitlines()[-1])) == set()

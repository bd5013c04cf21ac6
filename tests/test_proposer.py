"""The proposer pass over the REAL transcripts with the REAL embedded model, the structural
no-write guarantees, and planted secrets that must reach neither the database, the logs nor
the receipts."""

import ast
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from recalld.core import drafts, receipts, scope
from recalld.hook import run as hook
from recalld.capture import proposer
from recalld.bench.planted import PLANTED, leaks, plant, secret_text  # one copy, shared with the benchmark
from recalld import store
from recalld.daemon import transcripts
from tests.helpers import REPO, TRANSCRIPTS, run_recalld

PKG = REPO / "recalld"
# Modules that write memories (or reach code that does); the proposer must reach none of them.
WRITERS = {"recalld.store", "recalld.capture.proposals", "recalld.cli.main", "recalld.mcp"}


def _imports(module: str) -> set:
    """Every recalld module `module` imports, anywhere in its body (functions included)."""
    path = PKG.joinpath(*module.split(".")[1:]).with_suffix(".py")
    if not path.exists():
        path = PKG.joinpath(*module.split(".")[1:], "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("recalld"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("recalld"):
            out.add(node.module)
            for a in node.names:  # `from recalld import store` imports the module recalld.store
                sub = f"{node.module}.{a.name}"
                if PKG.joinpath(*sub.split(".")[1:]).with_suffix(".py").exists():
                    out.add(sub)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            out.add("<dynamic import>")
    return out


def import_closure(root: str) -> dict:
    """module -> the module that first imported it, over the whole reachable graph."""
    seen, todo = {root: None}, [root]
    while todo:
        mod = todo.pop()
        if mod == "<dynamic import>" or mod == "recalld":
            continue
        for dep in _imports(mod):
            if dep not in seen:
                seen[dep] = mod
                todo.append(dep)
    return seen


def test_the_proposer_has_no_import_path_to_memory_writes():
    closure = import_closure("recalld.capture.proposer")
    assert "recalld.core.drafts" in closure and "recalld.capture.policies" in closure and "recalld.model.runtime" in closure
    reached = WRITERS & set(closure)
    assert not reached, {m: closure[m] for m in reached}
    assert "<dynamic import>" not in closure  # nothing the walk cannot see


def test_the_walk_would_notice_a_writer():
    # The same walk from the approvals module does reach the store: the check can fail.
    assert "recalld.store" in import_closure("recalld.capture.proposals")


def test_the_proposer_handle_cannot_write_memories(home, project):
    sc = scope.resolve(str(project))
    c = drafts.connect()
    with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
        store.remember(c, "The proposer tried to write this memory directly.", sc, check_similar=False)
    for sql in ("INSERT INTO memories (text, kind, scope, project, agent, created_at, valid_from) "
                "VALUES ('x', 'fact', 'project', 'p', 'a', 't', 't')",
                "UPDATE memories SET invalid_at = 't'", "DELETE FROM memories",
                "INSERT INTO memory_changes (time, memory_id, action) VALUES ('t', 1, 'created')",
                "INSERT INTO memories_fts(rowid, text, tell, aux) VALUES (1, 'x', '', '')",
                "DELETE FROM memories_fts_data", "DROP TRIGGER memories_no_delete", "PRAGMA writable_schema = 1"):
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            c.execute(sql)
    # It can still read memories and write drafts and receipts.
    assert c.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    r = receipts.new("proposer", "test")
    assert drafts.store_pass(c, r, session="s", source="x", from_line=1, to_line=2, boundary_id=None,
                             window_chars=0, drafts=[], project=sc.project, agent="main", model=None) == []
    c.close()
    plain = __import__("recalld.core.db", fromlist=["connect"]).connect()
    assert plain.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    assert plain.execute("SELECT count(*) FROM receipts WHERE source = 'proposer'").fetchone()[0] == 1
    plain.close()


# --- the real model on the real transcripts ---------------------------------------------------


@pytest.fixture(scope="module")
def runtime():
    from recalld.model import runtime as llm
    from recalld.model.errors import Unavailable

    try:
        return llm.require_runtime("proposer", {"models": {}})
    except Unavailable as e:
        pytest.fail(f"the embedded model must be available for these tests: {e}")


@pytest.mark.model
def test_a_pass_over_a_real_transcript(home, runtime, shared_transcripts):
    path = TRANSCRIPTS / "spotter-subagent.jsonl"
    res = proposer.run_pass(str(path), origin="cli", runtime=runtime)
    assert res.outcome in ("stored", "nothing"), res.error
    assert res.model == runtime.name and res.model_ms > 0
    assert 0 < res.window_chars <= 2000 and res.turns >= 1 and res.to_line == 96
    assert len(res.drafts) <= 3
    assert len(res.drafts) == len(res.stored_ids) + len(res.rejected)
    c = drafts.connect()
    rows = [dict(r) for r in c.execute("SELECT * FROM proposals ORDER BY id")]
    assert [r["id"] for r in rows] == res.stored_ids
    for row in rows:
        assert row["session"] == res.session and row["model"] == runtime.name
    rec = receipts.read(c, source="proposer")
    assert len(rec) == 1 and rec[0]["uid"] == res.receipt_uid
    d = rec[0]["detail"]
    assert (d["window_chars"], d["drafts"], d["rejections"], d["stored_ids"]) == (
        res.window_chars, len(res.drafts), res.rejections, res.stored_ids)
    assert d["model_ms"] > 0 and rec[0]["outcome"] == res.outcome
    # Receipts stay payload-free: no window text, no draft text.
    assert all(x.text not in json.dumps(rec[0]) for x in res.drafts if x.text)
    # The next pass reads only what is new: nothing, and it needs no model call.
    calls = runtime.calls
    again = proposer.run_pass(str(path), origin="cli", runtime=runtime)
    assert again.outcome == "nothing" and again.window_events == 0 and runtime.calls == calls
    assert again.from_line == 97
    c.close()


@pytest.mark.model
def test_the_daemon_turn_end_hook_runs_the_same_pass(home, runtime, shared_transcripts):
    path = TRANSCRIPTS / "viewer-agent-test-hash-123.jsonl"
    events = list(transcripts.parse_file(str(path)))
    assert events[-1].kind == "turn_end"
    turn = events[:-1]
    res = proposer.run_pass(str(path), session=events[0].session, events=turn, origin="daemon", runtime=runtime)
    assert res.outcome in ("stored", "nothing"), res.error
    assert res.window_events == len(turn) and res.to_line == max(e.line_no for e in turn)
    c = drafts.connect()
    assert drafts.cursor(c, str(path.resolve())) == res.to_line
    assert receipts.read(c, source="proposer")[0]["hook"] == "daemon"
    c.close()

    from recalld.cli import daemon as daemon_cmds

    assert daemon_cmds.turn_end_hooks() == (proposer.on_turn_end,)


@pytest.mark.model
def test_a_turn_the_judge_preempted_is_drafted_again(home, runtime, monkeypatch, shared_transcripts):
    # The judge stops a running draft (recalld.model.errors.LLMPreempted); the daemon hands each
    # turn over once, so on_turn_end tries the pass again instead of losing the turn.
    from recalld.model import runtime as llm
    from recalld.model.errors import LLMPreempted

    class Preempting:
        """The real runtime, except that its first generation is preempted."""

        def __init__(self, rt):
            self.rt, self.generations = rt, 0

        def __getattr__(self, name):
            return getattr(self.rt, name)

        def generate_json(self, *a, **kw):
            self.generations += 1
            if self.generations == 1:
                raise LLMPreempted("generation stopped for an urgent call (the judge)")
            return self.rt.generate_json(*a, **kw)

    wrapped = Preempting(runtime)
    monkeypatch.setattr(llm, "require_runtime", lambda role="judge", cfg=None: wrapped)
    monkeypatch.setattr(proposer, "PREEMPT_WAIT_S", 0.0)
    path = TRANSCRIPTS / "viewer-agent-test-hash-123.jsonl"
    events = list(transcripts.parse_file(str(path)))[:-1]
    res = proposer.on_turn_end(events[0].session, events)
    assert wrapped.generations == 2 and res.outcome in ("stored", "nothing"), res.error
    c = drafts.connect()
    recs = receipts.read(c, source="proposer")
    assert sorted((r["outcome"], r["error"]) for r in recs) == sorted(
        [("skipped", proposer.PREEMPTED), (res.outcome, None)])
    assert drafts.cursor(c, str(path.resolve())) == res.to_line
    c.close()


def test_without_a_model_the_pass_says_why_and_keeps_the_window(home, shared_transcripts):
    (home).mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"models": {"proposer": "off"}}))
    path = TRANSCRIPTS / "spotter-tool_heavy.jsonl"
    res = proposer.run_pass(str(path), origin="cli")
    assert res.outcome == "skipped" and "disabled" in res.error
    c = drafts.connect()
    assert drafts.cursor(c, str(path.resolve())) == 0  # not consumed: the next pass reads it
    rec = receipts.read(c, source="proposer")
    assert rec[0]["outcome"] == "skipped" and "disabled" in rec[0]["error"]
    c.close()


# --- planted secrets --------------------------------------------------------------------------


@pytest.mark.model
def test_planted_secrets_reach_neither_db_nor_logs_nor_receipts(home, tmp_path, runtime, shared_transcripts):
    src = TRANSCRIPTS / "spotter-tool_heavy.jsonl"
    copy = tmp_path / "session.jsonl"
    plant(src, copy)
    raw = copy.read_text()
    assert all(v in raw for v in PLANTED.values())
    session = next(transcripts.parse_file(str(copy))).session
    # The stop hook sees the agent's last message (with secrets) first.
    payload = {"session_id": session, "transcript_path": str(copy), "cwd": "/home/marco/projects/spotter",
               "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": False,
               "last_assistant_message": "Phoenix is up. " + secret_text()}
    out, r = hook.run(["stop"], json.dumps(payload).encode())
    assert r["outcome"] in ("nothing", "injected")
    # The CLI pass, the way a user runs it: the real model reads the window.
    res = run_recalld(["propose", "--transcript", str(copy), "--json"], timeout=600)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["boundaries"] == 1 and data["window_chars"] > 0
    assert sum(data["redactions"].values()) >= len(PLANTED)
    assert not [k for k, v in PLANTED.items() if v in res.stdout.decode() + res.stderr.decode()]

    # A model that echoes secrets back in its drafts: the policies must still catch them.
    class EchoingModel:
        name, n_ctx, calls = "echoing-test-model", None, 0

        def generate_json(self, prompt, schema, max_tokens=256, timeout_s=20, system=None):
            self.calls += 1
            return {"memories": [
                {"kind": "fact", "text": "Phoenix runs in the background with mix phx.server; " + secret_text(),
                 "why": "it needs " + secret_text()[:200], "confidence": 0.9},
                {"kind": "fact", "text": "The excerpt said: " + prompt[-900:], "why": "echo", "confidence": 0.9}]}

    copy2 = tmp_path / "session2.jsonl"
    plant(TRANSCRIPTS / "spotter-short.jsonl", copy2)
    echo = proposer.run_pass(str(copy2), origin="cli", runtime=EchoingModel())
    assert echo.outcome in ("stored", "nothing"), echo.error
    assert echo.drafts and all(v not in d.text + d.why for d in echo.drafts for v in PLANTED.values())

    # A pass that fails: its error message quotes a secret; the receipt must not.
    class FailingModel(EchoingModel):
        def generate_json(self, *a, **k):
            raise RuntimeError("bad output: " + PLANTED["openai"] + " " + PLANTED["aws"])

    copy3 = tmp_path / "session3.jsonl"
    plant(TRANSCRIPTS / "viewer-agent-test-hash-456.jsonl", copy3)
    failed = proposer.run_pass(str(copy3), origin="cli", runtime=FailingModel())
    assert failed.outcome == "error" and "REDACTED" in failed.error

    # And a receipt that had to go to the fallback file (the database refused it).
    rfb = receipts.new("proposer", "test")
    rfb["error"] = failed.error
    receipts.append_fallback(rfb, "test")

    conn = sqlite3.connect(str(home / "recalld.db"))
    try:
        assert conn.execute("SELECT count(*) FROM receipts WHERE source = 'proposer'").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM proposal_boundaries").fetchone()[0] == 1
        assert leaks(home, conn) == []
    finally:
        conn.close()
    # the check itself can see a leak
    shutil.copy(copy, home / "logs-copy.txt")
    conn = sqlite3.connect(str(home / "recalld.db"))
    try:
        assert leaks(home, conn)
    finally:
        conn.close()

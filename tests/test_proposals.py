"""Proposals: the strict state machine, approval through the core's durable write, concurrent
approvals writing one memory, the CLI and MCP surface, and bringing drafts to the agent's hooks."""

import json
import multiprocessing
import sqlite3

import pytest

from recalld.core import proposal_db, receipts, scope
from recalld.hook import run as hook
from recalld.capture import policies, decide
from recalld import memories
from tests.helpers import run_recalld

TEXT = ("The exporter must write cents as integers, because float rounding lost a cent on "
        "refunds in the March reconciliation.")


def make_drafts(conn, project_path, texts=(TEXT,), session="sess-1", kind="constraint"):
    sc = scope.resolve(str(project_path))
    r = receipts.new("proposer", "test")
    ds = [policies.Draft(kind=kind, text=t, why="it cost a reconciliation", confidence=0.9) for t in texts]
    return proposal_db.store_pass(conn, r, session=session, source="/transcripts/x.jsonl", from_line=1, to_line=9,
                             boundary_id=None, window_chars=100, drafts=ds, project=sc.project,
                             agent=sc.agent, model="test-model")


def counts(conn):
    return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("memories", "memory_changes", "proposal_events")}


def test_approve_writes_one_memory_through_the_store(conn, project):
    pid, = make_drafts(conn, project)
    p = decide.get(conn, pid)
    assert p["state"] == "pending" and p["events"] == []
    d = decide.approve(conn, pid)
    m = d.memory
    assert m["text"] == TEXT and m["kind"] == "constraint" and m["scope"] == "project"
    assert m["project"] == scope.resolve(str(project)).project and m["source"] == f"proposal:p{pid}"
    assert memories.get(conn, m["id"]) == m
    assert [c["action"] for c in memories.history(conn, m["id"], scope.resolve(str(project)))[0]["changes"]] == ["created"]
    p = decide.get(conn, pid)
    assert p["state"] == "approved" and p["memory_id"] == m["id"]
    assert [(e["from_state"], e["to_state"]) for e in p["events"]] == [("pending", "approved")]


def test_edit_then_approve_writes_the_edited_memory(conn, project):
    pid, = make_drafts(conn, project)
    d = decide.edit(conn, pid, text="Exporter amounts are integer cents; floats lost a cent on refunds.",
                       kind="decision", scope="shared", reason="tighter")
    assert d.proposal["state"] == "edited"
    assert d.proposal["text"] == TEXT  # the draft row is never rewritten
    decide.edit(conn, pid, tell="integer cents in the exporter")  # edited -> edited
    d = decide.approve(conn, pid, kind="constraint")
    assert d.memory["text"].startswith("Exporter amounts are integer cents")
    assert (d.memory["kind"], d.memory["scope"], d.memory["tell"]) == ("constraint", "shared",
                                                                       "integer cents in the exporter")
    assert [e["to_state"] for e in d.proposal["events"]] == ["edited", "edited", "approved"]


def test_approve_supersedes_and_reports_every_change(conn, project):
    sc = scope.resolve(str(project))
    old = memories.remember(conn, "The exporter writes cents as floats.", sc, check_similar=False).memory
    pid, = make_drafts(conn, project)
    d = decide.approve(conn, pid, supersedes=[old["id"]])
    assert [m["id"] for m in d.superseded] == [old["id"]]
    assert memories.get(conn, old["id"])["superseded_by"] == d.memory["id"]
    assert [m["id"] for m in d.as_dict()["changed"]] == [d.memory["id"], old["id"]]


def test_reject_needs_a_reason_and_writes_nothing(conn, project):
    pid, = make_drafts(conn, project)
    with pytest.raises(decide.ProposalError, match="reason"):
        decide.reject(conn, pid, "  ")
    before = counts(conn)
    d = decide.reject(conn, pid, "already in the exporter's docstring")
    assert d.proposal["state"] == "rejected" and d.event["reason"] == "already in the exporter's docstring"
    after = counts(conn)
    assert after["memories"] == before["memories"] and after["proposal_events"] == before["proposal_events"] + 1


ILLEGAL = [
    ("approved", lambda c, p: decide.approve(c, p)),
    ("approved", lambda c, p: decide.reject(c, p, "late")),
    ("approved", lambda c, p: decide.edit(c, p, text="changed my mind about the exporter cents rule")),
    ("rejected", lambda c, p: decide.approve(c, p)),
    ("rejected", lambda c, p: decide.reject(c, p, "again")),
    ("rejected", lambda c, p: decide.edit(c, p, kind="fact")),
]


@pytest.mark.parametrize("terminal,move", ILLEGAL)
def test_a_decided_proposal_never_moves_again(conn, project, terminal, move):
    pid, = make_drafts(conn, project)
    if terminal == "approved":
        decide.approve(conn, pid)
    else:
        decide.reject(conn, pid, "no")
    before = counts(conn)
    with pytest.raises(decide.ProposalError, match=f"already {terminal}"):
        move(conn, pid)
    assert counts(conn) == before
    assert not conn.in_transaction
    assert decide.get(conn, pid)["state"] == terminal


@pytest.mark.parametrize("call,msg", [
    (lambda c: decide.approve(c, 999), "p999 does not exist"),
    (lambda c: decide.reject(c, "p999", "x"), "p999 does not exist"),
    (lambda c: decide.approve(c, "m12"), "not a proposal id"),
    (lambda c: decide.approve(c, 1, kind="opinion"), "unknown kind"),
    (lambda c: decide.approve(c, 1, scope="world"), "unknown scope"),
    (lambda c: decide.approve(c, 1, supersedes=[77]), "m77 does not exist"),
    (lambda c: decide.edit(c, 1), "at least one"),
])
def test_bad_requests_fail_cleanly(conn, project, call, msg):
    make_drafts(conn, project)
    before = counts(conn)
    with pytest.raises(decide.ProposalError, match=msg):
        call(conn)
    assert counts(conn) == before and not conn.in_transaction
    assert decide.get(conn, 1)["state"] == "pending"


def test_the_schema_itself_refuses_illegal_transitions(conn, project):
    pid, = make_drafts(conn, project)
    decide.reject(conn, pid, "no")
    with pytest.raises(sqlite3.IntegrityError, match="illegal proposal transition"):
        conn.execute("INSERT INTO proposal_events (proposal_id, time, from_state, to_state) "
                     "VALUES (?, 't', 'pending', 'rejected')", (pid,))
    with pytest.raises(sqlite3.IntegrityError):  # approved needs its memory
        conn.execute("INSERT INTO proposal_events (proposal_id, time, from_state, to_state) "
                     "VALUES (?, 't', 'rejected', 'approved')", (pid,))
    proposal_db.record_boundary(conn, session="s", project="p", agent="main", origin="stop-hook", text="t")
    for sql in ("UPDATE proposal_events SET reason = 'x'", "DELETE FROM proposal_events",
                "UPDATE proposals SET text = 'x'", "DELETE FROM proposals", "DELETE FROM proposal_passes",
                "DELETE FROM proposal_boundaries"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(sql)


def test_edits_are_redacted(conn, project):
    pid, = make_drafts(conn, project)
    d = decide.edit(conn, pid, text="Deploys read GITHUB token ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s1 from CI.")
    assert "ghp_" not in d.proposal["effective"]["text"]
    d = decide.approve(conn, pid)
    assert "ghp_R4nd0m" not in d.memory["text"]


def _approve_in_process(home, pid, barrier, results):
    import os

    os.environ["RECALLD_HOME"] = home
    from recalld.core import db as db_
    from recalld.capture import decide as lib

    c = db_.connect()
    barrier.wait()
    try:
        d = lib.approve(c, pid, check_similar=False)
        results.put(("ok", d.memory["id"]))
    except lib.ProposalError as e:
        results.put(("refused", str(e)))
    finally:
        c.close()


def test_concurrent_approvals_write_one_memory(conn, project, home):
    pid, = make_drafts(conn, project)
    ctx = multiprocessing.get_context("spawn")
    n = 6
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_approve_in_process, args=(str(home), pid, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    got = [results.get(timeout=5) for _ in range(n)]
    oks = [g for g in got if g[0] == "ok"]
    assert len(oks) == 1, got
    assert all("already approved" in g[1] for g in got if g[0] == "refused")
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM proposal_events WHERE proposal_id = ? AND to_state = 'approved'",
                        (pid,)).fetchone()[0] == 1


def test_concurrent_cli_approvals_write_one_memory(conn, project, home):
    import os
    import subprocess
    import sys

    from tests.helpers import REPO

    pid, = make_drafts(conn, project)
    env = dict(os.environ, RECALLD_HOME=str(home), PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-m", "recalld", "proposals", "approve", str(pid), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert sorted(rc for _, _, rc in outs) == [0, 1, 1, 1], outs
    assert all(b"already approved" in err for _, err, rc in outs if rc)
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 1


def test_cli_round_trip(home, project, conn):
    ids = make_drafts(conn, project, texts=(TEXT, "Refund exports run nightly at two because the bank "
                                                  "locks the ledger during business hours."))
    res = run_recalld(["proposals", "list", "--json", "--cwd", str(project)])
    assert res.returncode == 0, res.stderr
    assert [p["id"] for p in json.loads(res.stdout)] == ids
    res = run_recalld(["proposals", "show", f"p{ids[0]}"])
    assert res.returncode == 0 and "pending" in res.stdout.decode() and "why: it cost" in res.stdout.decode()
    res = run_recalld(["proposals", "approve", str(ids[0]), "--scope", "agent", "--kind", "decision"])
    out = res.stdout.decode()
    assert res.returncode == 0, res.stderr
    assert f"approved p{ids[0]}" in out and "remembered m1 [decision, agent]" in out
    res = run_recalld(["proposals", "approve", str(ids[0])])
    assert res.returncode == 1 and b"already approved as m1" in res.stderr and len(res.stderr.splitlines()) == 1
    res = run_recalld(["proposals", "reject", str(ids[1])])
    assert res.returncode != 0 and b"--reason" in res.stderr
    res = run_recalld(["proposals", "edit", str(ids[1]), "--text", "Refund exports run nightly at two: the bank "
                       "locks the ledger in business hours.", "--json"])
    assert json.loads(res.stdout)["proposal"]["state"] == "edited"
    res = run_recalld(["proposals", "reject", str(ids[1]), "--reason", "it is in the cron file", "--json"])
    assert json.loads(res.stdout)["proposal"]["state"] == "rejected"
    res = run_recalld(["proposals", "list", "--state", "all", "--json", "--cwd", str(project)])
    assert [p["state"] for p in json.loads(res.stdout)] == ["approved", "rejected"]
    res = run_recalld(["search", "exporter cents", "--json", "--cwd", str(project)])
    assert [h["id"] for h in json.loads(res.stdout)] == [1]


def test_mcp_tools(home, project, conn):
    from tests.test_mcp import _call, _payload

    ids = make_drafts(conn, project, texts=(TEXT, "Refund exports run nightly at two because the bank "
                                                  "locks the ledger during business hours."))
    tools, results = _call(home, project, [
        ("proposals_list", {"cwd": str(project)}),
        ("proposals_edit", {"proposal_id": str(ids[0]), "kind": "decision"}),
        ("proposals_approve", {"proposal_id": f"p{ids[0]}"}),
        ("proposals_approve", {"proposal_id": f"p{ids[0]}"}),
        ("proposals_reject", {"proposal_id": str(ids[1]), "reason": "in the cron file"}),
        ("proposals_show", {"proposal_id": str(ids[1])}),
    ])
    assert {"proposals_list", "proposals_show", "proposals_approve", "proposals_edit", "proposals_reject"} <= tools
    lst, edited, approved, twice, rejected, shown = results
    assert [p["id"] for p in _payload(lst)] == ids
    assert _payload(edited)["proposal"]["state"] == "edited"
    a = _payload(approved)
    assert a["memory"]["kind"] == "decision" and a["changed"][0]["id"] == a["memory"]["id"]
    assert twice.is_error and "already approved" in twice.content[0].text
    assert _payload(rejected)["proposal"]["state"] == "rejected"
    assert _payload(shown)["events"][0]["reason"] == "in the cron file"


# --- the hook side -------------------------------------------------------------------------


def stop_payload(project, session="sess-1", message="All set."):
    return {"session_id": session, "transcript_path": "/home/u/.claude/projects/-p/sess-1.jsonl",
            "cwd": str(project), "permission_mode": "default", "hook_event_name": "Stop",
            "stop_hook_active": False, "last_assistant_message": message}


def prompt_payload(project, session="sess-1", prompt="what next?"):
    return {"session_id": session, "transcript_path": "/t.jsonl", "cwd": str(project),
            "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": prompt}


def test_stop_hook_records_a_redacted_boundary(conn, project):
    msg = ("Fixed: the client now reads OPENAI_API_KEY from the env; I tested with "
           "sk-proj-Abc123def456Ghi789jkl012Mno345pqr678 and postgres://app:Sup3rS3cretPw@db:5432/x")
    out, r = hook.run(["stop"], json.dumps(stop_payload(project, message=msg)).encode())
    assert out == "" and r["act"] == "stop"
    rows = [dict(x) for x in conn.execute("SELECT * FROM proposal_boundaries")]
    assert len(rows) == 1
    b = rows[0]
    assert (b["session"], b["origin"], b["native_event"], b["receipt_uid"]) == ("sess-1", "stop-hook", "Stop", r["uid"])
    assert "sk-proj-Abc123" not in b["text"] and "Sup3rS3cretPw" not in b["text"]
    assert "OPENAI_API_KEY" in b["text"] and r["detail"]["boundary_redactions"] == 2
    stored = conn.execute("SELECT detail FROM receipts WHERE uid = ?", (r["uid"],)).fetchone()[0]
    assert "Sup3r" not in stored


def test_pending_drafts_reach_the_sessions_next_hooks_a_bounded_number_of_times(conn, project):
    ids = make_drafts(conn, project, texts=(TEXT, "Refund exports run nightly at two because the bank "
                                                  "locks the ledger during business hours."))
    seen = []
    for _ in range(3):
        out, r = hook.run(["prompt-submit"], json.dumps(prompt_payload(project)).encode())
        seen.append(out)
    first = json.loads(seen[0])["hookSpecificOutput"]["additionalContext"]
    for pid in ids:
        assert f"p{pid} constraint:" in first
    assert "recalld proposals approve ID" in first and "recalld proposals reject ID --reason" in first
    assert "proposals_approve" in first
    assert seen[1] and not seen[2]  # show_times = 2
    # another session does not see them
    out, _ = hook.run(["prompt-submit"], json.dumps(prompt_payload(project, session="other")).encode())
    assert "proposals approve" not in out
    # deciding removes them from the block
    ids2 = make_drafts(conn, project, texts=("Invoices are immutable once sent, because the tax "
                                             "office requires the original numbering.",))
    decide.reject(conn, ids2[0], "known")
    out, _ = hook.run(["prompt-submit"], json.dumps(prompt_payload(project)).encode())
    assert out == ""


def test_pre_tool_and_stop_show_drafts_but_post_tool_does_not(conn, project):
    make_drafts(conn, project)
    pre = {"session_id": "sess-1", "transcript_path": "/t", "cwd": str(project), "permission_mode": "default",
           "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    post = dict(pre, hook_event_name="PostToolUse", tool_response={"stdout": ""})
    out, _ = hook.run(["post-tool"], json.dumps(post).encode())
    assert "proposals approve" not in out
    out, _ = hook.run(["pre-tool"], json.dumps(pre).encode())
    assert "proposals approve" in out
    out, r = hook.run(["stop"], json.dumps(stop_payload(project)).encode())
    assert "proposals approve" in out and r["delivered_ids"] == ["pb:1"]


def test_proposals_can_be_switched_off(conn, project, home):
    (home / "settings.json").write_text(json.dumps({"proposals": {"enabled": False}}))
    make_drafts(conn, project)
    out, _ = hook.run(["prompt-submit"], json.dumps(prompt_payload(project)).encode())
    assert out == ""
    hook.run(["stop"], json.dumps(stop_payload(project)).encode())
    assert conn.execute("SELECT count(*) FROM proposal_boundaries").fetchone()[0] == 0


def test_optional_review_gate_blocks_a_stop_once_per_batch(conn, project, home):
    make_drafts(conn, project)
    # off by default: the stop answers with context, never a block
    out, _ = hook.run(["stop"], json.dumps(stop_payload(project)).encode())
    assert "decision" not in json.loads(out)
    (home / "settings.json").write_text(json.dumps({"proposals": {"review_gate": True}}))
    make_drafts(conn, project, texts=("Invoices are immutable once sent, because the tax office "
                                      "requires the original numbering.",))
    codex = dict(stop_payload(project), turn_id="t-1")
    codex.pop("stop_hook_active")
    out, _ = hook.run(["stop"], json.dumps(codex).encode())
    assert "decision" not in out  # Codex's Stop is not documented to honour a block
    out, r = hook.run(["stop"], json.dumps(stop_payload(project)).encode())
    data = json.loads(out)
    assert data["decision"] == "block" and "recalld proposals approve ID" in data["reason"]
    assert "p1 constraint:" in data["reason"] and r["detail"]["stop_gate"] == "gate:pb:1"
    # Claude continues because of the block: no second block while stop_hook_active
    out, _ = hook.run(["stop"], json.dumps(dict(stop_payload(project), stop_hook_active=True)).encode())
    assert "decision" not in out
    # the next batch blocks once too, then never again
    out, _ = hook.run(["stop"], json.dumps(stop_payload(project)).encode())
    assert json.loads(out)["decision"] == "block" and "p2 constraint:" in json.loads(out)["reason"]
    out, _ = hook.run(["stop"], json.dumps(stop_payload(project)).encode())
    assert "decision" not in out
    assert conn.execute("SELECT count(*) FROM proposal_boundaries").fetchone()[0] == 6

"""Capture inside the real client (issue 13, "a proposal shown to the agent and approved over
MCP, then recalled in a new session"), in three runs of Claude Code against one scratch user:

1. the user states a decision with its reason; the turn ends (Stop hook); the proposer runs
   over that session's transcript the way the daemon would (`recalld propose --transcript`);
2. the same session resumed: the request shows the draft, and the scripted model approves it
   with the recalld MCP tool `proposals_approve`, the id read from the request it received;
3. a new session's related prompt: the approved memory is in its request.
"""

import glob
import json
import os
import re

import pytest
from e2e_clients import CLIENTS
from e2e_harness import Scratch, recalld_executable
from e2e_standins import Text, Tool, Until

DECISION = ("Note for later: we decided to write each nightly export under a dated key instead of "
            "overwriting latest.csv, because the reports bucket has object lock enabled.")
ACK = "Understood."
CARRY_ON = "Carry on."
APPROVED = "Approved the drafted memory."
RELATED = "Should the nightly export job overwrite latest.csv in the reports bucket?"
FINAL = "No: it writes a dated key."
APPROVE = "mcp__recalld__proposals_approve"
# A draft as the hook shows it: "p<ID> <kind>: <text>" (recalld/hook/proposal_source.py).
DRAFT_LINE = re.compile(r"\bp(\d+) \w+(?: \(edited\))?: [^\n]*latest\.csv")


def _run(client, sc, stand_in, prompt, *, resume=None, allow=()):
    argv, env = client.argv(sc, stand_in, prompt, True)
    argv = list(argv)
    if allow:
        i = argv.index("--allowedTools")
        argv[i + 1] += "," + ",".join(allow)
    if resume:
        argv += ["--resume", resume]
    return sc.run_client(argv, env)


def _session_id(run) -> str:
    try:
        return json.loads(run.stdout)["session_id"]
    except (ValueError, KeyError, TypeError):
        pytest.fail("no session_id in Claude Code's JSON output:\n" + run.tail())


def _approve_step(seen):
    """Reads the draft's id from the request the model received and approves it over MCP."""
    def step(body, stand_in):
        m = DRAFT_LINE.search(json.dumps(body, ensure_ascii=False).replace("\\n", "\n"))
        if not m:
            return Text("I see no draft to decide on.")
        seen.append(int(m.group(1)))
        return Tool(APPROVE, {"proposal_id": f"p{m.group(1)}"})
    return step


class Flow:
    def __init__(self, sc):
        self.sc = sc
        self.runs, self.stand_ins = [], []
        self.drafted, self.approved_ids = [], []

    def where(self) -> str:
        return f"(logs in {self.sc.root}: standin-*.log, client.txt)\n" + "\n".join(r.tail(800) for r in self.runs)

    def main(self, i):
        return self.stand_ins[i].main_requests()


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    client = CLIENTS["claude"]
    client.executable()
    recalld_executable()
    sc = Scratch(str(tmp_path_factory.mktemp("claude-proposals")))
    client.prepare(sc)
    sc.install(client.install_as)
    f = Flow(sc)

    def one(n, prompt, script, **kw):
        s = client.stand_in(script)
        try:
            with s:
                run = _run(client, sc, s, prompt, **kw)
        finally:
            sc.save(f"standin-{n}.log", s.log_text())
        f.runs.append(run)
        f.stand_ins.append(s)
        if run.rc != 0 or not s.main_requests():
            pytest.fail(f"run {n} did not complete ({len(s.main_requests())} model requests) " + f.where())
        return run

    f.session = _session_id(one(1, DECISION, [Text(ACK)]))
    paths = glob.glob(os.path.join(sc.home, ".claude", "projects", "*", f.session + ".jsonl"))
    if not paths:
        pytest.fail(f"no transcript for session {f.session} " + f.where())
    f.transcript = paths[0]
    f.pass_ = json.loads(sc.recalld("propose", "--transcript", f.transcript, "--json").stdout)
    f.pending = json.loads(sc.recalld("proposals", "list", "--json").stdout)
    # Drafted: the same session, resumed; the model approves what the request shows.
    ready = Until(lambda body: APPROVE in json.dumps(body), client.shell("sleep 1"))
    f.resumed = _session_id(one(2, CARRY_ON, [ready, _approve_step(f.approved_ids), Text(APPROVED)],
                                resume=f.session, allow=(APPROVE,)))
    one(3, RELATED, [Text(FINAL)])
    return f


def test_the_turn_end_is_recorded_and_the_proposer_drafts_the_decision(flow):
    hooks = [r["hook"] for r in flow.sc.hook_receipts()]
    assert "stop" in hooks, hooks
    texts = [b["text"] for b in flow.sc.boundaries()]
    assert any(ACK in t for t in texts), texts
    assert flow.pass_.get("outcome") != "error", flow.pass_
    assert any("latest.csv" in (p.get("text") or "") for p in flow.pending), (flow.pass_, flow.pending)


def test_the_resumed_session_shows_the_draft_and_approves_it_over_mcp(flow):
    # drafts are shown to the session they came from: --resume keeps the session id
    assert flow.resumed == flow.session, (flow.resumed, flow.session)
    first = flow.main(1)[0]
    ours = [p for p in flow.pending if "latest.csv" in (p.get("text") or "")]
    assert ours, flow.pending
    assert f"p{ours[0]['id']} " in first.raw and "proposals_approve" in first.raw, (
        "the draft is not in the resumed session's first request " + flow.where())
    assert flow.approved_ids == [ours[0]["id"]], flow.approved_ids
    outputs = [o for r in flow.main(1) for o in flow.stand_ins[1].tool_outputs(r.body)]
    assert any("approved" in o for o in outputs), outputs
    shown = json.loads(flow.sc.recalld("proposals", "show", str(ours[0]["id"]), "--json").stdout)
    assert shown["state"] == "approved", shown


def test_a_new_session_recalls_the_approved_memory(flow):
    ours = [p for p in flow.pending if "latest.csv" in (p.get("text") or "")]
    shown = json.loads(flow.sc.recalld("proposals", "show", str(ours[0]["id"]), "--json").stdout)
    assert shown["state"] == "approved" and shown["memory_id"], shown
    text = shown["effective"]["text"]
    first = flow.main(2)[0]
    assert text in first.raw, "the approved memory is not in the new session's request " + flow.where()
    new = [r for r in flow.sc.hook_receipts() if r["hook"] == "prompt-submit" and r["session"] != flow.session]
    assert len(new) == 1 and new[0]["outcome"] == "injected", new
    assert f"m:{shown['memory_id']}" in new[0]["delivered_ids"], new

"""recalld inside the real Claude Code, Codex CLI and Gemini CLI (issue 13).

Each scenario installs recalld into a scratch user the README's way, runs one client headless
against a scripted stand-in for its model API, and checks what reached the model's requests
(the stand-in's log) and what recalld recorded (receipts). The same checks run for every
client; a known break is xfail(strict=True) with its reason, so the test flips when it is fixed.
A client that cannot run here skips with the reason.
"""

import json
import os
import subprocess
import sys
import time

import pytest
from e2e_clients import CLIENTS
from e2e_harness import recalld_executable, scenario
from e2e_standins import Text

AGENTS = ("claude", "codex", "gemini")

M_RELATED = "We pin sqlite-utils to 3.x because 4.0 changed upsert semantics."
M_ALWAYS = "House style: indent with four spaces, never tabs."
MEMORIES = ((M_RELATED, "--kind", "decision"), (M_ALWAYS, "--kind", "preference", "--always"))
AGENT = "e2e-agent"  # RECALLD_AGENT of the tools scenario: hooks and MCP must both act as it
M_AGENT = "Agent note: the sqlite-utils upsert fixture lives in tests/fixtures/upsert.json."
P_RELATED = "Should we move to sqlite-utils 4 for the upsert change?"
P_UNRELATED = "Print today's date in ISO format."
FINAL = "All set: nothing else to change."
CRYSTAL_MARK = "CRYSTAL-7F3A"
CRYSTAL = f"⛔ {CRYSTAL_MARK}: git reset --hard throws away uncommitted work; stash it first."
RESET = "git reset --hard"
RESET_OUTPUT = "HEAD is now at"
POST_MARK = "CRYSTAL-POST-9D1E"
POST_CRYSTAL = f"❗ {POST_MARK}: after a hard reset, check `git stash list` for work to restore."
# A command that fails; its error (not its command line, which spells it otherwise) is what a
# crystal is bound to. Claude Code reports a failed call as PostToolUseFailure.
FAIL_CMD = "printf 'FATAL-%s-HELD\\n' LOCK-42 >&2; exit 3"
FAIL_OUTPUT = "FATAL-LOCK-42-HELD"
FAIL_MARK = "CRYSTAL-FAIL-5B2C"
FAIL_CRYSTAL = f"❗ {FAIL_MARK}: a held lock means another run is live: wait for it, never delete the lock."



def xfail(reason):
    # raises=AssertionError: only the check itself is the known break; a client that did not
    # run, or a harness error, still fails.
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


def agents(**known):
    """Parametrize over the clients; `known[name]` marks that client's run as a known break."""
    return pytest.mark.parametrize(
        "client", [pytest.param(a, marks=xfail(known[a])) if a in known else a for a in AGENTS],
        indirect=True)


@pytest.fixture(scope="module")
def client(request):
    c = CLIENTS[request.param]
    c.executable()  # skips when the pinned client is not installed
    recalld_executable()
    return c


def _final(client):
    return [Text(FINAL)]


@pytest.fixture(scope="module")
def related(client, tmp_path_factory):
    return scenario(client, str(tmp_path_factory.mktemp(f"{client.name}-related")), P_RELATED, _final,
                    memories=MEMORIES)


def _tools_script(client):
    """After an unrelated prompt: search recalld over MCP, then run `git reset --hard`, which a
    crystal guards. If the model was told the crystal and the command did not run, it re-issues
    the call once (the model read the note and the act is still right)."""
    retried, failed, trusted = [], [], []

    def after_reset(body, stand_in):
        ran = any(RESET_OUTPUT in o for o in stand_in.tool_outputs(body))
        if CRYSTAL_MARK in json.dumps(body, ensure_ascii=False) and not ran and not retried:
            retried.append(1)
            return client.shell(RESET)
        if not failed:  # then a command that fails
            failed.append(1)
            return client.shell(FAIL_CMD)
        if not trusted:  # then the agent tries to trust the project's crystals itself
            trusted.append(1)
            return client.shell(f"{recalld_executable()} crystals trust; echo trust-rc=$?")
        return Text(FINAL)

    return client.mcp_search("sqlite-utils upsert") + [client.shell(RESET), *[after_reset] * 4]


def _tools_setup(sc):
    sc.crystal("reset-hard", "bash", RESET, CRYSTAL, CRYSTAL_MARK)
    sc.crystal("after-reset", "tool-result", RESET_OUTPUT, POST_CRYSTAL, POST_MARK)
    sc.crystal("lock-held", "tool-result", FAIL_OUTPUT, FAIL_CRYSTAL, FAIL_MARK)
    with open(f"{sc.project}/README.md", "a", encoding="utf-8") as f:
        f.write("uncommitted work\n")


@pytest.fixture(scope="module")
def tools(client, tmp_path_factory):
    """An unrelated prompt; the model searches recalld over MCP, then runs a command a crystal
    is bound to, with uncommitted work in the tree."""
    memories = MEMORIES + ((M_AGENT, "--kind", "fact", "--scope", "agent"),)
    return scenario(client, str(tmp_path_factory.mktemp(f"{client.name}-tools")), P_UNRELATED, _tools_script,
                    setup=_tools_setup, memories=memories, env={"RECALLD_AGENT": AGENT})


@pytest.fixture(scope="module")
def served(client, tmp_path_factory):
    """The tools scenario after a related prompt, with the daemon up: every hook process hands
    its run to the daemon (recalld/hook/served.py), which must change nothing the model reads."""
    return scenario(client, str(tmp_path_factory.mktemp(f"{client.name}-served")), P_RELATED, _tools_script,
                    setup=_tools_setup, memories=MEMORIES, env={"RECALLD_AGENT": AGENT}, daemon=True)


@pytest.fixture(scope="module")
def as_installed(client, tmp_path_factory, related):
    """The related scenario with nothing but what install wrote: for Codex, without the flag
    that bypasses its hook trust review (the other clients' runs never bypass anything)."""
    if not client.trust_bypass:
        return related
    return scenario(client, str(tmp_path_factory.mktemp(f"{client.name}-as-installed")), P_RELATED, _final,
                    memories=MEMORIES, bypass_trust=False)


# --- what reached the model --------------------------------------------------------------------


@agents()
def test_prestep_recall_reaches_the_model_on_a_related_prompt(related):
    related.require_run()
    assert M_RELATED in related.first.raw, "the pre-step memory is not in the first request " + related.where()


@agents()
def test_nothing_is_recalled_on_an_unrelated_prompt(tools):
    tools.require_run()
    assert M_RELATED not in tools.first.raw, tools.where()
    prompt = [r for r in tools.receipts if r["hook"] == "prompt-submit"]
    assert prompt, "the prompt-submit hook did not run " + tools.where()
    related_id = next(k for k, v in tools.sc.memories.items() if v == M_RELATED)
    assert all(related_id not in r["delivered_ids"] for r in prompt), prompt


@agents()
def test_always_loaded_set_arrives_at_session_start(related):
    related.require_run()
    assert M_ALWAYS in related.first.raw, related.where()
    boot = [r for r in related.receipts if r["hook"] == "session-start"]
    assert len(boot) == 1 and boot[0]["outcome"] == "injected", boot


@agents()
def test_always_loaded_set_arrives_once(related):
    related.require_run()
    assert related.first.raw.count(M_ALWAYS) == 1, related.where()


@agents()
def test_mcp_search_result_reaches_the_model(tools):
    tools.require_run()
    outputs = [o for per_request in tools.tool_outputs() for o in per_request]
    assert outputs, "the scripted MCP call was never answered " + tools.where()
    assert any(M_RELATED in o for o in outputs), f"tool results: {outputs} " + tools.where()


@agents()
def test_recalld_tools_are_offered_in_the_first_request(related):
    """Codex sends its first request about 1 s after it starts, ready or not (issue 13.8), and
    Claude Code 2.1.332 waits for its server/discover probe only so long: `recalld mcp` answers
    both openings (the handshake, and the stateless protocol of 2026-07-28) before the SDK has
    loaded."""
    related.require_run()
    assert related.client.mcp_marker in related.first.raw, related.where()


@agents()
def test_mcp_server_gets_recalld_environment(tools):
    """`recalld mcp` reads the store of RECALLD_HOME as the agent of RECALLD_AGENT, as the hooks
    do: an agent-scoped note is found only when both reached the server (issue 13.3)."""
    tools.require_run()
    outputs = [o for per_request in tools.tool_outputs() for o in per_request]
    assert any(M_AGENT in o for o in outputs), f"tool results: {outputs} " + tools.where()


@agents()
def test_crystal_reaches_the_model(tools):
    """At all, whenever: what the next test asks on top, per client."""
    tools.require_run()
    assert any(CRYSTAL_MARK in r.raw for r in tools.main), "the crystal never reached the model " + tools.where()


@agents()
def test_crystal_reaches_the_model_before_the_command_runs(tools):
    tools.require_run()
    told = [i for i, r in enumerate(tools.main) if CRYSTAL_MARK in r.raw]
    assert told, "the crystal never reached the model " + tools.where()
    before = tools.tool_outputs()[told[0]]
    assert not any(RESET_OUTPUT in o for o in before), (
        f"the first request with the crystal already holds the command's output: {before}")
    held = [r for r in tools.receipts if r["hook"] == "pre-tool" and "reset-hard" in (r["detail"].get("gated") or [])]
    assert len(held) == 1, [r["detail"] for r in tools.receipts if r["hook"] == "pre-tool"]


@agents()
def test_command_still_runs_after_the_crystal(tools):
    tools.require_run()
    assert any(RESET_OUTPUT in o for per in tools.tool_outputs() for o in per), tools.where()


@agents()
def test_post_tool_context_reaches_the_model(tools):
    """A crystal bound to the tool's result (post-tool) arrives with or after that result."""
    tools.require_run()
    assert any(POST_MARK in r.raw for r in tools.main), tools.where()


@agents()
def test_the_agent_cannot_trust_crystals_from_its_shell(tools):
    """Trust is the user's: `recalld crystals trust` run by the agent's tool is refused, and the
    refusal is what the model reads (each client marks its tool shell; agents.shell_owner)."""
    tools.require_run()
    outs = [o for per_request in tools.tool_outputs() for o in per_request if "trust-rc=" in o]
    assert outs, "the trust command never ran " + tools.where()
    assert "must come from you, not from an agent" in outs[0] and "trust-rc=1" in outs[0], outs[0]


@agents()
def test_a_failed_commands_error_reaches_its_crystal(tools):
    """A crystal bound to an error only that command's output says: the failed call's post-tool
    hook (Claude Code: PostToolUseFailure) reads the error, and the note reaches the model."""
    tools.require_run()
    failed = [i for i, r in enumerate(tools.main) if FAIL_OUTPUT in r.raw]
    assert failed, "the failing command never ran " + tools.where()
    assert any(FAIL_MARK in r.raw for r in tools.main[failed[0]:]), tools.where()


@agents()
def test_stop_hook_receives_the_last_assistant_message(related):
    related.require_run()
    texts = [b["text"] for b in related.sc.boundaries()]
    assert texts, "no turn boundary was recorded " + related.where()
    assert any(FINAL in t for t in texts), texts


@agents()
def test_hooks_run_as_installed(as_installed):
    as_installed.require_run()
    hooks = {r["hook"] for r in as_installed.receipts}
    assert {"session-start", "prompt-submit", "stop"} <= hooks, hooks
    assert M_RELATED in as_installed.first.raw, as_installed.where()


@agents()
def test_doctor_says_installed_and_active(as_installed):
    """`recalld doctor` on the scratch user after the README's install: the client's hooks and
    server are there, and the client will run them (Codex: trusted; Gemini CLI: folder trusted)."""
    sc, client = as_installed.sc, as_installed.client
    rep = json.loads(sc.recalld("doctor", "--json", "--no-hook-run", "--no-model-probe", "--cwd", sc.project).stdout)
    mine = next(a for a in rep["agents"] if a["agent"] == client.install_as and a["scope"] == "user")
    assert mine["installed"] and mine["complete"] and mine["mcp"], mine
    assert mine["active"] is True and mine["problems"] == [], mine


@agents()
def test_the_daemon_reads_the_transcript_the_client_wrote(related, monkeypatch):
    """The middle layer's input: the client's own transcript, found under its adapter's roots
    and parsed by recalld's parser: the prompt (without hook context) and the final answer."""
    from recalld import agents as adapters
    from recalld.daemon import transcripts

    related.require_run()
    monkeypatch.setenv("HOME", related.sc.home)
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(var, raising=False)
    adapter = adapters.lookup(related.client.install_as)
    files = [os.path.join(d, f) for root in adapter.transcript_roots() for d, _, fs in os.walk(root) for f in fs
             if transcripts.is_transcript(f)]
    assert files, f"no transcript under {adapter.transcript_roots()} " + related.where()
    events = [e for f in files for e in transcripts.parse_file(f)]
    assert {transcripts.guess_format(f) for f in files} == {adapter.name}
    prompts = [e.text for e in events if e.kind == "prompt"]
    assert P_RELATED in prompts and not any("recalld" in p for p in prompts), prompts
    assert any(e.kind == "text" and FINAL in e.text for e in events), [(e.kind, e.text[:80]) for e in events]


def test_recalld_mcp_answers_tools_list_fast(tmp_path):
    """Codex sends its first model request about 1 s after it starts, whether or not its MCP
    servers are up (issue 13.8): `recalld mcp` must answer tools/list well before that. The
    bound is measured against a bare interpreter start in the same moment, since this machine
    is shared."""
    exe = recalld_executable()
    env = dict(os.environ, RECALLD_HOME=str(tmp_path / "rh"))
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    took, bare = [], []
    for _ in range(3):
        t = time.perf_counter()
        p = subprocess.Popen([exe, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             cwd=str(tmp_path), env=env)
        p.stdin.write("".join(json.dumps(m) + "\n" for m in lines).encode())
        p.stdin.flush()
        while json.loads(p.stdout.readline()).get("id") != 2:
            pass
        took.append(time.perf_counter() - t)
        p.stdin.close()
        p.wait(timeout=30)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t)
    assert min(took) < 0.3 + min(bare), (took, bare)


# --- receipts ----------------------------------------------------------------------------------


def _one_receipt_per_hook_run(res):
    res.require_run()
    runs = res.sc.hook_runs()
    assert runs, "the client ran no hook " + res.where()
    by_hook = {}
    for r in res.receipts:
        by_hook[r["hook"]] = by_hook.get(r["hook"], 0) + 1
    assert by_hook == dict(runs), f"receipts per hook {by_hook}, hook runs counted {dict(runs)}"
    errors = [(r["hook"], r["error"]) for r in res.receipts if r["outcome"] == "error"]
    assert not errors, errors


def _deliveries_reached_the_model(res):
    res.require_run()
    known = dict(res.sc.memories, **res.sc.crystals)
    everything = "\n".join(r.raw for r in res.main)
    for r in res.receipts:
        for key in r["delivered_ids"]:
            if key in known:
                assert known[key] in everything, f"{r['hook']} receipt counts {key} delivered; the model never saw it"


@agents()
def test_one_receipt_per_hook_run_and_none_is_an_error(related):
    _one_receipt_per_hook_run(related)


@agents()
def test_with_the_daemon_up_it_serves_every_hook_and_the_model_reads_the_same(served):
    """What the in-process tests above check, through the served path: the pre-step memory in
    the first request, the always-loaded set once, the crystal before its command (held once,
    the retry runs), the tool-result and error crystals, one receipt per hook run, each written
    by the daemon after the hook process confirmed its output, and no delivery the model missed."""
    served.require_run()
    assert M_RELATED in served.first.raw and served.first.raw.count(M_ALWAYS) == 1, served.where()
    told = [i for i, r in enumerate(served.main) if CRYSTAL_MARK in r.raw]
    assert told and not any(RESET_OUTPUT in o for o in served.tool_outputs()[told[0]]), served.where()
    assert any(RESET_OUTPUT in o for per in served.tool_outputs() for o in per), served.where()
    assert any(POST_MARK in r.raw for r in served.main) and any(FAIL_MARK in r.raw for r in served.main), \
        served.where()
    # Served, or (a daemon not taking it within 50 ms: the client's start-up competes for the
    # two cores here) run in-process saying so; never an error, never refused.
    how = [(r["hook"], (r.get("detail") or {}).get("served")) for r in served.receipts]
    assert all(s in ("daemon", "timeout") for _, s in how), how
    assert sum(s == "daemon" for _, s in how) * 2 > len(how), how
    assert all(r["agent"] == AGENT for r in served.receipts), {r["agent"] for r in served.receipts}
    _one_receipt_per_hook_run(served)
    _deliveries_reached_the_model(served)


@agents()
def test_one_receipt_per_hook_run_and_none_is_an_error_with_tools(tools):
    _one_receipt_per_hook_run(tools)


@agents()
def test_every_delivery_a_receipt_counts_reached_the_model(related):
    _deliveries_reached_the_model(related)


@agents()
def test_every_delivery_a_receipt_counts_reached_the_model_with_tools(tools):
    _deliveries_reached_the_model(tools)

"""recalld inside the real Claude Code, Codex CLI and Gemini CLI (issue 13).

Each scenario installs recalld into a scratch user the README's way, runs one client headless
against a scripted stand-in for its model API, and checks what reached the model's requests
(the stand-in's log) and what recalld recorded (receipts). The same checks run for every
client; a known break is xfail(strict=True) with its reason, so the test flips when it is fixed.
A client that cannot run here skips with the reason.
"""

import json

import pytest
from e2e_clients import CLIENTS
from e2e_harness import recalld_executable, scenario
from e2e_standins import Text

AGENTS = ("claude", "codex", "gemini")

M_RELATED = "We pin sqlite-utils to 3.x because 4.0 changed upsert semantics."
M_ALWAYS = "House style: indent with four spaces, never tabs."
MEMORIES = ((M_RELATED, "--kind", "decision"), (M_ALWAYS, "--kind", "preference", "--always"))
P_RELATED = "Should we move to sqlite-utils 4 for the upsert change?"
P_UNRELATED = "Print today's date in ISO format."
FINAL = "All set: nothing else to change."
CRYSTAL_MARK = "CRYSTAL-7F3A"
CRYSTAL = f"⛔ {CRYSTAL_MARK}: git reset --hard throws away uncommitted work; stash it first."
RESET = "git reset --hard"
RESET_OUTPUT = "HEAD is now at"
POST_MARK = "CRYSTAL-POST-9D1E"
POST_CRYSTAL = f"❗ {POST_MARK}: after a hard reset, check `git stash list` for work to restore."

CRYSTAL_LATE = "crystals arrive after the act (issue 13.1)"
CRYSTAL_NEVER = ("crystals arrive after the act (issue 13.1): Gemini CLI ignores BeforeTool "
                 "additionalContext, so the crystal never reaches the model")
RECEIPT_CLAIMS_DROPPED = ("receipts count a delivery the client drops (issue 13.1): Gemini CLI ignores "
                          "BeforeTool additionalContext, the receipt says injected")
CODEX_TRUST = ("Codex hook trust (issue 13.2): Codex skips untrusted hooks silently, and "
               "`recalld install codex` leaves them untrusted")
CODEX_MCP_ENV = ("Codex MCP env (issue 13.3): RECALLD_HOME does not reach `recalld mcp`, which "
                 "answers from an empty default store")
GEMINI_AFTER_AGENT = ("Gemini AfterAgent prompt_response (issue 13.6): the stop text is read from "
                      "last_assistant_message only, so it is always empty")
GEMINI_DOUBLE = ("Gemini double injection (issue 13.6): in -p runs the session-start block is prefixed "
                 "to the prompt, searched, and the always-loaded memory injected again")


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
    retried = []

    def after_reset(body, stand_in):
        ran = any(RESET_OUTPUT in o for o in stand_in.tool_outputs(body))
        if CRYSTAL_MARK in json.dumps(body, ensure_ascii=False) and not ran and not retried:
            retried.append(1)
            return client.shell(RESET)
        return Text(FINAL)

    return client.mcp_search("sqlite-utils upsert") + [client.shell(RESET), after_reset, after_reset]


@pytest.fixture(scope="module")
def tools(client, tmp_path_factory):
    """An unrelated prompt; the model searches recalld over MCP, then runs a command a crystal
    is bound to, with uncommitted work in the tree."""
    def setup(sc):
        sc.crystal("reset-hard", "bash", RESET, CRYSTAL, CRYSTAL_MARK)
        sc.crystal("after-reset", "tool-result", RESET_OUTPUT, POST_CRYSTAL, POST_MARK)
        with open(f"{sc.project}/README.md", "a", encoding="utf-8") as f:
            f.write("uncommitted work\n")

    return scenario(client, str(tmp_path_factory.mktemp(f"{client.name}-tools")), P_UNRELATED, _tools_script,
                    setup=setup, memories=MEMORIES)


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


@agents(gemini=GEMINI_DOUBLE)
def test_always_loaded_set_arrives_once(related):
    related.require_run()
    assert related.first.raw.count(M_ALWAYS) == 1, related.where()


@agents(codex=CODEX_MCP_ENV)
def test_mcp_search_result_reaches_the_model(tools):
    tools.require_run()
    outputs = [o for per_request in tools.tool_outputs() for o in per_request]
    assert outputs, "the scripted MCP call was never answered " + tools.where()
    assert any(M_RELATED in o for o in outputs), f"tool results: {outputs} " + tools.where()


@agents(gemini=CRYSTAL_NEVER)
def test_crystal_reaches_the_model(tools):
    """At all, whenever: what the next test asks on top, per client."""
    tools.require_run()
    assert any(CRYSTAL_MARK in r.raw for r in tools.main), "the crystal never reached the model " + tools.where()


@agents(claude=CRYSTAL_LATE, codex=CRYSTAL_LATE, gemini=CRYSTAL_NEVER)
def test_crystal_reaches_the_model_before_the_command_runs(tools):
    tools.require_run()
    told = [i for i, r in enumerate(tools.main) if CRYSTAL_MARK in r.raw]
    assert told, "the crystal never reached the model " + tools.where()
    before = tools.tool_outputs()[told[0]]
    assert not any(RESET_OUTPUT in o for o in before), (
        f"the first request with the crystal already holds the command's output: {before}")


@agents()
def test_command_still_runs_after_the_crystal(tools):
    tools.require_run()
    assert any(RESET_OUTPUT in o for per in tools.tool_outputs() for o in per), tools.where()


@agents()
def test_post_tool_context_reaches_the_model(tools):
    """A crystal bound to the tool's result (post-tool) arrives with or after that result."""
    tools.require_run()
    assert any(POST_MARK in r.raw for r in tools.main), tools.where()


@agents(gemini=GEMINI_AFTER_AGENT)
def test_stop_hook_receives_the_last_assistant_message(related):
    related.require_run()
    texts = [b["text"] for b in related.sc.boundaries()]
    assert texts, "no turn boundary was recorded " + related.where()
    assert any(FINAL in t for t in texts), texts


@agents(codex=CODEX_TRUST)
def test_hooks_run_as_installed(as_installed):
    as_installed.require_run()
    hooks = {r["hook"] for r in as_installed.receipts}
    assert {"session-start", "prompt-submit", "stop"} <= hooks, hooks
    assert M_RELATED in as_installed.first.raw, as_installed.where()


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
def test_one_receipt_per_hook_run_and_none_is_an_error_with_tools(tools):
    _one_receipt_per_hook_run(tools)


@agents()
def test_every_delivery_a_receipt_counts_reached_the_model(related):
    _deliveries_reached_the_model(related)


@agents(gemini=RECEIPT_CLAIMS_DROPPED)
def test_every_delivery_a_receipt_counts_reached_the_model_with_tools(tools):
    _deliveries_reached_the_model(tools)

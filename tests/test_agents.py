"""The agent adapters: each one complete, and the tables that the hook, the installer and the
daemon derive from them agreeing with each other (recalld/agents/)."""

import json
import re
import shlex

import pytest

from recalld import agents
from recalld.agents import base, claude_code, codex, gemini, git
from recalld.daemon import tailer, transcripts
from recalld.hook import payloads
from recalld.install import entries, plan as install
from tests.helpers import REPO

INSTALLABLE = [a for a in agents.ADAPTERS if a.install_name]
HOOKED = [a for a in agents.ADAPTERS if a.events]
IDS = [a.name for a in agents.ADAPTERS]

# One documented payload per agent (field names from ../shared/reference/agent-hooks.md): what
# detection must recognise without --agent.
DOCUMENTED = {
    "claude": ("prompt-submit", {"session_id": "s1", "transcript_path": "/t.jsonl", "cwd": "/w",
                                 "permission_mode": "default", "hook_event_name": "UserPromptSubmit",
                                 "prompt": "why is alembic pinned?"}),
    "codex": ("prompt-submit", {"session_id": "s2", "transcript_path": None, "cwd": "/w",
                                "hook_event_name": "UserPromptSubmit", "model": "gpt-5", "turn_id": "t-1",
                                "prompt": "why is alembic pinned?"}),
    "gemini": ("prompt-submit", {"session_id": "s3", "transcript_path": "/t.json", "cwd": "/w",
                                 "hook_event_name": "BeforeAgent", "timestamp": "2026-01-01T00:00:00Z",
                                 "prompt": "why is alembic pinned?"}),
    "git": ("commit", {"staged_files": ["app/models.py"]}),
}


def test_the_registry_names_every_agent_once():
    assert agents.NAMES == ("claude", "codex", "gemini", "git")
    assert agents.INSTALL_NAMES == ("claude-code", "codex", "gemini")
    assert [a for a in agents.ADAPTERS if a.fallback] == [agents.FALLBACK] == [claude_code.ADAPTER]
    for a in agents.ADAPTERS:  # no adapter's name shadows another's
        assert agents.by_name(a.name) is a and isinstance(a, base.Adapter)
        for n in (a.name, a.install_name, *a.aliases):
            if n:
                assert agents.lookup(n) is a
    assert agents.lookup("claude") is agents.lookup("claude_code") is claude_code.ADAPTER
    assert agents.by_name("claude-code") is None and agents.lookup("cursor") is None


@pytest.mark.parametrize("a", agents.ADAPTERS, ids=IDS)
def test_each_adapter_is_complete(a, tmp_path):
    assert a.name and re.fullmatch(r"[a-z]+", a.name)
    assert a.events or a.own_events, "an adapter handles at least one of our events"
    if a.install_name:
        assert a.events and a.mcp_format in ("json", "toml")
        for scope, root in (("user", None), ("project", str(tmp_path))):
            hooks_file, mcp_file = a.settings_files(scope, root)
            assert isinstance(hooks_file, str) and isinstance(mcp_file, str)
            if root:
                assert hooks_file.startswith(root) and mcp_file.startswith(root)
        if "pre-tool" in {ours for _, ours in a.events}:
            assert a.pre_tool_matcher
        h = a.hook_handler("recalld hook stop", "stop", 5)
        assert h["type"] == "command" and h["command"] == "recalld hook stop"
        assert a.mcp_entry(["recalld"])["args"] == ["mcp"]
    if a.parse_record is not None:
        assert a.transcript_roots(), "a parser without a root is never fed"
    else:
        assert not a.transcript_roots() and not a.fallback


@pytest.mark.parametrize("a", HOOKED, ids=[a.name for a in HOOKED])
def test_native_events_map_back_and_are_documented(a):
    owned = {ev for other in agents.ADAPTERS if other is not a for ev in other.own_events}
    assert {ours for _, ours in a.events} == set(agents.EVENTS) - owned
    for native, ours in a.events:
        assert native in a.known_events, f"{native} is not among {a.name}'s documented events"
        assert ours in agents.EVENTS
        assert a.event_of(native) == ours
        assert a.event_of(a.native_event(ours)) == ours
    assert a.not_installed <= {n for n, _ in a.events}


@pytest.mark.parametrize("a", INSTALLABLE, ids=[a.install_name for a in INSTALLABLE])
def test_install_writes_one_handler_per_native_event_that_runs_recalld(a):
    spec = a.install_hooks()
    natives = [n for n, *_ in spec]
    assert len(natives) == len(set(natives))
    assert {ours for *_, ours, _ in spec} == {ours for _, ours in a.events}, "every event is wired"
    for native, matcher, ours, timeout in spec:
        assert a.event_of(native) == ours
        assert matcher == (a.pre_tool_matcher if ours == "pre-tool" else None)
        assert timeout == base.HOOK_TIMEOUT_S.get(ours, base.DEFAULT_HOOK_TIMEOUT_S)
    for native, _, handler in entries.hook_spec(a, ["/opt/bin/recalld"]):
        assert entries.is_recalld_handler(handler)
        args = shlex.split(handler["command"])
        assert args[1:3] == ["hook", a.event_of(native)]
        # the installed command names the agent unless detection alone finds it
        assert args[3:] == (["--agent", a.hook_flag] if a.hook_flag else [])
    assert a.hook_flag in (None, a.name)
    if a.hook_flag is None:
        assert a is agents.FALLBACK


@pytest.mark.parametrize("a", INSTALLABLE, ids=[a.install_name for a in INSTALLABLE])
def test_the_pre_tool_matcher_names_only_tools_with_an_act(a):
    mine = a.bash_tools | a.write_tools | a.delegate_tools
    for tool in a.pre_tool_matcher.split("|"):
        assert tool.lower() in mine
        assert payloads.tool_act(tool, {"command": "ls", "file_path": "x"})[0] in ("bash", "write", "delegate")
    assert not (a.bash_tools & a.write_tools or a.bash_tools & a.delegate_tools or a.write_tools & a.delegate_tools)


def test_tool_names_keep_their_acts():
    """The act classifier's names, as they were before the adapters held them."""
    assert agents.BASH_TOOLS == {"bash", "shell", "exec_command", "local_shell", "run_shell_command",
                                 "container.exec", "shell_command", "unified_exec"}
    assert agents.WRITE_TOOLS == {"write", "edit", "multiedit", "notebookedit", "write_file", "replace",
                                  "apply_patch", "edit_file", "create_file"}
    assert agents.DELEGATE_TOOLS == {"task", "agent", "delegate", "spawn_agent"}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_payloads_are_detected_and_answered_with_their_native_name(name):
    event, p = DOCUMENTED[name]
    hi = payloads.normalize(event, p)
    assert hi.agent_kind == name
    # exactly one adapter claims it, or none: the fallback's, or git's (known by its event)
    claims = [a.name for a in agents.ADAPTERS if a.detect(p) != base.NOT_MINE]
    assert claims == ([name] if name in ("codex", "gemini") else [])
    # --agent wins over detection, and the answer's hookEventName is the agent's own
    for a in HOOKED:
        for ours in {o for _, o in a.events}:
            q = {k: v for k, v in p.items() if k != "hook_event_name"}
            assert payloads.normalize(ours, q, a.name).native_event == a.native_event(ours)


def test_an_event_name_outweighs_a_field_whatever_the_order():
    p = {"hook_event_name": "AfterTool", "turn_id": "t", "tool_name": "run_shell_command"}
    assert agents.detect(p) is gemini.ADAPTER
    assert agents.detect({"turn_id": "t"}) is codex.ADAPTER
    assert agents.detect({}) is agents.FALLBACK
    assert payloads.normalize("commit", {}).agent_kind == "git"
    assert payloads.normalize("commit", {}, "claude").agent_kind == "claude"


def test_gemini_is_told_apart_only_by_names_no_other_agent_uses():
    others = {n for a in agents.ADAPTERS if a is not gemini.ADAPTER for n in a.known_events}
    assert gemini.DETECT_EVENTS <= gemini.ADAPTER.known_events
    assert not gemini.DETECT_EVENTS & others
    # and the rest of its names could be anyone's
    assert gemini.ADAPTER.known_events - gemini.DETECT_EVENTS <= others


def test_own_events_belong_to_one_adapter():
    for a in agents.ADAPTERS:
        for ev in a.own_events:
            assert ev in agents.EVENTS and agents.owner_of_event(ev) is a
            assert all(ev not in {o for _, o in b.events} for b in agents.ADAPTERS)
    assert git.ADAPTER.own_events == ("commit",)


def test_install_targets_come_from_the_adapters(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    got = {a: install.target(a) for a in agents.INSTALL_NAMES}
    assert (got["claude-code"].hooks_file, got["claude-code"].mcp_file) == (tmp_path / "cc" / "settings.json",
                                                                            tmp_path / "cc" / ".claude.json")
    assert (got["codex"].hooks_file, got["codex"].mcp_file, got["codex"].mcp_format) == (
        tmp_path / "cx" / "hooks.json", tmp_path / "cx" / "config.toml", "toml")
    assert got["gemini"].hooks_file == got["gemini"].mcp_file == tmp_path / "home" / ".gemini" / "settings.json"
    assert install.target("claude").agent == install.target("claude_code").agent == "claude-code"
    for bad in ("git", "cursor"):
        with pytest.raises(entries.InstallError, match="unknown agent"):
            install.target(bad)


def test_transcript_roots_and_formats_come_from_the_adapters(monkeypatch, tmp_path):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "gh"))
    want = [(str(tmp_path / "cc" / "projects"), "claude"), (str(tmp_path / "cx" / "sessions"), "codex"),
            (str(tmp_path / "gh" / ".gemini" / "tmp"), "gemini")]
    assert [(r, a.name) for a in agents.TRANSCRIPT_ADAPTERS for r in a.transcript_roots()] == want
    assert [(str(p), k) for p, k in tailer.default_roots()] == want
    assert transcripts.guess_format("/x/rollout-2026-01-01T00-00-00-abc.jsonl") == "codex"
    assert transcripts.guess_format("/x/s.jsonl", {"type": "session_meta", "payload": {}}) == "codex"
    assert transcripts.guess_format("/home/u/.codex/archived/s.jsonl") == "codex"
    assert transcripts.guess_format("/x/s.jsonl", {"type": "user", "message": {}}) == "claude"
    assert transcripts.guess_format("/x/session-1.jsonl", {"sessionId": "s", "projectHash": "h"}) == "gemini"
    assert transcripts.guess_format("/home/u/.gemini/tmp/proj/chats/session-1.jsonl") == "gemini"


def test_each_parser_reads_its_own_records(tmp_path):
    claude_line = {"type": "user", "sessionId": "s", "cwd": str(tmp_path), "uuid": "u1",
                   "message": {"role": "user", "content": "why is alembic pinned?"}}
    codex_line = {"timestamp": "t", "type": "event_msg", "payload": {"type": "user_message",
                                                                       "message": "why is alembic pinned?"}}
    for name, rec in (("claude", claude_line), ("codex", codex_line)):
        st = base.ParseState(source=str(tmp_path / "s.jsonl"))
        evs = transcripts.parse_record(rec, name, st)
        assert [(e.role, e.kind, e.text) for e in evs] == [("user", "prompt", "why is alembic pinned?")]
        assert evs[0].as_dict()["kind"] == "prompt"
    line = json.dumps(codex_line).encode()
    st = transcripts.new_state(tmp_path / "rollout-2026-01-01T00-00-00-0000-1111-2222-3333-4444.jsonl")
    assert [e.kind for e in transcripts.parse_line(line, st)] == ["prompt"] and st.fmt == "codex"


def test_hooks_readme_shows_each_agents_events_and_matcher():
    """hooks/README.md's table is written by hand: it must say what the adapters say."""
    text = (REPO / "hooks" / "README.md").read_text()
    for a in INSTALLABLE:
        assert f"`{a.pre_tool_matcher.replace('|', chr(92) + '|')}`" in text, a.name
        for native, _ in a.events:
            if native not in a.not_installed:
                assert f"`{native}`" in text


@pytest.mark.parametrize("a", HOOKED, ids=[a.name for a in HOOKED])
def test_each_agent_says_which_channels_reach_its_model(a):
    """Observed in the real clients (docs/install.md): the hook claims a delivery only where
    the context arrives, and holds an act only where the client honours the hold."""
    ours = {o for _, o in a.events} | set(a.own_events)
    assert a.context_events <= ours and a.gate_events <= ours
    for ev in a.gate_events:
        out = a.gate_output(a.native_event(ev), "REASON")
        assert "REASON" in out and out.endswith("\n")
    block = a.context_output(a.native_event("prompt-submit"), "BLOCK")
    assert "BLOCK" in block
    want = {"claude": ({"session-start", "prompt-submit", "pre-tool", "post-tool", "stop"}, {"pre-tool"}),
            "codex": ({"session-start", "prompt-submit", "pre-tool", "post-tool"}, {"pre-tool"}),
            "gemini": ({"session-start", "prompt-submit", "post-tool"}, {"pre-tool"}),
            "git": ({"commit"}, {"commit"})}[a.name]
    assert (set(a.context_events), set(a.gate_events)) == want


def test_gate_outputs_are_each_agents_deny():
    claude = json.loads(claude_code.ADAPTER.gate_output("PreToolUse", "R"))
    assert claude == {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                             "permissionDecisionReason": "R"}}
    assert json.loads(codex.ADAPTER.gate_output("PreToolUse", "R")) == claude
    assert json.loads(gemini.ADAPTER.gate_output("BeforeTool", "R")) == {"decision": "deny", "reason": "R"}
    assert git.ADAPTER.gate_output(None, "R") == git.GATE_MARK + "\nR\n"


RECORDED = REPO / "tests" / "e2e" / "recorded" / "gemini-cli-0.61.0-session.jsonl"


def test_gemini_parser_reads_a_chat_the_real_client_wrote(tmp_path):
    """A chat Gemini CLI 0.61.0 wrote in an e2e run (paths renamed): session metadata, the
    CLI's own $set block, a prompt that carries the session-start hook context, a model turn
    written twice (first without, then with its tool call and result), the tool's
    functionResponse, the answer."""
    d = tmp_path / ".gemini" / "tmp" / "proj"
    (d / "chats").mkdir(parents=True)
    (d / ".project_root").write_text(str(tmp_path / "proj"))
    (tmp_path / "proj").mkdir()
    path = d / "chats" / "session-2026-12-01T08-57-69651bb3.jsonl"
    path.write_bytes(RECORDED.read_bytes())
    evs = list(transcripts.parse_file(path))
    got = [(e.role, e.kind, e.tool, e.text[:36]) for e in evs]
    assert got == [("user", "prompt", None, "Should we move to sqlite-utils 4 for"),
                   ("assistant", "tool_call", "run_shell_command", "echo hi"),
                   ("tool", "tool_result", "run_shell_command", "<untrusted_context>\nOutput: hi\nProce"),
                   ("assistant", "text", None, "All set: nothing else to change.")]
    assert evs[0].text == "Should we move to sqlite-utils 4 for the upsert change?"  # no hook context
    assert {e.session for e in evs} == {"69651bb3-a709-4524-9932-05a7acee2929"}
    assert {e.cwd for e in evs} == {str(tmp_path / "proj")}
    # A second prompt closes the first turn (no record marks a turn's end).
    st = transcripts.new_state(path)
    for line in RECORDED.read_bytes().splitlines():
        transcripts.parse_line(line, st)
    more = gemini.parse_record({"id": "u2", "timestamp": "t", "type": "user", "content": [{"text": "next"}]}, st)
    assert [e.kind for e in more] == ["turn_end", "prompt"]


def test_gemini_folder_trust_follows_its_rules(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    monkeypatch.delenv("GEMINI_CLI_TRUST_WORKSPACE", raising=False)
    monkeypatch.delenv("GEMINI_CLI_TRUSTED_FOLDERS_PATH", raising=False)
    proj = tmp_path / "work" / "proj"
    proj.mkdir(parents=True)
    assert gemini.folder_trust(str(proj))[0] is None
    (tmp_path / ".gemini").mkdir()
    rules = tmp_path / ".gemini" / "trustedFolders.json"
    rules.write_text(json.dumps({str(proj / "x"): "TRUST_PARENT"}))
    assert gemini.folder_trust(str(proj))[0] is True
    rules.write_text(json.dumps({str(tmp_path / "work"): "TRUST_FOLDER", str(proj): "DO_NOT_TRUST"}))
    assert gemini.folder_trust(str(proj))[0] is False and gemini.folder_trust(str(tmp_path / "work"))[0] is True
    assert gemini.folder_trust(str(proj), {"security": {"folderTrust": {"enabled": False}}})[0] is True
    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    assert gemini.folder_trust(str(proj))[0] is True

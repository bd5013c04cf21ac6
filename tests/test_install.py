"""Installing recalld into agents: merge, idempotence, exact removal, backups, bad files, the
installed commands actually running as the agent would run them, doctor and the hooks/ files.
Codex's config.toml and hook trust: test_install_codex.py; the git hook: test_install_git.py."""

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from recalld.agents import claude_code, gemini
from recalld.install import githook, plan as install, snippets
from recalld.core import receipts
from tests.helpers import REPO, run_recalld

PREFIX = [sys.executable, "-m", "recalld"]

# A realistic ~/.claude/settings.json: the user's own hooks on the very events recalld uses.
CLAUDE_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git status)", "Bash(npm test:*)"], "deny": ["Read(./.env)"]},
    "env": {"DISABLE_TELEMETRY": "1"},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/.claude/guard.sh", "timeout": 30}]},
        ],
        "UserPromptSubmit": [
            {"hooks": [{"type": "command", "command": "python3 ~/.claude/prompt_log.py"}]},
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send 'Claude is done'"}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "say hi"}]}],
    },
    "statusLine": {"type": "command", "command": "~/.claude/status.sh"},
}
CLAUDE_JSON = {
    "numStartups": 41,
    "installMethod": "native",
    "projects": {"/home/u/src/app": {"allowedTools": [], "mcpServers": {}}},
    "mcpServers": {"github": {"type": "stdio", "command": "github-mcp-server", "args": ["stdio"],
                              "env": {"GITHUB_TOKEN": "x"}}},
}


@pytest.fixture
def user(home, tmp_path, monkeypatch):
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(var, raising=False)
    return Path(os.environ["HOME"])


def write_json(path: Path, data, compact=False) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data) if compact else json.dumps(data, indent=4)
    path.write_text(text, encoding="utf-8")
    return text


def load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def recalld_handlers(settings: dict) -> dict:
    out = {}
    for event, groups in settings.get("hooks", {}).items():
        for g in groups:
            for h in g["hooks"]:
                if install.is_recalld_handler(h):
                    out.setdefault(event, []).append((g.get("matcher"), h))
    return out


# --- Claude Code -------------------------------------------------------------------------------


def test_claude_user_install_is_idempotent_and_uninstall_restores(user):
    settings = user / ".claude" / "settings.json"
    cj = user / ".claude.json"
    s_text = write_json(settings, CLAUDE_SETTINGS)
    c_text = write_json(cj, CLAUDE_JSON, compact=True)
    os.chmod(cj, 0o600)

    plan, recs = install.install("claude-code", "user", command=PREFIX)
    assert plan.changed and {r["file"] for r in recs if r["changed"]} == {str(settings), str(cj)}
    after = load(settings)
    ours = recalld_handlers(after)
    assert sorted(ours) == sorted(["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse",
                                   "PostToolUseFailure", "Stop", "SubagentStop"])
    for event, [(matcher, h)] in ours.items():
        assert isinstance(h["timeout"], int) and 1 <= h["timeout"] <= 30
        assert h["type"] == "command"
        assert shlex.split(h["command"])[:3] == PREFIX
    assert ours["PreToolUse"][0][0] == "Bash|Write|Edit|MultiEdit|NotebookEdit|Task|Agent"
    assert shlex.split(ours["UserPromptSubmit"][0][1]["command"])[3:] == ["hook", "prompt-submit"]
    # every setting and hook the user had is still there, in order, untouched
    for key in ("model", "permissions", "env", "statusLine"):
        assert after[key] == CLAUDE_SETTINGS[key]
    for event, groups in CLAUDE_SETTINGS["hooks"].items():
        assert [g for g in after["hooks"][event] if not any(install.is_recalld_handler(h) for h in g["hooks"])] == groups
    mcp = load(cj)
    assert mcp["mcpServers"]["github"] == CLAUDE_JSON["mcpServers"]["github"]
    assert mcp["mcpServers"]["recalld"] == {"type": "stdio", "command": PREFIX[0], "args": PREFIX[1:] + ["mcp"]}
    assert mcp["projects"] == CLAUDE_JSON["projects"]
    assert stat.S_IMODE(cj.stat().st_mode) == 0o600  # mode kept

    # backups hold the exact previous bytes
    backups = [Path(r["backup"]) for r in recs if r["backup"]]
    assert sorted(b.read_text() for b in backups) == sorted([s_text, c_text])

    first = (settings.read_bytes(), cj.read_bytes())
    plan2, recs2 = install.install("claude-code", "user", command=PREFIX)
    assert not plan2.changed and all(r["backup"] is None for r in recs2)
    assert (settings.read_bytes(), cj.read_bytes()) == first

    plan3, _ = install.uninstall("claude-code", "user")
    assert plan3.changed
    assert load(settings) == CLAUDE_SETTINGS and load(cj) == CLAUDE_JSON
    assert settings.read_text() == s_text and cj.read_text() == c_text  # even the formatting
    log = install.read_log()
    assert [r["action"] for r in log] == ["install"] * 4 + ["uninstall"] * 2


def test_uninstall_without_backup_keeps_everything_else(user):
    """Uninstall after someone else reformatted the file: parsed content is still restored."""
    settings = user / ".claude" / "settings.json"
    write_json(settings, CLAUDE_SETTINGS)
    install.install("claude-code", "user", command=PREFIX, mcp=False)
    data = load(settings)
    data["model"] = "sonnet"  # the user changes something meanwhile
    write_json(settings, data, compact=True)
    install.uninstall("claude-code", "user")
    expected = dict(CLAUDE_SETTINGS, model="sonnet")
    assert load(settings) == expected


def test_claude_fresh_machine_creates_and_removes_files(user):
    install.install("claude-code", "user", command=PREFIX)
    settings, cj = user / ".claude" / "settings.json", user / ".claude.json"
    assert settings.exists() and cj.exists()
    install.uninstall("claude-code", "user")
    assert not settings.exists() and not cj.exists()


def test_claude_config_dir_is_honoured(user, tmp_path, monkeypatch):
    cfg = tmp_path / "cfgdir"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(cfg))
    install.install("claude-code", "user", command=PREFIX)
    assert recalld_handlers(load(cfg / "settings.json"))
    assert "recalld" in load(cfg / ".claude.json")["mcpServers"]
    assert not (user / ".claude").exists() and not (user / ".claude.json").exists()


def test_claude_project_scope_from_a_subdirectory(user, project):
    sub = project / "src" / "pkg"
    sub.mkdir(parents=True)
    write_json(project / ".mcp.json", {"mcpServers": {"db": {"command": "db-mcp"}}})
    res = run_recalld(["install", "claude-code", "--no-model-probe", "--project", "--cwd", str(sub), "--command",
                       shlex.join(PREFIX), "--json"])
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert {f["path"] for f in out["files"]} == {str(project / ".claude" / "settings.json"),
                                                  str(project / ".mcp.json")}
    assert set(load(project / ".mcp.json")["mcpServers"]) == {"db", "recalld"}
    assert recalld_handlers(load(project / ".claude" / "settings.json"))
    res = run_recalld(["uninstall", "claude-code", "--project", "--cwd", str(sub)])
    assert res.returncode == 0, res.stderr
    assert load(project / ".mcp.json") == {"mcpServers": {"db": {"command": "db-mcp"}}}
    assert not (project / ".claude" / "settings.json").exists()


def test_reinstall_with_a_new_path_replaces_in_place(user):
    settings = user / ".claude" / "settings.json"
    write_json(settings, CLAUDE_SETTINGS)
    install.install("claude-code", "user", command=["/opt/old/bin/recalld"])
    install.install("claude-code", "user", command=PREFIX)
    ours = recalld_handlers(load(settings))
    assert all(len(v) == 1 for v in ours.values())  # no duplicates
    assert all(shlex.split(h["command"])[:3] == PREFIX for v in ours.values() for _, h in v)
    pre = load(settings)["hooks"]["PreToolUse"]
    assert pre[0] == CLAUDE_SETTINGS["hooks"]["PreToolUse"][0]  # the user's entry keeps its place
    assert load(user / ".claude.json")["mcpServers"]["recalld"]["command"] == PREFIX[0]
    install.uninstall("claude-code", "user")
    assert settings.read_text() == json.dumps(CLAUDE_SETTINGS, indent=4)  # the first backup's bytes
    assert not (user / ".claude.json").exists()


def test_a_recalld_handler_inside_a_users_group_is_taken_out_cleanly(user):
    settings = user / ".claude" / "settings.json"
    mixed = {"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": "python3 ~/.claude/prompt_log.py"},
        {"type": "command", "command": "recalld hook prompt-submit"}]}]}}
    write_json(settings, mixed)
    install.install("claude-code", "user", command=PREFIX, mcp=False)
    groups = load(settings)["hooks"]["UserPromptSubmit"]
    assert groups[0] == {"hooks": [{"type": "command", "command": "python3 ~/.claude/prompt_log.py"}]}
    assert len(recalld_handlers(load(settings))["UserPromptSubmit"]) == 1
    before = settings.read_bytes()
    assert not install.install("claude-code", "user", command=PREFIX, mcp=False)[0].changed
    assert settings.read_bytes() == before


@pytest.mark.parametrize("bad", ['{"hooks": {"Stop": [', '{"model": "opus",}\n', "[1, 2]",
                                 '{"hooks": []}', '{"hooks": {"Stop": {"hooks": []}}}',
                                 '// comment\n{"model": "opus"}'])
def test_malformed_settings_change_nothing(user, bad):
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(bad)
    cj = user / ".claude.json"
    write_json(cj, CLAUDE_JSON)
    cj_before = cj.read_bytes()
    with pytest.raises(install.InstallError) as e:
        install.install("claude-code", "user", command=PREFIX)
    assert str(settings) in str(e.value) and "nothing was changed" in str(e.value)
    assert settings.read_text() == bad and cj.read_bytes() == cj_before
    assert not (install.install_dir() / "backups").exists()

    res = run_recalld(["install", "claude-code", "--no-model-probe"])
    assert res.returncode != 0
    err = res.stderr.decode().strip()
    assert err.startswith("recalld: ") and len(err.splitlines()) == 1
    assert settings.read_text() == bad and cj.read_bytes() == cj_before


def test_a_foreign_mcp_server_named_recalld_is_not_overwritten(user):
    cj = user / ".claude.json"
    write_json(cj, {"mcpServers": {"recalld": {"type": "http", "url": "http://localhost:9999"}}})
    before = cj.read_bytes()
    with pytest.raises(install.InstallError, match="--force"):
        install.install("claude-code", "user", command=PREFIX)
    assert cj.read_bytes() == before
    assert not (user / ".claude" / "settings.json").exists()  # all or nothing
    install.install("claude-code", "user", command=PREFIX, force=True)
    assert load(cj)["mcpServers"]["recalld"]["args"][-1] == "mcp"


def test_symlinked_settings_stay_a_symlink(user, tmp_path):
    dot = tmp_path / "dotfiles" / "claude-settings.json"
    write_json(dot, CLAUDE_SETTINGS)
    link = user / ".claude" / "settings.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(dot)
    install.install("claude-code", "user", command=PREFIX, mcp=False)
    assert link.is_symlink() and recalld_handlers(load(dot))
    install.uninstall("claude-code", "user")
    assert link.is_symlink() and load(dot) == CLAUDE_SETTINGS


def test_installed_claude_commands_run_as_the_agent_runs_them(user, project):
    """Run the very command strings written into settings.json through a shell, with documented
    payloads: exit 0, valid output, one receipt each."""
    install.install("claude-code", "user", command=PREFIX, mcp=False)
    settings = load(user / ".claude" / "settings.json")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    payloads = {
        "SessionStart": {"session_id": "s-inst", "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                         "permission_mode": "default", "hook_event_name": "SessionStart", "source": "startup"},
        "UserPromptSubmit": {"session_id": "s-inst", "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                             "permission_mode": "default", "hook_event_name": "UserPromptSubmit",
                             "prompt": "why does the alembic downgrade fail?"},
        "PreToolUse": {"session_id": "s-inst", "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                       "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": "git reset --hard"}, "tool_use_id": "toolu_1"},
    }
    for event, payload in payloads.items():
        [(_, h)] = recalld_handlers(settings)[event]
        res = subprocess.run(h["command"], shell=True, input=json.dumps(payload).encode(), env=env,
                             capture_output=True, timeout=60)
        assert res.returncode == 0, res.stderr
        if res.stdout.strip():
            assert json.loads(res.stdout)["hookSpecificOutput"]["hookEventName"] == event
    from recalld.core import db

    recs = receipts.read(db.connect(readonly=True), session="s-inst")
    assert sorted(r["hook"] for r in recs) == ["pre-tool", "prompt-submit", "session-start"]


# --- Gemini --------------------------------------------------------------------------------------


def test_gemini_timeouts_in_milliseconds_and_round_trip(user):
    settings = user / ".gemini" / "settings.json"
    original = {"theme": "GitHub", "hooksConfig": {"enabled": True},
                "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [
                    {"name": "lint", "type": "command", "command": "./lint.sh", "timeout": 30000}]}]},
                "mcpServers": {"fs": {"command": "fs-mcp", "args": []}}}
    text = write_json(settings, original)
    install.install("gemini", "user", command=PREFIX)
    data = load(settings)
    ours = recalld_handlers(data)
    assert sorted(ours) == sorted(["SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent"])
    spec = {native: t for native, _, _, t in gemini.ADAPTER.install_hooks()}
    for event, [(matcher, h)] in ours.items():
        assert h["timeout"] == spec[event] * 1000 and h["timeout"] >= 1000
        assert shlex.split(h["command"])[-2:] == ["--agent", "gemini"]
        assert h["name"].startswith("recalld-")
    assert ours["BeforeTool"][0][0] == "run_shell_command|write_file|replace"
    assert shlex.split(ours["BeforeAgent"][0][1]["command"])[3:5] == ["hook", "prompt-submit"]
    assert data["mcpServers"]["recalld"] == {"command": PREFIX[0], "args": PREFIX[1:] + ["mcp"]}
    assert data["mcpServers"]["fs"] == original["mcpServers"]["fs"]
    install.uninstall("gemini", "user")
    assert settings.read_text() == text


def test_gemini_older_layout_with_switches_inside_hooks(user):
    settings = user / ".gemini" / "settings.json"
    original = {"hooks": {"enabled": True, "disabled": ["noisy"], "AfterAgent": [
        {"hooks": [{"name": "noisy", "type": "command", "command": "./noisy.sh"}]}]}}
    write_json(settings, original)
    install.install("gemini", "user", command=PREFIX, mcp=False)
    data = load(settings)
    assert data["hooks"]["enabled"] is True and data["hooks"]["disabled"] == ["noisy"]
    assert len(data["hooks"]["AfterAgent"]) == 2
    install.uninstall("gemini", "user")
    assert load(settings) == original


# --- doctor -----------------------------------------------------------------------------------------


def test_doctor_json_reports_installs_state_and_a_timed_hook_run(user, project):
    install.install("claude-code", "user", command=PREFIX)
    githook.install_git_hook(project, PREFIX)
    res = run_recalld(["doctor", "--json", "--no-model-probe", "--cwd", str(project), "--command", shlex.join(PREFIX)])
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert {"version", "command", "agents", "git_hook", "state", "models", "daemon", "hook_run"} <= set(rep)
    by = {(a["agent"], a["scope"]): a for a in rep["agents"]}
    assert set(by) == {(a, s) for a in install.AGENTS for s in ("user", "project")}
    cc = by[("claude-code", "user")]
    assert cc["installed"] and cc["complete"] and cc["mcp"]
    assert cc["hooks_file"] == str(user / ".claude" / "settings.json")
    assert not by[("codex", "user")]["installed"]
    assert rep["git_hook"]["installed"]
    h = rep["hook_run"]
    assert h["exit_code"] == 0 and h["stdout_valid"] and h["wall_ms"] > 0 and h["error"] is None
    assert h["receipt"]["outcome"] in receipts.OUTCOMES and h["receipt"]["duration_ms"] >= 0
    st = rep["state"]
    assert st["home"] == os.environ["RECALLD_HOME"] and st["db_exists"] and st["db_bytes"] > 0
    assert st["schema_version"] == st["expected_schema_version"]
    assert st["receipts"] >= 1 and st["fallback_receipts"] == 0
    # the run it reports is a real receipt anyone can read
    res = run_recalld(["receipts", "--json", "--session", h["session"]])
    assert [r["hook"] for r in json.loads(res.stdout)] == ["prompt-submit"]
    text = run_recalld(["doctor", "--no-model-probe", "--cwd", str(project), "--command", shlex.join(PREFIX)])
    assert text.returncode == 0 and b"hook run:" in text.stdout


def test_doctor_reports_a_hook_that_cannot_run(user, project, tmp_path):
    res = run_recalld(["doctor", "--json", "--no-model-probe", "--cwd", str(project), "--command", str(tmp_path / "no" / "recalld")])
    assert res.returncode == 0
    h = json.loads(res.stdout)["hook_run"]
    assert h["error"] and h["receipt"] is None


# --- the example files in hooks/ ---------------------------------------------------------------------


def test_hooks_dir_matches_the_installer():
    """hooks/ is generated by `python3 -m recalld.install.snippets`; this fails when they drift."""
    for rel, text in snippets.snippets().items():
        path = REPO / "hooks" / rel
        assert path.read_text() == text, f"hooks/{rel} is stale: run python3 -m recalld.install.snippets"
        if rel in snippets.EXECUTABLE_SNIPPETS:
            assert os.access(path, os.X_OK)
    sample = json.loads((REPO / "hooks" / "claude-code" / "settings.json").read_text())
    assert sorted(recalld_handlers(sample)) == sorted(n for n, *_ in claude_code.ADAPTER.install_hooks())
    market = json.loads((REPO / "contrib" / "claude-code" / "marketplace.json").read_text())
    for plugin in market["plugins"]:
        root = (REPO / plugin["source"]).resolve()
        assert json.loads((root / ".claude-plugin" / "plugin.json").read_text())["name"] == plugin["name"]


def test_daemon_autostart_follows_the_flag(user):
    """install turns on settings daemon.autostart only where this build has recalld/autostart.py
    and the setting; --no-daemon leaves settings alone."""
    from recalld.core import settings
    from recalld.cli.install import autostart_available

    res = run_recalld(["install", "claude-code", "--no-daemon", "--no-model-probe", "--command", shlex.join(PREFIX), "--json"])
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["daemon_autostart"] is None
    assert not settings.load_overrides()
    res = run_recalld(["install", "claude-code", "--no-model-probe", "--command", shlex.join(PREFIX), "--json"])
    assert res.returncode == 0, res.stderr
    supported = autostart_available() and "autostart" in settings.DEFAULTS.get("daemon", {})
    assert json.loads(res.stdout)["daemon_autostart"] is (True if supported else None)
    assert (settings.load_overrides().get("daemon") or {}).get("autostart") is (True if supported else None)


def test_plugin_wrapper_runs_recalld_or_nothing(user, project, tmp_path):
    wrapper = REPO / "hooks" / "claude-code" / "plugin" / "bin" / "recalld-hook"
    payload = json.dumps({"session_id": "s-plugin", "transcript_path": None, "cwd": str(project),
                          "permission_mode": "default", "hook_event_name": "UserPromptSubmit",
                          "prompt": "how do we run the migrations?"}).encode()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "recalld").write_text(f"#!/bin/sh\nexec {shlex.join(PREFIX)} \"$@\"\n")
    (shim / "recalld").chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{shim}:/usr/bin:/bin")
    res = subprocess.run([str(wrapper), "prompt-submit"], input=payload, env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    from recalld.core import db

    assert [r["hook"] for r in receipts.read(db.connect(readonly=True), session="s-plugin")] == ["prompt-submit"]
    # without recalld on PATH: nothing, and exit 0 (not an error on every prompt)
    env["PATH"] = "/usr/bin:/bin" if not Path("/usr/bin/recalld").exists() else str(tmp_path / "empty")
    res = subprocess.run([str(wrapper), "prompt-submit"], input=payload, env=env, capture_output=True, timeout=60)
    assert res.returncode == 0 and res.stdout == b"" and res.stderr == b""


def test_doctor_knows_every_module_a_hook_loads_and_their_bytecode(home, project):
    """doctor's bytecode check must cover what hooks really import, or it reports a false 'ok'."""
    import json as _json
    import os as _os
    import subprocess as _sp
    import sys as _sys

    from recalld.install import doctor
    from recalld.install.plan import ensure_bytecode
    from tests.helpers import REPO

    code = (
        "import sys, json\n"
        "from recalld.hook import run as hook\n"
        "cwd = sys.argv[1]\n"
        "for ev, p in [('session-start', {'hook_event_name': 'SessionStart', 'source': 'startup'}),\n"
        "              ('prompt-submit', {'hook_event_name': 'UserPromptSubmit', 'prompt': 'why alembic'}),\n"
        "              ('pre-tool', {'hook_event_name': 'PreToolUse', 'tool_name': 'Bash', 'tool_input': {'command': 'ls'}}),\n"
        "              ('stop', {'hook_event_name': 'Stop', 'last_assistant_message': 'done'})]:\n"
        "    hook.run([ev], json.dumps(dict(p, session_id='s', cwd=cwd)).encode())\n"
        "print(json.dumps(sorted(m[8:] for m in sys.modules if m.startswith('recalld.'))))\n"
    )
    p = _sp.run([_sys.executable, "-c", code, str(project)], capture_output=True, text=True,
                env=dict(_os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr
    loaded = set(_json.loads(p.stdout))
    import recalld

    hot = {m for m in loaded if m.split(".")[0] in recalld.HOT_PACKAGES or m == "entry"}
    assert loaded == hot, loaded - hot
    ensure_bytecode()
    assert doctor.bytecode()["missing_or_stale"] == []

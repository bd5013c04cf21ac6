"""Codex: recalld's server in config.toml found by what it is (not by comment markers Codex drops),
the env_vars Codex needs to pass RECALLD_HOME on, and the hooks trusted with the hashes Codex
itself gives (`codex app-server` hooks/list; here a stand-in speaking the same lines, the real
Codex 0.171.0 in tests/e2e), doctor reading the trust back, uninstall leaving Codex's own tables."""

import hashlib
import json
import shlex
import sys

import pytest

from recalld.install import plan as install
from recalld.install import toml as codex_toml
from tests.helpers import run_recalld
from tests.test_install import PREFIX, load, recalld_handlers, user, write_json  # noqa: F401 (user: the fixture)

tomllib = pytest.importorskip("tomllib")

CODEX_CONFIG = '''model = "gpt-5-codex"
approval_policy = "on-request"

[features]
web_search_request = true

[mcp_servers.github]
command = "github-mcp-server"
args = ["stdio"]

[mcp_servers.github.env]
GITHUB_TOKEN = "x"

[profiles.fast]
model = "gpt-5-mini"
'''

# A stand-in for `codex app-server`: JSON-RPC lines, initialize, then hooks/list with each
# hooks.json handler's key (<file>:<snake event>:<group>:<handler>), a hash of the handler, and
# whether config.toml's [hooks.state."<key>"] trusted_hash matches it, as Codex 0.171 reports.
FAKE_CODEX = r'''#!PYTHON
import hashlib, json, os, re, sys, tomllib
if sys.argv[1:] != ["app-server"]:
    sys.exit(2)
home = os.environ["CODEX_HOME"]
def hooks():
    path = os.path.join(home, "hooks.json")
    try:
        data = json.load(open(path))
    except OSError:
        return []
    try:
        state = tomllib.load(open(os.path.join(home, "config.toml"), "rb")).get("hooks", {}).get("state", {})
    except OSError:
        state = {}
    out = []
    for event, groups in data.get("hooks", {}).items():
        snake = re.sub(r"(?<!^)([A-Z])", r"_\1", event).lower()
        for g, group in enumerate(groups):
            for h, handler in enumerate(group.get("hooks", [])):
                key = f"{path}:{snake}:{g}:{h}"
                digest = "sha256:" + hashlib.sha256(json.dumps([event, group.get("matcher"), handler], sort_keys=True).encode()).hexdigest()
                trusted = state.get(key, {}).get("trusted_hash") == digest
                out.append({"key": key, "eventName": snake, "command": handler.get("command"), "sourcePath": path,
                            "currentHash": digest, "trustStatus": "trusted" if trusted else "untrusted"})
    return out
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        print(json.dumps({"id": msg["id"], "result": {"codexHome": home}}), flush=True)
    elif msg.get("method") == "hooks/list":
        print(json.dumps({"method": "configWarning", "params": {}}), flush=True)
        print(json.dumps({"id": msg["id"], "result": {"data": [{"cwd": msg["params"]["cwds"][0], "hooks": hooks(),
                                                               "warnings": [], "errors": []}]}}), flush=True)
'''


@pytest.fixture
def codex_home(user, tmp_path, monkeypatch):  # noqa: F811
    ch = tmp_path / "codex-home"
    ch.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(ch))
    monkeypatch.delenv("RECALLD_CODEX", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no codex unless a test puts one there
    return ch


@pytest.fixture
def fake_codex(codex_home, tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "codex"
    exe.parent.mkdir()
    exe.write_text(FAKE_CODEX.replace("PYTHON", sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    return exe


def env():
    import os

    return {k: os.environ[k] for k in ("CODEX_HOME", "PATH", "HOME")}


def trusted(cfg) -> dict:
    return codex_toml.trusted_hashes(tomllib.loads(cfg.read_text()))


def test_round_trip_without_codex_on_path_says_the_step_left(codex_home):
    cfg = codex_home / "config.toml"
    cfg.write_text(CODEX_CONFIG)
    write_json(codex_home / "hooks.json", {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}})
    hooks_before = (codex_home / "hooks.json").read_text()
    res = run_recalld(["install", "codex", "--no-model-probe", "--command", shlex.join(PREFIX)], env=env())
    assert res.returncode == 0, res.stderr
    assert b"open /hooks and trust recalld's hooks" in res.stdout and b"codex is not on PATH" in res.stdout
    text = cfg.read_text()
    assert text.startswith(CODEX_CONFIG)  # the user's part untouched
    parsed = tomllib.loads(text)
    assert parsed["mcp_servers"]["recalld"] == {"command": PREFIX[0], "args": PREFIX[1:] + ["mcp"],
                                                "env_vars": ["RECALLD_HOME", "RECALLD_AGENT", "XDG_DATA_HOME"]}
    assert parsed["mcp_servers"]["github"]["env"] == {"GITHUB_TOKEN": "x"} and "hooks" not in parsed
    ours = recalld_handlers(load(codex_home / "hooks.json"))
    assert sorted(ours) == sorted(["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"])
    before = (cfg.read_bytes(), (codex_home / "hooks.json").read_bytes())
    assert run_recalld(["install", "codex", "--no-model-probe", "--command", shlex.join(PREFIX)], env=env()).returncode == 0
    assert (cfg.read_bytes(), (codex_home / "hooks.json").read_bytes()) == before
    res = run_recalld(["uninstall", "codex"], env=env())
    assert res.returncode == 0, res.stderr
    assert cfg.read_text() == CODEX_CONFIG and (codex_home / "hooks.json").read_text() == hooks_before


def test_install_trusts_recalld_hooks_with_codex_hashes_and_doctor_reads_them(fake_codex, codex_home, project):
    cfg = codex_home / "config.toml"
    cfg.write_text(CODEX_CONFIG)
    res = run_recalld(["install", "codex", "--no-model-probe", "--command", shlex.join(PREFIX), "--json"], env=env())
    assert res.returncode == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert any("recalld's 5 hooks are trusted" in n for n in notes), notes
    hooks = str(codex_home / "hooks.json")
    got = trusted(cfg)
    assert sorted(got) == sorted(f"{hooks}:{e}:0:0" for e in ("session_start", "user_prompt_submit", "pre_tool_use",
                                                              "post_tool_use", "stop"))
    assert all(v.startswith("sha256:") for v in got.values())
    status = install.agent_status("codex", "user", project)
    assert status["active"] and status["codex_trust"]["trusted"] == 5 and status["problems"] == []
    # Codex's /hooks review writes its own table for another hook; a user changes a hash.
    text = cfg.read_text() + '\n[hooks.state."/elsewhere/hooks.json:stop:0:0"]\ntrusted_hash = "sha256:theirs"\n'
    stop_key = f"{hooks}:stop:0:0"
    text = text.replace(got[stop_key], "sha256:stale")
    cfg.write_text(text)
    status = install.agent_status("codex", "user", project)
    assert not status["active"] and "installed but not trusted" in status["problems"][0] and "stop" in status["problems"][0]
    doc = run_recalld(["doctor", "--cwd", str(project), "--no-hook-run", "--no-model-probe"], env=env())
    assert doc.returncode == 0 and b"installed but not trusted" in doc.stdout, doc.stdout
    # Reinstall puts the hash right in place; uninstall removes only what recalld wrote.
    assert run_recalld(["install", "codex", "--no-model-probe", "--command", shlex.join(PREFIX)], env=env()).returncode == 0
    assert trusted(cfg)[stop_key] == got[stop_key] and install.agent_status("codex", "user", project)["active"]
    assert run_recalld(["uninstall", "codex"], env=env()).returncode == 0
    assert trusted(cfg) == {"/elsewhere/hooks.json:stop:0:0": "sha256:theirs"}
    assert "recalld" not in (tomllib.loads(cfg.read_text()).get("mcp_servers") or {})


# What `codex mcp add other -- /bin/echo hi` left of an install with the earlier marked block
# (observed with Codex 0.171.0): the begin marker gone, the end marker under the new table.
AFTER_MCP_ADD = '''[mcp_servers.recalld]
command = "/opt/bin/recalld"
args = ["mcp"]

[mcp_servers.other]
command = "/bin/echo"
args = ["hi"]
# <<< recalld <<<

[hooks.state."/home/u/.codex/hooks.json:stop:0:0"]
trusted_hash = "sha256:dc6f"
'''


def test_recalld_is_found_by_its_table_when_codex_dropped_the_markers(codex_home):
    cfg = codex_home / "config.toml"
    cfg.write_text(AFTER_MCP_ADD)
    install.install("codex", "user", command=PREFIX)
    parsed = tomllib.loads(cfg.read_text())
    assert parsed["mcp_servers"]["recalld"]["command"] == PREFIX[0]
    assert parsed["mcp_servers"]["other"] == {"command": "/bin/echo", "args": ["hi"]}
    assert parsed["hooks"]["state"] == {"/home/u/.codex/hooks.json:stop:0:0": {"trusted_hash": "sha256:dc6f"}}
    assert "<<< recalld <<<" not in cfg.read_text()
    install.uninstall("codex", "user")
    parsed = tomllib.loads(cfg.read_text())
    assert parsed == {"mcp_servers": {"other": {"command": "/bin/echo", "args": ["hi"]}},
                      "hooks": {"state": {"/home/u/.codex/hooks.json:stop:0:0": {"trusted_hash": "sha256:dc6f"}}}}


def test_an_earlier_marked_block_with_codex_tables_inside_is_edited_not_cut(codex_home):
    legacy = (codex_toml.LEGACY_MARKS[0] + '\n[mcp_servers.recalld]\ncommand = "/opt/bin/recalld"\nargs = ["mcp"]\n\n'
              '[hooks.state."/h/hooks.json:pre_tool_use:0:0"]\ntrusted_hash = "sha256:codex-wrote-this"\n'
              + codex_toml.LEGACY_MARKS[1] + "\n")
    cfg = codex_home / "config.toml"
    cfg.write_text('model = "m"\n\n' + legacy)
    install.install("codex", "user", command=PREFIX)
    install.uninstall("codex", "user")
    assert tomllib.loads(cfg.read_text()) == {"model": "m", "hooks": {"state": {
        "/h/hooks.json:pre_tool_use:0:0": {"trusted_hash": "sha256:codex-wrote-this"}}}}
    assert "recalld" not in cfg.read_text()


def test_an_existing_recalld_table_keeps_the_keys_codex_added(codex_home):
    cfg = codex_home / "config.toml"
    cfg.write_text('[mcp_servers.recalld]\ncommand = "recalld"\nargs = [\n  "mcp",\n]\nstartup_timeout_sec = 20\n'
                   'env_vars = ["MY_VAR"]\n\n[mcp_servers.recalld.tools.search]\napproval_mode = "approve"\n')
    install.install("codex", "user", command=PREFIX)
    r = tomllib.loads(cfg.read_text())["mcp_servers"]["recalld"]
    assert r == {"command": PREFIX[0], "args": PREFIX[1:] + ["mcp"], "startup_timeout_sec": 20,
                 "env_vars": ["RECALLD_HOME", "RECALLD_AGENT", "XDG_DATA_HOME", "MY_VAR"],
                 "tools": {"search": {"approval_mode": "approve"}}}
    install.uninstall("codex", "user")
    assert "mcp_servers" not in tomllib.loads(cfg.read_text())


@pytest.mark.parametrize("text,match", [
    ('[mcp_servers.recalld]\ncommand = "someone-else"\nargs = []\n', "does not run `recalld mcp`"),
    ('[mcp_servers]\nrecalld = { command = "recalld", args = ["mcp"] }\n', "form recalld does not edit"),
    ('model = "x"\n[broken\n', "not valid TOML"),
])
def test_codex_refuses_what_it_cannot_edit(codex_home, text, match):
    cfg = codex_home / "config.toml"
    cfg.write_text(text)
    with pytest.raises(install.InstallError, match=match):
        install.install("codex", "user", command=PREFIX)
    assert cfg.read_text() == text and not (codex_home / "hooks.json").exists()


def test_codex_table_with_awkward_paths_reads_back():
    for prefix in (["/opt/my tools/recalld"], ['/weird"quote\\back/recalld'], ["/ünï/cödé/recalld"]):
        text, _ = codex_toml.merge_server("config.toml", "a = 1\n", prefix, False)
        assert tomllib.loads(text)["mcp_servers"]["recalld"]["command"] == prefix[0]
        assert codex_toml.remove_server(text) == "a = 1\n"
    digest = "sha256:" + hashlib.sha256(b"x").hexdigest()
    key = '/p a\\th/"q"/hooks.json:stop:0:0'
    text, written, left = codex_toml.set_trust("config.toml", "a = 1\n", {key: digest})
    assert written == [key] and not left and codex_toml.trusted_hashes(tomllib.loads(text)) == {key: digest}
    assert codex_toml.remove_trust(text, {key: digest}) == "a = 1\n"

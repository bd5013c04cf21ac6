"""Wiring recalld into agents: merge its hooks and MCP server into their settings, and take
exactly those out again.

Every change is planned first (all files parsed and checked; a malformed file stops the whole
plan before anything is written), then applied file by file: a timestamped backup under
RECALLD_HOME/install/backups/, an atomic replace of the real file (symlinks followed, mode kept),
and one line in the append-only RECALLD_HOME/install/install-log.jsonl.

recalld's own entries are recognised by their command: a recalld executable (or
`python -m recalld`) followed by `hook <event>`; its MCP server is the `recalld` entry whose
command runs `recalld mcp`. Everything else in the files is kept as it was, in order.
Standard library only.
"""

import copy
import difflib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from recalld.core import paths

AGENTS = ("claude-code", "codex", "gemini")
ALIASES = {"claude": "claude-code", "claude_code": "claude-code"}
HOOK_EVENTS = ("session-start", "prompt-submit", "pre-tool", "post-tool", "stop", "commit")

# Tools whose calls recalld looks at before they run (acts: bash, write, delegate).
CLAUDE_PRE_TOOL_MATCHER = "Bash|Write|Edit|MultiEdit|NotebookEdit|Task|Agent"
CODEX_PRE_TOOL_MATCHER = "Bash|apply_patch|Edit|Write"
GEMINI_PRE_TOOL_MATCHER = "run_shell_command|write_file|replace"

# (native event, matcher or None for all, our event, timeout in seconds). The hook has its own
# 300 ms deadline; these timeouts only bound a wedged interpreter start.
CLAUDE_HOOKS = (
    ("SessionStart", None, "session-start", 10),
    ("UserPromptSubmit", None, "prompt-submit", 5),
    ("PreToolUse", CLAUDE_PRE_TOOL_MATCHER, "pre-tool", 5),
    ("PostToolUse", None, "post-tool", 5),
    ("Stop", None, "stop", 5),
    ("SubagentStop", None, "stop", 5),
)
# Codex: the events in its documented hooks.json; SubagentStop is left out because older
# Codex releases do not know it.
CODEX_HOOKS = (
    ("SessionStart", None, "session-start", 10),
    ("UserPromptSubmit", None, "prompt-submit", 5),
    ("PreToolUse", CODEX_PRE_TOOL_MATCHER, "pre-tool", 5),
    ("PostToolUse", None, "post-tool", 5),
    ("Stop", None, "stop", 5),
)
GEMINI_HOOKS = (
    ("SessionStart", None, "session-start", 10),
    ("BeforeAgent", None, "prompt-submit", 5),
    ("BeforeTool", GEMINI_PRE_TOOL_MATCHER, "pre-tool", 5),
    ("AfterTool", None, "post-tool", 5),
    ("AfterAgent", None, "stop", 5),
)
HOOK_SPECS = {"claude-code": CLAUDE_HOOKS, "codex": CODEX_HOOKS, "gemini": GEMINI_HOOKS}
AGENT_FLAG = {"claude-code": None, "codex": "codex", "gemini": "gemini"}

TOML_BEGIN = "# >>> recalld: added by `recalld install codex`; `recalld uninstall codex` removes this block >>>"
TOML_END = "# <<< recalld <<<"
GIT_MARKER = "# recalld-managed pre-commit hook"
GIT_CHAINED = "pre-commit.recalld-chained"


class InstallError(Exception):
    """A clear, one-line reason why nothing was changed."""


# --- the recalld command --------------------------------------------------------------------


def recalld_command() -> list:
    """The absolute command that runs this recalld: the console script that is running now,
    the one installed beside this interpreter, one on PATH, else `python -m recalld`."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 and argv0.name == "recalld" and argv0.is_file() and os.access(argv0, os.X_OK):
        return [str(argv0.resolve())]
    beside = Path(sys.executable).parent / ("recalld.exe" if os.name == "nt" else "recalld")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("recalld")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "recalld"]


def parse_command(command: "str | list | None") -> list:
    if command is None:
        return recalld_command()
    if isinstance(command, (list, tuple)):
        return [str(c) for c in command]
    parts = shlex.split(command)
    if not parts:
        raise InstallError("--command is empty")
    return parts


def hook_command(prefix: list, event: str, agent: "str | None") -> str:
    args = [*prefix, "hook", event]
    if agent:
        args += ["--agent", agent]
    return shlex.join(args)


def _runs_recalld(prefix: list) -> bool:
    if not prefix:
        return False
    if Path(prefix[-1]).name in ("recalld", "recalld.exe"):
        return True
    return len(prefix) >= 2 and prefix[-2:] == ["-m", "recalld"]


def is_recalld_hook_command(cmd) -> bool:
    """True for `<recalld> hook <event> ...`, whatever the path to recalld."""
    if not isinstance(cmd, str):
        return False
    try:
        tokens = shlex.split(cmd)
    except ValueError:
        return False
    for i, tok in enumerate(tokens[:-1]):
        if tok == "hook" and tokens[i + 1] in HOOK_EVENTS and _runs_recalld(tokens[:i]):
            return True
    return False


def is_recalld_handler(h) -> bool:
    return isinstance(h, dict) and is_recalld_hook_command(h.get("command"))


def is_recalld_mcp(entry) -> bool:
    if not isinstance(entry, dict):
        return False
    args = entry.get("args") or []
    cmd = entry.get("command")
    if not isinstance(cmd, str) or not isinstance(args, list):
        return False
    full = [cmd, *[str(a) for a in args]]
    return bool(full) and full[-1] == "mcp" and _runs_recalld(full[:-1])


def importable_without_path(prefix: list) -> "str | None":
    """When the command is `python -m recalld`, check that this interpreter can import recalld
    without PYTHONPATH (as the agent will run it). Returns a warning, or None."""
    if not (len(prefix) >= 3 and prefix[-2:] == ["-m", "recalld"]):
        return None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        res = subprocess.run([*prefix[:-2], "-c", "import recalld"], cwd="/", env=env,
                             capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"could not check that {prefix[0]} can import recalld: {e}"
    if res.returncode != 0:
        return (f"{shlex.join(prefix)} does not work outside this checkout (recalld is not installed "
                f"for {prefix[0]}); the hooks will do nothing until you run `pip install -e .` "
                "or pass --command")
    return None


# --- what goes into each agent's files --------------------------------------------------------


def hook_handler(agent: str, prefix: list, event: str, timeout_s: int) -> dict:
    cmd = hook_command(prefix, event, AGENT_FLAG[agent])
    if agent == "gemini":
        # Gemini CLI counts handler timeouts in milliseconds.
        return {"name": f"recalld-{event}", "type": "command", "command": cmd,
                "timeout": timeout_s * 1000}
    return {"type": "command", "command": cmd, "timeout": timeout_s}


def hook_spec(agent: str, prefix: list) -> list:
    """[(native event, matcher or None, handler)] for one agent."""
    return [(native, matcher, hook_handler(agent, prefix, ev, t))
            for native, matcher, ev, t in HOOK_SPECS[agent]]


def hooks_config(agent: str, prefix: list) -> dict:
    """The `hooks` object recalld wants in a fresh file."""
    out: dict = {}
    for native, matcher, handler in hook_spec(agent, prefix):
        out.setdefault(native, []).append(_group(matcher, handler))
    return out


def mcp_entry(agent: str, prefix: list) -> dict:
    if agent == "claude-code":
        return {"type": "stdio", "command": prefix[0], "args": [*prefix[1:], "mcp"]}
    return {"command": prefix[0], "args": [*prefix[1:], "mcp"]}


def _group(matcher, handler) -> dict:
    g: dict = {}
    if matcher is not None:
        g["matcher"] = matcher
    g["hooks"] = [handler]
    return g


# --- where each agent keeps them ----------------------------------------------------------------


def project_root(cwd=None) -> Path:
    cwd = Path(cwd or os.getcwd()).resolve()
    try:
        res = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
        if res.returncode == 0 and res.stdout.strip():
            return Path(res.stdout.strip()).resolve()
    except (OSError, subprocess.SubprocessError):
        pass
    return cwd


def claude_config_dir() -> Path:
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env).expanduser() if env else Path.home() / ".claude"


def claude_global_file() -> Path:
    """~/.claude.json (inside CLAUDE_CONFIG_DIR when that is set): user-scope MCP servers."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(env).expanduser() / ".claude.json") if env else Path.home() / ".claude.json"


def codex_home() -> Path:
    env = os.environ.get("CODEX_HOME")
    return Path(env).expanduser() if env else Path.home() / ".codex"


@dataclass
class Target:
    """One agent at one scope: which file holds the hooks, which holds the MCP server."""
    agent: str
    scope: str
    hooks_file: Path
    mcp_file: Path
    mcp_format: str  # "json" (mcpServers) or "toml" (codex [mcp_servers.recalld])


def target(agent: str, scope: str = "user", cwd=None) -> Target:
    agent = ALIASES.get(agent, agent)
    if agent not in AGENTS:
        raise InstallError(f"unknown agent {agent!r} (one of: {', '.join(AGENTS)})")
    if scope not in ("user", "project"):
        raise InstallError(f"unknown scope {scope!r} (user or project)")
    root = project_root(cwd) if scope == "project" else None
    if agent == "claude-code":
        if root:
            return Target(agent, scope, root / ".claude" / "settings.json", root / ".mcp.json", "json")
        return Target(agent, scope, claude_config_dir() / "settings.json", claude_global_file(), "json")
    if agent == "codex":
        base = root / ".codex" if root else codex_home()
        return Target(agent, scope, base / "hooks.json", base / "config.toml", "toml")
    base = root / ".gemini" if root else Path.home() / ".gemini"
    return Target(agent, scope, base / "settings.json", base / "settings.json", "json")


# --- planning -----------------------------------------------------------------------------------


@dataclass
class FileChange:
    path: Path
    before: "str | None"  # None: the file does not exist
    after: "str | None"  # None: delete the file
    what: list = field(default_factory=list)  # human-readable summary
    created: list = field(default_factory=list)  # containers (dotted) this install created
    mode: "int | None" = None  # for new files (git hooks are executable)
    rename_to: "Path | None" = None  # git hook chaining: move the existing file here first
    restore_from: "Path | None" = None  # git hook unchaining: move this file back

    @property
    def changed(self) -> bool:
        return self.before != self.after or self.rename_to is not None or self.restore_from is not None

    def diff(self) -> str:
        a = (self.before or "").splitlines(keepends=True)
        b = (self.after or "").splitlines(keepends=True)
        return "".join(difflib.unified_diff(a, b, f"{self.path} (now)", f"{self.path} (after)"))


@dataclass
class Plan:
    action: str  # install | uninstall
    agent: str
    scope: str
    changes: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(c.changed for c in self.changes)


def _read(path: Path) -> "str | None":
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise InstallError(f"cannot read {path}: {e}")


def _load_json(path: Path, text: "str | None") -> dict:
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InstallError(f"{path} is not valid JSON ({e}); nothing was changed. Fix it (recalld will "
                           "not rewrite a file it cannot parse, comments included), or add the "
                           "snippet from hooks/ by hand")
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object; nothing was changed")
    return data


def _dump_json(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# Keys some agents keep inside `hooks` next to the events (Gemini CLI's older layout).
HOOKS_CONFIG_KEYS = ("enabled", "disabled", "notifications")


def _events(hooks: dict) -> list:
    return [e for e in hooks if e not in HOOKS_CONFIG_KEYS]


def _check_hooks_shape(path: Path, hooks) -> None:
    if not isinstance(hooks, dict):
        raise InstallError(f"{path}: `hooks` is not an object; nothing was changed")
    for event, groups in hooks.items():
        if event in HOOKS_CONFIG_KEYS:
            continue
        if not isinstance(groups, list):
            raise InstallError(f"{path}: hooks.{event} is not a list; nothing was changed")
        for g in groups:
            if not isinstance(g, dict) or not isinstance(g.get("hooks", []), list):
                raise InstallError(f"{path}: hooks.{event} has an entry that is not "
                                   "{\"matcher\", \"hooks\": [...]}; nothing was changed")


def _strip_ours(groups: list) -> tuple:
    """Remove recalld handlers from a list of matcher groups. Returns (new groups, index of the
    first group that held one or None). Groups left empty by the removal are dropped."""
    out, first = [], None
    for g in groups:
        hs = g.get("hooks", [])
        keep = [h for h in hs if not is_recalld_handler(h)]
        if len(keep) == len(hs):
            out.append(g)
            continue
        if first is None:
            # our new group goes where the old one was (after it, if the user's handlers stay)
            first = len(out) + (1 if keep else 0)
        if keep:
            out.append(dict(g, hooks=keep))
    return out, first


def merge_hooks(data: dict, spec: list, path: Path) -> list:
    """Put recalld's handlers into data["hooks"] (in place). Returns a summary. An entry that is
    already exactly right stays where it is, so a second install changes nothing."""
    hooks = data.setdefault("hooks", {})
    _check_hooks_shape(path, hooks)
    wanted: dict = {}
    for native, matcher, handler in spec:
        wanted.setdefault(native, []).append(_group(matcher, handler))
    what = []
    for event in _events(hooks):
        if event not in wanted:
            groups, first = _strip_ours(hooks[event])
            if first is not None:
                what.append(f"removed stale {event}")
                if groups:
                    hooks[event] = groups
                else:
                    del hooks[event]
    for event, groups_wanted in wanted.items():
        current = hooks.get(event, [])
        ours = [g for g in current if any(is_recalld_handler(h) for h in g.get("hooks", []))]
        if ours == groups_wanted:
            continue
        groups, first = _strip_ours(current)
        at = len(groups) if first is None else first
        hooks[event] = groups[:at] + copy.deepcopy(groups_wanted) + groups[at:]
        what.append(event)
    return what


def remove_hooks(data: dict, path: Path) -> list:
    hooks = data.get("hooks")
    if hooks is None:
        return []
    _check_hooks_shape(path, hooks)
    removed = []
    for event in _events(hooks):
        groups, first = _strip_ours(hooks[event])
        if first is not None:
            removed.append(event)
            hooks[event] = groups
    return removed


def merge_mcp_json(data: dict, entry: dict, path: Path, force: bool) -> list:
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError(f"{path}: `mcpServers` is not an object; nothing was changed")
    existing = servers.get("recalld")
    if existing == entry:
        return []
    if existing is not None and not is_recalld_mcp(existing) and not force:
        raise InstallError(f"{path} already has an MCP server named `recalld` that does not run "
                           "`recalld mcp`; nothing was changed (pass --force to replace it, or --no-mcp)")
    servers["recalld"] = entry
    return ["mcpServers.recalld"]


def remove_mcp_json(data: dict) -> list:
    servers = data.get("mcpServers")
    if isinstance(servers, dict) and is_recalld_mcp(servers.get("recalld")):
        del servers["recalld"]
        return ["mcpServers.recalld"]
    return []


def _containers(data: dict) -> set:
    out = set()
    if "hooks" in data:
        out.add("hooks")
        if isinstance(data["hooks"], dict):
            out.update(f"hooks.{e}" for e in _events(data["hooks"]))
    if "mcpServers" in data:
        out.add("mcpServers")
    return out


def _drop_empty(data: dict, candidates: set, created: "set | None", emptied: set) -> None:
    """Delete containers left empty: the ones this install created (per the install log) or,
    with no log to go by, the ones that became empty by recalld's removal."""
    def ok(name):
        return name in created if created is not None else name in emptied

    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        for event in _events(hooks):
            if hooks[event] == [] and ok(f"hooks.{event}") and f"hooks.{event}" in candidates:
                del hooks[event]
        if hooks == {} and ok("hooks"):
            del data["hooks"]
    if data.get("mcpServers") == {} and ok("mcpServers"):
        del data["mcpServers"]


# --- codex config.toml: one marked block ------------------------------------------------------


def _toml_str(s: str) -> str:
    # A JSON string without ASCII escaping is a valid TOML basic string, bar DEL.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007F")


def toml_block(prefix: list) -> str:
    args = ", ".join(_toml_str(a) for a in [*prefix[1:], "mcp"])
    return (f"{TOML_BEGIN}\n[mcp_servers.recalld]\ncommand = {_toml_str(prefix[0])}\n"
            f"args = [{args}]\n{TOML_END}\n")


def _toml_load(path: Path, text: str) -> "dict | None":
    try:
        import tomllib
    except ImportError:  # Python 3.10: no parser in the standard library; skip the check
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InstallError(f"{path} is not valid TOML ({e}); nothing was changed")


def _find_block(lines: list) -> "tuple | None":
    b = next((i for i, ln in enumerate(lines) if ln.rstrip("\n") == TOML_BEGIN), None)
    if b is None:
        return None
    e = next((i for i in range(b + 1, len(lines)) if lines[i].rstrip("\n") == TOML_END), None)
    if e is None:
        return None
    return b, e


def remove_toml_block(text: str) -> str:
    lines = text.splitlines(keepends=True)
    span = _find_block(lines)
    if span is None:
        return text
    b, e = span
    if b > 0 and lines[b - 1].strip() == "":
        b -= 1  # the blank line install put before the block
    return "".join(lines[:b] + lines[e + 1:])


def merge_toml(path: Path, text: "str | None", prefix: list, force: bool) -> tuple:
    text = text or ""
    _toml_load(path, text)
    lines = text.splitlines(keepends=True)
    block = toml_block(prefix)
    span = _find_block(lines)
    if span is not None:
        b, e = span
        new = "".join(lines[:b]) + block + "".join(lines[e + 1:])
    else:
        rest = _toml_load(path, text)
        if rest is not None and "recalld" in (rest.get("mcp_servers") or {}):
            raise InstallError(f"{path} already defines [mcp_servers.recalld] outside recalld's marked "
                               "block; nothing was changed (remove it, or pass --no-mcp)")
        if text and not text.endswith("\n"):
            text += "\n"
        new = text + ("\n" if text else "") + block
    parsed = _toml_load(path, new)
    if parsed is not None:
        got = (parsed.get("mcp_servers") or {}).get("recalld") or {}
        if got.get("command") != prefix[0] or got.get("args") != [*prefix[1:], "mcp"]:
            raise InstallError(f"{path}: the recalld block did not read back as written; nothing was changed")
    return new, ([] if new == text else ["mcp_servers.recalld"])


# --- the install log -----------------------------------------------------------------------------


def install_dir() -> Path:
    return Path(paths.home()) / "install"


def log_path() -> Path:
    return install_dir() / "install-log.jsonl"


def _log(rec: dict) -> None:
    line = (json.dumps(rec, ensure_ascii=False, default=str) + "\n").encode()
    path = log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log() -> list:
    out = []
    try:
        with open(log_path(), encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def _created_since_install(path: Path) -> "tuple[set, bool] | None":
    """What recalld's installs created in this file since the last uninstall, per the log:
    (containers, whether it created the file). None when the log knows nothing of the file."""
    key = str(path)
    created: set = set()
    created_file = False
    seen = False
    for rec in read_log():
        if rec.get("file") != key:
            continue
        if rec.get("action") == "uninstall":
            created, created_file, seen = set(), False, False
        elif rec.get("action") == "install":
            seen = True
            created.update(rec.get("created") or [])
            created_file = created_file or bool(rec.get("created_file"))
    return (created, created_file) if seen else None


# --- planning per agent --------------------------------------------------------------------------


def plan_install(agent: str, scope: str = "user", cwd=None, command=None, mcp: bool = True,
                 force: bool = False) -> Plan:
    t = target(agent, scope, cwd)
    prefix = parse_command(command)
    plan = Plan("install", t.agent, t.scope)
    texts: dict = {}
    datas: dict = {}

    def load(path):
        if path not in datas:
            texts[path] = _read(path)
            datas[path] = _load_json(path, texts[path])
        return datas[path]

    whats: dict = {}
    data = load(t.hooks_file)
    before_containers = {t.hooks_file: _containers(data)}
    whats[t.hooks_file] = [f"hooks {e}" for e in merge_hooks(data, hook_spec(t.agent, prefix), t.hooks_file)]
    toml_change = None
    if mcp:
        if t.mcp_format == "json":
            mdata = load(t.mcp_file)
            before_containers.setdefault(t.mcp_file, _containers(mdata) if t.mcp_file != t.hooks_file
                                         else before_containers[t.hooks_file])
            whats.setdefault(t.mcp_file, []).extend(merge_mcp_json(mdata, mcp_entry(t.agent, prefix),
                                                                   t.mcp_file, force))
        else:
            text = _read(t.mcp_file)
            new, what = merge_toml(t.mcp_file, text, prefix, force)
            toml_change = FileChange(t.mcp_file, text, new, what)
    for path, d in datas.items():
        after = _dump_json(d)
        before = texts[path]
        if before is not None and _load_json(path, before) == d:
            after = before  # same content: leave the bytes alone
        created = sorted(_containers(d) - before_containers.get(path, set()))
        plan.changes.append(FileChange(path, before, after, whats.get(path, []), created))
    if toml_change is not None:
        plan.changes.append(toml_change)
    warn = importable_without_path(prefix)
    if warn:
        plan.notes.append(warn)
    plan.notes.extend(_agent_notes(t, datas))
    return plan


def _agent_notes(t: Target, datas: dict) -> list:
    notes = []
    if t.agent == "codex":
        notes.append("Codex asks you to review and trust new hooks once: open /hooks in Codex. "
                     "Codex before 0.124 also needs `[features] codex_hooks = true` in config.toml.")
    if t.agent == "gemini":
        d = datas.get(t.hooks_file) or {}
        if (d.get("hooksConfig") or {}).get("enabled") is False or (d.get("hooks") or {}).get("enabled") is False:
            notes.append(f"hooks are disabled in {t.hooks_file} (hooksConfig.enabled = false); recalld "
                         "left that setting alone")
    if t.agent == "claude-code" and t.scope == "project":
        notes.append("Claude Code asks once before it starts a project's .mcp.json servers.")
    return notes


def plan_uninstall(agent: str, scope: str = "user", cwd=None) -> Plan:
    t = target(agent, scope, cwd)
    plan = Plan("uninstall", t.agent, t.scope)
    texts: dict = {}
    datas: dict = {}
    whats: dict = {}
    for path in dict.fromkeys([t.hooks_file] + ([t.mcp_file] if t.mcp_format == "json" else [])):
        text = _read(path)
        if text is None:
            continue
        data = _load_json(path, text)
        texts[path], datas[path] = text, data
        before = _containers(data)
        empty_before = {c for c in before if _is_empty_container(data, c)}
        what = [f"hooks {e}" for e in remove_hooks(data, path)] if path == t.hooks_file else []
        what += remove_mcp_json(data)
        emptied = {c for c in before if _is_empty_container(data, c)} - empty_before
        known = _created_since_install(path)
        _drop_empty(data, before, known[0] if known else None, emptied)
        after = _dump_json(data) if what else text
        if what:
            pre = next((t for t in _pre_install_texts(path) if _parses_to(t, data)), None)
            if pre is not None:
                after = pre  # back to the very bytes the file had before install
            elif known and known[1] and data == {}:
                after = None  # recalld created this file; it holds nothing else
        whats[path] = what
        plan.changes.append(FileChange(path, text, after, what))
    if t.mcp_format == "toml":
        text = _read(t.mcp_file)
        if text is not None:
            new = remove_toml_block(text)
            known = _created_since_install(t.mcp_file)
            after = None if (new != text and not new.strip() and known and known[1]) else new
            plan.changes.append(FileChange(t.mcp_file, text, after,
                                           ["mcp_servers.recalld"] if new != text else []))
    return plan


def _pre_install_texts(path: Path) -> list:
    """The file as it was before each install that changed it since the last uninstall that
    did, newest first (from the backups)."""
    out = []
    for rec in reversed(read_log()):
        if rec.get("file") != str(path) or not rec.get("changed"):
            continue
        if rec.get("action") != "install":
            break
        try:
            out.append(Path(rec["backup"]).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, TypeError, KeyError):
            continue
    return out


def _parses_to(text: str, data: dict) -> bool:
    try:
        return json.loads(text) == data
    except ValueError:
        return False


def _is_empty_container(data: dict, name: str) -> bool:
    if name == "hooks":
        return data.get("hooks") == {} or (isinstance(data.get("hooks"), dict)
                                           and all(v == [] for v in data["hooks"].values()))
    if name == "mcpServers":
        return data.get("mcpServers") == {}
    if name.startswith("hooks."):
        return (data.get("hooks") or {}).get(name[6:]) == []
    return False


# --- git pre-commit hook --------------------------------------------------------------------------


def git_hooks_dir(cwd=None) -> Path:
    """The directory git runs hooks from (honours core.hooksPath and worktrees)."""
    cwd = Path(cwd or os.getcwd()).resolve()
    try:
        res = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        raise InstallError(f"cannot run git: {e}")
    if res.returncode != 0:
        raise InstallError(f"{cwd} is not inside a git repository")
    return (cwd / res.stdout.strip()).resolve()


def git_hook_script(prefix: list) -> str:
    cmd = shlex.join([*prefix, "hook", "commit", "--agent", "git"])
    exe = shlex.quote(prefix[0])
    return f"""#!/bin/sh
{GIT_MARKER} (`recalld install git-hook`; `recalld uninstall git-hook` undoes it).
# 1. The repository's own pre-commit hook, if there was one, runs first, unchanged: its exit
#    status decides the commit exactly as before. A shell script is sourced with $0 still
#    naming this pre-commit file, because hook managers (husky, pre-commit) look at $0.
# 2. Then recalld offers the notes bound to `commit` for the staged files. It never blocks
#    the commit: whatever happens (recalld missing, broken, slow), this script exits 0.
chained="$(dirname "$0")/{GIT_CHAINED}"
if [ -x "$chained" ]; then
  # the interpreter named by its #! line, or "-" when that line passes options
  interp=$(sed -n '1s/^#![[:space:]]*//p' "$chained" | awk '{{ if ($1 ~ /\\/env$/) {{ i = $2; n = 2 }} else {{ i = $1; n = 1 }}; if (NF == n) print i; else print "-" }}')
  case "$interp" in
    ""|*/sh|sh|*/bash|bash|*/dash|dash|*/ksh|ksh)
      RECALLD_CHAINED="$chained" "${{interp:-sh}}" -c '. "$RECALLD_CHAINED"' "$0" "$@" || exit $? ;;
    *)
      "$chained" "$@" || exit $? ;;
  esac
fi
if command -v {exe} >/dev/null 2>&1; then
  if command -v timeout >/dev/null 2>&1; then
    timeout 10 {cmd} </dev/null 2>/dev/null || true
  else
    {cmd} </dev/null 2>/dev/null || true
  fi
fi
exit 0
"""


def plan_git_hook_install(cwd=None, command=None) -> Plan:
    prefix = parse_command(command)
    hooks_dir = git_hooks_dir(cwd)
    path = hooks_dir / "pre-commit"
    plan = Plan("install", "git-hook", "repository")
    before = _read(path)
    script = git_hook_script(prefix)
    if before is not None and GIT_MARKER in before:
        plan.changes.append(FileChange(path, before, script, ["pre-commit"] if before != script else [],
                                       mode=0o755))
    elif before is not None:
        chained = hooks_dir / GIT_CHAINED
        if chained.exists():
            raise InstallError(f"{chained} already exists; nothing was changed (move it away first)")
        plan.changes.append(FileChange(path, before, script, ["pre-commit (chained after your hook)"],
                                       mode=0o755, rename_to=chained))
        if not os.access(path, os.X_OK):
            plan.notes.append(f"your existing {path} is not executable, so git does not run it; "
                              "recalld keeps it that way")
    else:
        plan.changes.append(FileChange(path, None, script, ["pre-commit"], mode=0o755))
    warn = importable_without_path(prefix)
    if warn:
        plan.notes.append(warn)
    return plan


def plan_git_hook_uninstall(cwd=None) -> Plan:
    hooks_dir = git_hooks_dir(cwd)
    path = hooks_dir / "pre-commit"
    chained = hooks_dir / GIT_CHAINED
    plan = Plan("uninstall", "git-hook", "repository")
    before = _read(path)
    if before is None or GIT_MARKER not in before:
        if chained.exists():
            plan.notes.append(f"{path} is no longer recalld's, but {chained} (your earlier hook) is "
                              "still there; left both alone")
        return plan
    if chained.exists():
        plan.changes.append(FileChange(path, before, _read(chained), ["pre-commit (your hook restored)"],
                                       restore_from=chained))
    else:
        plan.changes.append(FileChange(path, before, None, ["pre-commit"]))
    return plan


# --- applying --------------------------------------------------------------------------------------


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def backup(path: Path) -> "Path | None":
    if not path.exists():
        return None
    real = path.resolve()
    name = str(real).strip("/").replace("/", "__")
    dest = install_dir() / "backups" / f"{name}.{_stamp()}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(real, dest)
    return dest


def atomic_write(path: Path, text: str, mode: "int | None" = None) -> None:
    """Write next to the real file (a symlinked dotfile stays a symlink), fsync, rename."""
    real = path.resolve() if path.is_symlink() else path
    real.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = stat.S_IMODE(real.stat().st_mode)
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".recalld-tmp", dir=str(real.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(str(real.parent), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def apply(plan: Plan) -> list:
    """Carry out a plan. Returns one record per file (also appended to the install log)."""
    out = []
    for c in plan.changes:
        rec = {"time": datetime.now(timezone.utc).isoformat(), "action": plan.action, "agent": plan.agent,
               "scope": plan.scope, "file": str(c.path), "changed": c.changed, "what": c.what,
               "created": c.created, "created_file": c.before is None and c.after is not None,
               "backup": None}
        if c.changed:
            b = backup(c.path)
            rec["backup"] = str(b) if b else None
            if c.rename_to is not None:
                os.replace(c.path, c.rename_to)
                rec["chained"] = str(c.rename_to)
            if c.restore_from is not None:
                os.replace(c.restore_from, c.path)
                rec["restored"] = str(c.restore_from)
            elif c.after is None:
                if c.path.exists() or c.path.is_symlink():
                    c.path.unlink()
            else:
                atomic_write(c.path, c.after, c.mode)
        _log(rec)
        out.append(rec)
    return out


def install(agent: str, scope: str = "user", cwd=None, command=None, mcp: bool = True,
            force: bool = False) -> tuple:
    plan = plan_install(agent, scope, cwd, command, mcp, force)
    return plan, apply(plan)


def uninstall(agent: str, scope: str = "user", cwd=None) -> tuple:
    plan = plan_uninstall(agent, scope, cwd)
    return plan, apply(plan)


def install_git_hook(cwd=None, command=None) -> tuple:
    plan = plan_git_hook_install(cwd, command)
    return plan, apply(plan)


def uninstall_git_hook(cwd=None) -> tuple:
    plan = plan_git_hook_uninstall(cwd)
    return plan, apply(plan)


# --- what is installed where (for doctor) ---------------------------------------------------------


def agent_status(agent: str, scope: str, cwd=None) -> dict:
    t = target(agent, scope, cwd)
    out = {"agent": t.agent, "scope": t.scope, "hooks_file": str(t.hooks_file), "mcp_file": str(t.mcp_file),
           "hooks": [], "commands": [], "mcp": False, "error": None}
    try:
        data = _load_json(t.hooks_file, _read(t.hooks_file))
        for event, groups in (data.get("hooks") or {}).items():
            for g in groups if isinstance(groups, list) else []:
                for h in (g.get("hooks") or []) if isinstance(g, dict) else []:
                    if is_recalld_handler(h):
                        out["hooks"].append(event)
                        out["commands"].append(h["command"])
        if t.mcp_format == "json":
            m = _load_json(t.mcp_file, _read(t.mcp_file))
            out["mcp"] = is_recalld_mcp((m.get("mcpServers") or {}).get("recalld"))
        else:
            text = _read(t.mcp_file) or ""
            out["mcp"] = _find_block(text.splitlines(keepends=True)) is not None
    except InstallError as e:
        out["error"] = str(e)
    out["installed"] = bool(out["hooks"]) or out["mcp"]
    out["complete"] = sorted(set(out["hooks"])) == sorted({n for n, *_ in HOOK_SPECS[t.agent]}) and out["mcp"]
    missing = []
    for cmd in dict.fromkeys(out["commands"]):
        exe = shlex.split(cmd)[0]
        if not (shutil.which(exe) or (Path(exe).is_file() and os.access(exe, os.X_OK))):
            missing.append(exe)
    out["missing_executables"] = missing
    return out


def git_hook_status(cwd=None) -> dict:
    try:
        hooks_dir = git_hooks_dir(cwd)
    except InstallError as e:
        return {"repository": False, "installed": False, "detail": str(e)}
    path = hooks_dir / "pre-commit"
    text = _read(path)
    return {"repository": True, "path": str(path), "installed": bool(text and GIT_MARKER in text),
            "chained": (hooks_dir / GIT_CHAINED).exists(),
            "executable": path.exists() and os.access(path, os.X_OK)}


# --- the example files in hooks/ (generated from this module; a test keeps them in step) -------


PLUGIN_MANIFEST = {
    "name": "recalld",
    "version": "0.1.0",
    "description": "Involuntary recall: relevant memories pushed into context before each prompt "
                   "and tool call, with a receipt for every hook run.",
    "license": "Apache-2.0",
}
# The plugin cannot know where recalld is installed, so its hooks go through PATH and do
# nothing (exit 0) when recalld is not there, rather than failing every prompt.
PLUGIN_WRAPPER = """#!/bin/sh
# recalld's Claude Code plugin: run `recalld hook EVENT` when recalld is on PATH; else nothing.
command -v recalld >/dev/null 2>&1 || exit 0
exec recalld hook "$@"
"""
EXECUTABLE_SNIPPETS = ("git/pre-commit", "claude-code/plugin/bin/recalld-hook")


def snippets() -> dict:
    """Relative path under hooks/ -> content, with the portable command `recalld`."""
    p = ["recalld"]
    claude = {"hooks": hooks_config("claude-code", p)}
    plugin_hooks = {"hooks": {}}
    for native, matcher, ev, t in CLAUDE_HOOKS:
        h = {"type": "command", "command": f"\"${{CLAUDE_PLUGIN_ROOT}}/bin/recalld-hook\" {ev}", "timeout": t}
        plugin_hooks["hooks"].setdefault(native, []).append(_group(matcher, h))
    return {
        "claude-code/settings.json": _dump_json(claude),
        "claude-code/mcp.json": _dump_json({"mcpServers": {"recalld": mcp_entry("claude-code", p)}}),
        "claude-code/plugin/hooks/hooks.json": _dump_json(plugin_hooks),
        "claude-code/plugin/.mcp.json": _dump_json({"mcpServers": {"recalld": mcp_entry("claude-code", p)}}),
        "claude-code/plugin/.claude-plugin/plugin.json": _dump_json(PLUGIN_MANIFEST),
        "claude-code/plugin/bin/recalld-hook": PLUGIN_WRAPPER,
        "codex/hooks.json": _dump_json({"hooks": hooks_config("codex", p)}),
        "codex/config.toml": toml_block(p),
        "gemini/settings.json": _dump_json({"hooks": hooks_config("gemini", p),
                                            "mcpServers": {"recalld": mcp_entry("gemini", p)}}),
        "git/pre-commit": git_hook_script(p),
    }


def write_snippets(root: Path) -> list:
    written = []
    for rel, text in snippets().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if _read(path) != text:
            path.write_text(text, encoding="utf-8")
            written.append(rel)
        if rel in EXECUTABLE_SNIPPETS:
            path.chmod(0o755)
    return written


if __name__ == "__main__":  # python3 -m recalld.install: regenerate hooks/ from this module
    root = Path(__file__).resolve().parents[2] / "hooks"
    for rel in write_snippets(root):
        print(f"wrote hooks/{rel}")


def ensure_bytecode() -> dict:
    """Compile recalld's modules to bytecode where they are installed.

    The hook starts a fresh interpreter on every prompt and tool call. Without .pyc files
    (an editable install, or PYTHONDONTWRITEBYTECODE set in the agent's environment) every run
    recompiles the hook's modules from source; on the machine this was measured on that took
    the hook from 1.17x to 1.7x a bare interpreter start (docs/evaluation.md).
    """
    import compileall
    import os

    import recalld

    pkg = os.path.dirname(os.path.abspath(recalld.__file__))
    try:
        ok = compileall.compile_dir(pkg, quiet=2, force=False)
    except OSError as e:  # a read-only install: report, never fail the install
        return {"package": pkg, "compiled": False, "error": str(e)}
    return {"package": pkg, "compiled": bool(ok)}


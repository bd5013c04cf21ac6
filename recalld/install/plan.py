"""Wiring recalld into agents: plan the changes to their settings, apply them, and keep the
backups and the log that make `recalld uninstall` exact.

Every change is planned first (all files parsed and checked; a malformed file stops the whole
plan before anything is written), then applied file by file: a timestamped backup under
RECALLD_HOME/install/backups/, an atomic replace of the real file (symlinks followed, mode kept),
and one line in the append-only RECALLD_HOME/install/install-log.jsonl.

Which files an agent keeps its hooks and MCP server in, and what goes into them, is its
adapter's (recalld/agents/); the merging is jsonmerge's and toml's, the git hook githook's.
Standard library only.
"""

import difflib
import json
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from recalld import agents
from recalld.agents.base import Adapter
from recalld.core import paths
from recalld.install.entries import (InstallError, hook_spec, importable_without_path, is_recalld_handler,
                                     is_recalld_mcp, parse_command)
from recalld.install.jsonmerge import (containers, drop_empty, dump_json, is_empty_container, load_json,
                                       merge_hooks, merge_mcp_json, parses_to, remove_hooks, remove_mcp_json)
from recalld.install import codextrust
from recalld.install import toml as codex_toml

AGENTS = agents.INSTALL_NAMES  # what `recalld install AGENT` takes (and each adapter's aliases)


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


@dataclass
class Target:
    """One agent at one scope: which file holds the hooks, which holds the MCP server."""
    agent: str  # the install name
    scope: str
    hooks_file: Path
    mcp_file: Path
    mcp_format: str  # "json" (mcpServers) or "toml" (codex [mcp_servers.recalld])
    adapter: Adapter


def target(agent: str, scope: str = "user", cwd=None) -> Target:
    adapter = agents.lookup(agent)
    if adapter is None or not adapter.install_name:
        raise InstallError(f"unknown agent {agent!r} (one of: {', '.join(AGENTS)})")
    if scope not in ("user", "project"):
        raise InstallError(f"unknown scope {scope!r} (user or project)")
    root = str(project_root(cwd)) if scope == "project" else None
    hooks_file, mcp_file = adapter.settings_files(scope, root)
    return Target(adapter.install_name, scope, Path(hooks_file), Path(mcp_file), adapter.mcp_format, adapter)


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
    logged: dict = field(default_factory=dict)  # more fields for the install log (Codex trust written)

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


def read_text(path: Path) -> "str | None":
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise InstallError(f"cannot read {path}: {e}")


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
            texts[path] = read_text(path)
            datas[path] = load_json(path, texts[path])
        return datas[path]

    whats: dict = {}
    data = load(t.hooks_file)
    before_containers = {t.hooks_file: containers(data)}
    whats[t.hooks_file] = [f"hooks {e}" for e in merge_hooks(data, hook_spec(t.adapter, prefix), t.hooks_file)]
    toml_text = toml_new = None
    toml_what: list = []
    if t.mcp_format == "toml":
        toml_text = read_text(t.mcp_file)
        toml_new, toml_what = (codex_toml.merge_server(t.mcp_file, toml_text, prefix, force) if mcp
                               else (toml_text or "", []))
    elif mcp:
        mdata = load(t.mcp_file)
        before_containers.setdefault(t.mcp_file, containers(mdata) if t.mcp_file != t.hooks_file
                                     else before_containers[t.hooks_file])
        whats.setdefault(t.mcp_file, []).extend(merge_mcp_json(mdata, t.adapter.mcp_entry(prefix),
                                                               t.mcp_file, force))
    for path, d in datas.items():
        after = dump_json(d)
        before = texts[path]
        if before is not None and load_json(path, before) == d:
            after = before  # same content: leave the bytes alone
        created = sorted(containers(d) - before_containers.get(path, set()))
        plan.changes.append(FileChange(path, before, after, whats.get(path, []), created))
    if t.mcp_format == "toml":
        hooks_after = next(c.after for c in plan.changes if c.path == t.hooks_file)
        toml_new, trusted, notes = _codex_trust(t, hooks_after, toml_new, cwd)
        plan.notes.extend(notes)
        if trusted:
            toml_what = toml_what + [f"hooks.state ({len(trusted)} trusted)"]
        after = toml_new if (toml_text is not None or toml_new) else None
        plan.changes.append(FileChange(t.mcp_file, toml_text, after, toml_what, logged={"trusted": trusted}))
    warn = importable_without_path(prefix)
    if warn:
        plan.notes.append(warn)
    plan.notes.extend(t.adapter.install_notes(t.scope, str(t.hooks_file), datas.get(t.hooks_file) or {}))
    return plan


def _codex_trust(t: Target, hooks_text: str, text: str, cwd) -> tuple:
    """(config.toml text, {key: hash} written, notes): recalld's hooks trusted the way Codex's
    /hooks review does it, with the hashes Codex itself gives (codextrust), or the one step
    the user has left."""
    if t.scope != "user":
        return text, {}, ["Codex runs a project's hooks only once you trust them: run `codex` in the project "
                          "and trust recalld's hooks in /hooks."]
    codex = codextrust.executable()
    if not codex:
        return text, {}, [codextrust.TRUST_STEP + "; codex is not on PATH, so recalld could not do it."]
    try:
        hashes = codextrust.planned_hashes(codex, hooks_text, str(t.hooks_file), str(Path(cwd or os.getcwd()).resolve()))
    except codextrust.TrustError as e:
        return text, {}, [f"{codextrust.TRUST_STEP}; asking Codex failed: {e}"]
    if not hashes:
        return text, {}, [f"{codextrust.TRUST_STEP}; {codex} listed none of recalld's hooks."]
    new, written, left = codex_toml.set_trust(t.mcp_file, text, hashes)
    notes = [f"Codex: recalld's {len(hashes)} hooks are trusted ([hooks.state] in {t.mcp_file}, "
             f"hashes from {codex} app-server)."]
    if left:
        notes.append(f"{len(left)} of them have a trust entry in {t.mcp_file} in a form recalld does not "
                     "edit; trust them in Codex's /hooks.")
    return new, {k: hashes[k] for k in written}, notes


def _logged_trust(path: Path) -> dict:
    """The trust entries recalld's installs wrote into this file since the last uninstall."""
    out: dict = {}
    for rec in read_log():
        if rec.get("file") != str(path):
            continue
        if rec.get("action") == "uninstall":
            out = {}
        elif isinstance(rec.get("trusted"), dict):
            out.update(rec["trusted"])
    return out


def plan_uninstall(agent: str, scope: str = "user", cwd=None) -> Plan:
    t = target(agent, scope, cwd)
    plan = Plan("uninstall", t.agent, t.scope)
    texts: dict = {}
    datas: dict = {}
    whats: dict = {}
    for path in dict.fromkeys([t.hooks_file] + ([t.mcp_file] if t.mcp_format == "json" else [])):
        text = read_text(path)
        if text is None:
            continue
        data = load_json(path, text)
        texts[path], datas[path] = text, data
        before = containers(data)
        empty_before = {c for c in before if is_empty_container(data, c)}
        what = [f"hooks {e}" for e in remove_hooks(data, path)] if path == t.hooks_file else []
        what += remove_mcp_json(data)
        emptied = {c for c in before if is_empty_container(data, c)} - empty_before
        known = _created_since_install(path)
        drop_empty(data, before, known[0] if known else None, emptied)
        after = dump_json(data) if what else text
        if what:
            pre = next((t for t in _pre_install_texts(path) if parses_to(t, data)), None)
            if pre is not None:
                after = pre  # back to the very bytes the file had before install
            elif known and known[1] and data == {}:
                after = None  # recalld created this file; it holds nothing else
        whats[path] = what
        plan.changes.append(FileChange(path, text, after, what))
    if t.mcp_format == "toml":
        text = read_text(t.mcp_file)
        if text is not None:
            no_server = codex_toml.remove_server(text)
            new = codex_toml.remove_trust(no_server, _logged_trust(t.mcp_file))
            what = (["mcp_servers.recalld"] if no_server != text else []) + (["hooks.state"] if new != no_server else [])
            known = _created_since_install(t.mcp_file)
            after = None if (new != text and not new.strip() and known and known[1]) else new
            if what and after is not None:
                parsed = codex_toml.load(t.mcp_file, new)
                pre = next((b for b in _pre_install_texts(t.mcp_file)
                            if parsed is not None and _toml_parses(b) == parsed), None)
                after = pre if pre is not None else after
            plan.changes.append(FileChange(t.mcp_file, text, after, what))
    return plan


def _toml_parses(text: str):
    try:
        return codex_toml.load("backup", text)
    except InstallError:
        return None


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
               "backup": None, **c.logged}
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


# --- what is installed where (for doctor) ---------------------------------------------------------


def agent_status(agent: str, scope: str, cwd=None) -> dict:
    t = target(agent, scope, cwd)
    out = {"agent": t.agent, "scope": t.scope, "hooks_file": str(t.hooks_file), "mcp_file": str(t.mcp_file),
           "hooks": [], "commands": [], "mcp": False, "error": None}
    try:
        data = load_json(t.hooks_file, read_text(t.hooks_file))
        for event, groups in (data.get("hooks") or {}).items():
            for g in groups if isinstance(groups, list) else []:
                for h in (g.get("hooks") or []) if isinstance(g, dict) else []:
                    if is_recalld_handler(h):
                        out["hooks"].append(event)
                        out["commands"].append(h["command"])
        if t.mcp_format == "json":
            m = load_json(t.mcp_file, read_text(t.mcp_file))
            out["mcp"] = is_recalld_mcp((m.get("mcpServers") or {}).get("recalld"))
        else:
            text = read_text(t.mcp_file) or ""
            entry = ((codex_toml.load(t.mcp_file, text) or {}).get("mcp_servers") or {}).get("recalld")
            out["mcp"] = codex_toml.has_server(text) and (entry is None or is_recalld_mcp(entry))
    except InstallError as e:
        out["error"] = str(e)
    out["installed"] = bool(out["hooks"]) or out["mcp"]
    out["complete"] = sorted(set(out["hooks"])) == sorted({n for n, *_ in t.adapter.install_hooks()}) and out["mcp"]
    out["problems"], out["active"] = activity(t, out, cwd) if out["hooks"] else ([], None)
    missing = []
    for cmd in dict.fromkeys(out["commands"]):
        exe = shlex.split(cmd)[0]
        if not (shutil.which(exe) or (Path(exe).is_file() and os.access(exe, os.X_OK))):
            missing.append(exe)
    out["missing_executables"] = missing
    return out


def activity(t: Target, status: dict, cwd=None) -> tuple:
    """(problems, active): whether the client will actually run the installed hooks, asked of
    the client where it keeps that (Codex's hook trust, Gemini CLI's folder trust)."""
    cwd = str(Path(cwd or os.getcwd()).resolve())
    problems = []
    if t.adapter.name == "codex":
        home = os.path.dirname(str(t.hooks_file)) if t.scope == "user" else codex_home()
        st = status["codex_trust"] = codextrust.status(home, str(t.hooks_file), cwd)
        if not st["checked"]:
            problems.append(f"installed, trust unknown: {st['error']}")
        elif st["trusted"] < st["hooks"] or not st["hooks"]:
            problems.append(f"installed but not trusted: Codex skips {len(st['untrusted']) or 'all'} of recalld's "
                            f"hooks ({', '.join(st['untrusted'])}); run `recalld install codex` again, or trust "
                            "them in Codex's /hooks")
    elif t.adapter.name == "gemini":
        from recalld.agents import gemini

        settings = {}
        try:
            settings = load_json(t.hooks_file, read_text(t.hooks_file))
        except InstallError:
            pass
        trusted, why = gemini.folder_trust(cwd, settings)
        status["gemini_folder_trusted"] = trusted
        if not trusted:
            problems.append(f"installed but inactive here: Gemini CLI loads hooks only in a trusted folder, and {cwd} "
                            f"is {why}; trust it when Gemini asks (it writes ~/.gemini/trustedFolders.json)")
    return problems, bool(status["complete"]) and not problems


def codex_home() -> str:
    from recalld.agents import codex

    return codex.home()


def ensure_bytecode() -> dict:
    """Compile recalld's modules to bytecode where they are installed.

    The hook starts a fresh interpreter on every prompt and tool call. Without .pyc files
    (an editable install, or PYTHONDONTWRITEBYTECODE set in the agent's environment) every run
    recompiles the hook's modules from source, which costs more than the rest of the hook
    (docs/evaluation.md, "Checks on the hook's path").
    """
    import compileall

    import recalld

    pkg = os.path.dirname(os.path.abspath(recalld.__file__))
    try:
        ok = compileall.compile_dir(pkg, quiet=2, force=False)
    except OSError as e:  # a read-only install: report, never fail the install
        return {"package": pkg, "compiled": False, "error": str(e)}
    return {"package": pkg, "compiled": bool(ok)}


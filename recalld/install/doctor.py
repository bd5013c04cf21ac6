"""`recalld doctor`: what is installed where, where state lives, and one timed hook run.

The hook run is real: `recalld hook prompt-submit` in a subprocess, fed a documented Claude Code
UserPromptSubmit payload with a session id of its own (`recalld-doctor-<hex>`), so its receipt can
be found afterwards. It appends one receipt like any other run.
"""

import importlib
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

from recalld import __version__
from recalld.install import entries, githook, plan as install
from recalld.core import paths, receipts

PROBE_PROMPT = "recalld doctor: probe that recall runs before each prompt"


def probe_payload(cwd: str, session: str) -> dict:
    """A Claude Code UserPromptSubmit payload (field names from agent-hooks.md)."""
    return {"session_id": session, "transcript_path": None, "cwd": cwd, "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit", "prompt": PROBE_PROMPT}


def time_hook(prefix: list, cwd: str, timeout_s: float = 30) -> dict:
    session = f"recalld-doctor-{uuid.uuid4().hex[:12]}"
    data = json.dumps(probe_payload(cwd, session)).encode()
    out = {"command": [*prefix, "hook", "prompt-submit"], "session": session, "wall_ms": None,
           "bare_python_ms": None, "exit_code": None, "stdout_valid": None, "receipt": None, "error": None}
    t0 = time.perf_counter()
    try:
        res = subprocess.run(out["command"], input=data, capture_output=True, timeout=timeout_s, cwd=cwd)
    except (OSError, subprocess.SubprocessError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    out["wall_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    out["exit_code"] = res.returncode
    out["bare_python_ms"] = bare_python_ms()
    text = res.stdout.decode("utf-8", "replace").strip()
    if not text:
        out["stdout_valid"] = True
    else:
        try:
            parsed = json.loads(text)
            out["stdout_valid"] = isinstance(parsed.get("hookSpecificOutput", {}).get("additionalContext"), str)
        except (ValueError, AttributeError):
            out["stdout_valid"] = False
    if res.returncode != 0:
        out["error"] = res.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["exit status"]
        out["error"] = out["error"][0][:300]
    # A served prompt's hook process may exit before the daemon has committed its receipt
    # (recalld/hook/served.py, "L"): give the commit the time the hook's own wait would have.
    deadline = time.monotonic() + 2.0
    while True:
        conn = _ro_conn()
        try:
            recs = receipts.read(conn, session=session)
        finally:
            if conn is not None:
                conn.close()
        if recs or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if recs:
        r = recs[0]
        out["receipt"] = {k: r.get(k) for k in ("outcome", "duration_ms", "candidates", "above_floor",
                                                 "delivered", "error")}
        out["receipt"]["stored"] = r.get("stored", "db")
        # who ran it: the daemon (recalld/hook/served.py), or this process and why not the daemon
        out["receipt"]["served"] = (r.get("detail") or {}).get("served") or "in-process"
    elif out["error"] is None:
        out["error"] = "the hook ran but left no receipt"
    return out


def bare_python_ms() -> "float | None":
    """One `python3 -c pass`, right after the hook: how much of the hook's time is this
    machine's interpreter start."""
    t0 = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return round((time.perf_counter() - t0) * 1000, 1)


def _ro_conn() -> "sqlite3.Connection | None":
    if not os.path.exists(paths.db_path()):
        return None
    try:
        from recalld.core import db

        return db.connect(readonly=True, busy_ms=2000)
    except sqlite3.Error:
        return None


def state() -> dict:
    dbp = Path(paths.db_path())
    out = {"home": str(paths.home()), "db_path": str(dbp), "db_exists": dbp.exists(), "db_bytes": None,
           "wal_bytes": None, "schema_version": None, "expected_schema_version": None, "memories": None,
           "current_memories": None, "receipts": None, "fallback_receipts_path": str(paths.fallback_receipts_path()),
           "fallback_receipts": 0, "settings_path": str(paths.settings_path()),
           "settings_exists": os.path.exists(paths.settings_path()), "install_log": str(install.log_path()),
           "error": None}
    try:
        from recalld.core.db import SCHEMA_VERSION

        out["expected_schema_version"] = SCHEMA_VERSION
    except Exception as e:  # a broken migration list is itself worth reporting
        out["error"] = f"{type(e).__name__}: {e}"
    if dbp.exists():
        out["db_bytes"] = dbp.stat().st_size
        wal = Path(str(dbp) + "-wal")
        out["wal_bytes"] = wal.stat().st_size if wal.exists() else 0
        conn = _ro_conn()
        if conn is None:
            out["error"] = "database exists but cannot be opened"
        else:
            try:
                out["schema_version"] = conn.execute("PRAGMA user_version").fetchone()[0]
                out["memories"] = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
                out["current_memories"] = conn.execute(
                    "SELECT count(*) FROM memories WHERE invalid_at IS NULL").fetchone()[0]
                out["receipts"] = conn.execute("SELECT count(*) FROM receipts").fetchone()[0]
            except sqlite3.Error as e:
                out["error"] = f"{type(e).__name__}: {e}"
            finally:
                conn.close()
    out["fallback_receipts"] = len(receipts.read_fallback())
    return out


def optional_module(name: str, funcs: tuple) -> dict:
    """Status from an optional part (models, daemon) if this build has it; absence is fine."""
    full = f"recalld.{name}"
    try:
        found = importlib.util.find_spec(full) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return {"available": False}
    try:
        mod = importlib.import_module(full)
    except Exception as e:
        return {"available": True, "error": f"import failed: {type(e).__name__}: {e}"}
    for fn in funcs:
        f = getattr(mod, fn, None)
        if callable(f):
            try:
                return {"available": True, "status": _jsonable(f())}
            except Exception as e:
                return {"available": True, "error": f"{fn}() failed: {type(e).__name__}: {e}"}
    return {"available": True, "status": None}


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        if hasattr(v, "__dict__"):
            return {k: _jsonable(x) for k, x in vars(v).items() if not k.startswith("_")}
        return str(v)


def report(cwd=None, command=None, run_hook: bool = True, probe_models: bool = True) -> dict:
    cwd = str(Path(cwd or os.getcwd()).resolve())
    prefix = entries.parse_command(command)
    out = {"version": __version__, "python": sys.executable, "command": prefix,
           "command_warning": entries.importable_without_path(prefix), "agents": [], "git_hook": None}
    for agent in install.AGENTS:
        for scope in ("user", "project"):
            out["agents"].append(install.agent_status(agent, scope, cwd))
    out["git_hook"] = githook.git_hook_status(cwd)
    # The hook run goes before the state, so the state shows the receipt it left.
    out["hook_run"] = time_hook(prefix, cwd) if run_hook else None
    out["state"] = state()
    out["models"] = models()
    out["model_probe"] = model_probe() if probe_models else None
    out["daemon"] = daemon()
    out["team"] = optional_module("team.status", ("summary",))  # team sync (recalld/team), read offline
    out["bytecode"] = bytecode()
    out["crystals"] = crystal_trust(cwd)
    return out


def crystal_trust(cwd: str) -> "dict | None":
    """The project's crystal folder and whether the hook may deliver it (admin.trust_summary)."""
    try:
        from recalld.crystals import admin
        from recalld.core import scope

        return admin.trust_summary(scope.resolve_project(cwd))
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def hot_modules() -> list:
    """The hook's modules (recalld.HOT_PACKAGES, plus the entry point), as source paths: each
    is recompiled on every run when its .pyc is missing."""
    import recalld

    pkg = Path(recalld.__file__).resolve().parent
    files = [pkg / "__init__.py", pkg / "entry.py"]
    for name in recalld.HOT_PACKAGES:
        files += sorted((pkg / name).glob("*.py"))
    return files


def bytecode() -> dict:
    """Whether the hook's modules have current .pyc files (see install.ensure_bytecode)."""
    import recalld

    pkg = Path(recalld.__file__).resolve().parent
    files = hot_modules()
    stale = []
    for src in files:
        pyc = Path(importlib.util.cache_from_source(str(src)))
        try:
            if pyc.stat().st_mtime < src.stat().st_mtime:
                stale.append(str(src.relative_to(pkg)))
        except OSError:
            stale.append(str(src.relative_to(pkg)))
    return {"package": str(pkg), "hot_modules": len(files), "missing_or_stale": stale}


def _has(name: str) -> bool:
    try:
        return importlib.util.find_spec(f"recalld.{name}") is not None
    except (ImportError, ValueError):
        return False


def models() -> dict:
    """Which model file each role would use (resolution only: nothing is loaded)."""
    if not _has("model.resolve"):
        return {"available": False}
    try:
        llm = importlib.import_module("recalld.model.resolve")
        if callable(getattr(llm, "resolve", None)) and getattr(llm, "ROLES", None):
            status = {r: llm.resolve(r).as_dict() for r in llm.ROLES}
            if "proposer" in status:
                from recalld.core import settings

                # Capture ranks by its cues unless a weight asks for the model (capture/proposer.py).
                weight = float(((settings.load().get("proposals") or {}).get("model_weight")) or 0)
                status["proposer"]["used"] = weight > 0
            return {"available": True, "status": status}
    except Exception as e:
        return {"available": True, "error": f"{type(e).__name__}: {e}"}
    return optional_module("model.resolve", ("status",))


def model_probe() -> dict:
    """Each GGUF role's model loaded in a child process with a time limit, plus one tiny call
    (recalld.model.faults.probe): works, crashes (and with what, and the fix), hangs, fails."""
    if not _has("model.faults"):
        return {"available": False}
    try:
        from recalld.core import settings

        faults = importlib.import_module("recalld.model.faults")
        return {"available": True, "status": faults.probe_roles(settings.load())}
    except Exception as e:
        return {"available": True, "error": f"{type(e).__name__}: {e}"}


def daemon() -> dict:
    """Is the daemon running (the kernel's flock says), is autostart on, its last status."""
    if not _has("hook.autostart"):
        return optional_module("daemon.status", ("status",))
    try:
        from recalld.hook import autostart
        from recalld.core import settings

        pid = autostart.running_pid()
        st = {"running": pid is not None, "pid": pid if pid and pid > 0 else None,
              "autostart": bool((settings.load().get("daemon") or {}).get("autostart"))}
        try:
            st["last_status"] = json.loads(Path(autostart.status_path()).read_text(encoding="utf-8"))
        except (OSError, ValueError, AttributeError):
            st["last_status"] = None
        if _has("daemon.lastrun"):  # how the last run ended, and each role's model worker
            st["died"] = importlib.import_module("recalld.daemon.lastrun").last_death()
            st["model_workers"] = importlib.import_module("recalld.daemon.models").role_report(settings.load())
        return {"available": True, "status": st}
    except Exception as e:
        return {"available": True, "error": f"{type(e).__name__}: {e}"}

"""How the daemon's last run ended: stopped, or died, and how (for `recalld daemon status`,
`recalld doctor` and the next daemon's start).

A daemon that stops cleanly removes its pid file and writes a status with running false. One
that dies leaves both behind: the pid file with no lock held is a death. How it died: Python's
faulthandler writes a fatal signal (SIGILL, SIGSEGV, SIGBUS, SIGFPE, SIGABRT) and the stack to
RECALLD_HOME/daemon/fault.log before the process ends; a SIGKILL (the OOM killer, kill -9)
leaves no word, so no fault record says that. The daemon's log's last line says what it was
doing. `recalld daemon run` calls `begin()`: it keeps the previous run's death in
RECALLD_HOME/daemon/last_death.json (so it is still shown once a new daemon runs) and arms
faulthandler for this run.
"""

import faulthandler
import json
import os
from pathlib import Path

from recalld.core import receipts
from recalld.daemon.log import log_path
from recalld.hook import autostart

_FAULT_FILE = None  # kept open for the process's life: faulthandler writes to its fd


def fault_path() -> Path:
    return Path(autostart.daemon_dir()) / "fault.log"


def death_path() -> Path:
    return Path(autostart.daemon_dir()) / "last_death.json"


def _read(p: Path, limit: int = 8000, head: bool = False) -> str:
    """The last `limit` bytes of a file (its first, with head: faulthandler's line that names
    the signal comes before every thread's stack)."""
    try:
        with open(p, "rb") as f:
            if not head:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _last_log_line() -> "str | None":
    lines = [ln for ln in _read(log_path()).splitlines() if ln.strip()]
    return lines[-1][:500] if lines else None


def _how(fault: str) -> dict:
    for ln in fault.splitlines():
        if ln.startswith("Fatal Python error:"):
            what = ln.split(":", 1)[1].strip()
            sig = {"Illegal instruction": "SIGILL", "Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS",
                   "Floating-point exception": "SIGFPE", "Floating point exception": "SIGFPE",
                   "Aborted": "SIGABRT"}.get(what)
            lines = fault.splitlines()
            # the thread that took the signal is "Current thread"; the others are listed too
            at = next((i for i, x in enumerate(lines) if x.startswith("Current thread")), 0)
            frames = [x.strip() for x in lines[at:] if x.strip().startswith("File ")][:3]
            return {"how": f"died of {sig or what}", "signal": sig, "where": frames}
    return {"how": "died without a fault record: a SIGKILL (the OOM killer, kill -9) or a power loss",
            "signal": None}


def died() -> "dict | None":
    """The last run's death when it died (its pid file is there and no daemon holds the lock),
    else None. Never raises."""
    try:
        pid = autostart.dead_pid()
        if pid is None:
            return None
        try:
            snap = json.loads(Path(autostart.status_path()).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            snap = {}
        out = {"pid": pid, "started_at": snap.get("started_at") if snap.get("pid") == pid else None,
               "last_status_at": snap.get("written_at") if snap.get("pid") == pid else None,
               "last_log_line": _last_log_line()}
        out.update(_how(_read(fault_path(), head=True)))
        return out
    except Exception as e:
        return {"how": f"unknown ({type(e).__name__}: {e})"}


def last_death() -> "dict | None":
    """The death recorded when the next daemon started (or the current one, not yet seen)."""
    now = died()
    if now is not None:
        return now
    try:
        return json.loads(death_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def begin() -> "dict | None":
    """At `daemon run`, before the lock is taken: keep the previous run's death, if it died,
    and arm faulthandler for this run. Returns that death."""
    global _FAULT_FILE
    d = died()
    Path(autostart.daemon_dir()).mkdir(parents=True, exist_ok=True)
    if d is None:
        try:
            death_path().unlink()  # the last run stopped cleanly: an older death is history
        except OSError:
            pass
    else:
        d["noticed_at"] = receipts.now_iso()
        try:
            tmp = death_path().with_suffix(".tmp")
            tmp.write_text(json.dumps(d, indent=1), encoding="utf-8")
            os.replace(tmp, death_path())
        except OSError:
            pass
    try:
        _FAULT_FILE = open(fault_path(), "w", encoding="utf-8")
        _FAULT_FILE.write(f"recalld daemon pid {os.getpid()} started {receipts.now_iso()}\n")
        _FAULT_FILE.flush()
        faulthandler.enable(file=_FAULT_FILE, all_threads=True)
    except OSError:
        pass
    return d

"""Is the daemon running, and start it if not, without delaying anyone (standard library only:
the session-start hook calls this).

The daemon holds an exclusive flock on RECALLD_HOME/daemon/daemon.lock for its whole life, so
"running" is a question the kernel answers: the lock is held or it is not. A crashed daemon's
lock is released with its process. Its pid file stays (a clean stop removes it), which is how a
death is told from a stop (recalld/daemon/lastrun.py says how it died): after a death,
autostart starts the daemon again at most MAX_RESTARTS_AFTER_DEATH times an hour, so a daemon
that dies at every start is not restarted into the same crash by every session.
"""

import os
import sys
import time

from recalld.core import paths

try:
    import fcntl
except ImportError:  # Windows: no flock; the daemon is POSIX-only for now
    fcntl = None

# A spawn in the last few seconds is still starting up: do not start a second one.
SPAWN_GRACE_S = 20.0
MAX_RESTARTS_AFTER_DEATH = 3  # an hour


def daemon_dir():
    return os.path.join(paths.home(), "daemon")


def lock_path():
    return os.path.join(daemon_dir(), "daemon.lock")


def pid_path():
    return os.path.join(daemon_dir(), "daemon.pid")


def status_path():
    return os.path.join(daemon_dir(), "status.json")


def spawn_stamp_path():
    return os.path.join(daemon_dir(), "autostart.stamp")


def spawns_path():
    return os.path.join(daemon_dir(), "autostart.log")


def dead_pid() -> "int | None":
    """The pid a daemon left in its pid file when it died (no daemon holds the lock), else None."""
    pid = _read_pid()
    if pid is None or running_pid() is not None:
        return None
    return pid


def _recent_spawns(now: float) -> int:
    try:
        with open(spawns_path(), "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            times = f.read().decode("ascii", "replace").split()
    except OSError:
        return 0
    n = 0
    for t in times:
        try:
            n += now - float(t) < 3600
        except ValueError:
            pass
    return n


def running_pid() -> "int | None":
    """The daemon's pid when one holds the lock, else None."""
    if fcntl is None:
        return None
    try:
        fd = os.open(str(lock_path()), os.O_RDONLY)
    except OSError:
        return None  # no lock file: never started here
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read_pid() or -1  # held: running (the pid file may be a moment behind)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid() -> "int | None":
    try:
        with open(pid_path(), "rb") as f:  # decoded by name: no encodings.ascii import
            return int(f.read().decode("ascii").strip() or 0) or None
    except (OSError, ValueError):
        return None


def spawn(extra_env: "dict | None" = None) -> int:
    """Start `python -m recalld daemon run` fully detached; returns its pid. Never waits."""
    import subprocess  # here, not above: every session-start imports this module, few spawn

    d = daemon_dir()
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ)
    # Make this very package importable in the child even when it runs from a checkout.
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("RECALLD_HOME", str(paths.home()))
    if extra_env:
        env.update(extra_env)
    proc = subprocess.Popen([sys.executable, "-m", "recalld", "daemon", "run"], cwd=str(d), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    return proc.pid


def maybe_start(cfg: "dict | None") -> str:
    """Start the daemon when settings daemon.autostart is on and none is running.

    Returns what happened: "disabled", "running", "starting" (spawned moments ago),
    "started", "not restarted: ..." (it died, and was started too often this hour), or
    "error: ...". Never raises.
    """
    try:
        if not ((cfg or {}).get("daemon") or {}).get("autostart"):
            return "disabled"
        if fcntl is None:
            return "error: no flock on this platform"
        if running_pid() is not None:
            return "running"
        stamp = spawn_stamp_path()
        try:
            if time.time() - os.stat(stamp).st_mtime < SPAWN_GRACE_S:
                return "starting"
        except OSError:
            pass
        now = time.time()
        if _read_pid() is not None:  # the last daemon died (a clean stop removes its pid file)
            n = _recent_spawns(now)
            if n >= MAX_RESTARTS_AFTER_DEATH:
                return (f"not restarted: the daemon died, and autostart started it {n} times in the last hour "
                        f"(`recalld daemon status` says how; `recalld daemon start` starts it anyway)")
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        with open(stamp, "w", encoding="ascii") as f:
            f.write(str(now))
        with open(spawns_path(), "a", encoding="ascii") as f:
            f.write(f"{now:.0f}\n")
        spawn()
        return "started"
    except Exception as e:  # the hook must not notice
        return f"error: {type(e).__name__}: {str(e)[:100]}"

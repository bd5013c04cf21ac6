"""The daemon's single-instance lock and its pid file (where the hook's autostart looks)."""

import os
import time
from pathlib import Path

from recalld.hook import autostart


class InstanceLock:
    """The single-instance lock: an exclusive flock held for the daemon's life."""

    def __init__(self):
        self.fd = None

    def acquire(self, wait_s: float = 2.0) -> bool:
        import fcntl

        d = Path(autostart.daemon_dir())
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(autostart.lock_path()), os.O_RDWR | os.O_CREAT, 0o600)
        end = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                # A status check may hold a shared lock for a microsecond; a daemon holds it for good.
                if time.monotonic() >= end:
                    os.close(fd)
                    return False
                time.sleep(0.05)
        self.fd = fd
        tmp = Path(autostart.pid_path()).with_suffix(".tmp")
        tmp.write_text(str(os.getpid()), encoding="ascii")
        os.replace(tmp, autostart.pid_path())
        return True

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if _read_int(autostart.pid_path()) == os.getpid():
                Path(autostart.pid_path()).unlink()
        except OSError:
            pass
        os.close(self.fd)  # closing drops the flock
        self.fd = None


def _read_int(p) -> "int | None":
    try:
        return int(Path(p).read_text().strip())
    except (OSError, ValueError):
        return None

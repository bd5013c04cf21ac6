"""The daemon's log: JSON lines in RECALLD_HOME/logs/daemon.log, written through structlog."""

import os
from pathlib import Path

from recalld.core import paths

LOG_MAX_BYTES = 10 * 1024 * 1024


def log_path() -> Path:
    return Path(paths.logs_dir()) / "daemon.log"


def open_log():
    """A JSON-lines logger writing to RECALLD_HOME/logs/daemon.log (rotated once at 10 MB), and
    the file it writes (the caller closes it)."""
    # Imported here, not above: `recalld daemon status` needs log_path, not a logger.
    import structlog

    p = log_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        if p.stat().st_size > LOG_MAX_BYTES:
            os.replace(p, p.with_suffix(".log.1"))
    except OSError:
        pass
    f = open(p, "a", encoding="utf-8", buffering=1)
    logger = structlog.wrap_logger(
        structlog.PrintLogger(f),
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(default=str)],
        context_class=dict, cache_logger_on_first_use=False)
    return logger.bind(pid=os.getpid()), f

"""Where recalld keeps its state. Everything lives under RECALLD_HOME."""

import os
from pathlib import Path


def home() -> Path:
    env = os.environ.get("RECALLD_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(xdg) / "recalld"


def db_path() -> Path:
    return home() / "recalld.db"


def fallback_receipts_path() -> Path:
    return home() / "receipts-fallback.jsonl"


def settings_path() -> Path:
    return home() / "settings.json"


def logs_dir() -> Path:
    return home() / "logs"


def crystals_dir() -> Path:
    return home() / "crystals"

"""Where recalld keeps its state. Everything lives under RECALLD_HOME.

Plain strings, not pathlib: the hook imports this on every prompt and tool call, and pathlib
costs more to import than the hook's own search.
"""

import os


def home() -> str:
    env = os.environ.get("RECALLD_HOME")
    if env:
        return os.path.expanduser(env)
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(xdg, "recalld")


def db_path() -> str:
    return os.path.join(home(), "recalld.db")


def fallback_receipts_path() -> str:
    return os.path.join(home(), "receipts-fallback.jsonl")


def settings_path() -> str:
    return os.path.join(home(), "settings.json")


def logs_dir() -> str:
    return os.path.join(home(), "logs")


def crystals_dir() -> str:
    return os.path.join(home(), "crystals")

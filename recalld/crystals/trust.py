"""Which project crystal folders the user has trusted (standard library only: the hook reads it).

A cloned repository can ship `.recalld/crystals/*.md`, and a crystal arrives in the agent's
context before the act it is bound to. So a project folder's crystals are delivered only once
the user has run `recalld crystals trust` for it, and only while its files are exactly the
ones trusted: the record holds the sha256 of every crystal file, and one added, removed or
changed file makes the folder untrusted again (`changed`) until it is trusted anew. This is how
Codex trusts a project's hooks and Gemini CLI trusts a folder.

The log is RECALLD_HOME/crystal-trust.jsonl, append-only, one JSON object a line:
{"time", "action": "trust" | "untrust", "dir", "project", "files": {name: sha256}}; the last
line for a folder decides. A file rather than a table: the hook reads it only when a project
has crystal files, and an act on an unchanged folder compares the hashes the crystal cache
already holds (crystals.scan_dir) with the record, hashing nothing.
"""

import os

from recalld.core import jsonio, paths

LOG = "crystal-trust.jsonl"
STATES = ("trusted", "untrusted", "changed")


def log_path() -> str:
    return os.path.join(paths.home(), LOG)


def log_sig() -> "tuple | None":
    """The log file's (inode, mtime, size): what a reader that kept an answer compares."""
    try:
        st = os.stat(log_path())
        return st.st_ino, st.st_mtime_ns, st.st_size
    except OSError:
        return None


def read() -> dict:
    """{folder: its last record}. A missing log, or a line that does not parse, trusts nothing."""
    out = {}
    try:
        with open(log_path(), "rb") as f:
            raw = f.read()
    except OSError:
        return out
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = jsonio.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("dir"), str):
            out[rec["dir"]] = rec
    return out


def last(directory: str) -> "dict | None":
    """The folder's last record, for the hook: lines are read from the end and only one naming
    this folder is parsed (each line holds a hash per file, and the log only grows)."""
    try:
        with open(log_path(), "rb") as f:
            raw = f.read()
    except OSError:
        return None
    needle = b'"dir": ' + jsonio.dumps(directory, ensure_ascii=False).encode("utf-8")
    for line in reversed(raw.split(b"\n")):
        if needle in line:
            try:
                rec = jsonio.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("dir") == directory:
                return rec
    return None


def state(directory: str, hashes: "dict | None", log: "dict | None" = None) -> str:
    """trusted: the folder's last record is a trust of exactly these files with these hashes;
    changed: it was trusted with other files or contents; untrusted: never, or untrusted since.
    hashes None (a folder not fully indexed) is never trusted."""
    rec = last(directory) if log is None else log.get(directory)
    if not rec or rec.get("action") != "trust":
        return "untrusted"
    files = rec.get("files")
    return "trusted" if hashes is not None and isinstance(files, dict) and files == hashes else "changed"


def diff(directory: str, hashes: "dict | None", log: "dict | None" = None) -> dict:
    """What changed since the folder was last trusted: {added, removed, changed: [names]}."""
    rec = (read() if log is None else log).get(directory) or {}
    old = rec.get("files") if isinstance(rec.get("files"), dict) else {}
    new = hashes or {}
    return {"added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)),
            "changed": sorted(n for n in set(new) & set(old) if new[n] != old[n])}


def record(directory: str, action: str, project: "str | None" = None, hashes: "dict | None" = None,
           now: "str | None" = None) -> dict:
    """Append one trust or untrust line; durable (file and, when new, its folder fsynced)
    before it returns."""
    if action not in ("trust", "untrust"):
        raise ValueError(f"unknown trust action {action!r}")
    from datetime import datetime, timezone

    rec = {"time": now or datetime.now(timezone.utc).isoformat(timespec="microseconds"), "action": action,
           "dir": directory, "project": project, "files": dict(sorted((hashes or {}).items()))}
    path = log_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    new = not os.path.exists(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        # One write of one line: O_APPEND keeps concurrent lines whole.
        os.write(fd, (jsonio.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        dfd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return rec

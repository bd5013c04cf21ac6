"""Trusting a project's crystal folder, and how its trust reads for `recalld crystals` and
`recalld doctor` (crystals read through recalld.core.crystals, the record in recalld.core.trust).
Not on the hook's path: the hook only reads trust.state."""

from recalld.core import trust
from recalld.core.crystals import directories, scan_dir


def trust_project(project: str) -> tuple:
    """Trust the project's crystal folder as it is now: (the trust record, entries, failures).
    Every file is read and hashed afresh (not from the hook's cache), so what is trusted is
    what was just listed. ValueError (one line) when there is nothing that can be trusted."""
    directory = directories(project)[0][1]
    entries, failures, _, hashes = scan_dir(directory, "project", use_cache=False)
    for f in failures:
        if f.path == directory:
            raise ValueError(f"{directory}: {f.reason}")
    if not hashes:
        raise ValueError(f"no crystal files in {directory}")
    return trust.record(directory, "trust", project, hashes), entries, failures


def trust_summary(project: "str | None") -> "dict | None":
    """The project's crystal folder as `crystals list` and `doctor` show it (None when the
    project has no crystal files): its trust state, what changed, and the command to trust it."""
    if not project:
        return None
    import shlex

    directory = directories(project)[0][1]
    es, fs, _, hashes = scan_dir(directory, "project")
    escaped = [f for f in fs if f.path == directory]
    if not hashes and not escaped:
        return None
    log = trust.read()
    st = "untrusted" if escaped else trust.state(directory, hashes, log)
    rec = log.get(directory) or {}
    return {"dir": directory, "project": project, "state": st, "crystals": len(es),
            "files": len(hashes or {}), "trusted_at": rec.get("time") if rec.get("action") == "trust" else None,
            "diff": trust.diff(directory, hashes, log) if st == "changed" else None,
            "reason": escaped[0].reason if escaped else None,
            "command": None if escaped or st == "trusted" else f"recalld crystals trust {shlex.quote(project)}"}

"""A project's name across machines: its normalized git remote URL, never its path."""

import os
import re

from recalld.core import scope


def _remotes(config_text: str) -> dict:
    """{remote name: url} from a git config file's text (the `[remote "x"]` sections)."""
    out, current = {}, None
    for raw in config_text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = re.match(r'\[\s*remote\s+"([^"]+)"\s*\]$', line)
        if m:
            current = m.group(1)
            continue
        if line.startswith("["):
            current = None
            continue
        if current is not None:
            key, _, value = line.partition("=")
            if key.strip().lower() == "url" and value.strip():
                out.setdefault(current, value.strip().strip('"'))
    return out


def normalize(url: str) -> str:
    """One key for every spelling of a repository's address: scheme, user, port, a trailing
    `.git` or `/` go; the host is lowercased. `git@github.com:Acme/app.git`,
    `https://github.com/Acme/app` and `ssh://git@github.com:22/Acme/app.git` are all
    `github.com/Acme/app`."""
    u = url.strip()
    m = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://(.*)$", u)
    if m:
        rest = m.group(1)
        host, _, path = rest.partition("/")
    elif re.match(r"^[^/]+:", u) and not re.match(r"^[a-zA-Z]:[\\/]", u):
        host, _, path = u.partition(":")  # scp-like: user@host:path
    else:
        return os.path.normpath(u)  # a local path remote: as it is, normalized
    host = host.rpartition("@")[2]
    host = re.sub(r":\d*$", "", host).lower()
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[:-4]
    return f"{host}/{path.rstrip('/')}" if path else host


def project_key(project: str) -> "str | None":
    """The normalized URL of the project's `origin` remote (else its only remote), or None when
    the project is not a git repository with a remote."""
    common = scope.git_common_dir(project)
    if common is None:
        return None
    try:
        with open(os.path.join(common, "config"), encoding="utf-8", errors="replace") as f:
            remotes = _remotes(f.read())
    except OSError:
        return None
    url = remotes.get("origin") or (next(iter(remotes.values())) if len(remotes) == 1 else None)
    return normalize(url) if url else None

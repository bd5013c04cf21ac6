"""Codex's config.toml: recalld's MCP server table and the trust entries of recalld's hooks,
found by what they are, edited line by line.

Codex rewrites config.toml itself (`codex mcp add`, the /hooks review): it keeps tables but
not always the comments between them, and it puts its own tables wherever it likes. So recalld
never relies on comment markers: its server is the `[mcp_servers.recalld]` table (with its
subtables), its trust entries are `[hooks.state."<hooks.json>:<event>:<group>:<handler>"]`
tables naming recalld's hooks. Everything else stays byte for byte; where tomllib exists
(Python 3.11+) the result is parsed and must equal the input outside recalld's keys.
"""

import json
import re
from pathlib import Path

from recalld.install.entries import InstallError, is_recalld_mcp

TABLE = ("mcp_servers", "recalld")
COMMENT = "# recalld: added by `recalld install codex`; `recalld uninstall codex` removes it"
# The marked block of installs before issue 13: its comment lines are dropped where found.
LEGACY_MARKS = ("# >>> recalld: added by `recalld install codex`; `recalld uninstall codex` removes this block >>>",
                "# <<< recalld <<<")
# Codex hands an MCP server only HOME, LOGNAME, PATH, SHELL, USER, LANG, LC_ALL, TERM, TMPDIR
# and TZ (observed in 0.171.0) unless the server names more: without these, `recalld mcp` reads
# the default store and serves another agent identity than the hooks.
ENV_VARS = ("RECALLD_HOME", "RECALLD_AGENT", "XDG_DATA_HOME")
OWN_KEYS = ("command", "args", "env_vars")

_HEADER = re.compile(r"^\s*\[(\[)?(.*?)\]\]?\s*(?:#.*)?$")
_KEY_LINE = re.compile(r"^\s*([A-Za-z0-9_-]+|\"[^\"]*\")\s*=")
_KEY_PART = re.compile(r'[A-Za-z0-9_-]+|"(?:\\.|[^"\\])*"|\'[^\']*\'')
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'[^\']*\'')


def toml_str(s: str) -> str:
    # A JSON string without ASCII escaping is a valid TOML basic string, bar DEL.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007F")


def _array(values) -> str:
    return "[" + ", ".join(toml_str(v) for v in values) + "]"


def own_lines(prefix: list, env_vars=ENV_VARS) -> dict:
    return {"command": f"command = {toml_str(prefix[0])}", "args": f"args = {_array([*prefix[1:], 'mcp'])}",
            "env_vars": f"env_vars = {_array(env_vars)}"}


def server_table(prefix: list) -> str:
    lines = own_lines(prefix)
    return f"{COMMENT}\n[mcp_servers.recalld]\n" + "".join(lines[k] + "\n" for k in OWN_KEYS)


def toml_block(prefix: list) -> str:
    """What install adds to a config.toml without recalld's server (hooks/ shows it)."""
    return server_table(prefix)


# --- reading the file's structure ------------------------------------------------------------


def split_key(raw: str) -> "tuple | None":
    """A dotted TOML key -> its parts (bare, "basic" or 'literal'); None if it does not parse."""
    parts, rest = [], raw.strip()
    while rest:
        m = _KEY_PART.match(rest)
        if not m:
            return None
        part = m.group(0)
        if part.startswith('"'):
            try:
                part = json.loads(part)
            except ValueError:
                return None
        elif part.startswith("'"):
            part = part[1:-1]
        parts.append(part)
        rest = rest[m.end():].lstrip()
        if rest:
            if not rest.startswith("."):
                return None
            rest = rest[1:].lstrip()
            if not rest:
                return None
    return tuple(parts) or None


def tables(lines: list) -> list:
    """[(header line index, end index (exclusive: the next header), key parts)] in order. A
    header-looking line inside a multi-line string is not a header."""
    out, in_str = [], None
    for i, line in enumerate(lines):
        if in_str is None:
            m = _HEADER.match(line.rstrip("\n"))
            if m and not line.lstrip().startswith("#"):
                key = split_key(m.group(2))
                if key is not None:
                    out.append([i, len(lines), key])
        for q in ('"""', "'''"):
            if (in_str in (None, q)) and line.count(q) % 2 == 1:
                in_str = None if in_str == q else q
    for a, b in zip(out, out[1:]):
        a[1] = b[0]
    return [tuple(t) for t in out]


def _find(lines: list, key: tuple) -> "tuple | None":
    return next((t for t in tables(lines) if t[2] == key), None)


def _body_end(lines: list, start: int, end: int) -> int:
    """The end of a table's own lines: without the blank lines and the comments that lead into
    the next table."""
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def _value_end(lines: list, i: int, end: int) -> int:
    """The line after a `key = value` starting at i (an array may run over several lines)."""
    depth = 0
    for j in range(i, end):
        code = _STRINGS.sub('""', lines[j]).split("#", 1)[0]
        if j == i and "=" in code:
            code = code.split("=", 1)[1]
        depth += code.count("[") - code.count("]")
        if depth <= 0:
            return j + 1
    return end


def load(path, text: str) -> "dict | None":
    try:
        import tomllib
    except ImportError:  # Python 3.10: no parser in the standard library; skip the checks
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InstallError(f"{path} is not valid TOML ({e}); nothing was changed")


def _drop_legacy(lines: list) -> list:
    return [ln for ln in lines if ln.rstrip("\n") not in LEGACY_MARKS]


def _without(parsed: "dict | None", trust_keys=()) -> "dict | None":
    """The parsed document without recalld's server and the given hooks.state entries."""
    if parsed is None:
        return None
    d = json.loads(json.dumps(parsed, default=str))
    servers = d.get("mcp_servers")
    if isinstance(servers, dict):
        servers.pop("recalld", None)
        if not servers:
            d.pop("mcp_servers")
    state = (d.get("hooks") or {}).get("state") if isinstance(d.get("hooks"), dict) else None
    if isinstance(state, dict):
        for k in trust_keys:
            state.pop(k, None)
        if not state:
            d["hooks"].pop("state")
        if not d["hooks"]:
            d.pop("hooks")
    return d


def _check_rest(path, before: str, after: str, trust_keys=()) -> "dict | None":
    parsed = load(path, after)
    if parsed is not None and _without(parsed, trust_keys) != _without(load(path, before), trust_keys):
        raise InstallError(f"{path}: the edit would change more than recalld's entries; nothing was changed")
    return parsed


# --- the MCP server --------------------------------------------------------------------------


def merge_server(path: Path, text: "str | None", prefix: list, force: bool) -> tuple:
    """(new text, what changed) with recalld's server in the file: its command, args and
    env_vars set in place in an existing table (other keys, subtables such as Codex's tool
    approvals, and everything else kept), else the table added at the end."""
    text = text or ""
    parsed = load(path, text)
    lines = _drop_legacy(text.splitlines(keepends=True))
    found = _find(lines, TABLE)
    entry = ((parsed or {}).get("mcp_servers") or {}).get("recalld") if parsed is not None else None
    if found is None and entry is not None:
        raise InstallError(f"{path} defines mcp_servers.recalld in a form recalld does not edit (not a "
                           "[mcp_servers.recalld] table); nothing was changed (make it a table, or pass --no-mcp)")
    if entry is not None and not is_recalld_mcp(entry) and not force:
        raise InstallError(f"{path} already has an MCP server named recalld that does not run `recalld mcp`; "
                           "nothing was changed (pass --force to replace it)")
    if found is None:
        body = "".join(lines)
        if body and not body.endswith("\n"):
            body += "\n"
        new = body + ("\n" if body.strip() else "") + server_table(prefix)
    else:
        start, end, _ = found
        end = _body_end(lines, start, end)
        have = (entry or {}).get("env_vars") if isinstance((entry or {}).get("env_vars"), list) else []
        want = own_lines(prefix, [*ENV_VARS, *[v for v in have if isinstance(v, str) and v not in ENV_VARS]])
        body, seen, i = [], set(), start + 1
        while i < end:
            m = _KEY_LINE.match(lines[i])
            key = m.group(1).strip('"') if m else None
            if key in OWN_KEYS and key not in seen:
                j = _value_end(lines, i, end)
                body.append(want[key] + "\n")
                seen.add(key)
                i = j
                continue
            body.append(lines[i])
            i += 1
        body += [want[k] + "\n" for k in OWN_KEYS if k not in seen]
        new = "".join(lines[:start + 1] + body + lines[end:])
    got = ((_check_rest(path, text, new) or {}).get("mcp_servers") or {}).get("recalld")
    if got is not None and (got.get("command") != prefix[0] or got.get("args") != [*prefix[1:], "mcp"]
                            or not set(ENV_VARS) <= set(got.get("env_vars") or ())):
        raise InstallError(f"{path}: recalld's server did not read back as written; nothing was changed")
    return new, ([] if new == text else ["mcp_servers.recalld"])


def remove_server(text: str) -> str:
    """The file without recalld's server table, its subtables, recalld's comment above it
    and the legacy markers; a foreign server named recalld stays."""
    lines = text.splitlines(keepends=True)
    parsed = None
    try:
        parsed = load("config.toml", text)
    except InstallError:
        pass
    entry = ((parsed or {}).get("mcp_servers") or {}).get("recalld") if parsed else None
    if parsed is not None and entry is not None and not is_recalld_mcp(entry):
        return text
    spans = [(s, e) for s, e, key in tables(lines) if key[:2] == TABLE]
    drop = set()
    for s, e in spans:
        e = _body_end(lines, s, e)
        drop.update(range(s, e))
        k = s - 1
        while k >= 0 and lines[k].rstrip("\n") in (COMMENT, *LEGACY_MARKS):
            drop.add(k)
            k -= 1
    drop.update(i for i, ln in enumerate(lines) if ln.rstrip("\n") in LEGACY_MARKS)
    return _squeeze(lines, drop)


def _squeeze(lines: list, drop: set) -> str:
    """The lines without `drop`, and without the blank line that led into a dropped span when
    nothing but a blank line or the end follows it."""
    keep = [i for i in range(len(lines)) if i not in drop]
    out = []
    for n, i in enumerate(keep):
        nxt = keep[n + 1] if n + 1 < len(keep) else None
        gap = nxt is None or nxt != i + 1
        if not lines[i].strip() and gap and (nxt is None or not lines[nxt].strip()) and (i + 1) in drop:
            continue
        out.append(lines[i])
    return "".join(out)


def has_server(text: str) -> bool:
    return _find(text.splitlines(keepends=True), TABLE) is not None


# --- trust of recalld's hooks ----------------------------------------------------------------


def trust_key(key: str) -> tuple:
    return ("hooks", "state", key)


def trusted_hashes(parsed: "dict | None") -> dict:
    state = ((parsed or {}).get("hooks") or {}).get("state") if isinstance((parsed or {}).get("hooks"), dict) else None
    if not isinstance(state, dict):
        return {}
    return {k: v.get("trusted_hash") for k, v in state.items() if isinstance(v, dict)}


def set_trust(path, text: str, hashes: dict) -> tuple:
    """(new text, keys written, keys left: defined in a form recalld does not edit) with
    `trusted_hash` set for each hook key, as Codex's /hooks review writes it."""
    parsed = load(path, text)
    have = trusted_hashes(parsed)
    lines = text.splitlines(keepends=True)
    written, left = [], []
    for key, digest in hashes.items():
        if have.get(key) == digest:
            continue
        found = _find(lines, trust_key(key))
        line = f"trusted_hash = {toml_str(digest)}\n"
        if found is None and key in have:
            left.append(key)
            continue
        if found is None:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines += (["\n"] if lines and lines[-1].strip() else []) + [f"[hooks.state.{toml_str(key)}]\n", line]
        else:
            start, end, _ = found
            end = _body_end(lines, start, end)
            at = next((i for i in range(start + 1, end) if (_KEY_LINE.match(lines[i]) or [None, None])[1] == "trusted_hash"),
                      None)
            if at is None:
                lines.insert(start + 1, line)
            else:
                lines[at] = line
        written.append(key)
    new = "".join(lines)
    if written:
        parsed = _check_rest(path, text, new, written)
        if parsed is not None and any(trusted_hashes(parsed).get(k) != hashes[k] for k in written):
            raise InstallError(f"{path}: the trust entries did not read back as written; nothing was changed")
    return new, written, left


def remove_trust(text: str, hashes: dict) -> str:
    """The file without the trust tables recalld wrote (`hashes`: key -> the hash it wrote),
    where each still holds only that hash; a table Codex changed since stays."""
    lines = text.splitlines(keepends=True)
    drop = set()
    for s, e, key in tables(lines):
        if len(key) == 3 and key[:2] == ("hooks", "state") and key[2] in hashes:
            e = _body_end(lines, s, e)
            body = [ln for ln in lines[s + 1:e] if ln.strip() and not ln.lstrip().startswith("#")]
            if body == [f"trusted_hash = {toml_str(hashes[key[2]])}\n"] or \
                    [b.rstrip("\n") for b in body] == [f"trusted_hash = {toml_str(hashes[key[2]])}"]:
                drop.update(range(s, e))
    return _squeeze(lines, drop) if drop else text

"""Codex's config.toml: recalld's MCP server table and the trust entries of recalld's hooks,
found by what they are and edited through tomlkit, which keeps every comment and the layout.

Codex rewrites config.toml itself (`codex mcp add`, the /hooks review): it keeps tables but
not always the comments between them, and it puts its own tables wherever it likes. So recalld
never relies on comment markers: its server is the `[mcp_servers.recalld]` table (with its
subtables), its trust entries are `[hooks.state."<hooks.json>:<event>:<group>:<handler>"]`
tables naming recalld's hooks. A table recalld adds goes at the end of the file; one that is
there is edited in place. Everything else stays byte for byte, and the result is parsed again
(tomllib where it exists, Python 3.11+) and must equal the input outside recalld's keys.

tomlkit is imported inside the functions: this module is on the install path only, and the
command line imports it at start.
"""

import json
from pathlib import Path

from recalld.install.entries import InstallError, is_recalld_mcp

TABLE = ("mcp_servers", "recalld")
COMMENT = "# recalld: added by `recalld install codex`; `recalld uninstall codex` removes it"
# The marked block of the first installs: its comment lines are dropped where found.
LEGACY_MARKS = ("# >>> recalld: added by `recalld install codex`; `recalld uninstall codex` removes this block >>>",
                "# <<< recalld <<<")
# Codex hands an MCP server only HOME, LOGNAME, PATH, SHELL, USER, LANG, LC_ALL, TERM, TMPDIR
# and TZ unless the server names more: without these, `recalld mcp` reads the default store
# and serves another agent identity than the hooks.
ENV_VARS = ("RECALLD_HOME", "RECALLD_AGENT", "XDG_DATA_HOME")
OWN_KEYS = ("command", "args", "env_vars")


def _values(prefix: list, env_vars=ENV_VARS) -> dict:
    return {"command": prefix[0], "args": [*prefix[1:], "mcp"], "env_vars": list(env_vars)}


def _nested(keys: tuple, body: dict) -> str:
    """`[a.b.c]` with body's keys, as tomlkit writes it (a and b implicit, so no `[a]` header)."""
    import tomlkit

    table = tomlkit.table()
    for k, v in body.items():
        table.add(k, v)
    for k in reversed(keys[1:]):
        outer = tomlkit.table(is_super_table=True)
        outer.add(k, table)
        table = outer
    doc = tomlkit.document()
    doc.add(keys[0], table)
    return tomlkit.dumps(doc)


def server_table(prefix: list) -> str:
    return f"{COMMENT}\n" + _nested(TABLE, _values(prefix))


def toml_block(prefix: list) -> str:
    """What install adds to a config.toml without recalld's server (hooks/ shows it)."""
    return server_table(prefix)


# --- parsing -----------------------------------------------------------------------------------


def load(path, text: str) -> "dict | None":
    """The parsed file as plain values (tomllib's reading, the reference the edits are checked
    against; tomlkit's on Python 3.10, which has no tomllib)."""
    try:
        import tomllib
    except ImportError:
        return _unwrap(_document(path, text))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InstallError(f"{path} is not valid TOML ({e}); nothing was changed")


def _document(path, text: str):
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text)
    except TOMLKitError as e:
        raise InstallError(f"{path} is not valid TOML ({e}); nothing was changed")


def _unwrap(doc) -> dict:
    return json.loads(json.dumps(doc.unwrap(), default=str))


def _child(container, key):
    try:
        return container[key] if key in container else None
    except (KeyError, TypeError):
        return None


def _table(doc, keys: tuple):
    """The item at keys when it is a table with its own `[header]` (not an inline table, not
    dotted keys, not only the parent of subtables); else None."""
    from tomlkit.items import Table

    node = doc
    for k in keys:
        node = _child(node, k) if isinstance(node, dict) else None
        if node is None:
            return None
    return node if isinstance(node, Table) and not node.is_super_table() else None


def _drop_lines(text: str, marks) -> str:
    return "".join(ln for ln in text.splitlines(keepends=True) if ln.rstrip("\r\n") not in marks)


def _dump(doc, before: str) -> str:
    """The document as text, without blank lines a removal left at the end of the file (the
    blank line that led into a table recalld added there)."""
    import tomlkit

    out = tomlkit.dumps(doc)
    trailing = len(before) - len(before.rstrip("\n"))
    if out.strip() and len(out) - len(out.rstrip("\n")) > max(trailing, 1):
        out = out.rstrip("\n") + "\n" * max(trailing, 1)
    return out if out.strip() else ""


def _append(text: str, block: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return text + ("\n" if text.strip() else "") + block


def _prune(doc, keys: tuple) -> None:
    """Delete keys[-1] under keys[:-1], then each parent left empty."""
    chain = [doc]
    for k in keys[:-1]:
        chain.append(chain[-1][k])
    del chain[-1][keys[-1]]
    for parent, k, node in reversed(list(zip(chain[:-1], keys[:-1], chain[1:]))):
        if len(node) == 0:
            del parent[k]


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
    clean = _drop_lines(text, LEGACY_MARKS)
    doc = _document(path, clean)
    table = _table(doc, TABLE)
    entry = ((parsed or {}).get("mcp_servers") or {}).get("recalld") if parsed is not None else None
    if table is None and entry is not None:
        raise InstallError(f"{path} defines mcp_servers.recalld in a form recalld does not edit (not a "
                           "[mcp_servers.recalld] table); nothing was changed (make it a table, or pass --no-mcp)")
    if entry is not None and not is_recalld_mcp(entry) and not force:
        raise InstallError(f"{path} already has an MCP server named recalld that does not run `recalld mcp`; "
                           "nothing was changed (pass --force to replace it)")
    if table is None:
        new = _append(clean, server_table(prefix))
    else:
        have = entry.get("env_vars") if isinstance(entry.get("env_vars"), list) else []
        want = _values(prefix, [*ENV_VARS, *[v for v in have if isinstance(v, str) and v not in ENV_VARS]])
        for key in OWN_KEYS:
            if entry.get(key) != want[key]:  # an equal value keeps its own layout
                table[key] = want[key]
        new = _dump(doc, clean)
    got = ((_check_rest(path, text, new) or {}).get("mcp_servers") or {}).get("recalld")
    if got is not None and (got.get("command") != prefix[0] or got.get("args") != [*prefix[1:], "mcp"]
                            or not set(ENV_VARS) <= set(got.get("env_vars") or ())):
        raise InstallError(f"{path}: recalld's server did not read back as written; nothing was changed")
    return new, ([] if new == text else ["mcp_servers.recalld"])


def remove_server(text: str) -> str:
    """The file without recalld's server table, its subtables, recalld's comment above it
    and the legacy markers; a foreign server named recalld, or a file that does not parse,
    stays as it is."""
    try:
        doc = _document("config.toml", text)
    except InstallError:
        return text
    entry = _unwrap(doc).get("mcp_servers", {}).get("recalld") if isinstance(doc.get("mcp_servers"), dict) else None
    if entry is not None and not is_recalld_mcp(entry):
        return text
    clean = _drop_lines(text, (COMMENT, *LEGACY_MARKS))
    if _table(doc, TABLE) is None:
        return clean
    doc = _document("config.toml", clean)
    _prune(doc, TABLE)
    return _dump(doc, clean)


def has_server(text: str) -> bool:
    try:
        return _table(_document("config.toml", text), TABLE) is not None
    except InstallError:
        return False


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
    doc = _document(path, text)
    written, left, blocks = [], [], []
    for key, digest in hashes.items():
        if have.get(key) == digest:
            continue
        table = _table(doc, trust_key(key))
        if table is not None:
            table["trusted_hash"] = digest
        elif key in have:
            left.append(key)
            continue
        else:
            blocks.append(_nested(trust_key(key), {"trusted_hash": digest}))
        written.append(key)
    if not written:
        return text, [], left
    new = _dump(doc, text) if len(blocks) < len(written) else text
    for block in blocks:
        new = _append(new, block)
    parsed = _check_rest(path, text, new, written)
    if parsed is not None and any(trusted_hashes(parsed).get(k) != hashes[k] for k in written):
        raise InstallError(f"{path}: the trust entries did not read back as written; nothing was changed")
    return new, written, left


def remove_trust(text: str, hashes: dict) -> str:
    """The file without the trust tables recalld wrote (`hashes`: key -> the hash it wrote),
    where each still holds only that hash; a table Codex changed since stays."""
    try:
        doc = _document("config.toml", text)
    except InstallError:
        return text
    drop = [key for key, digest in hashes.items()
            if _table(doc, trust_key(key)) is not None
            and _unwrap(_table(doc, trust_key(key))) == {"trusted_hash": digest}]
    if not drop:
        return text
    for key in drop:
        _prune(doc, trust_key(key))
    return _dump(doc, text)

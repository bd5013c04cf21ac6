"""Codex's config.toml: recalld's MCP server as one marked block, added and removed whole.

The rest of the file is never parsed for rewriting, only (with tomllib, Python 3.11+) checked
before and after, so comments and layout outside the block stay byte for byte.
"""

import json
from pathlib import Path

from recalld.install.entries import InstallError

TOML_BEGIN = "# >>> recalld: added by `recalld install codex`; `recalld uninstall codex` removes this block >>>"
TOML_END = "# <<< recalld <<<"


def _toml_str(s: str) -> str:
    # A JSON string without ASCII escaping is a valid TOML basic string, bar DEL.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007F")


def toml_block(prefix: list) -> str:
    args = ", ".join(_toml_str(a) for a in [*prefix[1:], "mcp"])
    return (f"{TOML_BEGIN}\n[mcp_servers.recalld]\ncommand = {_toml_str(prefix[0])}\n"
            f"args = [{args}]\n{TOML_END}\n")


def _toml_load(path: Path, text: str) -> "dict | None":
    try:
        import tomllib
    except ImportError:  # Python 3.10: no parser in the standard library; skip the check
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InstallError(f"{path} is not valid TOML ({e}); nothing was changed")


def find_block(lines: list) -> "tuple | None":
    b = next((i for i, ln in enumerate(lines) if ln.rstrip("\n") == TOML_BEGIN), None)
    if b is None:
        return None
    e = next((i for i in range(b + 1, len(lines)) if lines[i].rstrip("\n") == TOML_END), None)
    if e is None:
        return None
    return b, e


def remove_toml_block(text: str) -> str:
    lines = text.splitlines(keepends=True)
    span = find_block(lines)
    if span is None:
        return text
    b, e = span
    if b > 0 and lines[b - 1].strip() == "":
        b -= 1  # the blank line install put before the block
    return "".join(lines[:b] + lines[e + 1:])


def merge_toml(path: Path, text: "str | None", prefix: list, force: bool) -> tuple:
    text = text or ""
    _toml_load(path, text)
    lines = text.splitlines(keepends=True)
    block = toml_block(prefix)
    span = find_block(lines)
    if span is not None:
        b, e = span
        new = "".join(lines[:b]) + block + "".join(lines[e + 1:])
    else:
        rest = _toml_load(path, text)
        if rest is not None and "recalld" in (rest.get("mcp_servers") or {}):
            raise InstallError(f"{path} already defines [mcp_servers.recalld] outside recalld's marked "
                               "block; nothing was changed (remove it, or pass --no-mcp)")
        if text and not text.endswith("\n"):
            text += "\n"
        new = text + ("\n" if text else "") + block
    parsed = _toml_load(path, new)
    if parsed is not None:
        got = (parsed.get("mcp_servers") or {}).get("recalld") or {}
        if got.get("command") != prefix[0] or got.get("args") != [*prefix[1:], "mcp"]:
            raise InstallError(f"{path}: the recalld block did not read back as written; nothing was changed")
    return new, ([] if new == text else ["mcp_servers.recalld"])

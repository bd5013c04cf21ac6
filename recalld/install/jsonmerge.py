"""Merging recalld's hooks and MCP server into an agent's JSON settings, and taking exactly
those out again. Everything else in the file is kept as it was, in order.
"""

import copy
import json
from pathlib import Path

from recalld import agents
from recalld.install.entries import InstallError, group, is_recalld_handler, is_recalld_mcp


def load_json(path: Path, text: "str | None") -> dict:
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InstallError(f"{path} is not valid JSON ({e}); nothing was changed. Fix it (recalld will "
                           "not rewrite a file it cannot parse, comments included), or add the "
                           "snippet from hooks/ by hand")
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object; nothing was changed")
    return data


def dump_json(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# Keys some agents keep inside `hooks` next to the events (their adapters say which). Every
# agent's file is read with all of them, so none is ever taken for an event.
HOOKS_CONFIG_KEYS = tuple(dict.fromkeys(k for a in agents.ADAPTERS for k in a.hooks_config_keys))


def _events(hooks: dict) -> list:
    return [e for e in hooks if e not in HOOKS_CONFIG_KEYS]


def _check_hooks_shape(path: Path, hooks) -> None:
    if not isinstance(hooks, dict):
        raise InstallError(f"{path}: `hooks` is not an object; nothing was changed")
    for event, groups in hooks.items():
        if event in HOOKS_CONFIG_KEYS:
            continue
        if not isinstance(groups, list):
            raise InstallError(f"{path}: hooks.{event} is not a list; nothing was changed")
        for g in groups:
            if not isinstance(g, dict) or not isinstance(g.get("hooks", []), list):
                raise InstallError(f"{path}: hooks.{event} has an entry that is not "
                                   "{\"matcher\", \"hooks\": [...]}; nothing was changed")


def _strip_ours(groups: list) -> tuple:
    """Remove recalld handlers from a list of matcher groups. Returns (new groups, index of the
    first group that held one or None). Groups left empty by the removal are dropped."""
    out, first = [], None
    for g in groups:
        hs = g.get("hooks", [])
        keep = [h for h in hs if not is_recalld_handler(h)]
        if len(keep) == len(hs):
            out.append(g)
            continue
        if first is None:
            # our new group goes where the old one was (after it, if the user's handlers stay)
            first = len(out) + (1 if keep else 0)
        if keep:
            out.append(dict(g, hooks=keep))
    return out, first


def merge_hooks(data: dict, spec: list, path: Path) -> list:
    """Put recalld's handlers into data["hooks"] (in place). Returns a summary. An entry that is
    already exactly right stays where it is, so a second install changes nothing."""
    hooks = data.setdefault("hooks", {})
    _check_hooks_shape(path, hooks)
    wanted: dict = {}
    for native, matcher, handler in spec:
        wanted.setdefault(native, []).append(group(matcher, handler))
    what = []
    for event in _events(hooks):
        if event not in wanted:
            groups, first = _strip_ours(hooks[event])
            if first is not None:
                what.append(f"removed stale {event}")
                if groups:
                    hooks[event] = groups
                else:
                    del hooks[event]
    for event, groups_wanted in wanted.items():
        current = hooks.get(event, [])
        ours = [g for g in current if any(is_recalld_handler(h) for h in g.get("hooks", []))]
        if ours == groups_wanted:
            continue
        groups, first = _strip_ours(current)
        at = len(groups) if first is None else first
        hooks[event] = groups[:at] + copy.deepcopy(groups_wanted) + groups[at:]
        what.append(event)
    return what


def remove_hooks(data: dict, path: Path) -> list:
    hooks = data.get("hooks")
    if hooks is None:
        return []
    _check_hooks_shape(path, hooks)
    removed = []
    for event in _events(hooks):
        groups, first = _strip_ours(hooks[event])
        if first is not None:
            removed.append(event)
            hooks[event] = groups
    return removed


def merge_mcp_json(data: dict, entry: dict, path: Path, force: bool) -> list:
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError(f"{path}: `mcpServers` is not an object; nothing was changed")
    existing = servers.get("recalld")
    if existing == entry:
        return []
    if existing is not None and not is_recalld_mcp(existing) and not force:
        raise InstallError(f"{path} already has an MCP server named `recalld` that does not run "
                           "`recalld mcp`; nothing was changed (pass --force to replace it, or --no-mcp)")
    servers["recalld"] = entry
    return ["mcpServers.recalld"]


def remove_mcp_json(data: dict) -> list:
    servers = data.get("mcpServers")
    if isinstance(servers, dict) and is_recalld_mcp(servers.get("recalld")):
        del servers["recalld"]
        return ["mcpServers.recalld"]
    return []


def containers(data: dict) -> set:
    out = set()
    if "hooks" in data:
        out.add("hooks")
        if isinstance(data["hooks"], dict):
            out.update(f"hooks.{e}" for e in _events(data["hooks"]))
    if "mcpServers" in data:
        out.add("mcpServers")
    return out


def drop_empty(data: dict, candidates: set, created: "set | None", emptied: set) -> None:
    """Delete containers left empty: the ones this install created (per the install log) or,
    with no log to go by, the ones that became empty by recalld's removal."""
    def ok(name):
        return name in created if created is not None else name in emptied

    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        for event in _events(hooks):
            if hooks[event] == [] and ok(f"hooks.{event}") and f"hooks.{event}" in candidates:
                del hooks[event]
        if hooks == {} and ok("hooks"):
            del data["hooks"]
    if data.get("mcpServers") == {} and ok("mcpServers"):
        del data["mcpServers"]


def parses_to(text: str, data: dict) -> bool:
    try:
        return json.loads(text) == data
    except ValueError:
        return False


def is_empty_container(data: dict, name: str) -> bool:
    if name == "hooks":
        return data.get("hooks") == {} or (isinstance(data.get("hooks"), dict)
                                           and all(v == [] for v in data["hooks"].values()))
    if name == "mcpServers":
        return data.get("mcpServers") == {}
    if name.startswith("hooks."):
        return (data.get("hooks") or {}).get(name[6:]) == []
    return False


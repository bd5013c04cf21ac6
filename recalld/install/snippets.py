"""The example files in hooks/: what `recalld install` writes, generated from the adapters and
the installer (`python3 -m recalld.install.snippets` rewrites them; tests/test_install.py fails
when they drift).

Each installable agent gets its hooks file, and its MCP server file where that is another one,
named after the project-scope file (without a leading dot); the Claude Code plugin and the git
hook come on top.
"""

import os
from pathlib import Path

from recalld import agents
from recalld.agents import claude_code, git
from recalld.install.entries import group, hooks_config
from recalld.install.githook import git_hook_script
from recalld.install.jsonmerge import dump_json
from recalld.install.plan import read_text
from recalld.install.toml import toml_block

PLUGIN_MANIFEST = {
    "name": "recalld",
    "version": "0.1.0",
    "description": "Involuntary recall: relevant memories pushed into context before each prompt "
                   "and tool call, with a receipt for every hook run.",
    "license": "Apache-2.0",
}
# The plugin cannot know where recalld is installed, so its hooks go through PATH and do
# nothing (exit 0) when recalld is not there, rather than failing every prompt.
PLUGIN_WRAPPER = """#!/bin/sh
# recalld's Claude Code plugin: run `recalld hook EVENT` when recalld is on PATH; else nothing.
command -v recalld >/dev/null 2>&1 || exit 0
exec recalld hook "$@"
"""
GIT_SNIPPET = f"{git.ADAPTER.name}/{git.HOOK_NAME}"
EXECUTABLE_SNIPPETS = (GIT_SNIPPET, "claude-code/plugin/bin/recalld-hook")


def snippet_name(adapter, path: str) -> str:
    return f"{adapter.install_name}/{os.path.basename(path).lstrip('.')}"


def snippets() -> dict:
    """Relative path under hooks/ -> content, with the portable command `recalld`."""
    p = ["recalld"]
    out = {}
    for a in agents.ADAPTERS:
        if not a.install_name:
            continue
        hooks_file, mcp_file = a.settings_files("project", os.sep)
        hooks = {"hooks": hooks_config(a, p)}
        if a.mcp_format == "toml":
            out[snippet_name(a, mcp_file)] = toml_block(p)
        elif mcp_file == hooks_file:
            hooks["mcpServers"] = {"recalld": a.mcp_entry(p)}
        else:
            out[snippet_name(a, mcp_file)] = dump_json({"mcpServers": {"recalld": a.mcp_entry(p)}})
        out[snippet_name(a, hooks_file)] = dump_json(hooks)
    claude = claude_code.ADAPTER
    plugin_hooks = {"hooks": {}}
    for native, matcher, ev, t in claude.install_hooks():
        h = {"type": "command", "command": f"\"${{CLAUDE_PLUGIN_ROOT}}/bin/recalld-hook\" {ev}", "timeout": t}
        plugin_hooks["hooks"].setdefault(native, []).append(group(matcher, h))
    out.update({
        "claude-code/plugin/hooks/hooks.json": dump_json(plugin_hooks),
        "claude-code/plugin/.mcp.json": dump_json({"mcpServers": {"recalld": claude.mcp_entry(p)}}),
        "claude-code/plugin/.claude-plugin/plugin.json": dump_json(PLUGIN_MANIFEST),
        "claude-code/plugin/bin/recalld-hook": PLUGIN_WRAPPER,
        GIT_SNIPPET: git_hook_script(p),
    })
    return out


def write_snippets(root: Path) -> list:
    written = []
    for rel, text in snippets().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if read_text(path) != text:
            path.write_text(text, encoding="utf-8")
            written.append(rel)
        if rel in EXECUTABLE_SNIPPETS:
            path.chmod(0o755)
    return written


if __name__ == "__main__":  # python3 -m recalld.install.snippets: regenerate hooks/
    root = Path(__file__).resolve().parents[2] / "hooks"
    for rel in write_snippets(root):
        print(f"wrote hooks/{rel}")

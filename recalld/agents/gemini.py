"""Gemini CLI: hooks and MCP servers in one settings.json, handler timeouts in milliseconds
(facts from ../shared/reference/agent-hooks.md). recalld does not read its transcripts yet.
"""

import os

from recalld.agents.base import BY_EVENT_NAME, NOT_MINE, Adapter

# Its native events that neither Claude Code nor Codex uses: one of them names the agent.
DETECT_EVENTS = frozenset({"BeforeAgent", "AfterAgent", "BeforeTool", "AfterTool", "BeforeModel",
                           "AfterModel", "BeforeToolSelection", "PreCompress"})


class Gemini(Adapter):
    name = "gemini"
    install_name = "gemini"
    known_events = DETECT_EVENTS | {"SessionStart", "SessionEnd", "Notification"}
    events = (("SessionStart", "session-start"), ("BeforeAgent", "prompt-submit"),
              ("BeforeTool", "pre-tool"), ("AfterTool", "post-tool"), ("AfterAgent", "stop"))
    bash_tools = frozenset({"run_shell_command"})
    write_tools = frozenset({"write_file", "replace"})
    pre_tool_matcher = "run_shell_command|write_file|replace"
    hook_flag = "gemini"
    mcp_format = "json"
    # Older Gemini CLI releases keep these switches inside `hooks`, next to the events.
    hooks_config_keys = ("enabled", "disabled", "notifications")

    def detect(self, payload):
        return BY_EVENT_NAME if payload.get("hook_event_name") in DETECT_EVENTS else NOT_MINE

    def settings_files(self, scope, root):
        base = os.path.join(root, ".gemini") if scope == "project" else os.path.join(os.path.expanduser("~"), ".gemini")
        path = os.path.join(base, "settings.json")
        return path, path

    def hook_handler(self, command, event, timeout_s):
        # Gemini CLI counts handler timeouts in milliseconds.
        return {"name": f"recalld-{event}", "type": "command", "command": command, "timeout": timeout_s * 1000}

    def install_notes(self, scope, hooks_file, hooks_data):
        d = hooks_data or {}
        if (d.get("hooksConfig") or {}).get("enabled") is False or (d.get("hooks") or {}).get("enabled") is False:
            return [f"hooks are disabled in {hooks_file} (hooksConfig.enabled = false); recalld "
                    "left that setting alone"]
        return []


ADAPTER = Gemini()

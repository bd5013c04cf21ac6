"""OpenAI Codex CLI: hooks in hooks.json, the MCP server in config.toml, rollouts under
~/.codex/sessions (facts from Codex's hook documentation and the rollouts the pinned client wrote).

Rollout lines are `{"timestamp", "type", "payload"}` with `session_meta`, `turn_context`,
`response_item` (message, reasoning, function_call(_output), custom_tool_call(_output)) and
`event_msg` (user_message, task_complete...); rollouts from before 2025 have bare items.
"""

import os

from recalld.agents.base import BY_FIELD, NOT_MINE, Adapter
from recalld.agents.claude_code import deny_output


def home() -> str:
    env = os.environ.get("CODEX_HOME")
    return os.path.expanduser(env) if env else os.path.join(os.path.expanduser("~"), ".codex")


class Codex(Adapter):
    name = "codex"
    install_name = "codex"
    shell_markers = ("CODEX_THREAD_ID", "CODEX_SANDBOX")
    known_events = frozenset({"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
                              "PreCompact", "SubagentStart", "SubagentStop"})
    events = (("SessionStart", "session-start"), ("UserPromptSubmit", "prompt-submit"),
              ("PreToolUse", "pre-tool"), ("PostToolUse", "post-tool"), ("Stop", "stop"),
              ("SubagentStop", "stop"))
    # Older Codex releases do not know SubagentStop, so install leaves it out.
    not_installed = frozenset({"SubagentStop"})
    # Shell calls reach hooks as "Bash" and patches as "apply_patch" (observed); the rest are
    # the names of Codex's shell tools and what the pre-tool matcher lists.
    bash_tools = frozenset({"bash", "shell", "exec_command", "local_shell", "container.exec", "shell_command",
                            "unified_exec"})
    write_tools = frozenset({"apply_patch", "edit", "write"})
    delegate_tools = frozenset({"spawn_agent"})
    pre_tool_matcher = "Bash|apply_patch|Edit|Write"
    hook_flag = "codex"
    mcp_format = "toml"
    # Observed in 0.171.0: SessionStart and UserPromptSubmit context arrive as developer
    # messages in the first request; PreToolUse context after the call ran, PostToolUse
    # context with its output; Stop's additionalContext is ignored.
    context_events = frozenset({"session-start", "prompt-submit", "pre-tool", "post-tool"})
    # The PreToolUse deny in Claude Code's form stops the call; the reason arrives as its output.
    gate_events = frozenset({"pre-tool"})

    def detect(self, payload):
        return BY_FIELD if "turn_id" in payload else NOT_MINE

    def gate_output(self, native_event, reason):
        return deny_output(native_event, reason)

    def tool_input(self, tool_name, tool_input):
        # apply_patch reaches PreToolUse with the whole patch in `command` (observed): it is
        # what is being written, and its `*** Add File: ...` lines name the files.
        if (tool_name or "").lower() == "apply_patch" and isinstance(tool_input, dict):
            patch = tool_input.get("command")
            if isinstance(patch, list):
                patch = "\n".join(p for p in patch if isinstance(p, str))
            if isinstance(patch, str) and "patch" not in tool_input:
                from recalld.agents.codex_records import patch_paths  # only for a patch

                return dict(tool_input, patch=patch, path=patch_paths(patch))
        return tool_input

    def settings_files(self, scope, root):
        base = os.path.join(root, ".codex") if scope == "project" else home()
        return os.path.join(base, "hooks.json"), os.path.join(base, "config.toml")

    def install_notes(self, scope, hooks_file, hooks_data):
        # Trust (Codex skips untrusted hooks) is install's to settle: recalld/install/codextrust.py.
        return ["Codex before 0.124 also needs `[features] codex_hooks = true` in config.toml, "
                "which recalld does not write."]

    def transcript_roots(self):
        return [os.path.join(home(), "sessions")]

    def owns_transcript(self, path, first):
        if os.path.basename(path).startswith("rollout-"):
            return True
        if isinstance(first, dict) and ("payload" in first or first.get("type") == "session_meta"):
            return True
        return "/.codex/" in path.replace(os.sep, "/")

    def parse_record(self, o, st):
        from recalld.agents.codex_records import parse_record  # not on the hook's import path

        return parse_record(o, st)


ADAPTER = Codex()


def __getattr__(name):
    # The transcript parser lives in codex_records.py: the hook imports this module
    # on every run and never parses a transcript. Its old names still resolve here.
    if name in ('parse_record', '_parts_text', '_output', '_prompt', 'patch_paths', 'PATCH_FILE_MARKS',
                'TURN_END_EVENTS', '_ITEM_TYPES', '_INJECTED'):
        from recalld.agents import codex_records

        return getattr(codex_records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

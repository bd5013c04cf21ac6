"""Claude Code: hooks in settings.json, MCP servers in ~/.claude.json or .mcp.json, transcripts
under ~/.claude/projects (facts from Claude Code's hook documentation and real transcripts it wrote).

Transcripts: `~/.claude/projects/<encoded-cwd>/<session>.jsonl`, subagents in
`<session>/subagents/agent-<id>.jsonl` (older versions: `agent-<id>.jsonl` beside the
session). `type` user/assistant carry `message.content` (a string or blocks: text, tool_use,
tool_result, thinking); one API message is often split over several lines that share
`message.id`, so each line is parsed on its own and blocks are never merged. `system` records
with subtype `turn_duration` or `stop_hook_summary` mark a turn end, and so does an assistant
message whose `stop_reason` is `end_turn` (older versions). What the user types while the agent
works is a `queue-operation` record: `enqueue` with its `content`, then `remove` when the running
turn takes it in (no user record follows: this is the only place its words are written),
`dequeue` when it is sent as the next prompt (which has its own record), `popAll` when the
user takes it back unsent. A queued slash command (`/mcp`) is the client's, not words for the
model.
"""

import os

from recalld.agents.base import Adapter
from recalld.core import jsonio

def config_dir() -> str:
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return os.path.expanduser(env) if env else os.path.join(os.path.expanduser("~"), ".claude")


def global_file() -> str:
    """~/.claude.json (inside CLAUDE_CONFIG_DIR when that is set): user-scope MCP servers."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return os.path.join(os.path.expanduser(env) if env else os.path.expanduser("~"), ".claude.json")


class ClaudeCode(Adapter):
    name = "claude"
    install_name = "claude-code"
    aliases = ("claude_code",)
    shell_markers = ("CLAUDECODE",)
    known_events = frozenset({
        "SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SubagentStop",
        "PreCompact", "SessionEnd", "SubagentStart", "PostToolUseFailure", "Notification", "PostCompact"})
    events = (("SessionStart", "session-start"), ("UserPromptSubmit", "prompt-submit"),
              ("PreToolUse", "pre-tool"), ("PostToolUse", "post-tool"), ("PostToolUseFailure", "post-tool"),
              ("Stop", "stop"), ("SubagentStop", "stop"))
    bash_tools = frozenset({"bash"})
    write_tools = frozenset({"write", "edit", "multiedit", "notebookedit"})
    delegate_tools = frozenset({"task", "agent"})
    pre_tool_matcher = "Bash|Write|Edit|MultiEdit|NotebookEdit|Task|Agent"
    mcp_format = "json"
    # Claude Code marks its payloads and transcripts with nothing the others lack: it is what
    # an unclaimed payload or transcript is taken to be.
    fallback = True
    # Observed in 2.1.332: SessionStart and UserPromptSubmit context arrive with the prompt;
    # PreToolUse context only after the tool ran (so a crystal that must come first gates);
    # PostToolUse with the result; Stop context reaches the model and it takes another step.
    # A tool call that fails (a command's non-zero exit) fires PostToolUseFailure instead of
    # PostToolUse, with the message in `error`: the moment an error-bound crystal is for.
    context_events = frozenset({"session-start", "prompt-submit", "pre-tool", "post-tool", "stop"})
    # A PreToolUse deny stops the call before it runs; the reason arrives as its tool_result.
    gate_events = frozenset({"pre-tool"})

    def settings_files(self, scope, root):
        if scope == "project":
            return os.path.join(root, ".claude", "settings.json"), os.path.join(root, ".mcp.json")
        return os.path.join(config_dir(), "settings.json"), global_file()

    def mcp_entry(self, prefix):
        return {"type": "stdio", "command": prefix[0], "args": [*prefix[1:], "mcp"]}

    def gate_output(self, native_event, reason):
        return deny_output(native_event, reason)

    def install_notes(self, scope, hooks_file, hooks_data):
        if scope == "project":
            return ["Claude Code asks once before it starts a project's .mcp.json servers."]
        return []

    def transcript_roots(self):
        return [os.path.join(config_dir(), "projects")]

    def parse_record(self, o, st):
        from recalld.agents.claude_code_records import parse_record  # not on the hook's import path

        return parse_record(o, st)


def deny_output(native_event, reason: str) -> str:
    """PreToolUse's deny (Claude Code, and Codex, which reads the same form)."""
    return jsonio.dumps({"hookSpecificOutput": {"hookEventName": native_event or "PreToolUse",
                                                "permissionDecision": "deny",
                                                "permissionDecisionReason": reason}}, ensure_ascii=False) + "\n"


ADAPTER = ClaudeCode()


def __getattr__(name):
    # The transcript parser lives in claude_code_records.py: the hook imports this module
    # on every run and never parses a transcript. Its old names still resolve here.
    if name in ('parse_record', '_block_text', 'TURN_END_SUBTYPES'):
        from recalld.agents import claude_code_records

        return getattr(claude_code_records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

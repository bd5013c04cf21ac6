"""Claude Code: hooks in settings.json, MCP servers in ~/.claude.json or .mcp.json, transcripts
under ~/.claude/projects (facts from ../shared/reference/agent-hooks.md and the real files in
../shared/data/transcripts/).

Transcripts: `~/.claude/projects/<encoded-cwd>/<session>.jsonl`, subagents in
`<session>/subagents/agent-<id>.jsonl` (older versions: `agent-<id>.jsonl` beside the
session). `type` user/assistant carry `message.content` (a string or blocks: text, tool_use,
tool_result, thinking); one API message is often split over several lines that share
`message.id`, so each line is parsed on its own and blocks are never merged. `system` records
with subtype `turn_duration` or `stop_hook_summary` mark a turn end, and so does an assistant
message whose `stop_reason` is `end_turn` (older versions).
"""

import json
import os

from recalld.agents.base import Adapter, event as _ev, exit_code_error, text_of as _str, tool_summary

TURN_END_SUBTYPES = {"turn_duration", "stop_hook_summary"}


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
        return parse_record(o, st)


def deny_output(native_event, reason: str) -> str:
    """PreToolUse's deny (Claude Code, and Codex, which reads the same form)."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": native_event or "PreToolUse",
                                              "permissionDecision": "deny",
                                              "permissionDecisionReason": reason}}, ensure_ascii=False) + "\n"


def _block_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                out.append(_str(b.get("text")))
            elif isinstance(b, str):
                out.append(b)
        return "\n".join(o for o in out if o)
    return ""


def parse_record(o: dict, st) -> list:
    """One decoded transcript record -> events (raises on a known type with a bad shape)."""
    t = o.get("type")
    if isinstance(o.get("sessionId"), str) and o["sessionId"]:
        st.session = o["sessionId"]
    if isinstance(o.get("cwd"), str) and o["cwd"]:
        st.cwd = o["cwd"]
    time, uuid = _str(o.get("timestamp")) or None, _str(o.get("uuid")) or None
    agent = st.agent
    if o.get("isSidechain") and agent == "main":
        # a sidechain record inside the main file (older versions): keep it apart from "main"
        agent = f"agent-{o['agentId']}" if isinstance(o.get("agentId"), str) else "sidechain"
    kw = dict(time=time, uuid=uuid, agent=agent)

    if t == "system":
        if o.get("subtype") in TURN_END_SUBTYPES and agent in st.open_turns:
            return [_ev(st, "system", "turn_end", "", **kw)]
        return []
    if t not in ("user", "assistant"):
        return []  # progress, summary, file-history-snapshot, queue-operation...
    msg = o.get("message")
    if not isinstance(msg, dict):
        raise ValueError("message is not an object")
    content = msg.get("content")
    out: list = []

    if t == "user":
        meta = bool(o.get("isMeta"))
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for b in blocks:
            if not isinstance(b, dict):
                continue
            bt = b.get("type")
            if bt == "text":
                text = _str(b.get("text"))
                if not text.strip():
                    continue
                if meta:
                    out.append(_ev(st, "system", "text", text, **kw))
                    continue
                if agent in st.open_turns:
                    # Older versions write no turn-end record: a new prompt closes the turn.
                    out.append(_ev(st, "system", "turn_end", "", **kw))
                out.append(_ev(st, "user", "prompt", text, **kw))
            elif bt == "tool_result":
                tid = _str(b.get("tool_use_id"))
                text = _block_text(b.get("content"))
                tur = o.get("toolUseResult")
                err = b.get("is_error") is True or exit_code_error(text)
                if isinstance(tur, dict):
                    code = tur.get("exitCode", tur.get("exit_code"))
                    if isinstance(code, int) and code != 0:
                        err = True
                    if not text and isinstance(tur.get("stderr"), str):
                        text = tur["stderr"]
                out.append(_ev(st, "tool", "tool_result", text, tool=st.tool_names.get(tid),
                               is_error=err, **kw))
        return out

    # assistant
    for b in content if isinstance(content, list) else [{"type": "text", "text": _str(content)}]:
        if not isinstance(b, dict):
            continue
        bt = b.get("type")
        if bt == "text":
            text = _str(b.get("text"))
            if text.strip():
                out.append(_ev(st, "assistant", "text", text, **kw))
        elif bt == "thinking":
            text = _str(b.get("thinking"))
            if text.strip():
                out.append(_ev(st, "assistant", "reasoning", text, **kw))
        elif bt == "tool_use":
            name = _str(b.get("name")) or None
            ti = b.get("input") if isinstance(b.get("input"), dict) else None
            if isinstance(b.get("id"), str) and name:
                st.tool_names[b["id"]] = name
            out.append(_ev(st, "assistant", "tool_call", tool_summary(name or "", ti), tool=name,
                           tool_input=ti, **kw))
    if msg.get("stop_reason") == "end_turn" and agent in st.open_turns:
        out.append(_ev(st, "system", "turn_end", "", **kw))
    return out


ADAPTER = ClaudeCode()

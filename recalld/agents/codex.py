"""OpenAI Codex CLI: hooks in hooks.json, the MCP server in config.toml, rollouts under
~/.codex/sessions (facts from ../shared/reference/agent-hooks.md).

Rollout lines are `{"timestamp", "type", "payload"}` with `session_meta`, `turn_context`,
`response_item` (message, reasoning, function_call(_output), custom_tool_call(_output)) and
`event_msg` (user_message, task_complete...); rollouts from before 2025 have bare items.
"""

import json
import os

from recalld.agents.base import (BY_FIELD, MAX_TEXT, NOT_MINE, Adapter, event as _ev, exit_code_error,
                                 text_of as _str, tool_summary)
from recalld.agents.claude_code import deny_output

TURN_END_EVENTS = {"task_complete", "turn_complete"}
_ITEM_TYPES = {"message", "reasoning", "function_call", "function_call_output",
               "custom_tool_call", "custom_tool_call_output", "local_shell_call"}
# User messages Codex writes itself (environment, instructions): not prompts.
_INJECTED = ("<environment_context", "<user_instructions", "<permissions", "# AGENTS.md",
             "<INSTRUCTIONS>")


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
        return parse_record(o, st)


PATCH_FILE_MARKS = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")


def patch_paths(patch: str) -> str:
    """The files an apply_patch patch touches, one a line."""
    out = []
    for line in patch.splitlines():
        if line.startswith(PATCH_FILE_MARKS):
            out.append(line.split(": ", 1)[1].strip())
    return "\n".join(out)


def _parts_text(content) -> str:
    if isinstance(content, str):
        return content
    out = []
    for p in content or []:
        if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text", "summary_text",
                                                     "reasoning_text"):
            out.append(_str(p.get("text")))
    return "\n".join(o for o in out if o)


def _output(raw) -> tuple:
    """function_call_output.output: plain text, or JSON {"output", "metadata": {"exit_code"}}."""
    if isinstance(raw, dict):
        data = raw
    else:
        text = _str(raw)
        data = None
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except ValueError:
                data = None
        if not isinstance(data, dict):
            return text, exit_code_error(text)
    text = _str(data.get("output")) or _str(data.get("content")) or json.dumps(data)[:MAX_TEXT]
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    code = meta.get("exit_code", data.get("exit_code"))
    err = (isinstance(code, int) and code != 0) or data.get("success") is False or exit_code_error(text)
    return text, err


def _prompt(st, text: str, time) -> list:
    out = []
    if st.agent in st.open_turns:
        out.append(_ev(st, "system", "turn_end", "", time=time))
    out.append(_ev(st, "user", "prompt", text, time=time))
    return out


def parse_record(o: dict, st) -> list:
    """One decoded rollout record -> events (raises on a known type with a bad shape)."""
    time = _str(o.get("timestamp")) or None
    t = o.get("type")
    payload = o.get("payload")
    if payload is None:
        # pre-2025 rollouts: the first line is the session meta, then bare items
        if t in _ITEM_TYPES:
            t, payload = "response_item", o
        elif "id" in o and "type" not in o:
            t, payload = "session_meta", o
        else:
            return []
    if not isinstance(payload, dict):
        raise ValueError("payload is not an object")
    if t == "session_meta":
        if isinstance(payload.get("id"), str) and payload["id"]:
            st.session = payload["id"]
        if isinstance(payload.get("cwd"), str) and payload["cwd"]:
            st.cwd = payload["cwd"]
        return []
    if t == "turn_context":
        if isinstance(payload.get("cwd"), str) and payload["cwd"]:
            st.cwd = payload["cwd"]
        return []
    if t == "event_msg":
        pt = payload.get("type")
        if pt == "user_message":
            text = _str(payload.get("message"))
            if text.strip() and text.strip() != (st.last_prompt or ""):
                st.last_prompt = text.strip()
                return _prompt(st, text, time)
            return []
        if pt in TURN_END_EVENTS and st.agent in st.open_turns:
            return [_ev(st, "system", "turn_end", "", time=time)]
        return []  # agent_message / agent_reasoning repeat response items; token_count...
    if t != "response_item":
        return []  # compacted, unknown
    pt = payload.get("type")
    if pt == "message":
        role = payload.get("role")
        text = _parts_text(payload.get("content"))
        if not text.strip():
            return []
        if role == "user":
            if text.lstrip().startswith(_INJECTED) or text.strip() == (st.last_prompt or ""):
                return []
            st.last_prompt = text.strip()
            return _prompt(st, text, time)
        if role == "assistant":
            return [_ev(st, "assistant", "text", text, time=time)]
        return []  # developer / system instructions
    if pt == "reasoning":
        text = _parts_text(payload.get("summary")) or _parts_text(payload.get("content"))
        return [_ev(st, "assistant", "reasoning", text, time=time)] if text.strip() else []
    if pt in ("function_call", "custom_tool_call", "local_shell_call"):
        name = _str(payload.get("name")) or ("shell" if pt == "local_shell_call" else None)
        call_id = _str(payload.get("call_id")) or _str(payload.get("id"))
        if pt == "function_call":
            args = payload.get("arguments")
            try:
                ti = json.loads(args) if isinstance(args, str) else args
            except ValueError:
                ti = {"arguments": args}
        elif pt == "custom_tool_call":
            ti = {"input": payload.get("input")}
        else:
            ti = payload.get("action") if isinstance(payload.get("action"), dict) else {}
        if not isinstance(ti, dict):
            ti = {"arguments": ti}
        if call_id and name:
            st.tool_names[call_id] = name
        return [_ev(st, "assistant", "tool_call", tool_summary(name or "", ti), tool=name,
                    tool_input=ti, time=time)]
    if pt in ("function_call_output", "custom_tool_call_output"):
        call_id = _str(payload.get("call_id"))
        text, err = _output(payload.get("output"))
        return [_ev(st, "tool", "tool_result", text, tool=st.tool_names.get(call_id), is_error=err,
                    time=time)]
    return []


ADAPTER = Codex()

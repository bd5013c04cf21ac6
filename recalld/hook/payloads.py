"""Agent hook payloads -> one normalized HookInput (standard library only).

Field names follow each agent's hook documentation (Claude Code, Codex, Gemini CLI, git);
the tests feed documented payloads, not shapes this module happens to expect. Which agent sent
a payload, what it calls the event, and which tool names are which act: the adapters in
recalld/agents/ say.
"""

from recalld import agents
from recalld.agents.base import strip_injected

EVENTS = agents.EVENTS

MAX_ACT_TEXT = 20_000  # a 10 MB Write is matched on its head, not parsed whole


class BadInput(Exception):
    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


class HookInput:
    """One hook run's input, whatever the agent. (A plain class: `dataclasses` pulls in
    `inspect`, which costs the hook more than everything else it imports.)"""

    __slots__ = ("event", "agent_kind", "native_event", "session", "cwd", "act", "text", "tool_name",
                 "transcript_path", "payload")

    def __init__(self, event: str, agent_kind: str, native_event: "str | None", session: "str | None",
                 cwd: "str | None", act: str, text: str = "", tool_name: "str | None" = None,
                 transcript_path: "str | None" = None, payload: "dict | None" = None):
        self.event = event  # ours: session-start | prompt-submit | pre-tool | post-tool | stop | commit
        self.agent_kind = agent_kind  # claude | codex | gemini | git
        self.native_event = native_event
        self.session = session
        self.cwd = cwd
        self.act = act  # boot | prompt | bash | write | delegate | tool | tool-result | stop | commit
        self.text = text
        self.tool_name = tool_name
        self.transcript_path = transcript_path
        self.payload = payload if payload is not None else {}


def _s(v) -> str:
    return v if isinstance(v, str) else ""


def _command_text(cmd) -> str:
    if isinstance(cmd, list):
        parts = [c for c in cmd if isinstance(c, str)]
        # Codex shells out as ["bash", "-lc", "<script>"]: the script is the command.
        if len(parts) >= 3 and parts[1] in ("-c", "-lc"):
            return parts[2]
        return " ".join(parts)
    return _s(cmd)


def tool_act(tool_name: str, tool_input) -> tuple[str, str]:
    """(act, text a crystal matches against) for one tool call."""
    name = (tool_name or "").lower()
    ti = tool_input if isinstance(tool_input, dict) else {}
    if name in agents.BASH_TOOLS:
        return "bash", _command_text(ti.get("command", ti.get("cmd")))[:MAX_ACT_TEXT]
    if name in agents.WRITE_TOOLS or name.startswith("mcp__") and "write" in name:
        path = _s(ti.get("file_path") or ti.get("path") or ti.get("notebook_path"))
        content = []
        for key in ("content", "new_string", "new_source", "input", "patch"):
            content.append(_s(ti.get(key)))
        for edit in ti.get("edits") or []:
            if isinstance(edit, dict):
                content.append(_s(edit.get("new_string")))
        if not isinstance(tool_input, dict):
            content.append(_s(tool_input))
        return "write", (path + "\n" + "\n".join(c for c in content if c))[:MAX_ACT_TEXT]
    if name in agents.DELEGATE_TOOLS:
        brief = [_s(ti.get("description")), _s(ti.get("prompt")), _s(ti.get("subagent_type"))]
        return "delegate", "\n".join(b for b in brief if b)[:MAX_ACT_TEXT]
    return "tool", ""


def normalize(event: str, payload, agent: "str | None" = None) -> HookInput:
    if not isinstance(payload, dict):
        raise BadInput("payload_not_object")
    if event not in EVENTS:
        raise BadInput("unknown_event")
    for key in ("prompt", "session_id", "cwd", "tool_name", "transcript_path", "hook_event_name",
                "last_assistant_message", "prompt_response"):
        if payload.get(key) is not None and not isinstance(payload.get(key), str):
            raise BadInput(f"bad_field_type:{key}")
    if payload.get("tool_input") is not None and not isinstance(payload.get("tool_input"), dict):
        raise BadInput("bad_field_type:tool_input")
    # --agent names the agent; else the event (git's commit), else the payload's own marks.
    adapter = agents.by_name(agent) or agents.owner_of_event(event) or agents.detect(payload)
    kind = adapter.name
    native = _s(payload.get("hook_event_name")) or adapter.native_event(event)
    hi = HookInput(
        event=event, agent_kind=kind, native_event=native or None,
        session=_s(payload.get("session_id")) or None, cwd=_s(payload.get("cwd")) or None,
        act="stop", transcript_path=_s(payload.get("transcript_path")) or None, payload=payload,
    )
    if event == "session-start":
        hi.act = "boot"
    elif event == "prompt-submit":
        prompt = _s(payload.get("prompt"))
        hi.act, hi.text = "prompt", (strip_injected(prompt) if "<" in prompt or "&lt;" in prompt else prompt)[:MAX_ACT_TEXT]
    elif event in ("pre-tool", "post-tool"):
        hi.tool_name = _s(payload.get("tool_name")) or None
        act, text = tool_act(hi.tool_name or "", adapter.tool_input(hi.tool_name, payload.get("tool_input")))
        hi.act, hi.text = (act, text) if event == "pre-tool" else ("tool-result", text)
        if event == "post-tool":
            hi.payload = dict(payload, _tool_act=act)
    elif event == "stop":
        hi.act, hi.text = "stop", _s(adapter.stop_text(payload))[:MAX_ACT_TEXT]
    elif event == "commit":
        files = payload.get("staged_files")
        hi.act = "commit"
        hi.text = "\n".join(f for f in files if isinstance(f, str)) if isinstance(files, list) else ""
    return hi

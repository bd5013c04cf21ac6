"""Codex rollout records -> events (the format: recalld/agents/codex.py's docstring).

A module of its own so that the hook, which imports every adapter on every run, does not load a
parser it never calls; the daemon imports it with its first Codex rollout.
"""

import re

from recalld.agents.base import MAX_TEXT, event as _ev, exit_code_error, text_of as _str, tool_summary
from recalld.core import jsonio

TURN_END_EVENTS = {"task_complete", "turn_complete"}
_ITEM_TYPES = {"message", "reasoning", "function_call", "function_call_output",
               "custom_tool_call", "custom_tool_call_output", "local_shell_call"}
# User messages Codex writes itself (environment, instructions): not prompts.
_INJECTED = ("<environment_context", "<user_instructions", "<permissions", "# AGENTS.md",
             "<INSTRUCTIONS>")
PATCH_FILE_MARKS = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")


def patch_paths(patch: str) -> str:
    """The files an apply_patch patch touches, one a line."""
    out = []
    for line in patch.splitlines():
        if line.startswith(PATCH_FILE_MARKS):
            out.append(line.split(": ", 1)[1].strip())
    return "\n".join(out)


# A prompt with an attached image: the response item wraps the image in text parts of its own
# ("<image name=[Image #1]>", "</image>") that the user did not type and that the prompt's
# event_msg does not repeat; kept, they made one prompt two (observed in a 2026 rollout).
_IMAGE_TAG = re.compile(r"^</?image\b[^>]*>$")


def _parts_text(content) -> str:
    if isinstance(content, str):
        return content
    out = []
    for p in content or []:
        if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text", "summary_text",
                                                     "reasoning_text"):
            text = _str(p.get("text"))
            if not (p.get("type") == "input_text" and _IMAGE_TAG.match(text.strip())):
                out.append(text)
    return "\n".join(o for o in out if o)


# A command that exits non-zero under Codex's sandbox comes back as one line of the harness's
# before its output: "failed in sandbox LinuxSeccomp with execution error: sandbox denied exec
# error, exit code: 2, stdout: ..., stderr: ...". The command failed (whatever the sandbox had
# to do with it); what it printed is the output.
SANDBOX_FAILED = "failed in sandbox "


# macOS's seatbelt denial comes as Rust's debug print of the command's output: "Denied { output:
# ExecToolCallOutput { exit_code: 128, stdout: StreamOutput { text: \"...\", ... }, stderr: ...,
# aggregated_output: StreamOutput { text: \"...\" } ... } }".
_STREAM = re.compile(r'\b(aggregated_output|stderr|stdout): StreamOutput \{ text: "((?:[^"\\]|\\.)*)"')
_EXIT_CODE = re.compile(r"\bexit_code: (-?\d+)")
_DEBUG_ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]{1,6}\}|.)", re.S)
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def _debug_unescape(s: str) -> str:
    def one(m):
        e = m.group(1)
        if not e.startswith("u{"):
            return _ESCAPED.get(e, e)
        n = int(e[2:-1], 16)
        # Not a character (past U+10FFFF, or half of a surrogate pair): left as written.
        return chr(n) if n <= 0x10FFFF and not 0xD800 <= n <= 0xDFFF else m.group(0)
    return _DEBUG_ESCAPE.sub(one, s)


def _sandbox_failure(text: str) -> "tuple[str, bool] | None":
    """(the command's own output, failed) for a sandbox failure line, else None."""
    if not text.startswith(SANDBOX_FAILED):
        return None
    streams = dict(_STREAM.findall(text))
    if streams:
        out = streams.get("aggregated_output") or streams.get("stderr") or streams.get("stdout") or ""
        code = _EXIT_CODE.search(text)
        return (_debug_unescape(out) or text), not (code and int(code.group(1)) == 0)
    head, sep, rest = text.partition(", stdout: ")
    code = head.rpartition("exit code: ")[2].strip()
    failed = not (code.lstrip("-").isdigit() and int(code) == 0)
    return (rest if sep else text), failed


def _output(raw) -> tuple:
    """function_call_output.output: plain text (a sandbox's failure line too), or JSON
    {"output", "metadata": {"exit_code"}}."""
    if isinstance(raw, dict):
        data = raw
    else:
        text = _str(raw)
        data = None
        if text.startswith("{"):
            try:
                data = jsonio.loads(text)
            except ValueError:
                data = None
        if not isinstance(data, dict):
            return _sandbox_failure(text) or (text, exit_code_error(text))
    text = _str(data.get("output")) or _str(data.get("content")) or jsonio.dumps(data)[:MAX_TEXT]
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
                ti = jsonio.loads(args) if isinstance(args, str) else args
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

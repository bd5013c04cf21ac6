"""Gemini CLI: hooks and MCP servers in one settings.json, handler timeouts in milliseconds,
chats under ~/.gemini/tmp (facts from ../shared/reference/agent-hooks.md and files the real
Gemini CLI 0.61.0 wrote in the end-to-end tests).

Chats: `~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl` (`GEMINI_CLI_HOME` replaces
the home directory), the project directory named in `~/.gemini/projects.json` and in
`<project>/.project_root`, which holds the cwd (the records do not). The first line is the
session's metadata (`sessionId`, `projectHash`, `startTime`, `kind`); then message records
(`id`, `timestamp`, `type` user | gemini | info | error, `content`: parts or a string,
`thoughts`, `toolCalls` with their `result`), `{"$set": {...}}` metadata updates and
`{"$rewindTo": id}`. A message is written again, whole, each time it grows (a gemini turn
first without its toolCalls, then with them), so the parser remembers what it has emitted per
message id. No record marks a turn's end: the next prompt closes it (the AfterAgent hook is
the turn boundary recalld's proposer reads).
"""

import json
import os

from recalld.agents.base import (BY_EVENT_NAME, NOT_MINE, Adapter, event as _ev, strip_injected, text_of as _str,
                                 tool_summary)

# Its native events that neither Claude Code nor Codex uses: one of them names the agent.
DETECT_EVENTS = frozenset({"BeforeAgent", "AfterAgent", "BeforeTool", "AfterTool", "BeforeModel",
                           "AfterModel", "BeforeToolSelection", "PreCompress"})
# Prompt parts Gemini CLI writes itself: its environment block and hook context.
_INJECTED = ("<session_context>",)
TRUSTED_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT")


def gemini_dir() -> str:
    home = os.environ.get("GEMINI_CLI_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini")


class Gemini(Adapter):
    name = "gemini"
    install_name = "gemini"
    shell_markers = ("GEMINI_CLI",)
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
    # Observed in 0.61.0: SessionStart context reaches the model (in -p runs prefixed to the
    # prompt), BeforeAgent context is appended to the user turn, AfterTool context to the
    # tool's result. BeforeTool ignores additionalContext, and so does AfterAgent.
    context_events = frozenset({"session-start", "prompt-submit", "post-tool"})
    # BeforeTool's {"decision": "deny"} stops the call; the reason arrives as its error.
    gate_events = frozenset({"pre-tool"})

    def detect(self, payload):
        return BY_EVENT_NAME if payload.get("hook_event_name") in DETECT_EVENTS else NOT_MINE

    def settings_files(self, scope, root):
        base = os.path.join(root, ".gemini") if scope == "project" else gemini_dir()
        path = os.path.join(base, "settings.json")
        return path, path

    def hook_handler(self, command, event, timeout_s):
        # Gemini CLI counts handler timeouts in milliseconds.
        return {"name": f"recalld-{event}", "type": "command", "command": command, "timeout": timeout_s * 1000}

    def gate_output(self, native_event, reason):
        return json.dumps({"decision": "deny", "reason": reason}, ensure_ascii=False) + "\n"

    def stop_text(self, payload):
        # AfterAgent sends the turn's answer as `prompt_response` (observed).
        return payload.get("prompt_response") or payload.get("last_assistant_message")

    def install_notes(self, scope, hooks_file, hooks_data):
        d = hooks_data or {}
        notes = ["Gemini CLI loads hooks only in a trusted folder: trust the project when Gemini asks "
                 "(or add it to ~/.gemini/trustedFolders.json); `recalld doctor --cwd DIR` checks it."]
        if (d.get("hooksConfig") or {}).get("enabled") is False or (d.get("hooks") or {}).get("enabled") is False:
            notes.append(f"hooks are disabled in {hooks_file} (hooksConfig.enabled = false); recalld "
                         "left that setting alone")
        return notes

    def transcript_roots(self):
        return [os.path.join(gemini_dir(), "tmp")]

    def owns_transcript(self, path, first):
        if isinstance(first, dict) and "projectHash" in first:
            return True
        return "/.gemini/tmp/" in path.replace(os.sep, "/")

    def parse_record(self, o, st):
        return parse_record(o, st)


def folder_trust(cwd: str, settings: "dict | None" = None) -> tuple:
    """(trusted: True | False | None, why) for a folder, by Gemini CLI 0.61's rules: the
    GEMINI_CLI_TRUST_WORKSPACE switch, `security.folderTrust.enabled` (default on), then the
    longest rule in trustedFolders.json that covers the folder (TRUST_PARENT covers the rule's
    parent). None: no rule covers it, and Gemini asks (a `-p` run exits instead)."""
    if os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "false":
        return False, "distrusted by GEMINI_CLI_TRUST_WORKSPACE=false"
    if os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return True, "GEMINI_CLI_TRUST_WORKSPACE=true"
    ft = ((settings or {}).get("security") or {}).get("folderTrust")
    if isinstance(ft, dict) and ft.get("enabled") is False:
        return True, "folder trust is off (security.folderTrust.enabled = false)"
    path = os.environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or os.path.join(gemini_dir(), "trustedFolders.json")
    try:
        with open(path, encoding="utf-8") as f:
            rules = json.load(f)
    except FileNotFoundError:
        rules = {}
    except (OSError, ValueError) as e:
        return False, f"not checked: {path} cannot be read ({e}), and Gemini CLI refuses to start"
    if not isinstance(rules, dict):
        rules = {}
    here = os.path.realpath(cwd)
    best, level = -1, None
    for rule, lvl in rules.items():
        base = os.path.dirname(rule) if lvl == "TRUST_PARENT" else rule
        base = os.path.realpath(base)
        if (here == base or here.startswith(base.rstrip(os.sep) + os.sep)) and len(rule) > best:
            best, level = len(rule), lvl
    if level in TRUSTED_LEVELS:
        return True, f"trusted in {path}"
    if level == "DO_NOT_TRUST":
        return False, f"marked DO_NOT_TRUST in {path}"
    return None, f"not in {path}"


# --- chats --------------------------------------------------------------------------------------


def _project_root(source: str) -> "str | None":
    """The cwd a chat belongs to: `<project dir>/.project_root`, beside `chats/`."""
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(source)), ".project_root"), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _parts(content) -> list:
    if isinstance(content, str):
        return [{"text": content}]
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


def _prompt_text(parts: list) -> str:
    out = []
    for p in parts:
        text = _str(p.get("text"))
        if text.strip() and not text.lstrip().startswith(_INJECTED):
            text = strip_injected(text)
            if text:
                out.append(text)
    return "\n".join(out)


def _result_text(response) -> tuple:
    if not isinstance(response, dict):
        return _str(response), False
    text = response.get("output") if "output" in response else response.get("error", response.get("content"))
    if not isinstance(text, str):
        text = json.dumps(response, ensure_ascii=False)[:4000]
    return text, "error" in response


def _tool_result(st, call_id: str, name, response, failed: bool, time) -> list:
    key = "result:" + call_id
    if not call_id or key in st.seen:
        return []
    st.seen.add(key)
    text, err = _result_text(response)
    return [_ev(st, "tool", "tool_result", text, tool=name or st.tool_names.get(call_id), is_error=err or failed,
                time=time)]


def parse_record(o: dict, st) -> list:
    """One decoded chat record -> events (raises on a known type with a bad shape)."""
    if st.cwd is None and st.source:
        st.cwd = _project_root(st.source)
    if isinstance(o.get("sessionId"), str) and o["sessionId"] and "projectHash" in o:
        st.session = o["sessionId"]
        return []
    if "$set" in o or "$rewindTo" in o:
        return []  # metadata, and Gemini's own environment block; a rewind keeps what was said
    mid = o.get("id")
    if not isinstance(mid, str) or not mid:
        return []
    t = o.get("type")
    time = _str(o.get("timestamp")) or None
    out: list = []
    if t == "user":
        parts = _parts(o.get("content"))
        for p in parts:
            fr = p.get("functionResponse")
            if isinstance(fr, dict):
                out += _tool_result(st, _str(fr.get("id")), _str(fr.get("name")) or None, fr.get("response"),
                                    False, time)
        if ("prompt:" + mid) not in st.seen:
            text = _prompt_text(parts)
            if text:
                st.seen.add("prompt:" + mid)
                if st.agent in st.open_turns:
                    out.append(_ev(st, "system", "turn_end", "", time=time))
                out.append(_ev(st, "user", "prompt", text, time=time, uuid=mid))
        return out
    if t != "gemini":
        return []  # info, error, warning: the CLI's own lines
    for i, th in enumerate(o.get("thoughts") or []):
        key = f"thought:{mid}:{i}"
        if isinstance(th, dict) and key not in st.seen:
            st.seen.add(key)
            text = "\n".join(x for x in (_str(th.get("subject")), _str(th.get("description"))) if x.strip())
            if text.strip():
                out.append(_ev(st, "assistant", "reasoning", text, time=time, uuid=mid))
    text = "\n".join(_str(p.get("text")) for p in _parts(o.get("content")) if _str(p.get("text")).strip())
    if text.strip() and ("text:" + mid) not in st.seen:
        st.seen.add("text:" + mid)
        out.append(_ev(st, "assistant", "text", text, time=time, uuid=mid))
    for call in o.get("toolCalls") or []:
        if not isinstance(call, dict):
            continue
        cid, name = _str(call.get("id")), _str(call.get("name")) or None
        args = call.get("args") if isinstance(call.get("args"), dict) else {}
        if cid and ("call:" + cid) not in st.seen:
            st.seen.add("call:" + cid)
            if name:
                st.tool_names[cid] = name
            out.append(_ev(st, "assistant", "tool_call", tool_summary(name or "", args), tool=name,
                           tool_input=args, time=_str(call.get("timestamp")) or time))
        for r in call.get("result") or []:
            fr = r.get("functionResponse") if isinstance(r, dict) else None
            if isinstance(fr, dict):
                out += _tool_result(st, cid or _str(fr.get("id")), name, fr.get("response"),
                                    call.get("status") == "error", _str(call.get("timestamp")) or time)
    return out


ADAPTER = Gemini()

"""Agent transcripts -> one normalized event stream.

Two formats, both one JSON object per line (field names from
../shared/reference/agent-hooks.md and the real files in ../shared/data/transcripts/):

- Claude Code: `~/.claude/projects/<encoded-cwd>/<session>.jsonl`, subagents in
  `<session>/subagents/agent-<id>.jsonl` (older versions: `agent-<id>.jsonl` beside the
  session). `type` user/assistant carry `message.content` (a string or blocks: text,
  tool_use, tool_result, thinking); one API message is often split over several lines that
  share `message.id`, so each line is parsed on its own and blocks are never merged.
  `system` records with subtype `turn_duration` or `stop_hook_summary` mark a turn end, and
  so does an assistant message whose `stop_reason` is `end_turn` (older versions).
- Codex: rollout lines `{"timestamp", "type", "payload"}` with `session_meta`,
  `turn_context`, `response_item` (message, reasoning, function_call(_output),
  custom_tool_call(_output)) and `event_msg` (user_message, task_complete...).

Parsing never raises for bad data: a line that is not a JSON object is "malformed", counted
in the caller's ParseState and skipped. Records we have no use for (progress, snapshots,
summaries) parse to no events; that is not malformed.
"""

import io
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from orjson import loads as _loads

# Text kept per event. Tool results can be 200 KB web pages; the need detector and the
# proposer read the head, and the transcript itself stays the full record.
MAX_TEXT = 16_000
# A tool result is mostly a file, a listing or a web page: its head carries the error or the
# gist, and the transcript keeps the rest.
MAX_RESULT_TEXT = 4_000

CLAUDE_TURN_END_SUBTYPES = {"turn_duration", "stop_hook_summary"}
CODEX_TURN_END_EVENTS = {"task_complete", "turn_complete"}
_EXIT_CODE = re.compile(r"(?:^|\n)\s*(?:Exit code|exit code|Process exited with code)[:\s]+(-?\d+)")
_SUBAGENT_FILE = re.compile(r"^agent-(.+)\.jsonl(?:\.zst)?$")


@dataclass
class Event:
    session: str
    cwd: "str | None"
    project: "str | None"
    agent: str  # "main", or the subagent id / sidechain marker
    role: str  # user | assistant | tool | system
    kind: str  # prompt | text | reasoning | tool_call | tool_result | turn_end
    text: str
    tool: "str | None" = None
    tool_input: "dict | None" = None
    is_error: bool = False
    time: "str | None" = None
    uuid: "str | None" = None
    source: str = ""
    line_no: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ParseState:
    """What one file's parser carries from line to line."""

    source: str = ""
    fmt: "str | None" = None  # "claude" | "codex"
    session: "str | None" = None
    cwd: "str | None" = None
    agent: str = "main"
    line_no: int = 0
    malformed: int = 0
    tool_names: dict = field(default_factory=dict)  # tool_use_id / call_id -> tool name
    open_turns: set = field(default_factory=set)  # agents with events since their last turn end
    last_prompt: "str | None" = None  # Codex writes each prompt twice (response_item + event_msg)
    projects: dict = field(default_factory=dict)  # cwd -> project (the resolver walks the disk)

    def project_of(self, cwd: "str | None") -> "str | None":
        if not cwd:
            return None
        if cwd not in self.projects:
            from recalld.core.scope import resolve_project

            try:
                self.projects[cwd] = resolve_project(cwd)
            except (OSError, ValueError):
                self.projects[cwd] = cwd
        return self.projects[cwd]


# --- format and file helpers ----------------------------------------------------------------


def is_transcript(path: "str | os.PathLike") -> bool:
    name = os.path.basename(str(path))
    return name.endswith(".jsonl") or name.endswith(".jsonl.zst")


def is_compressed(path) -> bool:
    return str(path).endswith(".zst")


def zstd_available() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def guess_format(path, first: "dict | None" = None) -> str:
    name = os.path.basename(str(path))
    if name.startswith("rollout-"):
        return "codex"
    if isinstance(first, dict) and ("payload" in first or first.get("type") == "session_meta"):
        return "codex"
    if "/.codex/" in str(path).replace(os.sep, "/"):
        return "codex"
    return "claude"


def new_state(path) -> ParseState:
    """Initial state for a file: the session and agent its path implies."""
    p = Path(path)
    st = ParseState(source=str(path))
    name = p.name
    m = _SUBAGENT_FILE.match(name)
    if m:
        st.agent = f"agent-{m.group(1)}"
        # <session>/subagents/agent-<id>.jsonl: the session is the grandparent directory.
        if p.parent.name == "subagents":
            st.session = p.parent.parent.name
    else:
        stem = name[: -len(".jsonl.zst")] if name.endswith(".jsonl.zst") else name[: -len(".jsonl")] if name.endswith(".jsonl") else name
        if stem.startswith("rollout-"):
            # rollout-YYYY-MM-DDThh-mm-ss-<uuid>: the uuid is the last 5 dash groups
            parts = stem.split("-")
            st.session = "-".join(parts[-5:]) if len(parts) >= 6 else stem
        else:
            st.session = stem
    return st


def open_text(path) -> io.BufferedIOBase:
    """A binary stream of the file's lines, decompressed when it is .zst."""
    if is_compressed(path):
        import zstandard

        raw = open(path, "rb")
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return open(path, "rb")


# --- lines ------------------------------------------------------------------------------------


def parse_line(line: bytes, st: ParseState) -> "list[Event] | None":
    """One complete line (without or with its newline). None when malformed (counted)."""
    st.line_no += 1
    s = line.strip()
    if not s:
        return []
    try:
        # orjson: decoding is a fifth of the daemon's tailing time with the standard library's
        # json; orjson decodes these lines 2.3x faster (tailing +29% in an A/B run). It takes
        # the bytes as they are (invalid UTF-8 is a ValueError, like bad JSON) but not a BOM.
        obj = _loads(s[3:] if s.startswith(b"\xef\xbb\xbf") else s)
    except (ValueError, UnicodeDecodeError):
        st.malformed += 1
        return None
    if not isinstance(obj, dict):
        st.malformed += 1
        return None
    if st.fmt is None:
        st.fmt = guess_format(st.source, obj)
    try:
        return parse_record(obj, st.fmt, st)
    except (TypeError, AttributeError, KeyError, ValueError):
        # A record of a known type with an unexpected shape: skip it, like a bad line.
        st.malformed += 1
        return None


def parse_file(path) -> Iterator[Event]:
    """Every event of a whole file (either format, .zst when zstandard is importable)."""
    st = new_state(path)
    with open_text(path) as f:
        for line in io.BufferedReader(f) if is_compressed(path) else f:
            if not line.endswith(b"\n"):
                # a partial last line is not a record yet; a tailer waits for its newline
                break
            for ev in parse_line(line, st) or ():
                yield ev


def parse_record(obj: dict, fmt: str, state: ParseState) -> list:
    if fmt == "codex":
        return _codex(obj, state)
    return _claude(obj, state)


# --- shared -----------------------------------------------------------------------------------


def _clip(s: str, n: int = MAX_TEXT) -> str:
    return s if len(s) <= n else s[:n]


def _str(v) -> str:
    return v if isinstance(v, str) else ""


def _ev(st: ParseState, role: str, kind: str, text: str, *, session=None, cwd=None, agent=None,
        tool=None, tool_input=None, is_error=False, time=None, uuid=None) -> Event:
    cwd = cwd or st.cwd
    if kind == "turn_end":
        st.open_turns.discard(agent or st.agent)
    else:
        st.open_turns.add(agent or st.agent)
    if isinstance(tool_input, dict) and any(isinstance(v, str) and len(v) > 2000 for v in tool_input.values()):
        # a Write's whole file content: keep the head (the transcript keeps the rest)
        tool_input = {k: (_clip(v, 2000) if isinstance(v, str) else v) for k, v in tool_input.items()}
    return Event(session=session or st.session or "", cwd=cwd, project=st.project_of(cwd),
                 agent=agent or st.agent, role=role, kind=kind,
                 text=_clip(text, MAX_RESULT_TEXT if kind == "tool_result" else MAX_TEXT), tool=tool,
                 tool_input=tool_input, is_error=bool(is_error), time=time, uuid=uuid,
                 source=st.source, line_no=st.line_no)


def tool_summary(name: str, tool_input) -> str:
    """What a tool call is about, as text: the command, the path, the query."""
    if not isinstance(tool_input, dict):
        return _clip(_str(tool_input), 2000)
    parts = []
    for key in ("description", "command", "cmd", "file_path", "path", "notebook_path", "pattern",
                "query", "url", "prompt", "subagent_type", "input"):
        v = tool_input.get(key)
        if isinstance(v, list):
            v = " ".join(x for x in v if isinstance(x, str))
        if isinstance(v, str) and v.strip():
            parts.append(v.strip())
    return _clip("\n".join(parts), 2000)


def _exit_code_error(text: str) -> bool:
    head = text[:2000]
    if "xit code" not in head and "exited with code" not in head:
        return False  # the regex has no literal prefix to skip ahead with: scan cheaply first
    m = _EXIT_CODE.search(head)
    return bool(m and m.group(1) != "0")


# --- Claude Code ------------------------------------------------------------------------------


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


def _claude(o: dict, st: ParseState) -> list:
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
        if o.get("subtype") in CLAUDE_TURN_END_SUBTYPES and agent in st.open_turns:
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
                err = b.get("is_error") is True or _exit_code_error(text)
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


# --- Codex ------------------------------------------------------------------------------------

_CODEX_ITEM_TYPES = {"message", "reasoning", "function_call", "function_call_output",
                     "custom_tool_call", "custom_tool_call_output", "local_shell_call"}
_CODEX_INJECTED = ("<environment_context", "<user_instructions", "<permissions", "# AGENTS.md",
                   "<INSTRUCTIONS>")


def _parts_text(content) -> str:
    if isinstance(content, str):
        return content
    out = []
    for p in content or []:
        if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text", "summary_text",
                                                     "reasoning_text"):
            out.append(_str(p.get("text")))
    return "\n".join(o for o in out if o)


def _codex_output(raw) -> tuple[str, bool]:
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
            return text, _exit_code_error(text)
    text = _str(data.get("output")) or _str(data.get("content")) or json.dumps(data)[:MAX_TEXT]
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    code = meta.get("exit_code", data.get("exit_code"))
    err = (isinstance(code, int) and code != 0) or data.get("success") is False or _exit_code_error(text)
    return text, err


def _codex_prompt(st: ParseState, text: str, time) -> list:
    out = []
    if st.agent in st.open_turns:
        out.append(_ev(st, "system", "turn_end", "", time=time))
    out.append(_ev(st, "user", "prompt", text, time=time))
    return out


def _codex(o: dict, st: ParseState) -> list:
    time = _str(o.get("timestamp")) or None
    t = o.get("type")
    payload = o.get("payload")
    if payload is None:
        # pre-2025 rollouts: the first line is the session meta, then bare items
        if t in _CODEX_ITEM_TYPES:
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
                return _codex_prompt(st, text, time)
            return []
        if pt in CODEX_TURN_END_EVENTS and st.agent in st.open_turns:
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
            if text.lstrip().startswith(_CODEX_INJECTED) or text.strip() == (st.last_prompt or ""):
                return []
            st.last_prompt = text.strip()
            return _codex_prompt(st, text, time)
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
        text, err = _codex_output(payload.get("output"))
        return [_ev(st, "tool", "tool_result", text, tool=st.tool_names.get(call_id), is_error=err,
                    time=time)]
    return []

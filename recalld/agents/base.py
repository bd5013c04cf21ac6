"""What every agent adapter provides, and the shapes its transcript parser produces.

An adapter is one instance of a subclass of `Adapter`, defined in its own module
(`recalld/agents/<agent>.py`) and listed in `recalld.agents.ADAPTERS`. The hook asks it which
agent sent a payload and what that agent calls our events; the installer asks it where the
agent keeps its settings and what goes into them; the daemon asks it where the agent writes
transcripts and how to read one record.

Standard library only: the hook imports this module on every run (no dataclasses, typing or
pathlib; plain classes with `__slots__`).
"""

from recalld.core import jsonio

# recalld's own hook events (`recalld hook EVENT`); an adapter maps its native names onto these.
EVENTS = ("session-start", "prompt-submit", "pre-tool", "post-tool", "stop", "commit")

# Handler timeouts written by `recalld install`, in seconds. The hook has its own 300 ms
# deadline; these only bound a wedged interpreter start, which is slowest at session start.
HOOK_TIMEOUT_S = {"session-start": 10}
DEFAULT_HOOK_TIMEOUT_S = 5

# How sure an adapter's `detect` is that a payload is its agent's. A native event name that only
# this agent uses outweighs a field that only it sends, so the answer never depends on the order
# adapters are asked in.
NOT_MINE, BY_FIELD, BY_EVENT_NAME = 0, 1, 2

# Tool names the act classifier has recognized from the start that no adapter here documents:
# kept so that no tool call's act changes with the move to adapters.
COMMON_WRITE_TOOLS = frozenset({"edit_file", "create_file"})
COMMON_DELEGATE_TOOLS = frozenset({"delegate"})


class Adapter:
    """One coding agent, as recalld sees it. Subclasses set the class attributes and override
    the methods their agent needs; `tests/test_agents.py` checks that each adapter is complete
    and that its tables agree with each other."""

    name = ""  # ours: `--agent NAME`, HookInput.agent_kind, receipts' agent_kind
    install_name: "str | None" = None  # `recalld install NAME`; None when not installed that way
    aliases: tuple = ()  # other names `recalld install` accepts
    # Every native hook event the agent documents in its hook reference, whether
    # or not recalld listens to it: detection and the tests read it.
    known_events: frozenset = frozenset()
    # (native event, our event) for each native event recalld handles, in install order. The
    # first native name of an event is the one recalld answers with (hookEventName).
    events: tuple = ()
    not_installed: frozenset = frozenset()  # native events handled but not wired by install
    own_events: tuple = ()  # our events only this agent fires (git: commit)
    # Tool names (lower case) whose calls are the acts bash / write / delegate.
    bash_tools: frozenset = frozenset()
    write_tools: frozenset = frozenset()
    delegate_tools: frozenset = frozenset()
    pre_tool_matcher: "str | None" = None  # the pre-tool hook's matcher: the tools above, natively
    hook_flag: "str | None" = None  # `--agent` in installed hook commands; None: detection suffices
    mcp_format: "str | None" = None  # "json" (mcpServers) or "toml"; None: no MCP server
    hooks_config_keys: tuple = ()  # keys the agent keeps inside `hooks` next to the events
    fallback = False  # a hook payload or transcript no adapter claims is taken to be this agent's
    # Environment variables the agent sets in the shell its tool runs commands in (observed in
    # the pinned clients): a command that finds one was typed by the agent, not by the user.
    shell_markers: tuple = ()
    parse_record = None  # (record: dict, st: ParseState) -> [Event], for agents with transcripts
    # Our events whose context output (additionalContext, or git's plain text) reaches the model
    # in this client, as the end-to-end tests observed (docs/install.md). The hook claims a
    # delivery only at these; elsewhere it prints nothing and leaves queued items queued.
    context_events: frozenset = frozenset()
    # Our events at which the client lets a hook hold the act before it runs, with a reason the
    # model reads (a crystal's `deliver: gate`).
    gate_events: frozenset = frozenset()

    # --- the hook ---------------------------------------------------------------------------

    def detect(self, payload: dict) -> int:
        """NOT_MINE, BY_FIELD or BY_EVENT_NAME for a hook payload."""
        return NOT_MINE

    def native_event(self, event: str) -> "str | None":
        for native, ours in self.events:
            if ours == event:
                return native
        return None

    def event_of(self, native: str) -> "str | None":
        for n, ours in self.events:
            if n == native:
                return ours
        return None

    def context_output(self, native_event: "str | None", block: str) -> str:
        """What the hook prints to put `block` in the model's context."""
        return jsonio.dumps({"hookSpecificOutput": {"hookEventName": native_event or "",
                                                    "additionalContext": block}}, ensure_ascii=False) + "\n"

    def gate_output(self, native_event: "str | None", reason: str) -> str:
        """What the hook prints to hold the act once, with `reason` for the model (gate_events)."""
        raise NotImplementedError(f"{self.name} cannot hold an act")

    def tool_input(self, tool_name: str, tool_input):
        """A tool call's input in the fields the act classifier reads (payloads.tool_act)."""
        return tool_input

    def stop_text(self, payload: dict):
        """The agent's last message at a turn end (the stop event)."""
        return payload.get("last_assistant_message")

    # --- install ----------------------------------------------------------------------------

    def install_hooks(self) -> tuple:
        """(native event, matcher or None for all, our event, timeout s) that install writes."""
        return tuple((native, self.pre_tool_matcher if ours == "pre-tool" else None, ours,
                      HOOK_TIMEOUT_S.get(ours, DEFAULT_HOOK_TIMEOUT_S))
                     for native, ours in self.events if native not in self.not_installed)

    def settings_files(self, scope: str, root: "str | None") -> tuple:
        """(hooks file, MCP file) for scope "user", or "project" under the repository `root`."""
        raise NotImplementedError(f"{self.name} is not installed through settings files")

    def hook_handler(self, command: str, event: str, timeout_s: int) -> dict:
        return {"type": "command", "command": command, "timeout": timeout_s}

    def mcp_entry(self, prefix: list) -> dict:
        return {"command": prefix[0], "args": [*prefix[1:], "mcp"]}

    def install_notes(self, scope: str, hooks_file: str, hooks_data: dict) -> list:
        """What the user must still do, or should know, after an install."""
        return []

    # --- transcripts ------------------------------------------------------------------------

    def transcript_roots(self) -> list:
        """Directories the daemon watches for this agent's transcripts."""
        return []

    def owns_transcript(self, path: str, first: "dict | None") -> bool:
        """Is this file (named `path`, first record `first`) in this agent's format?"""
        return False


# --- what transcript parsers produce -------------------------------------------------------------

# Text kept per event. Tool results can be 200 KB web pages; the need detector and the
# proposer read the head, and the transcript itself stays the full record.
MAX_TEXT = 16_000
# A tool result is mostly a file, a listing or a web page: its head carries the error or the
# gist, and the transcript keeps the rest.
MAX_RESULT_TEXT = 4_000


class Event:
    """One normalized transcript event, whatever the agent."""

    __slots__ = ("session", "cwd", "project", "agent", "role", "kind", "text", "tool", "tool_input",
                 "is_error", "time", "uuid", "source", "line_no")

    def __init__(self, session: str, cwd: "str | None", project: "str | None", agent: str, role: str,
                 kind: str, text: str, tool: "str | None" = None, tool_input: "dict | None" = None,
                 is_error: bool = False, time: "str | None" = None, uuid: "str | None" = None,
                 source: str = "", line_no: int = 0):
        self.session = session
        self.cwd = cwd
        self.project = project
        self.agent = agent  # "main", or the subagent id / sidechain marker
        self.role = role  # user | assistant | tool | system
        self.kind = kind  # prompt | text | reasoning | tool_call | tool_result | turn_end
        self.text = text
        self.tool = tool
        self.tool_input = tool_input
        self.is_error = is_error
        self.time = time
        self.uuid = uuid
        self.source = source
        self.line_no = line_no

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__slots__}
        if isinstance(d["tool_input"], dict):
            d["tool_input"] = dict(d["tool_input"])
        return d

    def __repr__(self) -> str:
        return f"Event({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class ParseState:
    """What one file's parser carries from line to line."""

    __slots__ = ("source", "fmt", "session", "cwd", "agent", "line_no", "malformed", "tool_names",
                 "open_turns", "last_prompt", "projects", "seen", "queued")

    def __init__(self, source: str = "", fmt: "str | None" = None, session: "str | None" = None,
                 cwd: "str | None" = None, agent: str = "main", line_no: int = 0, malformed: int = 0):
        self.source = source
        self.fmt = fmt  # the adapter name of the file's format ("claude", "codex")
        self.session = session
        self.cwd = cwd
        self.agent = agent
        self.line_no = line_no
        self.malformed = malformed
        self.tool_names: dict = {}  # tool_use_id / call_id -> tool name
        self.open_turns: set = set()  # agents with events since their last turn end
        self.last_prompt: "str | None" = None  # Codex writes each prompt twice (response_item + event_msg)
        self.projects: dict = {}  # cwd -> project (the resolver walks the disk)
        self.seen: set = set()  # what a parser already emitted, for formats that rewrite records
        self.queued: list = []  # messages typed while the agent works, not yet taken in (Claude Code)

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


# Context blocks a client pastes into the prompt it then hands the prompt hook (Gemini CLI's
# `-p` runs prefix the session-start context, inside <hook_context>, `<` and `>` escaped):
# recalld's own words, never the request, so never searched.
INJECTED_BLOCKS = (("<hook_context>", "</hook_context>"), ("<recalld>", "</recalld>"),
                   ("&lt;recalld&gt;", "&lt;/recalld&gt;"))


def strip_injected(text: str) -> str:
    """The prompt without the hook-context blocks a client put into it."""
    for start, end in INJECTED_BLOCKS:
        while start in text:
            i = text.index(start)
            j = text.find(end, i)
            if j < 0:
                break
            text = text[:i] + text[j + len(end):]
    return text.strip()


def clip(s: str, n: int = MAX_TEXT) -> str:
    return s if len(s) <= n else s[:n]


def text_of(v) -> str:
    return v if isinstance(v, str) else ""


def event(st: ParseState, role: str, kind: str, text: str, *, session=None, cwd=None, agent=None,
          tool=None, tool_input=None, is_error=False, time=None, uuid=None) -> Event:
    """An Event at the parser's current line; keeps the state's open turns up to date."""
    cwd = cwd or st.cwd
    if kind == "turn_end":
        st.open_turns.discard(agent or st.agent)
    else:
        st.open_turns.add(agent or st.agent)
    if isinstance(tool_input, dict) and any(isinstance(v, str) and len(v) > 2000 for v in tool_input.values()):
        # a Write's whole file content: keep the head (the transcript keeps the rest)
        tool_input = {k: (clip(v, 2000) if isinstance(v, str) else v) for k, v in tool_input.items()}
    return Event(session=session or st.session or "", cwd=cwd, project=st.project_of(cwd),
                 agent=agent or st.agent, role=role, kind=kind,
                 text=clip(text, MAX_RESULT_TEXT if kind == "tool_result" else MAX_TEXT), tool=tool,
                 tool_input=tool_input, is_error=bool(is_error), time=time, uuid=uuid,
                 source=st.source, line_no=st.line_no)


def tool_summary(name: str, tool_input) -> str:
    """What a tool call is about, as text: the command, the path, the query."""
    if not isinstance(tool_input, dict):
        return clip(text_of(tool_input), 2000)
    parts = []
    for key in ("description", "command", "cmd", "file_path", "path", "notebook_path", "pattern",
                "query", "url", "prompt", "subagent_type", "input"):
        v = tool_input.get(key)
        if isinstance(v, list):
            v = " ".join(x for x in v if isinstance(x, str))
        if isinstance(v, str) and v.strip():
            parts.append(v.strip())
    return clip("\n".join(parts), 2000)


_exit_code = None  # compiled on first use: the hook imports this module and never parses


def exit_code_error(text: str) -> bool:
    """Does a tool result's head report a non-zero exit code?"""
    global _exit_code
    head = text[:2000]
    if "xit code" not in head and "exited with code" not in head:
        return False  # the regex has no literal prefix to skip ahead with: scan cheaply first
    if _exit_code is None:
        import re  # only for a result that mentions an exit code: re costs the hook ~5-10 ms

        _exit_code = re.compile(r"(?:^|\n)\s*(?:Exit code|exit code|Process exited with code)[:\s]+(-?\d+)")
    m = _exit_code.search(head)
    return bool(m and m.group(1) != "0")

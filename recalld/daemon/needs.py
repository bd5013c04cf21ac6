"""Need detection: from a session's new transcript events, decide when something is worth
recalling, and what to search for.

A need is raised by
- `intent`: the agent's text or reasoning says what it is about to do or what puzzles it
  ("Let me check why the migration fails", "not sure where X is configured"),
- `error`: a failing tool result (the agent's `is_error`, a non-zero exit code, error text in a
  command's output),
- `path`: a file or module the session touches for the first time.

The query is built from the triggering events of the window since the session's last pass:
error lines first (with the command that failed), then the latest intent, then the new paths.

Timing: a need waits `debounce_s` for the session to go quiet, and every newer event of that
session rebuilds it and restarts the wait (a newer event cancels the pending pass), up to
`max_wait_s` after its first trigger. After a tool result the wait is RESULT_DEBOUNCE_S at
most: the agent's answer to a result takes a model call, so what follows a result within half
a second is only the rest of a burst of parallel results, and those come within 0.1 s. A new prompt or a turn end drops it: the session moved on
or went idle. Passes are rate-limited per session (`min_pass_interval_s`) and overall
(`max_passes_per_minute`). Only "live" events (from a file written in the last few minutes)
can raise a need, so replaying history or catching up after a restart never fires passes.
"""

import os
import re
import time
from collections import deque
from dataclasses import dataclass, field

_INTENT = re.compile(
    r"\b(let me|let's|i'll|i will|i need to|i'm going to|i am going to|we need to|i should|i want to|"
    r"now i|next,? i|trying to|try to|figure out|not sure|unsure|unclear|wonder|confus|unexpected|"
    r"strange|weird|doesn't (?:seem|work)|does not (?:seem|work)|isn't working|is not working|"
    r"still fail|keeps? failing|why (?:is|does|did|are|do|would)|how (?:do|does|to|can|should)|"
    r"what (?:is|does|causes)|investigat|debug|the (?:issue|problem|bug|error|cause) (?:is|was|seems|might)|"
    r"root cause|instead of|approach)\b", re.I)
_ERROR_LINE = re.compile(
    r"(Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b[:(]|\berror\b[:\[]|\bERROR\b|"
    r"\bFAILED\b|\bFAIL:|\bfailed\b|command not found|No such file or directory|Permission denied|"
    r"\bpanic:|\bfatal:|cannot find|could not|undefined (?:function|method|variable)|"
    r"Exit code [1-9]|exit code [1-9]|non-zero exit)", re.I)
# Tool results whose text is program output (so error words in it mean an error), as opposed to
# file contents or web pages that merely mention errors.
_OUTPUT_TOOLS = {"bash", "shell", "exec_command", "local_shell", "run_shell_command", "container.exec",
                 "shell_command", "unified_exec", "bashoutput"}
_REJECTED = ("doesn't want to proceed", "was rejected", "Request interrupted", "user denied",
             "haven't granted it yet")
_PATH_KEYS = ("file_path", "path", "notebook_path")
_PATH_TOKEN = re.compile(r"(?:^|[\s'\"=(])((?:\.{0,2}/)?[\w.@-]+(?:/[\w.@-]+)+|[\w-]+\.(?:py|js|ts|tsx|jsx|rs|go|rb|ex|exs|java|kt|c|h|cc|cpp|hpp|md|toml|yaml|yml|json|sql|sh|css|html|vue|swift|php))")
_STOP_PATHS = {"/dev/null", "/tmp", "/usr/bin/env"}
# What comes soon after a tool result is only parallel calls' results, so a result-triggered need
# waits less than debounce_s and catches the same bursts sooner (the transcripts' timing:
# docs/evaluation.md, "The need's debounce").
RESULT_DEBOUNCE_S = 0.15


@dataclass
class Need:
    session: str
    agent: str
    project: "str | None"
    cwd: "str | None"
    query: str
    triggers: list
    first_at: float
    due: float
    events: int  # events in the window it was built from
    source: str = ""
    line_no: int = 0

    def as_dict(self) -> dict:
        return {"session": self.session, "agent": self.agent, "project": self.project,
                "triggers": self.triggers, "events": self.events, "query_chars": len(self.query),
                "source": self.source, "line_no": self.line_no}


@dataclass
class _Session:
    window: deque
    seen_paths: set = field(default_factory=set)
    triggers: list = field(default_factory=list)  # (kind, text) since the last pass
    pending: "Need | None" = None
    last_pass: float = float("-inf")
    last_event: "object | None" = None
    seq: int = 0  # when it last saw an event (a counter), for forgetting the least recent


def _informative_words(text: str) -> int:
    return len([w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_.-]{2,}", text)])


def intent_text(text: str) -> "str | None":
    """The sentence(s) of an agent's text that state an intent or a puzzle, else None."""
    text = text.strip()
    if not text:
        return None
    sentences = re.split(r"(?<=[.!?])\s+|\n+", text)
    hits = [s.strip() for s in sentences if s.strip() and (_INTENT.search(s) or s.strip().endswith("?"))]
    hits = [s for s in hits if _informative_words(s) >= 3]
    if not hits:
        return None
    return " ".join(hits[-3:])


def error_text(ev) -> "str | None":
    """The error lines of a failing tool result, else None."""
    text = ev.text or ""
    head = text[:4000]
    if any(r in head for r in _REJECTED):
        return None  # the user said no: nothing to recall
    tool = (ev.tool or "").lower()
    lines = [ln.strip() for ln in head.splitlines() if _ERROR_LINE.search(ln)]
    if ev.is_error:
        if lines:
            return "\n".join(lines[:3])[:400]
        return head.strip()[:300] or None
    if tool in _OUTPUT_TOOLS and lines:
        return "\n".join(lines[:3])[:400]
    return None


def touched_paths(ev) -> list:
    """Paths a tool call names (its input keys, or path-like words of a command)."""
    ti = ev.tool_input if isinstance(ev.tool_input, dict) else {}
    out = []
    for k in _PATH_KEYS:
        v = ti.get(k)
        if isinstance(v, str) and v.strip():
            out.append(v.strip())
    cmd = ti.get("command", ti.get("cmd"))
    if isinstance(cmd, list):
        cmd = " ".join(c for c in cmd if isinstance(c, str))
    if isinstance(cmd, str):
        out.extend(m.group(1) for m in _PATH_TOKEN.finditer(cmd[:2000]))
    return [p for p in out if p not in _STOP_PATHS and not p.startswith(("http:", "https:"))]


def relative_path(path: str, bases) -> str:
    """`path` relative to the first base it lies under (the project, the cwd), else as is."""
    for b in bases:
        if b and path.startswith(b.rstrip("/") + "/"):
            return path[len(b.rstrip("/")) + 1:]
        if b and path.rstrip("/") == b.rstrip("/"):
            return ""
    return path


def path_terms(path: str) -> str:
    """A path as search words: its last directories and the module name."""
    parts = [p for p in path.replace("\\", "/").split("/") if p and p not in (".", "..", "~")]
    tail = parts[-3:]
    if tail:
        stem, _ext = os.path.splitext(tail[-1])
        tail[-1] = stem or tail[-1]
    return " ".join(tail)


class NeedDetector:
    def __init__(self, cfg: "dict | None" = None, clock=time.monotonic):
        d = (cfg or {}).get("daemon") or {}
        self.debounce_s = float(d.get("debounce_s", 0.5))
        self.max_wait_s = float(d.get("max_wait_s", 6.0))
        self.min_interval_s = float(d.get("min_pass_interval_s", 15.0))
        self.max_per_minute = int(d.get("max_passes_per_minute", 6))
        self.window_size = int(d.get("need_window", 12))
        self.max_query = int(d.get("need_max_chars", 600))
        self.clock = clock
        self.sessions: dict = {}
        self.recent_passes: deque = deque()
        self._seq = 0
        self.stats = {"triggers": 0, "needs": 0, "replaced": 0, "cancelled": 0, "rate_limited": 0}

    def _session(self, key) -> _Session:
        s = self.sessions.get(key)
        if s is None:
            s = self.sessions[key] = _Session(window=deque(maxlen=self.window_size))
        return s

    def observe(self, events, live: bool = True, now: "float | None" = None) -> int:
        """Take a batch of new events (in file order). Returns how many triggers they raised."""
        now = self.clock() if now is None else now
        raised = 0
        touched = set()
        for ev in events:
            key = (ev.session, ev.agent)
            s = self._session(key)
            s.window.append(ev)
            s.last_event = ev
            self._seq += 1
            s.seq = self._seq
            touched.add(key)
            if ev.kind in ("prompt", "turn_end"):
                # a new request, or the agent stopped: whatever was pending is moot
                if s.pending is not None:
                    self.stats["cancelled"] += 1
                s.pending, s.triggers = None, []
                continue
            found = self._triggers(ev, s)
            if not live:
                continue
            for kind, text in found:
                s.triggers.append((kind, text, ev))
                raised += 1
        self.stats["triggers"] += raised
        if live:
            for key in touched:
                self._reschedule(key, now)
        return raised

    def _triggers(self, ev, s: _Session) -> list:
        found = []
        if ev.role == "assistant" and ev.kind in ("text", "reasoning"):
            t = intent_text(ev.text)
            if t:
                found.append(("intent", t))
        elif ev.kind == "tool_result":
            t = error_text(ev)
            if t:
                found.append(("error", t))
        elif ev.kind == "tool_call":
            for p in touched_paths(ev):
                rel = relative_path(p, (ev.project, ev.cwd))
                if rel and rel not in s.seen_paths:
                    s.seen_paths.add(rel)
                    found.append(("path", rel))
        return found

    def _reschedule(self, key, now: float) -> None:
        s = self.sessions[key]
        if not s.triggers:
            return
        first = s.pending.first_at if s.pending is not None else now
        if s.pending is not None:
            self.stats["replaced"] += 1  # by a need built from the newer window
        last = s.last_event
        wait = min(self.debounce_s, RESULT_DEBOUNCE_S) if last.kind == "tool_result" else self.debounce_s
        due = min(now + wait, first + self.max_wait_s)
        due = max(due, s.last_pass + self.min_interval_s)
        s.pending = Need(session=key[0], agent=key[1], project=last.project, cwd=last.cwd,
                         query=self.build_query(s.triggers), triggers=sorted({k for k, _, _ in s.triggers}),
                         first_at=first, due=due, events=len(s.window), source=last.source,
                         line_no=last.line_no)

    def build_query(self, triggers: list) -> str:
        errors = [(t, ev) for k, t, ev in triggers if k == "error"]
        intents = [t for k, t, _ in triggers if k == "intent"]
        paths = [t for k, t, _ in triggers if k == "path"]
        parts = []
        for t, _ev in errors[-2:]:
            parts.append(t)
        if intents:
            parts.append(intents[-1])
        if paths:
            parts.append(" ".join(dict.fromkeys(path_terms(p) for p in paths[-4:])))
        q = "\n".join(p for p in parts if p).strip()
        return q[: self.max_query]

    def next_due(self) -> "float | None":
        dues = [s.pending.due for s in self.sessions.values() if s.pending is not None]
        return min(dues) if dues else None

    def take_due(self, now: "float | None" = None) -> list:
        """Needs whose time has come (and that the rate limits allow); they leave the detector."""
        now = self.clock() if now is None else now
        while self.recent_passes and self.recent_passes[0] <= now - 60:
            self.recent_passes.popleft()
        out = []
        for s in sorted(self.sessions.values(), key=lambda s: s.pending.due if s.pending else 0):
            n = s.pending
            if n is None or n.due > now:
                continue
            if len(self.recent_passes) >= self.max_per_minute:
                n.due = self.recent_passes[0] + 60
                self.stats["rate_limited"] += 1
                continue
            if not n.query.strip():
                s.pending, s.triggers = None, []
                continue
            s.pending, s.triggers = None, []
            s.last_pass = now
            self.recent_passes.append(now)
            self.stats["needs"] += 1
            out.append(n)
        return out

    def forget_idle(self, keep: int = 256) -> None:
        """Bound memory: keep the `keep` most recently active sessions (and any with a pending need)."""
        if len(self.sessions) <= keep:
            return
        order = sorted(self.sessions, key=lambda k: self.sessions[k].seq)
        for key in order[: len(order) - keep]:
            if self.sessions[key].pending is None:
                del self.sessions[key]

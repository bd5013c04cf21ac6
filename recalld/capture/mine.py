"""Candidate memories mined from what was said in a turn, each a quoted span with provenance.

A 135M model cannot write a memory worth keeping (docs/capture.md); people and agents in a
session already say them. So the proposer reads every text of the turn (the user's messages,
the agent's text, the user's answers to the agent's questions, a subagent's report, failing
commands and what came after them; a pasted document and the agent's reasoning are read and
counted, never candidates), cuts it into statements, and scores each
by cue features (a decision with its reason, a constraint or warning, a root cause, a user
correction or preference, a concrete project fact: a port, path, version, flag, identifier) and
by structure (an error, then what fixed it; the same error again and again). A model ranks
them only when asked (proposer.py); nothing here invents a word: a candidate is a span of
the turn, at most with leading filler ("Perfect! I can see that") cut off, or spans of the turn
joined by a symbol (error -> fix).

Standard library only. Every text is redacted before it is cut, so a secret never reaches a
span, a score or a receipt.
"""

import re
from collections import Counter
from dataclasses import dataclass, field

from recalld.capture import policies, rules
from recalld.capture.cues import (BOLD_HEADING, CAUSE, FLOOR, MAX_CHARS, MIN_WORDS, PROGRESS, SEMANTIC,  # noqa: F401
                                   SPECIFIC, USER_NOTE, WEIGHTS, _content, clean_line, score, statements, tighten)

# --- what is read --------------------------------------------------------------------------

# Text the harness writes into the user's turn: not the user speaking.
HARNESS_PROMPTS = ("[Request interrupted", "<command-name>", "<command-message>", "<local-command",
                   "Caveat:", "<system-reminder>", "<user-prompt-submit-hook>", "<bash-input>",
                   "<bash-stdout>", "<bash-stderr>", "<task-notification>", "Tool loaded.",
                   # another tool's prompt hook blocked the prompt; Claude Code writes its notice
                   "Operation stopped by hook:")
# Tool errors about the agent's use of the tool (or the user declining it), not the project.
HARNESS_ERRORS = ("<tool_use_error>", "The user doesn't want to proceed", "The user doesn't want to take this action",
                  "Claude requested permissions", "EISDIR", "File has not been read yet",
                  "File has been modified since read", "String to replace not found", "No changes to make",
                  "[Request interrupted", "InputValidationError",
                  # Codex's limit on the call, which the agent chose (timeout_ms), not the project's
                  "command timed out after")
# Claude Code's result for a call the user declined, when the user typed why: the words after
# this are the user's, said mid-turn (a correction, more often than not).
DECLINED_SAID = "To tell you how to proceed, the user said:"
# A failure with no message: Codex's record of a command whose output was empty (`rg` that
# matched nothing exits 1), or a bare exit code.
EMPTY_FAILURE = re.compile(r'^\{"output":\s*"",\s*"metadata"|^(?:exit code:?\s*\d+\s*)+$', re.I)
# The user's answers to the agent's questions arrive as a tool result (Claude Code's AskUserQuestion).
ANSWER_TOOLS = ("askuserquestion", "ask_user", "request_user_input")
ANSWER_PAIR = re.compile(r'"([^"]{3,300})"\s*=\s*"([^"]{1,300})"')
# A subagent's final report comes back as the delegating tool's result.
DELEGATE_TOOLS = ("task", "agent", "delegate", "spawn_agent")
# What the delegating tool answers when the subagent runs in the background: the harness's
# notice to the agent ("Async agent launched ... do not mention to user"), not a report.
HARNESS_REPORTS = ("Async agent launched",)

# What the harness writes into the user's turn without the user asking anything: a background
# task's notification, a tool search's "Tool loaded.", an interruption, a local command's
# output. Anything else the user's turn holds was asked (a slash command's body too: the user
# invoked it).
NOT_ASKED = ("<task-notification>", "Tool loaded.", "[Request interrupted", "<local-command", "Caveat:",
             "Operation stopped by hook:")
# A turn is substantive when the user asked something and the turn said at least this many
# statements: the unit of the session's proposal budget (proposer._room) and of the rate
# `recalld bench capture` reports ("Ok", "thanks" and a lone tool call earn nothing).
SUBSTANTIVE = 5

# A user message longer than this is a paste: a person types a few paragraphs in a chat turn;
# pages come from a file (a decision record, a prompt template's body).
PASTE_CHARS = 3_000


@dataclass
class Span:
    text: str  # the statement as a quote of the turn (redacted)
    role: str  # user | agent | answer | report | delegation | error | command
    line: int  # transcript line it was said on
    uuid: "str | None" = None
    line_to: "int | None" = None  # error -> fix: the line of the fix
    kind: str = "fact"
    score: float = 0.0  # cue + structure
    cues: list = field(default_factory=list)
    model: "float | None" = None  # the model's log-odds that it is worth keeping
    final: float = 0.0
    chunk: int = 0

    def where(self) -> str:
        to = f"-{self.line_to}" if self.line_to and self.line_to != self.line else ""
        return f"line {self.line}{to}" + (f", uuid {self.uuid[:8]}" if self.uuid else "")


@dataclass
class Mined:
    spans: list  # candidates (score >= FLOOR), best first
    statements: int = 0  # statements read
    units: int = 0  # texts read (messages, reports, errors)
    errors: int = 0  # failing tool results read
    chars: int = 0
    said_chars: int = 0  # characters of the texts cut into statements (what chunks are made of)
    paste_chars: int = 0  # of those, the characters of documents the user pasted
    text: str = ""  # everything the turn said (redacted): what a draft must be grounded in
    redactions: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)
    asked: int = 0  # turns the user's prompt opened (NOT_ASKED aside), slash commands included
    # Statements read and not made candidates: (why, line, text). The receipt counts them by
    # why (text never leaves the pass); `recalld bench capture` finds its missed labels here.
    passed: list = field(default_factory=list, repr=False)

    @property
    def passed_over(self) -> dict:
        return dict(Counter(why for why, _line, _text in self.passed))


def _passed_why(st: str, role: str) -> "str | None":
    """Why a statement read (filler cut) is not a candidate, before it is scored; None when it
    may be one."""
    if len(st) > MAX_CHARS:
        return "too_long"
    if len(_content(st)) < MIN_WORDS:
        return "too_short"
    # A pasted document is in the file it came from (the decision record the agent then
    # writes down, the prompt file Codex expands): read, counted, never a draft. So is
    # the agent's reasoning: its plans and doubts of the moment, and what it found is
    # what it then tells (docs/capture.md, "What a pass reads").
    if role in ("document", "reasoning"):
        return role
    if role in ("agent", "report"):
        if rules.of_the_moment(st):
            return "of_the_moment"
        if rules.is_trivia(st):
            return "trivia"
    if role == "user" and rules.user_of_the_moment(st):
        return "of_the_moment"
    return None


def substantive_turns(m: Mined) -> int:
    """The turns of `m` that count for the proposal budget: one per turn the user's prompt
    opened, at most one per SUBSTANTIVE statements said (a pass is usually one turn; `propose
    --transcript` reads many at once)."""
    return min(m.asked, m.statements // SUBSTANTIVE)


# Codex writes these above a command's output; they say how it ran, not what failed.
_RUN_HEADER = re.compile(r"^(?:exit code:?\s*-?\d+|wall time:.*|output:|process exited with code -?\d+)$", re.I)


def _first_error_line(text: str) -> str:
    """The line of a tool's output that says what failed (warnings skipped), with the line
    after it when it is only a heading ("Build error occurred" / "[TypeError: ...]")."""
    lines = [clean_line(ln) for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln and not _RUN_HEADER.match(ln)]
    for n, ln in enumerate(lines):
        low = ln.lower()
        if low.startswith(("npm warn", "warning:", "warn ", "(node:", "hint:")):
            continue
        if re.search(r"error|failed|cannot|can't|not found|no such|denied|refused|exception|traceback|fatal|"
                     r"invalid|undefined|missing|unable", low):
            if len(ln) < 40 and n + 1 < len(lines):
                ln = f"{ln} {lines[n + 1]}"
            return _cut(ln, 240)
    return _cut(lines[0], 240) if lines else ""


def _cut(text: str, n: int) -> str:
    """At most n characters, cut between words: half a word is a word the turn never said."""
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0]


_CD = re.compile(r"^cd\s+\S+\s*&&\s*")
# The shell a command was handed to (Codex runs `bash -lc CMD`, on Windows `powershell.exe
# -NoProfile -Command CMD`): the command is what follows; cutting the wrapper is a deletion.
_SHELL = re.compile(r"^(?:(?:/usr)?(?:/bin/)?(?:ba|z|da)?sh\s+-l?c|(?:powershell|pwsh)(?:\.exe)?(?:\s+-\w+)*\s+-Command|"
                    r"cmd(?:\.exe)?\s+/c)\s+", re.I)


def unwrap(cmd: str) -> str:
    """A command without the shell it was handed to, and without a leading `cd DIR &&`."""
    cmd = _SHELL.sub("", cmd.strip())
    if len(cmd) > 1 and cmd[0] == cmd[-1] and cmd[0] in "'\"":
        cmd = cmd[1:-1]
    return _CD.sub("", cmd)


def _command_of(ev) -> str:
    if ev is None:
        return ""
    ti = ev.tool_input if isinstance(ev.tool_input, dict) else {}
    for key in ("command", "cmd", "file_path", "path", "url", "query", "pattern"):
        v = ti.get(key)
        if isinstance(v, list):
            v = " ".join(x for x in v if isinstance(x, str))
        if isinstance(v, str) and v.strip():
            return _cut(unwrap(" ".join(v.strip().splitlines()[0].split())), 160)
    return _cut(" ".join((ev.text or "").split()), 160)


def mine(events: list) -> Mined:
    """Every statement of a turn scored; candidates (>= FLOOR) best first, one per distinct text."""
    m = Mined(spans=[])
    red_counts: dict = {}
    texts = []

    def red(t: str) -> str:
        r, found = policies.redact(t or "")
        for k, n in found.items():
            red_counts[k] = red_counts.get(k, 0) + n
        return r

    units = []  # (role, text, line, uuid)
    calls = {}  # tool -> last call event
    errors = []  # (index in `order`, error event, the call that failed)
    seen_texts = set()
    order = []  # (kind, payload) in event order, for the error -> fix walk
    in_turn = False  # a user's prompt opened the turn being read
    for ev in events:
        if ev.kind == "turn_end":
            in_turn = False
            continue
        t = (ev.text or "").strip()
        if ev.kind == "tool_call":
            calls[ev.tool] = ev
            texts.append(red(t))
            order.append(("call", ev))
            continue
        if not t:
            continue
        if ev.kind == "prompt":
            sub = ev.agent not in ("main", None) and ev.agent != ""
            if not sub and not t.startswith(NOT_ASKED):
                # A request opens a turn; a message typed while the agent works is said inside
                # the turn it joins, and a subagent's task is the agent asking, not the user.
                m.asked += not in_turn
                in_turn = True
            if t.startswith(HARNESS_PROMPTS):
                continue
            t = red(t)
            texts.append(t)
            role = "delegation" if sub else "user"
            if role == "user":
                m.requests.append(" ".join(t.split()))
                # Pages of text in one message are a paste (a decision record, a prompt file's
                # body), not the user speaking: its statements are the document's, not drafted.
                if len(t) > PASTE_CHARS:
                    role = "document"
            units.append((role, t, ev.line_no, ev.uuid))
        elif ev.kind in ("text", "reasoning") and ev.role == "assistant":
            t = red(t)
            texts.append(t)
            key = " ".join(t.split())
            if key in seen_texts:  # a subagent's report appears as its text and as the tool result
                continue
            seen_texts.add(key)
            units.append(("agent" if ev.kind == "text" else "reasoning", t, ev.line_no, ev.uuid))
            # Reasoning is never what fixed an error or what a command brought up: it is never
            # drafted, on its own or as the far side of an arrow.
            order.append(("text" if ev.kind == "text" else "reasoning", (t, ev)))
        elif ev.kind == "tool_result":
            t = red(t)
            texts.append(t)
            tool = (ev.tool or "").lower()
            if ev.is_error:
                said = t.partition(DECLINED_SAID)[2].strip() if t.startswith(HARNESS_ERRORS) else ""
                if said:
                    m.requests.append(" ".join(said.split()))
                    units.append(("user", said, ev.line_no, ev.uuid))
                    continue
                if t.startswith(HARNESS_ERRORS) or len(t) < 12 or any(h in t[:200] for h in HARNESS_ERRORS) \
                        or EMPTY_FAILURE.match(t):
                    continue
                m.errors += 1
                errors.append((len(order), ev, calls.get(ev.tool)))
                order.append(("error", ev))
            elif tool in ANSWER_TOOLS or t.startswith("User has answered"):
                for q, a in ANSWER_PAIR.findall(t):
                    units.append(("answer", f"{q}={a}", ev.line_no, ev.uuid))
            elif tool in DELEGATE_TOOLS:
                if t.startswith(HARNESS_REPORTS):
                    continue
                key = " ".join(t.split())
                if key not in seen_texts:
                    seen_texts.add(key)
                    units.append(("report", t, ev.line_no, ev.uuid))
            else:
                order.append(("ok", ev))
    m.text = "\n".join(texts)
    m.chars = len(m.text)
    m.units = len(units)
    spans = []
    m.said_chars = sum(len(u[1]) for u in units)
    m.paste_chars = sum(len(u[1]) for u in units if u[0] == "document")
    for role, t, line, uuid in units:
        headings = {clean_line(h) for h in t.splitlines() if BOLD_HEADING.match(h.strip())}
        for st in (statements(t, casual=role == "user") if role != "answer" else [t]):
            m.statements += 1
            noted = role == "user" and USER_NOTE.match(st)
            why = "heading" if st in headings else None
            st = tighten(st)
            why = why or _passed_why(st, role)
            if why:
                m.passed.append((why, line, st))
                continue
            s, kind, cues = score(st, role)
            if noted and "remember" not in cues:
                s, cues = s + WEIGHTS["remember"], cues + ["remember"]
            kind = rules.kind_of(st, role, kind)
            spans.append(Span(text=st, role=role, line=line, uuid=uuid, kind=kind, score=s, cues=cues))
    spans.extend(_error_spans(order, errors))
    spans.extend(_run_spans(order))
    m.redactions = red_counts
    best = {}
    for sp in spans:
        why = ("below_floor" if sp.score < FLOOR else
               "no_claim" if not (set(sp.cues) & SEMANTIC or sp.role == "answer") else
               # The user's "let's use X" is a decision, not narration; an error's parts were checked.
               "narration" if sp.role not in ("error", "command", "user", "answer") and policies.is_narration(sp.text)
               else None)
        if why:
            m.passed.append((why, sp.line, sp.text))
            continue
        key = policies._norm(sp.text)
        if key not in best or sp.score > best[key].score:
            best[key] = sp
    m.spans = sorted(best.values(), key=lambda sp: (-sp.score, sp.line))
    return m


# `PYTHONPATH=. pytest`: the variables set for one command are not the command.
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _head(cmd: str) -> str:
    words = cmd.split()
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    return " ".join(words[:2])


def _fix_statement(text: str, head: str) -> "str | None":
    """The claim in what the agent said after an error: "Let me fix X by Y:" -> "fix X by Y",
    when it names the error or its subject and is more than a fix's trivia."""
    for st in statements(text):
        st = tighten(FIX_LEAD.sub("", st)).rstrip(":").strip()
        if len(_content(st)) >= 4 and not policies.is_narration(st) and rules.links(head, st) \
                and not rules.is_trivia(st) and not rules.of_the_moment(st):
            return st
    return None


def _error_spans(order: list, errors: list) -> list:
    """Structure: a failing command, what the agent said next, and whether the same command
    later went through (error -> fix); or the same error again and again, never fixed (a
    warning). The span joins quotes of the turn with symbols only: `command`: error -> fix."""
    out = []
    by_error: dict = {}
    for i, ev, call in errors:
        # The event texts are the parser's, not redacted yet: the quote is, before it is used.
        err = policies.redact(_first_error_line(ev.text or ""))[0]
        if err:
            by_error.setdefault(policies._norm(err), []).append((i, ev, call, err))
    for group in by_error.values():
        i, ev, call, err = group[0]
        cmd = policies.redact(_command_of(call))[0] if call is not None else ""
        if is_look(cmd):
            continue  # a look that found nothing says where the agent looked, not how the project is
        after = order[i + 1:]
        fix_text, fix_line, fixed_line = None, None, None
        for kind, payload in after:
            if kind == "text":
                t, tev = payload
                got = _fix_statement(t, f"{cmd} {err}")
                if got:
                    fix_text, fix_line = got, tev.line_no
                    break
        last_i = group[-1][0]
        for kind, payload in order[last_i + 1:]:
            if kind == "ok" and payload.tool == ev.tool and call is not None and cmd and \
                    _head(_command_of(_call_before(order, payload))) == _head(cmd):
                fixed_line = payload.line_no
                break
        head = f"`{cmd}`: {err}" if cmd else err
        if fixed_line and fix_text:
            text, cue = f"{head} → {fix_text}", "error_fixed"
        else:
            # Never fixed: what the agent said the cause might be, if it said one.
            cause, fix_line = None, None
            for k, p in order[last_i + 1:]:
                if k != "text":
                    continue
                cause = next((tighten(st) for st in statements(p[0]) if CAUSE.search(st)
                              and not PROGRESS.search(st) and not policies.is_narration(st)
                              and rules.links(f"{cmd} {err}", st) and not rules.of_the_moment(st)), None)
                if cause:
                    fix_line = p[1].line_no
                    break
            text = head + (f" → {cause}" if cause else "")
            cue = "error_repeated" if len(group) > 1 else "error_once"
        if len(text) > MAX_CHARS:
            text = text[: MAX_CHARS - 1].rsplit(" ", 1)[0]
        # Scored by its structure and by what the agent said about it: the paths and names an
        # error message is full of say nothing about whether it matters.
        s, _kind, cues = score(text[len(head):], "error") if text != head else (0.0, None, [])
        kind = "fact" if cue == "error_fixed" else "constraint"
        to = fixed_line or fix_line
        out.append(Span(text=text, role="error", line=ev.line_no, uuid=ev.uuid,
                        line_to=to if to and to != ev.line_no else None, kind=kind,
                        score=max(s, 0.0) + WEIGHTS[cue], cues=[cue, *cues]))
    return out


def _call_before(order: list, result) -> "object":
    """The tool call a result answers: the latest call of the same tool before it."""
    call = None
    for kind, payload in order:
        if payload is result:
            break
        if kind == "call" and payload.tool == result.tool:
            call = payload
    return call


# Read-only looks around (their failures are the agent looking in the wrong place).
EXPLORE_COMMANDS = ("ls", "cat", "head", "tail", "find", "tree", "grep", "rg", "pwd", "echo", "which", "stat",
                    "wc", "file", "cd", "less", "more", "type", "nl", "dir", "get-content", "get-childitem",
                    "select-string", "test-path", "get-item")
_GIT_LOOK = re.compile(r"^git\s+(?:status|log|diff|show|branch|remote|rev-parse|ls-files)\b")


def is_look(cmd: str) -> bool:
    """A read-only look around (`cat`, `rg`, `Get-Content`, `sed -n`, `git status`): its failure
    says where the agent looked, not how the project is."""
    cmd = unwrap(cmd)
    head = cmd.split(" ", 1)[0].lower()
    if head in EXPLORE_COMMANDS or _GIT_LOOK.match(cmd):
        return True
    return head == "sed" and not re.search(r"\s-i\b|--in-place", cmd)
# "Let me fix X by Y" -> "fix X by Y": the claim after the agent's announcement of it.
FIX_LEAD = re.compile(r"^(?:let me|i'll|i will|i need to|we need to|now i'll|now let me|i should)\s+", re.I)


# What the agent says when a command brought something up: how the project is run (the dev
# server on its port), the kind of thing a CLAUDE.md lists first.
SERVER_UP = re.compile(r"\b(?:server|app|application|service|api|site|daemon|backend|frontend)\b[^.;:]{0,40}?"
                       r"\b(?:is|are|now) (?:up|running|listening|serving|started)\b", re.I)


def _run_spans(order: list) -> list:
    """Structure: a command (not a look around) and the agent's next words saying that what it
    started is up: `pnpm dev --port 3001` → The development server is running successfully.
    Quotes joined by a symbol, as for error -> fix; scored by the command's concrete words."""
    out, last = [], None
    for kind, payload in order:
        if kind == "call":
            ti = payload.tool_input if isinstance(payload.tool_input, dict) else {}
            cmd = ti.get("command") or ti.get("cmd")
            if isinstance(cmd, list):
                cmd = " ".join(x for x in cmd if isinstance(x, str))
            if isinstance(cmd, str) and cmd.strip():
                last = None if is_look(_command_of(payload)) else payload
            continue
        if kind != "text" or last is None:
            continue
        said = next((tighten(st) for st in statements(payload[0]) if SERVER_UP.search(st)), None)
        if not said:
            continue
        cmd = policies.redact(_command_of(last))[0]
        text = f"`{cmd}` → {said}"
        if len(text) > MAX_CHARS:
            continue
        found = [name for name, rx in SPECIFIC if name != "code" and rx.search(cmd)]
        n_spec = sum(len(rx.findall(cmd)) for name, rx in SPECIFIC if name != "code")
        out.append(Span(text=text, role="command", line=last.line_no, uuid=last.uuid,
                        line_to=payload[1].line_no if payload[1].line_no != last.line_no else None, kind="procedure",
                        score=WEIGHTS["command_runs"] + min(WEIGHTS["specific_max"], WEIGHTS["specific"] * n_spec),
                        cues=["command_runs", *found]))
        last = None  # one span per command
    return out

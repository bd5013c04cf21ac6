"""Candidate memories mined from what was said in a turn, each a quoted span with provenance.

A 135M model cannot write a memory worth keeping (docs/capture.md); people and agents in a
session already say them. So the proposer reads every text of the turn (the user's messages,
the agent's text and reasoning, the user's answers to the agent's questions, a subagent's
report, failing commands and what came after them), cuts it into statements, and scores each
by cue features (a decision with its reason, a constraint or warning, a root cause, a user
correction or preference, a concrete project fact: a port, path, version, flag, identifier) and
by structure (an error, then what fixed it; the same error again and again). The model only
ranks the best of these (proposer.py); nothing here invents a word: a candidate is a span of
the turn, at most with leading filler ("Perfect! I can see that") cut off, or spans of the turn
joined by a symbol (error -> fix).

Standard library only. Every text is redacted before it is cut, so a secret never reaches a
span, a score or a receipt.
"""

import re
from dataclasses import dataclass, field

from recalld.capture import policies, rules

# --- what is read --------------------------------------------------------------------------

# Text the harness writes into the user's turn: not the user speaking.
HARNESS_PROMPTS = ("[Request interrupted", "<command-name>", "<command-message>", "<local-command",
                   "Caveat:", "<system-reminder>", "<user-prompt-submit-hook>", "<bash-input>",
                   "<bash-stdout>", "<bash-stderr>", "<task-notification>", "Tool loaded.")
# Tool errors about the agent's use of the tool (or the user declining it), not the project.
HARNESS_ERRORS = ("<tool_use_error>", "The user doesn't want to proceed", "The user doesn't want to take this action",
                  "Claude requested permissions", "EISDIR", "File has not been read yet",
                  "File has been modified since read", "String to replace not found", "No changes to make",
                  "[Request interrupted", "InputValidationError")
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

MIN_WORDS, MAX_CHARS = 6, 400
# A user message longer than this is a paste: a person types a few paragraphs in a chat turn;
# pages come from a file (a decision record, a prompt template's body).
PASTE_CHARS = 3_000


@dataclass
class Span:
    text: str  # the statement as a quote of the turn (redacted)
    role: str  # user | document | agent | reasoning | answer | report | delegation | error | command
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


# --- cues ----------------------------------------------------------------------------------


def _rx(*parts) -> "re.Pattern":
    return re.compile("|".join(parts), re.I)


DECISION = _rx(r"\bwe(?:'ve| have)? (?:decided|chose|agreed|settled|picked|opted)\b", r"\bdecided\b", r"\bdecision\b",
               r"\b(?:chose|chosen|opted|settled on|went with|go with|going with)\b", r"\binstead of\b",
               r"\brather than\b", r"\bin favou?r of\b", r"\b(?:switch(?:ed)?|migrat(?:e|ed)|mov(?:e|ed)) (?:to|away from)\b",
               r"\b(?:pinned|pin) (?:to|at)\b", r"\bno-gos?\b", r"\bout of scope\b", r"\bseparate task\b",
               r"\b(?:keep|leave) (?:the )?defaults?\b", r"\b(?:not|no) [\w/ -]{1,30} yet\b", r"\bfall ?back to\b")
# A reason is only counted with a decision or a rule, so ", so" and a colon before a clause
# ("Do not tag on Fridays: the rota has nobody on Saturdays") read as one there.
REASON = _rx(r"\bbecause\b", r"\bsince\b", r"\bso that\b", r"\bto avoid\b", r"\bdue to\b", r"\botherwise\b",
             r"\bwhich means\b", r"\bfor (?:compatibility|performance|safety|security)\b", r"—|--? |;",
             r", so\b", r"\w: (?=\S+ \S+ \S+)")
CONSTRAINT = _rx(r"\bmust(?:n't| not)?\b", r"\bnever\b", r"\balways\b", r"\bdo not\b", r"\bdon't\b", r"\bcannot\b",
                 r"\bcan't\b", r"\bwon't\b", r"\bshould(?:n't| not)\b", r"\brequires?\b", r"\brequired\b",
                 r"\bmake sure\b", r"\bcareful\b", r"\bwarning\b", r"\bcaution\b", r"\bimportant\b", r"\bavoid\b",
                 r"\bnot supported\b", r"\bunsupported\b", r"\bincompatible\b", r"\bdeprecated\b",
                 r"\b(?:is|are|runs?) (?:very )?slow\b", r"\bdoes(?:n't| not) work\b", r"\bstill (?:does(?:n't| not)|fails?)\b",
                 r"\bbroken\b", r"\bfails? (?:with|when|on|if)\b", r"\bexpires?\b", r"\btimes? out\b",
                 r"\brate[- ]limit(?:s|ed)?\b", r"\blimited to\b", r"\bonly works\b",
                 r"\btakes? [\w+ -]{0,12}(?:minutes|seconds|hours)\b")
CAUSE = _rx(r"\bcaused by\b", r"\broot cause\b", r"\bthe (?:problem|issue|bug|cause|reason|culprit) (?:is|was)\b",
            r"\bturns? out\b", r"\bdue to\b", r"\bthe fix\b", r"\bfixed by\b", r"\bthis happens\b",
            r"\bhappens (?:when|because)\b", r"\bthat's why\b", r"\bwhich is why\b", r"\bbecause\b",
            r"\bmight be related to\b", r"\bthe error (?:is|was|means)\b")
STATE = _rx(r"\balready\b", r"\bis configured\b", r"\bare configured\b", r"\buses\b", r"\bis using\b", r"\blives? in\b",
            r"\blocated (?:in|at)\b", r"\bdefaults? (?:to|is)\b", r"\bby default\b", r"\bdiffers?\b",
            r"\bdoes(?:n't| not) exist\b", r"\bnot installed\b", r"\bis missing\b", r"\bare missing\b", r"\bmissing\b",
            r"\bdepends on\b", r"\bis set to\b", r"\b(?:is|are) (?:set|managed|generated|handled|built|owned) by\b",
            r"\bpoints? to\b", r"\bruns? on\b", r"\blistens? on\b",
            r"\b(?:upgraded|downgraded|updated) (?:from|to)\b", r"\bdiscrepancy\b", r"\bduplicated\b",
            r"\bno [\w.`-]+ (?:installers?|scripts?|config|tests?)\b", r"\bactual (?:file|name|port|path)\b",
            r"\bdocumented\b", r"\bcan add\b", r"\bhandles?\b", r"\bgenerates?\b", r"\binstalled\b",
            r"\bconfigured (?:with|to|for|in|as)\b", r"\b(?:enabled|disabled) (?:by|in|for)\b",
            r"\bhosted (?:at|on|by)\b", r"\bdeployed (?:to|on|at)\b", r"\bserved (?:from|by)\b")
# Explicit markers of what should outlive the session ("Note for later:", "keep in mind").
REMEMBER = _rx(r"\bnote (?:for later|to self|for (?:the )?future)\b", r"\bfor (?:future|later) reference\b",
               r"\bkeep in mind\b", r"\bremember (?:that|to)\b", r"\bgoing forward\b", r"\bfrom now on\b",
               r"\bheads[- ]up\b", r"\bgotchas?\b", r"\blessons? learned\b", r"\bfyi\b",
               r"\bworth (?:noting|remembering|knowing)\b", r"\bfor the record\b")
# A decision said as one: its kind is decision even when the user says it (whose words also
# carry the preference cue, "instead", "we use"), and an answer to a question that asks what to
# do is the decision taken, not a taste.
DECIDED = _rx(r"\bwe(?:'ve| have)? (?:decided|chose|agreed|settled|picked|opted)\b", r"\bdecided\b",
              r"\bdecision\b", r"\b(?:chose|chosen|opted for|settled on|went with|going with)\b",
              r"\blet's (?:go with|use|keep|stick with)\b")
DECISION_QUESTION = _rx(r"\b(?:should|shall|will|would|do) we\b", r"\bwhich (?:[\w-]+ ){0,3}(?:should|to)\b",
                        r"\b(?:how|what) (?:[\w-]+ ){0,3}should\b", r"\b(?:approach|option|strategy)\b")
PREFERENCE = _rx(r"^(?:no|nope)\b[,.!]?", r"^(?:don't|do not|never|always|stop)\b", r"^please (?:don't|do not|always|never|use|keep)\b",
                 r"^(?:include|exclude|keep|pause|skip|avoid|only|make sure|ask me|confirm)\b", r"\bwe should\b", r"\blet's\b",
                 r"^use\b", r"\bwe (?:use|don't|do not|prefer|always|never|need)\b", r"\bi (?:prefer|want|don't want|do not want|like|hate)\b",
                 r"\b(?:it|this|that|we) should\b",
                 r"\binstead\b", r"\bprefer\b", r"\brather\b")

# What makes a statement about this project rather than about anything.
SPECIFIC = [
    ("port", re.compile(r"\bport\s*:?\s*\(?\d{2,5}\b|\blocalhost:\d{2,5}\b|\b\d{1,3}(?:\.\d{1,3}){3}:\d{2,5}\b", re.I)),
    ("version", re.compile(r"(?<![\w.])v?\d+\.\d+(?:\.\d+)*\b|(?<!\w)v\d+\b|[~^]>?\s*\d+(?:\.\d+)*")),
    ("path", re.compile(r"(?<![\w:/])(?:~|\.{1,2})?/?(?:[\w@.-]+/)+[\w@.-]*")),
    ("file", re.compile(r"\b[\w.-]+\.(?:py|js|mjs|cjs|ts|tsx|jsx|ex|exs|heex|json|toml|ya?ml|md|css|scss|lock|cfg|ini|"
                        r"sh|go|rs|rb|java|kt|swift|c|h|cc|cpp|sql|env|txt|html|vue|svelte|gradle|xml)\b")),
    ("quantity", re.compile(r"(?<![\w.])\d+(?:\.\d+)?\+?\s*(?:ms|milliseconds?|secs?|seconds?|mins?|minutes?|"
                            r"hours?|hrs?|days?|[KMGT]i?B|bytes?|%)(?!\w)", re.I)),
    ("flag", re.compile(r"(?<![\w-])--[a-z][\w-]+")),
    ("env", re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")),
    ("code", re.compile(r"`[^`\n]{2,80}`")),
    ("identifier", re.compile(r"\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b|\b\w+_\w+\b|\b\w+\.\w+\(?")),
]
# Progress, plans and praise: what the agent did or will do, not what is true.
PROGRESS = _rx(r"\blet me\b", r"\bi'll\b", r"\bi will\b", r"\bi'm going\b", r"\bi am going\b", r"\bi've\b",
               r"\bi have (?:successfully|now|also|created|added|updated|implemented)\b", r"\bnow i\b",
               r"^(?:now|next|then|first|finally|also)\b(?![.\w])", r"\bsuccessfully\b", r"\bhere's\b", r"\bhere is\b")
FLUFF = _rx(r"\bcomprehensive\b", r"\bprofessional\b", r"\bseamless(?:ly)?\b", r"\brobust\b", r"\bintuitive\b",
            r"\bmodern\b", r"\bclean\b", r"\bbeautiful\b", r"\bproduction[- ]ready\b", r"\bwell[- ]\w+\b",
            r"\bexcellent\b", r"\bscalable\b", r"\bfully functional\b", r"\bcomplete\b", r"\bbest practices?\b",
            r"\bgreat\b", r"\bsmooth\b", r"\belegant\b", r"\bpowerful\b")
# Leading filler that can be cut without losing the claim ("Perfect! I can see that X" -> "X").
FILLER = re.compile(
    r"^(?:(?:perfect|great|good|excellent|ok(?:ay)?|alright|sure|ah|oh|hmm|yes|right|interesting|nice|got it)\b[!,.:]*\s*[-—]?\s*|also,\s+)*"
    r"(?:(?:i can see|i see|i notice|i noticed|i found|it seems|it looks like|it appears|looks like|"
    r"i can confirm|i understand|i realized|i learned)\b(?: that)?[,:]?\s+|note(?: that|:)\s+)?", re.I)
# ("Note that X" and "Note: X" lose the lead; "Note for later: X" keeps it, a marker, not filler.)

WEIGHTS = {"decision": 2.0, "reason": 1.0, "remember": 2.0, "constraint": 1.5, "cause": 2.0, "state": 1.0,
           "preference": 2.5,
           "specific": 0.6, "specific_max": 2.4, "progress": -2.0, "fluff": -1.5, "fluff_min": -3.0,
           "question": -1.5, "emoji": -1.0, "user": 0.5, "answer": 3.0, "report": 0.0, "delegation": -1.0,
           "error_fixed": 3.0, "error_repeated": 2.5, "error_once": 1.0, "command_runs": 2.0}
FLOOR = 1.5  # below this a statement is not a candidate at all
# A candidate says something (a decision, rule, cause, state of things, preference, or an
# error's story); concrete words alone ("TodoItem.tsx - displays a todo") are a description.
SEMANTIC = {"decision", "remember", "constraint", "cause", "state", "preference", "error_fixed", "error_repeated",
            "error_once", "command_runs"}


# --- cutting text into statements ----------------------------------------------------------

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_SENT = re.compile(r"(?<=[.!?。])\s+(?=[A-Z`\"'(\[*_])|(?<=。)")
_EMOJI = re.compile("[\u2600-\u27bf\U0001f300-\U0001faff\u2b50\u2705\u274c]")
_BULLET = re.compile(r"^\s*(?:>\s*)*(?:[-*+•]\s+|\d+[.)]\s+|#+\s+)?")


def clean_line(line: str) -> str:
    line = _BULLET.sub("", line)
    line = line.replace("**", "").replace("__", "")
    line = _EMOJI.sub("", line)
    return " ".join(line.split())


# People type in lower case: in what the user says a sentence may start with a small letter.
_SENT_LOWER = re.compile(r"(?<=[.!?])\s+(?=[a-z])")
# The user marking what to remember ("note that most are Python"): the marker is cut as filler,
# the cue stays.
USER_NOTE = re.compile(r"^(?:note|fyi|remember|keep in mind)(?: that|:|,)\s", re.I)


# A line wholly in bold, short and with no sentence end in it, is a heading ("**Adjusting working
# directory paths**", the title of a Codex reasoning summary), not a statement.
BOLD_HEADING = re.compile(r"^(?:[-*+]\s+)?\*\*[^*.!?;]{1,80}\*\*:?$")


def statements(text: str, casual: bool = False) -> list:
    """A text cut into statements: code blocks dropped, one statement per list item or line,
    lines cut at sentence ends (`casual`: before a small letter too, as the user types). Table
    rows and headings alone are not statements."""
    text = _FENCE.sub("\n", text or "")
    out = []
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s.startswith("|") or re.match(r"^#+\s", s) or set(s) <= set("-=*_ >|:"):
            continue
        line = clean_line(s)
        for sent in _SENT.split(line):
            for part in (_SENT_LOWER.split(sent) if casual else [sent]):
                part = part.strip()
                if part:
                    out.append(part)
    return out


def tighten(text: str) -> str:
    """Cut leading filler; the rest is the statement as said (a deletion, so it stays grounded)."""
    t = FILLER.sub("", text).strip()
    t = t.lstrip("-—:;,. ")
    if len(t.split()) < MIN_WORDS:
        return text.strip()
    return t[:1].upper() + t[1:] if t[:1].islower() and text[:1].isupper() else t


def _content(text: str) -> list:
    return re.findall(r"[\w'’-]+", text)


def score(text: str, role: str) -> tuple:
    """(score, kind, cues) of one statement by its words alone."""
    text = rules.plain(text)
    w, cues = WEIGHTS, []
    s = 0.0
    kinds = {}
    if DECISION.search(text):
        s += w["decision"]
        cues.append("decision")
        kinds["decision"] = w["decision"]
        if REASON.search(text):
            s += w["reason"]
            cues.append("reason")
    if CONSTRAINT.search(text):
        s += w["constraint"]
        cues.append("constraint")
        kinds["constraint"] = w["constraint"]
        # A rule with its reason ("slow on first run — just document") is worth more than a rule.
        if "reason" not in cues and REASON.search(text):
            s += w["reason"]
            cues.append("reason")
    if CAUSE.search(text):
        s += w["cause"]
        cues.append("cause")
        kinds["fact"] = max(kinds.get("fact", 0), w["cause"])
    if STATE.search(text):
        s += w["state"]
        cues.append("state")
        kinds["fact"] = max(kinds.get("fact", 0), w["state"])
    if REMEMBER.search(text):
        s += w["remember"]
        cues.append("remember")
    if role in ("user", "answer") and PREFERENCE.search(text):
        s += w["preference"]
        cues.append("preference")
        kinds["preference"] = w["preference"]
    found = [name for name, rx in SPECIFIC if rx.search(text)]
    n_spec = sum(len(rx.findall(text)) for _, rx in SPECIFIC)
    if found:
        s += min(w["specific_max"], w["specific"] * n_spec)
        cues.extend(found)
    if PROGRESS.search(text):
        s += w["progress"]
        cues.append("progress")
    fl = len(FLUFF.findall(text))
    if fl:
        s += max(w["fluff_min"], w["fluff"] * fl)
        cues.append("fluff")
    # A question asks, it does not say; the user's "what about we ...?" proposes, and stays.
    if text.rstrip().endswith("?") and not (role == "user" and rules.DECIDED.search(text)):
        s += w["question"]
    if _EMOJI.search(text):
        s += w["emoji"]
    s += w.get(role, 0.0) if role in ("user", "answer", "report", "delegation") else 0.0
    kind = max(kinds, key=kinds.get) if kinds else "fact"
    if role == "answer":
        question = text.split("=", 1)[0]
        kind = "decision" if "decision" in kinds or DECISION_QUESTION.search(question) else "preference"
    elif DECIDED.search(text):
        kind = "decision"
    return s, kind, cues


# --- the turn ------------------------------------------------------------------------------


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


def _first_error_line(text: str) -> str:
    """The line of a tool's output that says what failed (warnings skipped), with the line
    after it when it is only a heading ("Build error occurred" / "[TypeError: ...]")."""
    lines = [clean_line(ln) for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln]
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
    for ev in events:
        if ev.kind == "turn_end":
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
            if t.startswith(HARNESS_PROMPTS):
                continue
            t = red(t)
            texts.append(t)
            sub = ev.agent not in ("main", None) and ev.agent != ""
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
            order.append(("text", (t, ev)))
        elif ev.kind == "tool_result":
            t = red(t)
            texts.append(t)
            tool = (ev.tool or "").lower()
            if ev.is_error:
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
    # What the agent told, to check its reasoning against: a claim thought and then said is the
    # text's (the answer restates the thinking behind it, in the words chosen for the reader).
    told = [st for role, t, _l, _u in units if role == "agent" for st in statements(t)]
    for role, t, line, uuid in units:
        headings = {clean_line(h) for h in t.splitlines() if BOLD_HEADING.match(h.strip())}
        for st in (statements(t, casual=role == "user") if role != "answer" else [t]):
            m.statements += 1
            if st in headings:
                continue
            noted = role == "user" and USER_NOTE.match(st)
            st = tighten(st)
            if len(st) > MAX_CHARS or len(_content(st)) < MIN_WORDS:
                continue
            if role in ("agent", "reasoning", "report", "document") and \
                    (rules.of_the_moment(st, role) or rules.is_trivia(st)):
                continue
            if role == "reasoning" and rules.said_again(st, told):
                continue
            # A pasted document is in the file it came from (the decision record the agent then
            # writes down, the prompt file Codex expands): read, counted, never a draft.
            if role == "document":
                continue
            if role == "user" and rules.user_of_the_moment(st):
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
        if sp.score < FLOOR or not (set(sp.cues) & SEMANTIC or sp.role == "answer"):
            continue
        # The user's "let's use X" is a decision, not narration; an error's parts were checked.
        if sp.role not in ("error", "command", "user", "answer") and policies.is_narration(sp.text):
            continue
        key = policies._norm(sp.text)
        if key not in best or sp.score > best[key].score:
            best[key] = sp
    m.spans = sorted(best.values(), key=lambda sp: (-sp.score, sp.line))
    return m


def _head(cmd: str) -> str:
    return " ".join(cmd.split()[:2])


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

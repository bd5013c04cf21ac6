"""What makes a statement worth a later session's time, read off its words: the cues (a
decision and its reason, a constraint, a root cause, a concrete project fact, a user's
correction) that mine.py scores every statement of a turn by, and how a turn's text is cut into
statements. Standard library only; nothing here invents a word.
"""

import re

from recalld.capture import rules

MIN_WORDS, MAX_CHARS = 6, 400  # a statement's least words, a candidate's most characters


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

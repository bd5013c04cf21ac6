"""What a draft must pass before it may be stored as a proposal.

Two jobs. Redaction (recalld/redact.py, re-exported here): secrets are replaced by
`[REDACTED:kind]` before text goes to the model, into a draft, into the store, a log or a
receipt. Screening: narration and
progress reports, drafts that are too short or too long, degenerate repetition, drafts not
grounded in what the model read (numbers it never saw, words the window does not contain),
duplicates of a current memory or a pending proposal, and low-confidence drafts are rejected,
each counted by reason.

rapidfuzz is imported where duplicates are checked.
"""

import re
from collections import Counter
from dataclasses import dataclass, field

from recalld.core.redact import PLACEHOLDER, has_secret, redact  # noqa: F401  (re-exported)

KINDS = ("decision", "constraint", "fact", "procedure", "preference")
# --- screening -----------------------------------------------------------------------------

# Narration and progress: what the agent did, is doing or will do, not what is true.
_NARRATION_START = re.compile(
    r"^\s*(?:(?:i|we)(?:'ve|'ll|'m| have| will| am| are| just)?\s+(?:now\s+)?(?:updated|added|fixed|changed|"
    r"created|implemented|modified|ran|run|made|removed|refactored|wrote|committed|pushed|moved|renamed|"
    r"deleted|installed|started|finished|completed|tested|checked|verified|going|will|need|should|think|"
    r"can|could|looked|found|see|noticed)\b|i'll\b|i'm\b|let me\b|let's\b|now,?\s+let's\b|now\s+i\b|next,?\s|"
    r"then,?\s|done\b|all done\b|finished\b|ok(?:ay)?\b|sure\b|great\b|perfect\b|alright\b|"
    r"here(?:'s| is| are)\b|the user (?:asked|wants|requested|said)\b|user (?:asked|wants|requested)\b)",
    re.I)
_NARRATION_ANY = re.compile(
    r"\b(?:i(?:'ve| have)? (?:just )?(?:updated|added|fixed|changed|created|implemented|modified|refactored)|"
    r"now let's|let me (?:check|look|see|run|try)|i'll (?:now |go |start |run |check |fix |update |add )|"
    r"(?:successfully|now) (?:updated|added|fixed|implemented|created)|all (?:tests )?(?:pass(?:ing)?|done))\b",
    re.I)
_WORD = re.compile(r"[\w'’-]+")


_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'"})


def is_narration(text: str) -> bool:
    text = (text or "").translate(_QUOTES)  # "I\u2019ll" is "I'll" (Codex and GPT write curly quotes)
    return bool(_NARRATION_START.search(text) or _NARRATION_ANY.search(text))


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


@dataclass
class Draft:
    kind: str
    text: str
    why: str = ""
    confidence: "float | None" = None
    redactions: dict = field(default_factory=dict)
    # Provenance of a mined span (recalld/capture/mine.py): who said it and where.
    role: "str | None" = None  # user | agent | answer | report | delegation | error | command
    line: "int | None" = None
    line_to: "int | None" = None
    uuid: "str | None" = None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "why": self.why, "confidence": self.confidence,
                "redactions": self.redactions, "role": self.role, "line": self.line, "line_to": self.line_to,
                "uuid": self.uuid}


@dataclass
class Screened:
    kept: list  # Drafts that may be stored
    rejected: list  # (Draft, reason)
    redactions: Counter
    # (Draft, index into `pending`): drafts rejected as saying what an earlier pass's pending
    # proposal says; their provenance belongs to that proposal (proposal_db.store_pass).
    again: list = field(default_factory=list)

    @property
    def by_reason(self) -> dict:
        return dict(Counter(reason for _, reason in self.rejected))


DEFAULTS = {"max_drafts": 3, "min_chars": 40, "min_words": 6, "max_chars": 600,
            "min_confidence": 0.5, "duplicate_ratio": 88, "min_grounding": 0.6}

_STOP = set("""a an and are as at be been but by can could did do does for from had has have how if in
into is it its may might must no not of on or our should so such than that the their them then there
these they this those to too was we were what when where which while who why will with would you your
also only just very more most some any each other about after before over under again""".split())
_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)?%?")


def _content_words(text: str) -> list:
    return [w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP]


def grounding(text: str, window: str) -> float:
    """Share of the draft's content words that occur in the window (0..1)."""
    words = _content_words(text)
    if not words:
        return 0.0
    have = set(_WORD.findall(window.lower()))
    return sum(1 for w in words if w in have) / len(words)


def invented_numbers(text: str, window: str) -> list:
    """Numbers in the draft that the window never says: a proposer once invented a statistic this way."""
    return [n for n in _NUMBER.findall(text) if n not in window]


def is_repetitive(text: str) -> bool:
    """Degenerate output: the same phrase over and over."""
    words = _WORD.findall(text.lower())
    if len(words) < 12:
        return False
    grams = [" ".join(words[i:i + 4]) for i in range(len(words) - 3)]
    return len(set(grams)) / len(grams) < 0.7 or len(set(words)) / len(words) < 0.35


def coerce(raw) -> "Draft | None":
    """A model's JSON object -> Draft, redacted; None when it is not a draft at all."""
    if not isinstance(raw, dict):
        return None
    kind = raw.get("kind")
    text = raw.get("text")
    if not isinstance(text, str) or not isinstance(kind, str):
        return None
    why = raw.get("why") if isinstance(raw.get("why"), str) else ""
    conf = raw.get("confidence")
    conf = float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else None
    if conf is not None:
        conf = min(1.0, max(0.0, conf))  # the grammar cannot bound a number; the model overshoots
    # Redact first: line-anchored shapes (.env lines, key blocks) need their newlines.
    text, c1 = redact(text)
    why, c2 = redact(why)
    text, why = " ".join(text.split()), " ".join(why.split())
    return Draft(kind=kind.strip().lower(), text=text, why=why, confidence=conf, redactions=dict(c1 + c2))


def similarity(a: str, b: str) -> float:
    """0..100: how nearly two drafts say the same thing (word order and case ignored)."""
    from rapidfuzz import fuzz

    na, nb = _norm(a), _norm(b)
    if not na or not nb:
        return 0.0
    score = fuzz.token_sort_ratio(na, nb)
    # A draft that is a near-subset of a longer memory says nothing new; only count it when
    # the two are of comparable length, or "use uv" would duplicate every memory about uv.
    la, lb = len(na), len(nb)
    if min(la, lb) / max(la, lb) >= 0.6:
        score = max(score, fuzz.token_set_ratio(na, nb))
    return float(score)


# The names a claim is about: code spans and paths of some length ("`/opt/venv/bin/python3.10`").
_SPECIFIC = re.compile(r"`([^`\n]{8,120})`|(?<![\w/])((?:[\w.@~-]+)?/[\w.@/-]{7,})")


def _specifics(text: str) -> set:
    return {(a or b).lower().strip("./") for a, b in _SPECIFIC.findall(text)}


# An error draft and a command draft join quotes with this (capture/mine.py): "`cmd`: error →
# fix", "`cmd` → what it brought up".
ARROW = " → "


# An error joined to what followed it: "`cmd`: error → fix" (a command draft has no colon).
_ERROR_JOIN = re.compile(r"^`[^`\n]+`: .+" + ARROW)


def same_claim(a: str, b: str, ratio: float) -> bool:
    """Two drafts say the same thing. An error or a command draft is its head, the failing
    command and error (or the command): the same head is the same claim whatever followed it
    (the same compile error quoted at two turns, once with its fix), and two heads are two
    claims however alike what followed (two commands that each brought the server up), unless
    what followed an error is the same: the fix or cause the text linked to an error is the
    claim the agent learned, whether said after another error or alone. Other drafts: alike in
    words (>= ratio), or about the same names: they share two or more, or one's single name is
    the other's and their words mostly overlap (the same path fact said three times in three
    wordings in one turn)."""
    if ARROW in a or ARROW in b:
        ha, hb = a.split(ARROW, 1)[0], b.split(ARROW, 1)[0]
        if _ERROR_JOIN.match(a) or _ERROR_JOIN.match(b):
            ta, tb = (x.split(ARROW, 1)[1] if _ERROR_JOIN.match(x) else x for x in (a, b))
            if min(len(ta), len(tb)) >= 20 and similarity(ta, tb) >= ratio:
                return True
        if min(len(ha), len(hb)) >= 20:
            return similarity(ha, hb) >= ratio
    if similarity(a, b) >= ratio:
        return True
    sa, sb = _specifics(a), _specifics(b)
    shared = sa & sb
    if len(shared) >= 2:
        return True
    if shared and (sa <= sb or sb <= sa):
        from rapidfuzz import fuzz

        return fuzz.token_set_ratio(_norm(a), _norm(b)) >= 60
    return False


def _same_index(text: str, others: list, ratio: float) -> "int | None":
    return next((i for i, o in enumerate(others) if same_claim(text, o, ratio)), None)


def _closest(text: str, others: list) -> "tuple[float, int | None]":
    from rapidfuzz import process

    if not others:
        return 0.0, None
    norm = _norm(text)
    best = process.extractOne(norm, [_norm(o) for o in others], scorer=lambda a, b, **_: similarity(a, b))
    if best is None:
        return 0.0, None
    return float(best[1]), best[2]


def screen(drafts: list, *, memories: list = (), pending: list = (), requests: list = (),
           window: "str | None" = None, cfg: "dict | None" = None) -> Screened:
    """Apply every policy, in a fixed order so each rejection has one reason.

    memories: texts of current memories in scope; pending: texts of pending proposals;
    requests: the user's own prompts in the window (a draft that repeats one is a request,
    not something learned); window: the text the model read (a draft must be grounded in it)."""
    c = dict(DEFAULTS, **(cfg or {}))
    kept, rejected, again = [], [], []
    redactions: Counter = Counter()
    seen = list(pending)
    for raw in drafts:
        d = raw if isinstance(raw, Draft) else coerce(raw)
        if d is None:
            rejected.append((Draft(kind="?", text=""), "malformed"))
            continue
        redactions.update(d.redactions)
        reason = _reason(d, c, memories, seen, requests, window, len(kept))
        if reason == "duplicate_proposal" and kept:
            # The same thing twice in one pass: the better-worded one stays (the more confident,
            # then the shorter), and it keeps the other's provenance in its why.
            i = _same_index(d.text, [k.text for k in kept], float(c["duplicate_ratio"]))
            if i is not None:
                k = kept[i]
                better, worse = (d, k) if better_worded(d, k) else (k, d)
                better.why = _also(better.why, worse)
                kept[i] = better
                seen[len(pending) + i] = better.text
                rejected.append((worse, "duplicate_proposal"))
                continue
        if reason == "duplicate_proposal" and pending:
            i = _same_index(d.text, list(pending), float(c["duplicate_ratio"]))
            if i is not None:
                again.append((d, i))
        if reason:
            rejected.append((d, reason))
            continue
        kept.append(d)
        seen.append(d.text)
    return Screened(kept, rejected, redactions, again)


# A statement that leans on what came before it ("Additionally, ...", "Also ...", "which ...").
_FRAGMENT = re.compile(r"^(?:additionally|also|and|but|so|which|this|that|it|they|then)\b|^[a-z]")


def better_worded(a: Draft, b: Draft) -> bool:
    """Whether a is the better-worded of two drafts saying the same: one that stands alone,
    then the one naming more (paths, code), then the more confident, then the shorter."""
    def key(d):
        return (not _FRAGMENT.search(d.text.strip()), len(_specifics(d.text)), d.confidence or 0.0, -len(d.text))
    return key(a) > key(b)


def _also(why: str, other: Draft) -> str:
    where = f"line {other.line}" + (f"-{other.line_to}" if other.line_to and other.line_to != other.line else "")
    return f"{why}; also said at {where}" if other.line is not None else why


def _reason(d: Draft, c: dict, memories, seen, requests, window, n_kept: int) -> "str | None":
    text = d.text.strip()
    if d.kind not in KINDS or not text:
        return "malformed"
    # What is left once the secrets are gone must still say something.
    bare = re.sub(r"\[REDACTED:[a-z\-]+\]", "", text)
    words = _WORD.findall(bare)
    if len(bare.strip()) < int(c["min_chars"]) or len(words) < int(c["min_words"]):
        return "too_short"
    if len(text) > int(c["max_chars"]):
        return "too_long"
    if is_repetitive(text):
        return "repetitive"
    if d.role not in ("user", "answer") and is_narration(text):  # the user's "let's use X" decides
        return "narration"
    if window is not None and (invented_numbers(text, window)
                               or grounding(text, window) < float(c["min_grounding"])):
        return "ungrounded"
    if d.confidence is not None and d.confidence < float(c["min_confidence"]):
        return "low_confidence"
    ratio = float(c["duplicate_ratio"])
    # What the user said is the point of a user's correction or preference; for anything else,
    # repeating the request is not something learned.
    if requests and d.role not in ("user", "answer") and _closest(text, list(requests))[0] >= ratio:
        return "echoes_request"
    # A current memory is a duplicate only when alike in words: sharing names with one is how a
    # new rule about the same file is said.
    if memories and _closest(text, list(memories))[0] >= ratio:
        return "duplicate_memory"
    if seen and _same_index(text, list(seen), ratio) is not None:
        return "duplicate_proposal"
    if n_kept >= int(c["max_drafts"]):
        return "over_limit"
    return None

"""What a draft must pass before it may be stored as a proposal.

Two jobs. Redaction: secrets (provider keys and tokens, private keys, passwords in URLs and
assignments, bearer headers, `.env` lines) are replaced by `[REDACTED:kind]` before text goes
to the model, into a draft, into the store, a log or a receipt. Screening: narration and
progress reports, drafts that are too short or too long, degenerate repetition, drafts not
grounded in what the model read (numbers it never saw, words the window does not contain),
duplicates of a current memory or a pending proposal, and low-confidence drafts are rejected,
each counted by reason.

Standard library only at module level: the stop hook redacts the agent's last message with
`redact` on the hot path. rapidfuzz is imported where duplicates are checked.
"""

import re
from collections import Counter
from dataclasses import dataclass, field

KINDS = ("decision", "constraint", "fact", "procedure", "preference")
PLACEHOLDER = "[REDACTED:{}]"
_NOT_REDACTED = r"(?!\[REDACTED)"

# (kind, pattern, replacement). Order matters: specific provider formats first, then the
# generic shapes (assignments, headers) that would otherwise swallow them under a vaguer name.
_PATTERNS: list = [
    ("private-key", re.compile(
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----.*?"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S), None),
    ("anthropic-key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{10,}"), None),
    ("openai-key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9][A-Za-z0-9_\-]{19,}"), None),
    ("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,}"), None),
    ("github-token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"), None),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), None),
    ("slack-token", re.compile(r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"), None),
    ("slack-webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"), None),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35,}"), None),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}"), None),
    # scheme://user:password@host -> keep the user and host, drop the password
    ("url-password", re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@\"'<>]+):" + _NOT_REDACTED
                                + r"([^\s@/\"'<>]+)@"), r"\1:[REDACTED:url-password]@"),
    ("bearer", re.compile(r"(?i)\b((?:authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?"
                          r"(?:bearer|basic|token|bot)\s+)" + _NOT_REDACTED + r"[A-Za-z0-9._~+/=\-]{6,}"),
     r"\1[REDACTED:bearer]"),
    ("bearer", re.compile(r"(?i)\b(bearer\s+)" + _NOT_REDACTED + r"[A-Za-z0-9._~+/\-]{12,}=*"),
     r"\1[REDACTED:bearer]"),
    # .env-style lines: KEY=VALUE where the name says secret
    ("env-secret", re.compile(
        r"(?m)^(\s*(?:export\s+)?[A-Z_][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|"
        r"CREDENTIALS?|AUTH)[A-Z0-9_]*\s*=\s*)" + _NOT_REDACTED + r"(\S.*)$"), r"\1[REDACTED:env-secret]"),
    # the same name inline (a sentence, a squashed line): the value runs to the next space
    ("env-secret", re.compile(
        r"((?<![\w.\-])[A-Z_][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|CREDENTIALS?|AUTH)"
        r"[A-Z0-9_]*=)" + _NOT_REDACTED + r"([^\s\"']+)"), r"\1[REDACTED:env-secret]"),
    # password = "...", "api_key": "...", token: ..., --password ... The match starts at the
    # keyword (db_password's "db_" stays outside it and untouched): matching the identifier's
    # head too made these two patterns most of the daemon's tailing time.
    ("assignment", re.compile(
        r"(?i)((?:password|passwd|pwd|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?)[\"']?\s*(?:[:=]|=>)\s*)"
        r"([\"'])" + _NOT_REDACTED + r"([^\"'\n]{4,})\2"), r"\1\2[REDACTED:assignment]\2"),
    ("assignment", re.compile(
        r"(?i)((?:password|passwd|pwd|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?)[\"']?\s*(?:[:=]|=>)\s*[\"']?)"
        + _NOT_REDACTED + r"([^\s\"',;}{)(]{4,})"), r"\1[REDACTED:assignment]"),
    ("cli-secret", re.compile(r"(?i)(--(?:password|passwd|token|api-key|secret|client-secret)[= ])"
                              + _NOT_REDACTED + r"(\S{4,})"), r"\1[REDACTED:cli-secret]"),
]


# A pattern is tried only when the text holds one of its cues (lower-cased substrings): most
# text holds none, and the daemon redacts every transcript line it stores.
_CUES = {
    "private-key": ("private key",), "anthropic-key": ("sk-ant-",), "openai-key": ("sk-",),
    "stripe-key": ("_live_", "_test_"), "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "aws-access-key": ("akia", "asia", "abia", "acca"), "slack-token": ("xox",), "slack-webhook": ("hooks.slack.com",),
    "google-api-key": ("aiza",), "jwt": ("eyj",), "url-password": ("://",), "bearer": ("bearer", "authorization"),
    "env-secret": ("key", "token", "secret", "pass", "pwd", "credential", "auth"),
    "assignment": ("pass", "pwd", "secret", "token", "key", "credential"),
    "cli-secret": ("--pass", "--token", "--api-key", "--secret", "--client-secret"),
}

_ALL_CUES = tuple(sorted({c for cs in _CUES.values() for c in cs}))
# The generic shapes are the costly ones and their cue words are everywhere in code, so they
# also need the shape itself: a cue word ending a name, then `=` or `:` (checked lower-cased).
_GATES = {
    "assignment": re.compile(r"(?:pass|pwd|secret|token|key|credential)[a-z0-9_]*[\"']?\s*(?:[:=]|=>)"),
    "env-secret": re.compile(r"(?:key|token|secret|pass|pwd|credential|auth)[a-z0-9_]*\s*="),
}


def redact(text: str) -> tuple[str, Counter]:
    """(text with every secret replaced, count per kind)."""
    counts: Counter = Counter()
    if not text:
        return text or "", counts
    low = text.lower()
    # substring tests are C-speed; one regex alternation of all cues measured 3x slower
    present = {c for c in _ALL_CUES if c in low}
    if not present:
        return text, counts
    gated = {kind for kind, gate in _GATES.items() if not present.isdisjoint(_CUES[kind]) and gate.search(low)}
    for kind, pattern, repl in _PATTERNS:
        if present.isdisjoint(_CUES[kind]) or (kind in _GATES and kind not in gated):
            continue
        if repl is None:
            repl = PLACEHOLDER.format(kind)

        def _sub(m, _repl=repl, _kind=kind):
            counts[_kind] += 1
            return m.expand(_repl)

        text = pattern.sub(_sub, text)
    return text, counts


def has_secret(text: str) -> bool:
    return bool(redact(text)[1])


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


def is_narration(text: str) -> bool:
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

    def as_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "why": self.why, "confidence": self.confidence,
                "redactions": self.redactions}


@dataclass
class Screened:
    kept: list  # Drafts that may be stored
    rejected: list  # (Draft, reason)
    redactions: Counter

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
    """Numbers in the draft that the window never says: the seeds' invented statistic."""
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
    kept, rejected = [], []
    redactions: Counter = Counter()
    seen = list(pending)
    for raw in drafts:
        d = raw if isinstance(raw, Draft) else coerce(raw)
        if d is None:
            rejected.append((Draft(kind="?", text=""), "malformed"))
            continue
        redactions.update(d.redactions)
        reason = _reason(d, c, memories, seen, requests, window, len(kept))
        if reason:
            rejected.append((d, reason))
            continue
        kept.append(d)
        seen.append(d.text)
    return Screened(kept, rejected, redactions)


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
    if is_narration(text):
        return "narration"
    if window is not None and (invented_numbers(text, window)
                               or grounding(text, window) < float(c["min_grounding"])):
        return "ungrounded"
    if d.confidence is not None and d.confidence < float(c["min_confidence"]):
        return "low_confidence"
    ratio = float(c["duplicate_ratio"])
    if requests and _closest(text, list(requests))[0] >= ratio:
        return "echoes_request"
    if memories and _closest(text, list(memories))[0] >= ratio:
        return "duplicate_memory"
    if seen and _closest(text, list(seen))[0] >= ratio:
        return "duplicate_proposal"
    if n_kept >= int(c["max_drafts"]):
        return "over_limit"
    return None

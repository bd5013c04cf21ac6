"""Redaction of secrets: provider keys and tokens, private keys, passwords in URLs and
assignments, bearer headers, `.env` lines, each replaced by `[REDACTED:kind]`.

Its own module, standard library only (`re`, `collections`), because the stop hook redacts
the agent's last message on the hot path, and the daemon redacts every transcript line before
storing it. `recalld.policies` (the proposer's screening) builds on it.
"""

import re
from collections import Counter

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
# Cues are looked for in a tree: a cue that contains a shorter one ("--api-key" holds "key") is
# tried only when that one is present, and "gh" stands before the GitHub prefixes. Fewer
# substring scans per text; the set found is the same.
_ROOT_CUES = ("gh",)


def _cue_tree() -> tuple:
    nodes = set(_ALL_CUES) | set(_ROOT_CUES)
    children: dict = {}
    roots = []
    for c in sorted(nodes):
        parents = [p for p in nodes if p != c and p in c]
        if parents:
            children.setdefault(min(parents, key=len), []).append(c)
        else:
            roots.append(c)
    return tuple(roots), {p: tuple(cs) for p, cs in children.items()}


_CUE_ROOTS, _CUE_CHILDREN = _cue_tree()


def _cues_in(low: str) -> set:
    found = set()
    todo = [c for c in _CUE_ROOTS if c in low]
    while todo:
        c = todo.pop()
        found.add(c)
        todo.extend(k for k in _CUE_CHILDREN.get(c, ()) if k in low)
    return found
# The generic shapes are the costly ones and their cue words are everywhere in code, so they
# also need the shape itself: a cue word ending a name, then `=` or `:` (checked lower-cased).
_GATES = {
    "assignment": re.compile(r"(?:pass|pwd|secret|token|key|credential)[a-z0-9_]*[\"']?\s*(?:[:=]|=>)"),
    "env-secret": re.compile(r"(?:key|token|secret|pass|pwd|credential|auth)[a-z0-9_]*\s*="),
}
# Gates checked on the text itself (case matters to these patterns): an upper-case name then
# `=`, and a URL with a user:password@ part. Both start with a literal, so they scan fast.
_CASE_GATES = {
    "env-secret": r"(?:KEY|TOKEN|SECRET|PASS|PWD|CREDENTIAL|AUTH)[A-Z0-9_]*\s*=",
    "url-password": r"://[^\s:/@\"'<>]+:[^\s@/\"'<>]+@",
}


# The ignore-case patterns scan every position of the text trying each keyword in both cases;
# the same pattern without (?i), run over the lower-cased text, scans with a literal-prefix
# search and measured ~7x faster on the shared transcripts (it finds the spans; the original
# pattern then re-matches at each one for its groups).
_FINDER_SOURCES = {id(p): (p.pattern.replace("(?i)", "").replace("REDACTED", "redacted"), p.flags & ~re.I)
                   for _kind, p, _repl in _PATTERNS if p.flags & re.I}


def _compiled(source, flags: int = 0):
    # compiled on first use (re caches it): the stop hook imports this module on every turn
    # and most texts never reach these patterns
    return re.compile(source, flags)


def redact(text: str) -> tuple[str, Counter]:
    """(text with every secret replaced, count per kind)."""
    counts: Counter = Counter()
    if not text:
        return text or "", counts
    low = text.lower()
    if not low.isascii():
        # the two letters (?i) matches to ASCII ones that lower() leaves alone (re docs), so
        # the cues and gates see "paſsword" as the patterns do
        low = low.replace("\u0131", "i").replace("\u017f", "s")
    # substring tests are C-speed; one regex alternation of all cues measured 3x slower
    present = _cues_in(low)
    if not present:
        return text, counts
    blocked = {kind for kind, gate in _GATES.items() if not present.isdisjoint(_CUES[kind]) and not gate.search(low)}
    blocked.update(kind for kind, gate in _CASE_GATES.items()
                   if kind not in blocked and not present.isdisjoint(_CUES[kind]) and not _compiled(gate).search(text))
    original = text
    for kind, pattern, repl in _PATTERNS:
        if kind in blocked or present.isdisjoint(_CUES[kind]):
            continue
        if repl is None:
            repl = PLACEHOLDER.format(kind)
        new = None
        finder = _FINDER_SOURCES.get(id(pattern))
        if finder is not None and _lower_is_exact(text):
            finder = _compiled(*finder)
            lowered = low if text is original else text.lower()
            if len(lowered) == len(text):
                new = _sub_found(finder.finditer(lowered), pattern, text, repl, kind, counts)
        if new is None:
            def _sub(m, _repl=repl, _kind=kind):
                counts[_kind] += 1
                return m.expand(_repl)

            new = pattern.sub(_sub, text)
        text = new
    return text, counts


def _lower_is_exact(text: str) -> bool:
    """Does matching the lower-cased text case-sensitively equal matching the text ignoring
    case, for patterns whose letters are ASCII? Yes unless lower() changes the length or the
    text holds one of the four non-ASCII letters that (?i) matches to ASCII ones (re docs)."""
    if text.isascii():
        return True
    return not any(c in text for c in "\u0130\u0131\u017f\u212a")


def _sub_found(found, pattern, text: str, repl: str, kind: str, counts: Counter) -> str:
    """pattern.sub over text, given where the case-sensitive finder matched its lower-cased copy.
    Each match is re-taken from the original text (one anchored match) for its groups; None
    (counting nothing) if the two ever disagree, and the caller falls back to pattern.sub."""
    out, last, n = [], 0, 0
    for m in found:
        m2 = pattern.match(text, m.start())
        if m2 is None or m2.end() != m.end():  # not expected for ASCII; stay exact regardless
            return None
        out.append(text[last:m.start()])
        out.append(m2.expand(repl))
        n += 1
        last = m.end()
    if not n:
        return text
    counts[kind] += n
    out.append(text[last:])
    return "".join(out)


def has_secret(text: str) -> bool:
    return bool(redact(text)[1])

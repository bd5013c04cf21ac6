"""Redaction of secrets: provider keys and tokens, private keys, passwords in URLs and
assignments, bearer headers, `.env` lines, passwords on command lines and in prose, each
replaced by `[REDACTED:kind]`.

Its own module, standard library only (`re`, `collections`), because the stop hook redacts
the agent's last message on the hot path, and the daemon redacts every transcript line before
storing it. Every memory write redacts through it (recalld/store.py), and
`recalld.capture.policies` (the proposer's screening) builds on it. docs/security.md lists what
it finds and what it leaves alone.
"""

import re
from collections import Counter

PLACEHOLDER = "[REDACTED:{}]"
_NOT_REDACTED = r"(?!\[REDACTED)"
# Pieces of the patterns below. Those used in ignore-case patterns (all but _ENV_NAME), which
# redact() also runs case-sensitively over the lower-cased text, have lower-case letters only.
# An opening quote, maybe backslash-escaped (JSON text); always the pattern's group 2, which
# _ARG_VALUE reads: quoted, the value runs to the same quote; bare, to the next space or quote,
# and never eats the backslash of an escaped quote, so redacted JSON text stays JSON.
_QUOTE = r"(\\{0,3}[\"'])?"
_ARG_VALUE = r"(?!\$)(?(2)[^\"'\n]{{{0},}}?(?=\2)|(?:[^\s\"'\\]|\\(?![\"'])){{{0},}})"
# An unquoted value that is code, not a secret: a call or subscript (`getpass()`,
# `os.environ["X"]`), an attribute path (`settings.secret_key`), a `$VAR`, a literal.
_NOT_CODE = (r"(?![a-z_$][\w$]*(?:\.[a-z_$][\w$]*)*\s*[(\[])(?![a-z_]\w*(?:\.[a-z_]\w*)+(?![\w.\-/@:+=!#%~]))"
             r"(?!\$)(?!(?:none|null|nil|true|false|undefined|nan|string|str|number|int|integer|bool|boolean|bytes|"
             r"any|object|optional)(?![\w\-]))")
# An environment variable whose name says secret: the word ends a part of the name, so
# TOKENIZERS_PARALLELISM or GIT_AUTHOR_NAME are not taken for one.
_ENV_NAME = (r"[A-Z_][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|PASS|PWD|CREDENTIALS?|AUTH)S?"
             r"(?:_[A-Z0-9_]*)?")
_PROSE_NAME = (r"(?:password|passphrase|passcode|passwd|"
               r"(?:api|access|auth|bearer|bot|deploy|refresh|session|github|gitlab|slack|npm|pypi)[ _\-]?token|"
               r"(?:api|secret|access|license|private)[ _\-]?key|(?:client|shared|webhook|signing|app)[ _\-]?secret)")
_PROSE_VERB = (r"(?:\s+for\s+[^\s,.;:!?]+(?:\s+[^\s,.;:!?]+){0,3}?)?\s+(?:is|was|has\s+been|got)"
               r"(?:\s+(?:now|still|actually))?(?:\s+(?:set|changed|reset|rotated)\s+to)?:?\s+")
# Words that follow "the password is" in ordinary sentences; a bare value that is one of them,
# or an English word with one of these endings, is not taken for a password.
_PROSE_STOP = (
    "a an the this that these those it its in on at of for from to by via with without inside into under over "
    "out up down off stored kept saved set unset not never always still now also only just required needed "
    "necessary optional mandatory wrong correct incorrect invalid valid expired missing empty blank same "
    "different too very long short weak strong secure insecure sensitive case unknown known bad good fine ok "
    "okay there here what which how where why who whatever and or but so then be been being my your our their "
    "his her one two no yes true false null none nil undefined available unavailable visible hidden leaked "
    "exposed compromised rotated revoked safe unsafe secret private public shared random unique static new old "
    "default plain plaintext cleartext simple see read sent given part like something anything nothing "
    "whatever more less enough").split()
_WORD_END = r"(?![\w@#$%^&*+=/\\~\-])"
_PROSE_WORD = (r"(?!\$)(?!(?:" + "|".join(sorted(set(_PROSE_STOP), key=len, reverse=True)) + ")" + _WORD_END + ")"
               r"(?![a-z]+(?:ed|ing|ly|able|ible|er|ive|ous|ful|less|al)" + _WORD_END + ")"
               r"(?=[^\s\"'`<>]{3})[^\s\"'`<>]*[^\s\"'`<>.,;:!?)\]}]")

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
        r"(?m)^(\s*(?:export\s+)?" + _ENV_NAME + r"\s*=\s*)" + _NOT_REDACTED + r"(\S.*)$"), r"\1[REDACTED:env-secret]"),
    # the same name inline (a sentence, a squashed line): the value runs to the next space
    ("env-secret", re.compile(
        r"((?<![\w.\-])" + _ENV_NAME + r"=)" + _NOT_REDACTED + r"((?:[^\s\"'\\]|\\(?![\"']))+)"),
     r"\1[REDACTED:env-secret]"),
    # password = "...", "api_key": "...", token: ..., --password ... The match starts at the
    # keyword (db_password's "db_" stays outside it and untouched): matching the identifier's
    # head too made these two patterns most of the daemon's tailing time. Quotes may come
    # escaped (`\"password\": \"...\"`): the daemon redacts tool input as JSON text, where a
    # JSON document inside a command is a string with backslashed quotes.
    ("assignment", re.compile(
        r"(?i)((?:password|passwd|pwd|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?)(?:\\{0,3}[\"'])?\s*(?:[:=]|=>)\s*)"
        r"(\\{0,3}[\"'])" + _NOT_REDACTED + r"([^\"'\n]{4,})\2"), r"\1\2[REDACTED:assignment]\2"),
    # Unquoted: never code (_NOT_CODE), and never the backslash of an escaped quote.
    ("assignment", re.compile(
        r"(?i)((?:password|passwd|pwd|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?)(?:\\{0,3}[\"'])?\s*(?:[:=]|=>)\s*"
        r"(?:\\{0,3}[\"'])?)" + _NOT_REDACTED + _NOT_CODE + r"((?:[^\s\"',;}{)(\\]|\\(?![\"'])){4,})"),
     r"\1[REDACTED:assignment]"),
    ("cli-secret", re.compile(r"(?i)(--(?:(?:http-|ftp-|proxy-)?password|passwd|token|api-key|secret|"
                              r"client-secret)[= ]\s*" + _QUOTE + ")" + _NOT_REDACTED + _ARG_VALUE.format(4)),
     r"\1[REDACTED:cli-secret]"),
    # A password given on a command line, named by its command (so `sort -u` or `docker run -u
    # 1000:1000` are left alone): curl -u user:pass (the user stays), mysql -pPASS, sshpass -p
    # PASS, docker login -p PASS, redis-cli -a PASS.
    ("cli-secret", re.compile(r"(\bcurl\b[^\n|;&]*?\s(?:-u|--user)(?:[ =]\s*)?" + _QUOTE
                              + r"(?!\$)[^\s:\"'\\$]+:)" + _NOT_REDACTED + _ARG_VALUE.format(1)),
     r"\1[REDACTED:cli-secret]"),
    ("cli-secret", re.compile(r"(\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|"
                              r"mariadb-dump)\b[^\n|;&]*?\s-p" + _QUOTE + ")" + _NOT_REDACTED + _ARG_VALUE.format(1)),
     r"\1[REDACTED:cli-secret]"),
    ("cli-secret", re.compile(r"((?:\b(?:sshpass|(?:docker|podman|helm)\s+(?:registry\s+)?login)\b[^\n|;&]*?\s-p\s*|"
                              r"\bredis-cli\b[^\n|;&]*?\s(?:-a|--pass)\s+)" + _QUOTE + ")" + _NOT_REDACTED
                              + _ARG_VALUE.format(1)), r"\1[REDACTED:cli-secret]"),
    # Said in prose: "the password is hunter2", "the API key for staging was `k-123`". Only
    # after a name that can only mean a credential (not "token" or "secret" alone: LLM tokens,
    # "the secret is to..."), and not when the word after it is ordinary English ("is stored",
    # "is required", "is too short"): quoted values always count.
    ("prose-secret", re.compile(r"(?i)\b(" + _PROSE_NAME + _PROSE_VERB + r"([\"'`])?)" + _NOT_REDACTED
                                + r"(?(2)[^\"'`\n]{3,200}?(?=\2)|" + _PROSE_WORD + ")"),
     r"\1[REDACTED:prose-secret]"),
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
    "cli-secret": ("--pass", "--token", "--api-key", "--secret", "--client-secret", "-password", "curl",
                   "mysql", "mariadb", "sshpass", "login", "redis-cli"),
    "prose-secret": ("password", "passphrase", "passcode", "passwd", "token", "key", "secret"),
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
# also need the shape itself: one of the cue words, then what the pattern needs after it (a name's
# tail and `=` or `:`; for prose, "is"/"was"/... or "for"), checked lower-cased. Each present
# word's occurrences are found by str.find and the tail matched there: on the shared transcripts
# that measured ~6x faster than one regex scanning for the words.
_GATES = {
    "assignment": (("pass", "pwd", "secret", "token", "key", "credential"),
                   re.compile(r"[a-z0-9_]*(?:\\{0,3}[\"'])?\s*(?:[:=]|=>)")),
    "env-secret": (("key", "token", "secret", "pass", "pwd", "credential", "auth"), re.compile(r"[a-z0-9_]*\s*=")),
    "prose-secret": (("password", "passphrase", "passcode", "passwd", "token", "key", "secret"),
                     re.compile(r"\s+(?:(?:is|was|has|got)[\s:]|for\s)")),
}


def _gate_open(low: str, present: set, words: tuple, tail) -> bool:
    """Is one of `words` (those in `present`) followed by `tail` anywhere in `low`?"""
    match = tail.match
    for w in words:
        if w not in present:
            continue
        i = low.find(w)
        while i >= 0:
            if match(low, i + len(w)):
                return True
            i = low.find(w, i + 1)
    return False


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
    blocked = {kind for kind, (words, tail) in _GATES.items()
               if not present.isdisjoint(_CUES[kind]) and not _gate_open(low, present, words, tail)}
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

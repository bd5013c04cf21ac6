"""Redaction of secrets: provider keys and tokens, private keys, passwords in URLs and
assignments, bearer headers, `.env` lines, passwords on command lines and in prose, each
replaced by `[REDACTED:kind]`.

Its own module, standard library only, because the stop hook redacts the agent's last message
on the hot path, and the daemon redacts every transcript line before storing it. `re` and
`collections` are imported only once a text needs them: the cues and gates that decide whether
a pattern can match are plain string code, and importing `re` and compiling the patterns cost
the stop hook more than the rest of its run. Every memory write redacts through it (recalld/memories.py), and
`recalld.capture.policies` (the proposer's screening) builds on it. docs/security.md lists what
it finds and what it leaves alone.
"""

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
    "whatever more less enough absent present gone ignored used reused").split()
_WORD_END = r"(?![\w@#$%^&*+=/\\~\-])"
_PROSE_WORD = (r"(?!\$)(?!(?:" + "|".join(sorted(set(_PROSE_STOP), key=len, reverse=True)) + ")" + _WORD_END + ")"
               r"(?![a-z]+(?:ed|ing|ly|able|ible|er|ive|ous|ful|less|al)" + _WORD_END + ")"
               r"(?=[^\s\"'`<>]{3})[^\s\"'`<>]*[^\s\"'`<>.,;:!?)\]}]")

# (kind, pattern, replacement). Order matters: specific provider formats first, then the
# generic shapes (assignments, headers) that would otherwise swallow them under a vaguer name.
_SOURCES: list = [
    ("private-key", (
        r"(?s)-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----.*?"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)"), None),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{10,}", None),
    ("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9][A-Za-z0-9_\-]{19,}", None),
    ("stripe-key", r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,}", None),
    ("github-token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}", None),
    ("aws-access-key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", None),
    ("slack-token", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}", None),
    ("slack-webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+", None),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35,}", None),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}", None),
    # scheme://user:password@host -> keep the user and host, drop the password
    ("url-password", (r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@\"'<>]+):" + _NOT_REDACTED
                     + r"([^\s@/\"'<>]+)@"), r"\1:[REDACTED:url-password]@"),
    ("bearer", (r"(?i)\b((?:authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?"
                r"(?:bearer|basic|token|bot)\s+)" + _NOT_REDACTED + r"[A-Za-z0-9._~+/=\-]{6,}"),
     r"\1[REDACTED:bearer]"),
    ("bearer", (r"(?i)\b(bearer\s+)" + _NOT_REDACTED + r"[A-Za-z0-9._~+/\-]{12,}=*"),
     r"\1[REDACTED:bearer]"),
    # .env-style lines: KEY=VALUE where the name says secret
    ("env-secret", (
        r"(?m)^(\s*(?:export\s+)?" + _ENV_NAME + r"\s*=\s*)" + _NOT_REDACTED + r"(\S.*)$"), r"\1[REDACTED:env-secret]"),
    # the same name inline (a sentence, a squashed line): the value runs to the next space
    ("env-secret", (
        r"((?<![\w.\-])" + _ENV_NAME + r"=)" + _NOT_REDACTED + r"((?:[^\s\"'\\]|\\(?![\"']))+)"),
     r"\1[REDACTED:env-secret]"),
    # password = "...", "api_key": "...", token: ..., --password ... The match starts at the
    # keyword (db_password's "db_" stays outside it and untouched): matching the identifier's
    # head too made these two patterns most of the daemon's tailing time. Quotes may come
    # escaped (`\"password\": \"...\"`): the daemon redacts tool input as JSON text, where a
    # JSON document inside a command is a string with backslashed quotes.
    ("assignment", (
        r"(?i)((?:password|passwd|pwd|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?)(?:\\{0,3}[\"'])?\s*(?:[:=]|=>)\s*)"
        r"(\\{0,3}[\"'])" + _NOT_REDACTED + r"([^\"'\n]{4,})\2"), r"\1\2[REDACTED:assignment]\2"),
    # Unquoted: never code (_NOT_CODE), and never the backslash of an escaped quote.
    ("assignment", (
        r"(?i)((?:password|passwd|pwd|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?)(?:\\{0,3}[\"'])?\s*(?:[:=]|=>)\s*"
        r"(?:\\{0,3}[\"'])?)" + _NOT_REDACTED + _NOT_CODE + r"((?:[^\s\"',;}{)(\\]|\\(?![\"'])){4,})"),
     r"\1[REDACTED:assignment]"),
    ("cli-secret", (r"(?i)(--(?:(?:http-|ftp-|proxy-)?password|passwd|token|api-key|secret|"
                   r"client-secret)[= ]\s*" + _QUOTE + ")" + _NOT_REDACTED + _ARG_VALUE.format(4)),
     r"\1[REDACTED:cli-secret]"),
    # A password given on a command line, named by its command (so `sort -u` or `docker run -u
    # 1000:1000` are left alone): curl -u user:pass (the user stays), mysql -pPASS, sshpass -p
    # PASS, docker login -p PASS, redis-cli -a PASS.
    ("cli-secret", (r"(\bcurl\b[^\n|;&]*?\s(?:-u|--user)(?:[ =]\s*)?" + _QUOTE
                   + r"(?!\$)[^\s:\"'\\$]+:)" + _NOT_REDACTED + _ARG_VALUE.format(1)),
     r"\1[REDACTED:cli-secret]"),
    ("cli-secret", (r"(\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|"
                   r"mariadb-dump)\b[^\n|;&]*?\s-p" + _QUOTE + ")" + _NOT_REDACTED + _ARG_VALUE.format(1)),
     r"\1[REDACTED:cli-secret]"),
    ("cli-secret", (r"((?:\b(?:sshpass|(?:docker|podman|helm)\s+(?:registry\s+)?login)\b[^\n|;&]*?\s-p\s*|"
                   r"\bredis-cli\b[^\n|;&]*?\s(?:-a|--pass)\s+)" + _QUOTE + ")" + _NOT_REDACTED
                   + _ARG_VALUE.format(1)), r"\1[REDACTED:cli-secret]"),
    # Said in prose: "the password is hunter2", "the API key for staging was `k-123`". Only
    # after a name that can only mean a credential (not "token" or "secret" alone: LLM tokens,
    # "the secret is to..."), and not when the word after it is ordinary English ("is stored",
    # "is required", "is too short"): quoted values always count.
    ("prose-secret", (r"(?i)\b(" + _PROSE_NAME + _PROSE_VERB + r"([\"'`])?)" + _NOT_REDACTED
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


# The gates below are what these regexes, matched at a cue's end, would say, written as string
# code so that a text no pattern can match never imports `re` (tests/test_redact_gates.py holds
# each to its regex): the stop hook's texts almost always hold a cue word and almost never a secret.
_NAME_TAIL = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_UPPER_TAIL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _skip(s: str, i: int, chars) -> int:
    n = len(s)
    while i < n and s[i] in chars:
        i += 1
    return i


def _at(s: str, i: int, chars: str) -> bool:
    return i < len(s) and s[i] in chars


def _skip_space(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i].isspace():  # what \s matches in a str pattern, on every code point
        i += 1
    return i


def _assignment_tail(s: str, i: int) -> bool:
    r"""[a-z0-9_]*(?:\\{0,3}["'])?\s*(?:[:=]|=>)"""
    i = _skip(s, i, _NAME_TAIL)
    j = _skip(s, i, "\\")
    if j - i <= 3 and _at(s, j, "'\"") and _at(s, _skip_space(s, j + 1), ":="):
        return True
    return _at(s, _skip_space(s, i), ":=")


def _env_tail(s: str, i: int) -> bool:
    r"""[a-z0-9_]*\s*="""
    return _at(s, _skip_space(s, _skip(s, i, _NAME_TAIL)), "=")


def _prose_tail(s: str, i: int) -> bool:
    r"""\s+(?:(?:is|was|has|got)[\s:]|for\s)"""
    j = _skip_space(s, i)
    if j == i:
        return False
    for word, after in (("is", ":"), ("was", ":"), ("has", ":"), ("got", ":"), ("for", "")):
        if s.startswith(word, j):
            c = s[j + len(word):j + len(word) + 1]
            return bool(c) and (c.isspace() or c == after)
    return False


def _upper_env_tail(s: str, i: int) -> bool:
    r"""[A-Z0-9_]*\s*="""
    return _at(s, _skip_space(s, _skip(s, i, _UPPER_TAIL)), "=")


def _url_password_tail(s: str, i: int) -> bool:
    r"""[^\s:/@"'<>]+:[^\s@/"'<>]+@  (after "://")"""
    n = len(s)
    j = i
    while j < n and not s[j].isspace() and s[j] not in ":/@\"'<>":
        j += 1
    if j == i or j >= n or s[j] != ":":
        return False
    k = j = j + 1
    while k < n and not s[k].isspace() and s[k] not in "@/\"'<>":
        k += 1
    return k > j and k < n and s[k] == "@"


# The generic shapes are the costly ones and their cue words are everywhere in code, so they
# also need the shape itself: one of the cue words, then what the pattern needs after it (a name's
# tail and `=` or `:`; for prose, "is"/"was"/... or "for"), checked lower-cased. Each present
# word's occurrences are found by str.find and the tail matched there, which was several times
# faster than one regex scanning for the words (docs/evaluation.md, "Tailing throughput").
_GATES = {
    "assignment": (("pass", "pwd", "secret", "token", "key", "credential"), _assignment_tail),
    "env-secret": (("key", "token", "secret", "pass", "pwd", "credential", "auth"), _env_tail),
    "prose-secret": (("password", "passphrase", "passcode", "passwd", "token", "key", "secret"), _prose_tail),
}


def _gate_open(low: str, present, words: tuple, tail) -> bool:
    """Is one of `words` (those in `present`, or all when None) followed by `tail` anywhere in `low`?"""
    for w in words:
        if present is not None and w not in present:
            continue
        i = low.find(w)
        while i >= 0:
            if tail(low, i + len(w)):
                return True
            i = low.find(w, i + 1)
    return False


# Gates checked on the text itself (case matters to these patterns): an upper-case name then
# `=`, and a URL with a user:password@ part.
_CASE_GATES = {
    "env-secret": (("KEY", "TOKEN", "SECRET", "PASS", "PWD", "CREDENTIAL", "AUTH"), _upper_env_tail),
    "url-password": (("://",), _url_password_tail),
}


# The ignore-case patterns scan every position of the text trying each keyword in both cases;
# the same pattern without (?i), run over the lower-cased text, scans with a literal-prefix
# search, several times faster (docs/evaluation.md, "Tailing throughput"); it finds the spans,
# and the original pattern then re-matches at each one for its groups.
_FINDER_SOURCES = {i: src.replace("(?i)", "").replace("REDACTED", "redacted")
                   for i, (_kind, src, _repl) in enumerate(_SOURCES) if src.startswith("(?i)")}
_COMPILED: dict = {}  # index in _SOURCES -> (pattern, finder or None), compiled on first use


def _pattern(i: int) -> tuple:
    got = _COMPILED.get(i)
    if got is None:
        import re

        finder = _FINDER_SOURCES.get(i)
        got = _COMPILED[i] = (re.compile(_SOURCES[i][1]), re.compile(finder) if finder is not None else None)
    return got


def __getattr__(name: str):
    # _PATTERNS, [(kind, compiled pattern, replacement)] in order, for the tests and anyone
    # else who wants them all; compiled only when asked for
    if name == "_PATTERNS":
        patterns = [(kind, _pattern(i)[0], repl) for i, (kind, _src, repl) in enumerate(_SOURCES)]
        globals()["_PATTERNS"] = patterns
        return patterns
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_COUNTER: list = []  # collections.Counter, imported by the first redact() (never by the stop hook)


def redact(text: str) -> tuple:
    """(text with every secret replaced, collections.Counter of the count per kind)."""
    if not _COUNTER:
        from collections import Counter

        _COUNTER.append(Counter)
    text, counts = redact_counts(text)
    out = _COUNTER[0]()  # filled as a dict: Counter(mapping) costs the daemon's tailer per line
    if counts:
        dict.update(out, counts)
    return text, out


def redact_counts(text: str) -> tuple:
    """redact() with a plain dict of counts: the stop hook's call, without `collections`."""
    counts: dict = {}
    if not text:
        return text or "", counts
    low = text.lower()
    if not low.isascii():
        # the two letters (?i) matches to ASCII ones that lower() leaves alone (re docs), so
        # the cues and gates see "paſsword" as the patterns do
        low = low.replace("\u0131", "i").replace("\u017f", "s")
    # substring tests are C-speed; one regex alternation of all cues was slower
    # (docs/evaluation.md, "Tailing throughput")
    present = _cues_in(low)
    if not present:
        return text, counts
    blocked = {kind for kind, (words, tail) in _GATES.items()
               if not present.isdisjoint(_CUES[kind]) and not _gate_open(low, present, words, tail)}
    blocked.update(kind for kind, (words, tail) in _CASE_GATES.items()
                   if kind not in blocked and not present.isdisjoint(_CUES[kind])
                   and not _gate_open(text, None, words, tail))
    original = text
    for i, (kind, _src, repl) in enumerate(_SOURCES):
        if kind in blocked or present.isdisjoint(_CUES[kind]):
            continue
        if repl is None:
            repl = PLACEHOLDER.format(kind)
        pattern, finder = _pattern(i)
        new = None
        if finder is not None and _lower_is_exact(text):
            lowered = low if text is original else text.lower()
            if len(lowered) == len(text):
                new = _sub_found(finder.finditer(lowered), pattern, text, repl, kind, counts)
        if new is None:
            def _sub(m, _repl=repl, _kind=kind):
                counts[_kind] = counts.get(_kind, 0) + 1
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


def _sub_found(found, pattern, text: str, repl: str, kind: str, counts: dict) -> str:
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
    counts[kind] = counts.get(kind, 0) + n
    out.append(text[last:])
    return "".join(out)


def has_secret(text: str) -> bool:
    return bool(redact_counts(text)[1])

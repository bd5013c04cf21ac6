"""Turning prompts and memories into search terms (standard library only).

Terms are stemmed by SQLite's own porter tokenizer (through a temporary FTS5 table), so the
terms we weigh are exactly the terms the index holds.
"""

import _sqlite3 as sqlite3  # the C module: the package's dbapi2 imports datetime (the hook)

# No regular expressions here: `import re` (with enum, functools' friends) cost the prompt hook
# more than its whole search. Each function below gives exactly what the regex in its
# docstring gives (tests/test_query_terms.py compares them on every code point and on the
# shared corpora); str methods classify characters the way re's unicode classes do.


class _Splitter(dict):
    r"""str.translate table: a letter or digit stays, anything else becomes a space. Filled in
    as code points are met (str.isalnum is exactly re's `[^\W_]`)."""

    def __missing__(self, cp: int) -> int:
        v = cp if chr(cp).isalnum() else 32
        if len(self) < 65536:  # a long-lived daemon meets many scripts: bounded, then uncached
            self[cp] = v
        return v


_SPLIT = _Splitter()
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")

STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are aren as at be because been before
being below between both but by can cannot could couldn did didn do does doesn doing don down
during each else ever few for from further get gets got had hadn has hasn have haven having he
her here hers herself him himself his how i if in into is isn it its itself just let lets like
ll me might more most much must mustn my myself need no nor not now of off on once only or other
ought our ours ourselves out over own please re really s same shall shan she should shouldn so
some such t than that thats the their theirs them themselves then there these they this those
through to too under until up us ve very via want was wasn we were weren what whats when where
which while who whom why will with won would wouldn yes yet you your yours yourself yourselves
okay ok hey hi hello thanks thank sure one two go going make made use used using way thing things
something anything everything know think see look tell say said right well still even back
went gone goes saw seen sees knew knows known thought thinks told tells says makes gets getting uses
""".split()
)


# The porter stems of STOPWORDS ("was" -> "wa"): a memory's terms are stems, and these weigh
# nothing when the search measures how much of a memory a prompt mentions. Written out so the
# hook does not stem 300 words on every run; tests/test_search.py checks it against the stemmer.
STOP_STEMS = frozenset(
    """
a about abov after again against all also am an and ani anyth ar aren as at back be becaus been
befor below between both but by can cannot could couldn did didn do doe doesn don down dure each
els even ever everyth few for from further get go goe gone got ha had hadn hasn have haven he
hei hello her here herself hi him himself how i if in into is isn it itself just knew know known
let like ll look made make me might more most much must mustn my myself need no nor not now of
off ok okai on onc onli or other ought our ourselv out over own pleas re realli right s sai said
same saw see seen shall shan she should shouldn so some someth still such sure t tell than thank
that the thei their them themselv then there these thi thing think those thought through to told
too two under until up us ve veri via wa wai want wasn we well went were weren what when where
which while who whom why will with won would wouldn ye yet you your yourself yourselv
""".split()
)


# The forms of one verb, for verbs whose past forms the porter stemmer cannot join to the base
# ("met" is not "meet", "broke" is not "break"). A query word in one group also matches the
# group's other forms. Verbs that are stopwords (go, get, make, ...) are left out.
IRREGULAR_GROUPS = """
arise arose arisen|awake awoke awoken|bear bore borne|beat beaten|become became|begin began begun|
bend bent|bet|bind bound|bite bit bitten|bleed bled|blow blew blown|break broke broken|breed bred|
bring brought|build built|burn burnt|buy bought|catch caught|choose chose chosen|cling clung|
come came|cost|creep crept|cut|deal dealt|dig dug|draw drew drawn|dream dreamt|drink drank drunk|
drive drove driven|eat ate eaten|fall fell fallen|feed fed|feel felt|fight fought|find found|flee fled|
fly flew flown|forbid forbade forbidden|forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|
give gave given|grind ground|grow grew grown|hang hung|hear heard|hide hid hidden|hit|hold held|hurt|
keep kept|kneel knelt|lay laid|lead led|lean leant|leap leapt|learn learnt|leave left|lend lent|
lie lay lain|light lit|lose lost|mean meant|meet met|pay paid|prove proven|quit|read|ride rode ridden|
ring rang rung|rise rose risen|run ran|seek sought|sell sold|send sent|set|shake shook shaken|shed|
shine shone|shoot shot|show shown|shrink shrank shrunk|shut|sing sang sung|sink sank sunk|sit sat|
sleep slept|slide slid|speak spoke spoken|speed sped|spend spent|spin spun|split|spread|spring sprang sprung|
stand stood|steal stole stolen|stick stuck|sting stung|stink stank stunk|strike struck|swear swore sworn|
sweep swept|swim swam swum|swing swung|teach taught|tear tore torn|throw threw thrown|understand understood|
wake woke woken|wear wore worn|weave wove woven|weep wept|win won|wind wound|withdraw withdrew withdrawn|
write wrote written|undo undid undone|rebuild rebuilt|rewrite rewrote rewritten|overwrite overwrote overwritten|
mislead misled|upset|rerun reran|take took taken|fix|child children|person people|mouse mice|man men|
woman women|foot feet|tooth teeth|index indices|matrix matrices|vertex vertices|schema schemata|datum data
"""
FORMS: dict = {}
for _group in IRREGULAR_GROUPS.replace("\n", " ").split("|"):
    _forms = tuple(_group.split())
    if len(_forms) > 1:
        for _f in _forms:
            FORMS[_f] = _forms


def other_forms(word: str) -> tuple:
    """The other irregular forms of a word ("met" -> ("meet",)), or ()."""
    forms = FORMS.get(word.lower())
    return tuple(f for f in forms if f != word.lower()) if forms else ()


def tokens(text: str) -> list[str]:
    r"""Split the way FTS5's unicode61 tokenizer does, letters and digits only: re's
    findall(r"[^\W_]+"). No letter or digit is whitespace, so split() cuts exactly there."""
    return text.translate(_SPLIT).split()


def camel_parts(tok: str) -> list[str]:
    r"""re's findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", tok): HTTPServer ->
    HTTP, Server; an acronym before a word gives up its last capital to the word."""
    out, i, n = [], 0, len(tok)
    while i < n:
        c = tok[i]
        if c in _UPPER:
            j = i + 1
            while j < n and tok[j] in _UPPER:
                j += 1
            if j < n and tok[j] in _LOWER:
                if j - i >= 2:  # the acronym, without the capital that starts the next word
                    out.append(tok[i:j - 1])
                    i = j - 1
                    continue
                j += 1
                while j < n and tok[j] in _LOWER:
                    j += 1
            out.append(tok[i:j])
            i = j
        elif c in _LOWER or c.isdecimal():
            same = _LOWER.__contains__ if c in _LOWER else str.isdecimal
            j = i + 1
            while j < n and same(tok[j]):
                j += 1
            out.append(tok[i:j])
            i = j
        else:
            i += 1
    return out


def identifier_parts(text: str) -> list[str]:
    """Pieces of mixed-case identifiers (OperationalError -> Operational, Error), so a memory
    naming `OperationalError` is found by "operational error" and the other way round."""
    out = []
    for tok in tokens(text):
        if tok.islower() or tok.isupper() or tok.isdigit():
            continue
        parts = camel_parts(tok)
        if len(parts) > 1:
            out.extend(parts)
    return out


_LABEL_CHARS = "_ .-/"


def subject_span(text: str) -> "str | None":
    r"""The label a memory opens with, after an optional [bracketed] prefix: group 1 of
    re.match(r"(?:\[[^\]\n]{0,60}\]\s*)?([^\W\d][\w .\-/]{0,40}?):\s", text), else None."""
    i, n = 0, len(text)
    if text.startswith("["):
        j = text.find("]", 1, 62)
        if j < 0 or "\n" in text[1:j]:
            return None  # and without the prefix the label would start at "[": no match
        i = j + 1
        while i < n and text[i].isspace():
            i += 1
    if i >= n or not (text[i].isalnum() or text[i] == "_") or text[i].isdecimal():
        return None
    # ":" is not a label character, so the lazy {0,40}? ends at the first colon, at most 40
    # characters on, and everything before it must be a label character
    k = text.find(":", i + 1, i + 42)
    if k < 0 or k + 1 >= n or not text[k + 1].isspace():
        return None
    rest = text[i + 1:k]
    for ch in _LABEL_CHARS:
        rest = rest.replace(ch, "")
    return text[i:k] if not rest or rest.isalnum() else None


def aux_text(text: str) -> str:
    return " ".join(identifier_parts(text))


def informative(toks: list[str]) -> list[str]:
    """Drop stopwords and one-letter noise; keep order and the first spelling of each."""
    seen, out = set(), []
    for t in toks:
        low = t.lower()
        if low in STOPWORDS or (len(low) < 2 and not low.isdigit()) or low in seen:
            continue
        seen.add(low)
        out.append(t)
    return out


class Stemmer:
    """SQLite's porter stemmer, reached through a temporary FTS5 table on one connection.

    Each call empties the table before it inserts, so nothing is cleared afterwards: in the
    hook the table dies with the connection, and a clean-up delete was a dozen statements."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.recalld_stem USING "
            "fts5(t, tokenize='porter unicode61 remove_diacritics 2')"
        )
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.recalld_stem_v USING "
            "fts5vocab(temp, recalld_stem, instance)"
        )

    def stem_each(self, words: list[str]) -> list["str | None"]:
        """One stem per word (None where the tokenizer kept nothing of it).

        The words go in as one document, so this is one insert however many words there
        are; each word is letters and digits only (see `tokens`), which unicode61 keeps as one
        token, so token offsets line up with the words. If they ever do not, each word is
        stemmed as its own document instead."""
        if not words:
            return []
        c = self.conn
        c.execute("DELETE FROM temp.recalld_stem")
        c.execute("INSERT INTO temp.recalld_stem(rowid, t) VALUES (1, ?)", (" ".join(words),))
        got = c.execute("SELECT term FROM temp.recalld_stem_v WHERE col = 't' ORDER BY offset").fetchall()
        if len(got) == len(words):
            return [r[0] for r in got]
        c.execute("DELETE FROM temp.recalld_stem")
        c.executemany("INSERT INTO temp.recalld_stem(rowid, t) VALUES (?, ?)",
                      [(i + 1, w) for i, w in enumerate(words)])
        out: list = [None] * len(words)
        for doc, term in c.execute("SELECT doc, term FROM temp.recalld_stem_v WHERE col = 't' ORDER BY doc, offset"):
            if out[doc - 1] is None:
                out[doc - 1] = term
        return out

    def terms_of(self, text: str) -> set[str]:
        """All distinct stems in a text (used when a memory is written)."""
        c = self.conn
        c.execute("DELETE FROM temp.recalld_stem")
        c.execute("INSERT INTO temp.recalld_stem(rowid, t) VALUES (1, ?)", (text,))
        return {r[0] for r in c.execute("SELECT DISTINCT term FROM temp.recalld_stem_v")}


def within_edits(a: str, b: str, k: int) -> bool:
    """True when a and b are at most k edits apart (insert, delete, substitute, swap of two
    neighbours). Skips the common prefix and suffix in C (string comparison) and branches on
    the first difference, so a vocabulary scan costs microseconds per term for k <= 2."""
    if a == b:
        return True
    if k <= 0 or abs(len(a) - len(b)) > k:
        return False
    i = 0
    n = min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    a, b = a[i:], b[i:]
    while a and b and a[-1] == b[-1]:
        a, b = a[:-1], b[:-1]
    if not a or not b:
        return max(len(a), len(b)) <= k
    if len(a) >= 2 and len(b) >= 2 and a[0] == b[1] and a[1] == b[0] and within_edits(a[2:], b[2:], k - 1):
        return True
    return (within_edits(a[1:], b[1:], k - 1) or within_edits(a[1:], b, k - 1)
            or within_edits(a, b[1:], k - 1))

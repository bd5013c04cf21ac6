"""Scoped full-text search built for verbatim prompts and mid-task text (standard library
only: the pre-step hook runs it).

BM25 ranks candidates but cannot tell a hit from a miss: its values are not comparable across
queries. So every hit also gets `score`, the IDF-weighted share of the query's informative
terms that the memory covers (0..1). The pre-step injects only hits whose score clears the
floor, so an unrelated prompt injects nothing.
"""

import math
import os
import _sqlite3 as sqlite3  # the C module: the package's dbapi2 imports datetime (the hook)

from recalld.core.scope import Scope
from recalld.core.query_terms import (STOP_STEMS, Stemmer, identifier_parts, informative, other_forms, subject_span,
                                   tokens, within_edits)

MAX_QUERY_TERMS = 32
# A pasted log can be megabytes; what decides recall is in its first pages.
MAX_QUERY_CHARS = 20_000
MAX_QUERY_WORDS = 400
CANDIDATES = 40
# The ranked MATCH reads the posting lists of the terms it ORs; their summed document
# frequencies bound its cost. The rarest terms go in first; commoner ones still count toward
# a hit's coverage, they just do not pull candidates in.
POSTINGS_BUDGET = 1000
# When every term is commoner than that, memories holding the rarest terms together are read
# newest first, from at most this many matches.
SCAN_CAP = 1000
# Typo correction: words of at least this length, at most this many per query; two edits
# only for long words.
FUZZY_MIN_LEN = 4
FUZZY_TWO_EDITS_LEN = 8
MAX_FUZZY = 3
# Ranking = coverage + BM25_WEIGHT * (bm25 relative to the best candidate) + SUBJECT_WEIGHT
# when the query names the memory's subject label. `score` (what the floor reads) is coverage.
BM25_WEIGHT = 0.15
# For a prompt of at least LONG_PROMPT_TERMS informative terms, `score` is the larger of the
# prompt's share covered and the memory's share mentioned.
LONG_PROMPT_TERMS = 10
SUBJECT_WEIGHT = 0.2
# A threaded memory (migration 5) is read with the thread's previous memory, whose terms count
# at THREAD_WEIGHTS[0] of their weight, and the one before that at THREAD_WEIGHTS[1]: in a
# conversation the answer ("cinnamon knots and a lemon tart") rarely repeats the question's words,
# the turns before it do. Chosen on the LoCoMo development split (docs/evaluation.md, "Threads").
THREAD_WEIGHTS = (0.8, 0.4)
# A store of one, three or ten memories cannot tell an informative word from a common one
# (every term it holds has its highest document frequency), so a term's document frequency is
# blended with a background prior, counted as PRIOR_MEMORIES memories: wordprior.txt (generated
# by scripts/gen_wordprior.py) holds how likely a memory-sized text is to contain each stem, in
# English or in code. With n memories the store's own statistics weigh n / (n + PRIOR_MEMORIES).
PRIOR_MEMORIES = 300
PRIOR_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wordprior.txt")


# Plain classes: `dataclasses` imports `inspect`, the single most expensive import on the
# hook's path, paid on every prompt.


class Hit:
    __slots__ = ("id", "text", "tell", "kind", "scope", "project", "agent", "always", "created_at",
                 "score", "bm25", "matched", "context", "rank")

    def __init__(self, id: int, text: str, tell: "str | None", kind: str, scope: str, project: str,
                 agent: str, always: bool, created_at: str, score: float, bm25: float,
                 matched: "list | None" = None, context: "list | None" = None):
        self.id, self.text, self.tell, self.kind, self.scope = id, text, tell, kind, scope
        self.project, self.agent, self.always, self.created_at = project, agent, always, created_at
        self.score = score  # comparable across queries: weighted query-term coverage, 0..1
        self.bm25 = bm25  # FTS5 bm25 (lower is better); only comparable within one query
        self.matched = [] if matched is None else matched
        self.context = [] if context is None else context  # terms matched only by the thread's earlier memories
        self.rank = score  # the ordering key search() sorts by (score + bm25 and subject terms); per query only

    def __repr__(self) -> str:
        return f"Hit(m{self.id}, score={self.score:.3f})"

    def as_dict(self) -> dict:
        return {
            "id": self.id, "text": self.text, "tell": self.tell, "kind": self.kind,
            "scope": self.scope, "project": self.project, "agent": self.agent,
            "always": self.always, "created_at": self.created_at,
            "score": round(self.score, 4), "bm25": round(self.bm25, 4), "matched": self.matched,
            "context": self.context,
        }


class QueryTerm:
    __slots__ = ("word", "stem", "df", "idf", "fuzzy", "alts", "forms")

    def __init__(self, word: str, stem: str, df: int, idf: float, fuzzy: bool = False, alts: tuple = (),
                 forms: tuple = ()):
        self.word = word  # as typed
        self.stem = stem  # what the index holds (after fuzzy correction, if any)
        self.df = df
        self.idf = idf
        self.fuzzy = fuzzy
        self.alts = alts  # stems of the word's irregular forms ("met" for "meet"), matched alike
        self.forms = forms  # those forms as words, for the MATCH expression (FTS5 stems what it is given)

    def __repr__(self) -> str:
        return f"QueryTerm({self.word!r}->{self.stem!r}, df={self.df})"

    def in_(self, have) -> bool:
        return self.stem in have or any(a in have for a in self.alts)


def _quote(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def analyse(conn: sqlite3.Connection, text: str, stemmer: "Stemmer | None" = None,
            max_terms: int = MAX_QUERY_TERMS) -> tuple[list[QueryTerm], int]:
    """Informative query terms with their document frequencies, typos corrected."""
    text = text[:MAX_QUERY_CHARS]
    words = informative(tokens(text) + identifier_parts(text))[:MAX_QUERY_WORDS]
    if not words:
        return [], 0
    stemmer = stemmer or Stemmer(conn)
    forms = [other_forms(w) for w in words]
    flat = [f for fs in forms for f in fs]
    stems = stemmer.stem_each(words + flat)
    alt_stems, i = [], len(words)
    for fs in forms:
        alt_stems.append(tuple(a for a in stems[i:i + len(fs)] if a))
        i += len(fs)
    # An inflected word whose base is irregular ("drawing" -> draw -> drew, drawn) is looked up
    # by its stem; only such words cost a second stemming pass.
    later = {}
    for i, w in enumerate(words):
        if not forms[i] and stems[i] and stems[i] != w.lower():
            extra = tuple(f for f in other_forms(stems[i]) if f != w.lower())
            if extra:
                later[i] = extra
    if later:
        more = iter(stemmer.stem_each([f for fs in later.values() for f in fs]))
        for i, fs in later.items():
            forms[i] = fs
            alt_stems[i] = tuple(a for a in (next(more) for _ in fs) if a)
    pairs, seen = [], set()
    for w, s, alts, fs in zip(words, stems, alt_stems, forms):
        if s and s not in seen:
            seen.add(s)
            pairs.append((w, s, tuple(a for a in alts if a != s), fs))
    if not pairs:
        return [], 0
    n_docs = conn.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()[0]
    df = doc_freqs(conn, sorted({x for _, s, alts, _ in pairs for x in (s, *alts)}))
    terms = []
    for w, s, alts, fs in pairs:
        d = min(n_docs, df.get(s, 0) + sum(df.get(a, 0) for a in alts))
        terms.append(QueryTerm(w, s, d, term_idf(n_docs, d, s, alts), alts=alts, forms=fs))
    # Words the store has never seen may be typos: correct the longest few (each correction
    # reads a slice of the vocabulary, so their number is bounded).
    unknown = sorted((t for t in terms if t.df == 0 and len(t.stem) >= FUZZY_MIN_LEN and t.stem.isalpha()),
                     key=lambda t: -len(t.stem))[:MAX_FUZZY]
    for t in unknown:
        alt = _closest_term(conn, t.stem)
        if alt is not None and alt[0] not in seen:
            seen.add(alt[0])
            t.stem, t.df, t.fuzzy = alt[0], alt[1], True
            t.idf = term_idf(n_docs, t.df, t.stem)
    # Long prompts: keep the most informative terms the store holds, and as many absent ones
    # (those still count against coverage: they say the store does not know this). Ranking all
    # of them by idf alone would keep only the absent ones, which have the highest idf.
    if len(terms) > max_terms:
        known = sorted((t for t in terms if t.df > 0), key=lambda t: -t.idf)[:max_terms]
        terms = known + [t for t in terms if t.df == 0][:max_terms]
    return terms, n_docs


def doc_freqs(conn: sqlite3.Connection, stems: list) -> dict:
    """{stem: number of memories holding it}. term_stats (migration 4) is an index lookup;
    fts5vocab, the fallback for a store not yet migrated, walks each term's posting list."""
    marks = ",".join("?" * len(stems))
    try:
        return dict(conn.execute(f"SELECT term, df FROM term_stats WHERE term IN ({marks})", stems).fetchall())
    except sqlite3.OperationalError:
        return dict(conn.execute(f"SELECT term, doc FROM memories_vocab WHERE term IN ({marks})", stems).fetchall())


def idf(n: int, df: int) -> float:
    """The weight of a term held by `df` of `n` memories (BM25's idf, always positive)."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def term_idf(n: int, df: int, stem: str, alts: tuple = ()) -> float:
    """A term's weight: its idf with the background prior blended in (PRIOR_MEMORIES memories
    of which the prior's share hold it). A word's irregular forms add up, as their document
    frequencies do. Without a readable table, the store's statistics alone."""
    table = _PRIOR if _PRIOR is not None else _load_prior()
    if not table:
        return idf(n, df)
    if _PRIOR_MAP is not None:
        get = _PRIOR_MAP.get
        q = get(stem, 0.0)
        for a in alts:
            q += get(a, 0.0)
    else:
        q = prior_of(stem, table)
        for a in alts:
            q += prior_of(a, table)
    return idf(n + PRIOR_MEMORIES, df + PRIOR_MEMORIES * min(q, 1.0))


_PRIOR = None  # the table's sorted "stem code" lines, read once per process; "" when unreadable
_PRIOR_MAP = None  # {stem: prior} once keep_prior_table() has run


def _load_prior() -> str:
    global _PRIOR
    try:
        # bytes decoded by name: a text-mode open would look the codec up and import
        # encodings.ascii; newlines as text mode reads them
        with open(PRIOR_PATH, "rb") as f:
            text = f.read().decode("ascii")
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
    except (OSError, ValueError):
        text = ""
    start = 0
    while text.startswith("#", start):
        start = text.find("\n", start) + 1 or len(text)
    _PRIOR = text[start:]
    return _PRIOR


def prior_of(stem: str, table: "str | None" = None) -> float:
    """The prior probability that a memory holds `stem` (0.0 when the table does not list it).

    The table is bisected as text: a prompt looks up a handful of stems, and a dict of all
    21,950 took 9-20 ms to build on a shared 2-core machine, in every hook process (a
    long-lived process builds it once: keep_prior_table, which term_idf then reads)."""
    t = table if table is not None else (_PRIOR if _PRIOR is not None else _load_prior())
    lo, hi = 0, len(t)
    while lo < hi:
        mid = (lo + hi) >> 1
        a = t.rfind("\n", lo, mid) + 1 or lo
        sp = t.find(" ", a)
        if sp < 0:
            return 0.0
        key = t[a:sp]
        if key == stem:
            end = t.find("\n", sp)
            try:
                return 10 ** (-int(t[sp + 1:end if end >= 0 else len(t)]) / 10)
            except ValueError:  # a damaged table weighs nothing rather than failing the search
                return 0.0
        if key < stem:
            lo = t.find("\n", sp) + 1 or hi
        else:
            hi = a
    return 0.0


def keep_prior_table() -> None:
    """Look stems up in a dict from now on (the same values: prior_table), for a process that
    searches many times."""
    global _PRIOR_MAP
    _PRIOR_MAP = prior_table()


def prior_table() -> dict:
    """The whole table as {stem: probability} (for tests and measurements, not the search)."""
    t = _PRIOR if _PRIOR is not None else _load_prior()
    out = {}
    for line in t.splitlines():
        stem, _, code = line.partition(" ")
        out[stem] = 10 ** (-int(code) / 10)
    return out


def _closest_term(conn: sqlite3.Connection, stem: str) -> "tuple[str, int] | None":
    """A vocabulary term one edit away (two for long words), most frequent first.

    Candidates are read as three narrow ranges of term_stats' primary key: terms sharing the
    first two letters (an error anywhere after them), starting with the first and third letter
    (an extra or swapped second letter), or with the first two letters swapped. A substituted
    or missing second letter is not corrected; in exchange the scan stays at a few dozen terms
    even at 100k memories.
    """
    k = 1 if len(stem) < FUZZY_TWO_EDITS_LEN else 2
    prefixes = {stem[:2], stem[0] + stem[2], stem[1] + stem[0]}
    ranges = " OR ".join("(term >= ? AND term < ?)" for _ in prefixes)
    params = [x for p in sorted(prefixes) for x in (p, p[0] + chr(ord(p[1]) + 1))]
    try:
        rows = conn.execute(
            f"SELECT term, df FROM term_stats WHERE ({ranges}) AND length(term) BETWEEN ? AND ?",
            (*params, len(stem) - k, len(stem) + k)).fetchall()
    except sqlite3.OperationalError:
        rows = conn.execute(f"SELECT term, doc FROM memories_vocab WHERE {ranges}", params).fetchall()
    best = None
    for term, doc in rows:
        if term == stem or abs(len(term) - len(stem)) > k:
            continue
        if within_edits(stem, term, k) and (best is None or doc > best[1]):
            best = (term, doc)
    return best


def _match_expr(terms: list) -> str:
    return " OR ".join(_term_expr(t) for t in terms)


def _term_expr(t: QueryTerm) -> str:
    if t.fuzzy:
        return _quote(t.stem) + "*"
    if t.alts:
        # FTS5 stems what it is given, so the irregular forms go in as words.
        return "(" + " OR ".join([_quote(t.word)] + [_quote(f) for f in t.forms]) + ")"
    return _quote(t.word)


ROW_COLUMNS = "m.id, m.text, m.tell, m.kind, m.scope, m.project, m.agent, m.always, m.created_at, m.terms, m.follows"
SELECT_HIT = """SELECT """ + ROW_COLUMNS + """{bm}
                FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid
                WHERE memories_fts MATCH ? AND {where}"""


def candidate_rows(conn: sqlite3.Connection, present: list, scope: Scope, candidates: int) -> list:
    """Rows worth scoring, at a bounded cost.

    The rarest terms (summed document frequency within POSTINGS_BUDGET) are OR-ed and ranked
    by bm25. When even the rarest term is commoner than the budget allows, every memory
    holding the (up to three) rarest terms together is read newest first instead; FTS5
    walks those posting lists lazily, so LIMIT bounds the work.
    """
    where, params = scope.where("m")
    by_df = sorted(present, key=lambda t: t.df)
    ranked, total = [], 0
    for t in by_df:
        if total + t.df > POSTINGS_BUDGET:
            break
        ranked.append(t)
        total += t.df
    if ranked:
        sql = SELECT_HIT.format(bm=", bm25(memories_fts, 1.0, 0.6, 0.4) AS bm", where=where)
        return conn.execute(sql + " ORDER BY bm LIMIT ?", (_match_expr(ranked), *params, candidates)).fetchall()
    # The newest SCAN_CAP matches at most: a project idle for a long time behind busier ones
    # must not turn this into a walk over every posting.
    sql = f"""SELECT {ROW_COLUMNS}, 0.0 AS bm
              FROM (SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?
                    ORDER BY rowid DESC LIMIT {SCAN_CAP}) f
              JOIN memories m ON m.id = f.rowid
              WHERE {where} ORDER BY m.id DESC LIMIT ?"""
    for n in (3, 2, 1):
        if n > len(by_df):
            continue
        rows = conn.execute(sql, (" AND ".join(_term_expr(t) for t in by_df[:n]), *params, candidates)).fetchall()
        if rows or n == 1:
            return rows
    return []


def search(conn: sqlite3.Connection, query: str, scope: Scope, *, limit: int = 10,
           floor: float = 0.0, stemmer: "Stemmer | None" = None,
           candidates: int = CANDIDATES, bm25_weight: float = BM25_WEIGHT,
           subject_weight: float = SUBJECT_WEIGHT, thread_weights: tuple = THREAD_WEIGHTS,
           weigh=None) -> list[Hit]:
    """Current memories in `scope` for `query`, best first: at most `limit`, each with a
    coverage `score` of at least `floor`.

    The ranking's weights default to the shipped ones; they are parameters so that a
    benchmark measures a variant through this function, not a copy of it
    (recalld.bench.ablations). `thread_weights` has at most len(THREAD_WEIGHTS) entries (that
    many earlier memories are read). `weigh(term) -> float`, when given, replaces each query
    term's idf in the coverage score (the long-prompt rule's other memory terms keep theirs);
    candidates are chosen by document frequency as always."""
    stemmer = stemmer or Stemmer(conn)
    terms, n_docs = analyse(conn, query, stemmer)
    if weigh is not None:
        for t in terms:
            t.idf = weigh(t)
    present = [t for t in terms if t.df > 0]
    if not present:
        return []
    rows = candidate_rows(conn, present, scope, candidates)
    rows, before = thread_context(conn, rows, scope)
    total_idf = sum(t.idf for t in terms) or 1.0
    best_bm = min((r["bm"] for r in rows), default=-1.0) or -1.0
    have_of = [set(r["terms"].split()) for r in rows]
    long_prompt = len(terms) >= LONG_PROMPT_TERMS
    mem_idf = _memory_idf(conn, have_of, terms, n_docs) if long_prompt else {}
    hits = []
    # Each term's stems as a set: `isdisjoint` runs in C, and this loop runs for every term of
    # every candidate (and its thread context).
    keyed = [(t, frozenset((t.stem, *t.alts))) for t in terms]
    for r, have in zip(rows, have_of):
        matched, missing = [], []
        for t, keys in keyed:
            (missing if have.isdisjoint(keys) else matched).append((t, keys))
        got = sum(t.idf for t, _ in matched)
        matched = [t for t, _ in matched]
        earlier = before.get(r["id"])
        via = []
        if earlier:
            for t, keys in missing:
                for weight, prev in zip(thread_weights, earlier):
                    if not prev.isdisjoint(keys):
                        via.append(t)
                        got += weight * t.idf
                        break
        cover = got / total_idf
        if mem_idf and len(matched) >= 2:
            # Long verbatim prompts (a traceback, a page of instructions) cover a small share
            # of themselves with any one memory; the share of the memory the prompt mentions
            # says the same thing from the memory's side. Only for long prompts (a short
            # memory sharing one word with a short question is not about it) and only when
            # two or more of the memory's terms are mentioned.
            mass = sum(map(mem_idf.__getitem__, have))
            if mass > 0:
                cover = max(cover, min(1.0, sum(t.idf for t in matched) / mass))
        hits.append(Hit(
            id=r["id"], text=r["text"], tell=r["tell"], kind=r["kind"], scope=r["scope"],
            project=r["project"], agent=r["agent"], always=bool(r["always"]),
            created_at=r["created_at"], score=cover, bm25=r["bm"],
            matched=[t.stem for t in matched], context=[t.stem for t in via],
        ))
    # Coverage decides first (it is what the floor reads); bm25 breaks near-ties, and a
    # memory whose subject label the query names ("Caroline: ...", "alembic: ...") is about
    # that subject rather than merely mentioning it.
    words = {t.word.lower() for t in terms} | {t.stem for t in terms}
    for h in hits:
        h.rank = h.score + bm25_weight * (h.bm25 / best_bm) + (subject_weight if _names_subject(h.text, words) else 0.0)
    hits.sort(key=lambda h: -h.rank)
    return [h for h in hits if h.score >= floor][:limit]


def thread_context(conn: sqlite3.Connection, rows: list, scope: Scope) -> tuple[list, dict]:
    """The rows plus the memories that follow them in their threads (up to len(THREAD_WEIGHTS)
    steps on), and {row id: [terms of the memory it follows, of the one before that, ...]}.

    Only current memories this scope may read count, as results and as context: a superseded
    turn no longer speaks for the one after it. A store without threads pays one index probe."""
    if not rows or conn.execute("SELECT 1 FROM memories WHERE follows IS NOT NULL LIMIT 1").fetchone() is None:
        return rows, {}
    where, params = scope.where("m")
    by_id = {r["id"]: r for r in rows}
    out, frontier = list(rows), list(by_id)
    for _ in THREAD_WEIGHTS:
        marks = ",".join("?" * len(frontier))
        new = [r for r in conn.execute(f"SELECT {ROW_COLUMNS}, 0.0 AS bm FROM memories m "
                                       f"WHERE m.follows IN ({marks}) AND {where}", (*frontier, *params))
               if r["id"] not in by_id]
        if not new:
            break
        by_id.update((r["id"], r) for r in new)
        out.extend(new)
        frontier = [r["id"] for r in new]
    terms = {i: r["terms"] for i, r in by_id.items()}
    follows = {i: r["follows"] for i, r in by_id.items()}
    for _ in THREAD_WEIGHTS:
        need = sorted({f for f in follows.values() if f is not None and f not in terms})
        if not need:
            break
        terms.update(dict.fromkeys(need))  # None: not readable here
        marks = ",".join("?" * len(need))
        for i, t, f in conn.execute(f"SELECT m.id, m.terms, m.follows FROM memories m "
                                    f"WHERE m.id IN ({marks}) AND {where}", (*need, *params)):
            terms[i], follows[i] = t, f
    context, sets = {}, {}
    for r in out:
        chain, p = [], r["follows"]
        while p is not None and terms.get(p) is not None and len(chain) < len(THREAD_WEIGHTS):
            if p not in sets:
                sets[p] = set(terms[p].split())
            chain.append(sets[p])
            p = follows.get(p)
        if chain:
            context[r["id"]] = chain
    return out, context


def _memory_idf(conn, have_of: list, terms: list, n_docs: int) -> dict:
    """idf of every informative term the candidates hold (stopword stems weigh nothing)."""
    stop = STOP_STEMS
    known = {t.stem: t.idf for t in terms}
    for t in terms:
        for a in t.alts:
            known.setdefault(a, t.idf)
    every = set().union(*have_of)
    need = sorted(every - stop - set(known))
    out = dict.fromkeys(every, 0.0)  # every candidate term is a key; stopwords weigh nothing
    out.update((k, v) for k, v in known.items() if k not in stop)
    for i in range(0, len(need), 500):
        for term, df in doc_freqs(conn, need[i:i + 500]).items():
            out[term] = term_idf(n_docs, df, term)
    return out


def subject_label(text: str) -> list:
    """The words (lower case) of the short `label:` a memory opens with, after an optional
    [bracketed] prefix ("Caroline: ...", "alembic: ..."); [] when there is none or it is
    longer than three words."""
    span = subject_span(text)  # no regex: the hook would import re for it on every prompt
    if span is None:
        return []
    label = tokens(span.lower())
    return label if len(label) <= 3 else []


def _names_subject(text: str, words: set) -> bool:
    """True when a query word is one of the memory's subject label's words."""
    return any(w in words for w in subject_label(text))

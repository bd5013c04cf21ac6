"""Scoped full-text search built for verbatim prompts and mid-task text (standard library
only: the pre-step hook runs it).

BM25 ranks candidates but cannot tell a hit from a miss: its values are not comparable across
queries. So every hit also gets `score`, the IDF-weighted share of the query's informative
terms that the memory covers (0..1). The pre-step injects only hits whose score clears the
floor, so an unrelated prompt injects nothing.
"""

import math
import sqlite3
from dataclasses import dataclass, field

from recalld.scope import Scope
from recalld.textproc import Stemmer, identifier_parts, informative, tokens, within_edits

MAX_QUERY_TERMS = 32
CANDIDATES = 40


@dataclass
class Hit:
    id: int
    text: str
    tell: "str | None"
    kind: str
    scope: str
    project: str
    agent: str
    always: bool
    created_at: str
    score: float  # comparable across queries: weighted query-term coverage, 0..1
    bm25: float  # FTS5 bm25 (lower is better); only comparable within one query
    matched: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "id": self.id, "text": self.text, "tell": self.tell, "kind": self.kind,
            "scope": self.scope, "project": self.project, "agent": self.agent,
            "always": self.always, "created_at": self.created_at,
            "score": round(self.score, 4), "bm25": round(self.bm25, 4), "matched": self.matched,
        }


@dataclass
class QueryTerm:
    word: str  # as typed
    stem: str  # what the index holds (after fuzzy correction, if any)
    df: int
    idf: float
    fuzzy: bool = False


def _quote(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def analyse(conn: sqlite3.Connection, text: str, stemmer: "Stemmer | None" = None,
            max_terms: int = MAX_QUERY_TERMS) -> tuple[list[QueryTerm], int]:
    """Informative query terms with their document frequencies, typos corrected."""
    words = informative(tokens(text) + identifier_parts(text))
    if not words:
        return [], 0
    stemmer = stemmer or Stemmer(conn)
    stems = stemmer.stem_each(words)
    pairs, seen = [], set()
    for w, s in zip(words, stems):
        if s and s not in seen:
            seen.add(s)
            pairs.append((w, s))
    if not pairs:
        return [], 0
    n_docs = conn.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()[0]
    df = dict(conn.execute(
        f"SELECT term, doc FROM memories_vocab WHERE term IN ({','.join('?' * len(pairs))})",
        [s for _, s in pairs],
    ).fetchall())
    terms = []
    for w, s in pairs:
        d = df.get(s, 0)
        fuzzy = False
        if d == 0 and len(s) >= 4 and not s.isdigit():
            alt = _closest_term(conn, s)
            if alt is not None:
                s, d, fuzzy = alt[0], alt[1], True
        terms.append(QueryTerm(w, s, d, _idf(n_docs, d), fuzzy))
    # Long prompts: keep the most informative terms (absent terms count: they say the
    # store does not know this).
    if len(terms) > max_terms:
        terms = sorted(terms, key=lambda t: -t.idf)[:max_terms]
    return terms, n_docs


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _closest_term(conn: sqlite3.Connection, stem: str) -> "tuple[str, int] | None":
    """A vocabulary term one edit away (two for long words), most frequent first.

    Candidates share the first letter (typos rarely hit it) and are read through the vocab
    table's term range, so this stays a bounded scan even at 100k memories.
    """
    k = 1 if len(stem) < 6 else 2
    lo = stem[0]
    hi = chr(ord(lo) + 1)
    best = None
    for term, doc in conn.execute(
        "SELECT term, doc FROM memories_vocab WHERE term >= ? AND term < ?", (lo, hi)
    ):
        if abs(len(term) - len(stem)) > k or term == stem:
            continue
        if within_edits(stem, term, k) and (best is None or doc > best[1]):
            best = (term, doc)
    return best


def search(conn: sqlite3.Connection, query: str, scope: Scope, *, limit: int = 10,
           floor: float = 0.0, stemmer: "Stemmer | None" = None,
           candidates: int = CANDIDATES) -> list[Hit]:
    terms, n_docs = analyse(conn, query, stemmer)
    present = [t for t in terms if t.df > 0]
    if not present:
        return []
    match = " OR ".join(
        (_quote(t.stem) + "*") if t.fuzzy else _quote(t.word) for t in present
    )
    where, params = scope.where("m")
    rows = conn.execute(
        f"""SELECT m.id, m.text, m.tell, m.kind, m.scope, m.project, m.agent, m.always,
                   m.created_at, m.terms, bm25(memories_fts, 1.0, 0.6, 0.4) AS bm
            FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid
            WHERE memories_fts MATCH ? AND {where}
            ORDER BY bm LIMIT ?""",
        (match, *params, candidates),
    ).fetchall()
    total_idf = sum(t.idf for t in terms) or 1.0
    best_bm = min((r["bm"] for r in rows), default=-1.0) or -1.0
    hits = []
    for r in rows:
        have = set(r["terms"].split())
        matched = [t for t in terms if t.stem in have]
        cover = sum(t.idf for t in matched) / total_idf
        hits.append(Hit(
            id=r["id"], text=r["text"], tell=r["tell"], kind=r["kind"], scope=r["scope"],
            project=r["project"], agent=r["agent"], always=bool(r["always"]),
            created_at=r["created_at"], score=cover, bm25=r["bm"],
            matched=[t.stem for t in matched],
        ))
    # Coverage decides first (it is what the floor reads); bm25 breaks near-ties.
    hits.sort(key=lambda h: -(h.score + 0.15 * (h.bm25 / best_bm)))
    return [h for h in hits if h.score >= floor][:limit]

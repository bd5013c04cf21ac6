"""Ranking variants of the pre-step search tried on LoCoMo (dev split, categories 1-4), measured
in one run through the real search, the shipped ranking first.

    recalld bench ablations [--data PATH] [--json]

Every row asks every answerable question through recalld.core.search.search itself (all
candidates and their thread followers returned, no floor), so the shipped row is exactly the
pre-step's ranking, long-prompt rule included, and equals `recalld bench locomo`'s hit@1 and
recall@5. A variant differs from it in one of three ways, and only in the way its row says:

- a ranking weight passed to search(): thread_weights, bm25_weight, subject_weight, candidates;
- `weigh`, passed to search(): each query term's weight in the coverage score instead of its
  idf (idf^p; idf mixed with the idf within the question's project; question-frame words at 0);
- a re-ordering of search()'s hits by the shipped ranking key (Hit.rank) plus one added term
  (length penalty or bonus, query-bigram proximity, a penalty for turns that are questions, the
  subject bonus only for the first label named), or by Hit.bm25 alone ("bm25 only").

Not re-made here: prefix matching of stems (docs/evaluation.md records it), which changes how a
term matches a memory inside the scoring loop and would need a second copy of it; and the
variants that are not one search (pseudo-relevance feedback, MMR), measured once through the
full search and recorded in docs/evaluation.md.
"""

import math
import re
import sys

from recalld.bench import locomo
from recalld.core import search as S
from recalld.core.query_terms import Stemmer

SHIPPED = "shipped: coverage (thread context 0.8 / 0.4) + 0.15 bm25 + 0.2 subject label"
CANDIDATE_COUNTS = (20, 40, 100, 200)
EVERY = 1_000_000  # search()'s limit: every candidate and thread follower comes back
FRAME = {"kind", "often", "reason", "like", "specif", "main", "type", "sort", "done", "get", "take", "thing",
         "activ", "way", "feel", "think"}
_TOK = re.compile(r"[^\W_]+")


class Variant:
    """search() keyword arguments, optionally `weigh(question, term) -> weight` and
    `key(question, hit) -> float` (higher first) to re-order the hits."""

    def __init__(self, name: str, key=None, weigh=None, **kwargs):
        self.name, self.key, self.weigh, self.kwargs = name, key, weigh, kwargs


class Question:
    """One question and what the variants read of it: its scope and evidence, its analysed
    terms (proximity), its project's document frequencies (project-local idf)."""

    def __init__(self, text, scope, evidence, id2dia, terms, local_n, local_df):
        self.text, self.scope, self.evidence, self.id2dia = text, scope, evidence, id2dia
        self.terms, self.local_n, self.local_df = terms, local_n, local_df
        self.labels = self.first = None  # set by first_subject: hit id -> label words, the first label word


def proximity(q: Question, h) -> float:
    """The idf-weighted share of adjacent query-word pairs found within 3 words of each other
    in the memory's words (after a [bracketed] prefix)."""
    toks = [x.lower() for x in _TOK.findall(h.text.split("] ", 1)[-1])]
    qs = q.terms
    pos = {}
    for i, x in enumerate(toks):
        for j, t in enumerate(qs):
            if x == t.word.lower() or x.startswith(t.stem):
                pos.setdefault(j, []).append(i)
    tot = sum(t.idf for t in qs) or 1.0
    bonus = 0.0
    for j in range(len(qs) - 1):
        a, b = pos.get(j), pos.get(j + 1)
        if a and b and any(abs(x - y) <= 3 for x in a for y in b):
            bonus += min(qs[j].idf, qs[j + 1].idf)
    return bonus / tot


def first_subject(q: Question, h, hits: list) -> bool:
    """Does the hit's subject label hold the first query word that is any hit's label?"""
    if q.labels is None:
        q.labels = {x.id: set(S.subject_label(x.text)) for x in hits}
        every = set().union(*q.labels.values()) if q.labels else set()
        q.first = next((t.word.lower() for t in q.terms if t.word.lower() in every), None)
    return q.first is not None and q.first in q.labels.get(h.id, ())


def local_idf(q: Question, t) -> float:
    return S.idf(q.local_n, q.local_df.get(t.stem, 0))


def variants() -> list:
    W = S.SUBJECT_WEIGHT
    v = [Variant(SHIPPED)]
    for tw in ((0.0, 0.0), (0.5, 0.25), (1.0, 0.5), (0.8, 0.0), (1.0, 1.0)):
        v.append(Variant(f"thread weights {tw[0]} / {tw[1]}" + (" (no thread context)" if tw == (0.0, 0.0) else ""),
                         thread_weights=tw))
    v.append(Variant("no subject label", subject_weight=0.0))
    for w in (0.1, 0.3):
        v.append(Variant(f"subject label weight {w}", subject_weight=w))
    for a in (0.0, 0.3, 1.0):
        v.append(Variant(f"bm25 weight {a}", bm25_weight=a))
    v.append(Variant("bm25 only", key=lambda q, h, hits: -h.bm25))  # bm25 is negative; followers 0
    for p in (0.5, 2.0):
        v.append(Variant(f"idf^{p} in coverage", weigh=lambda q, t, p=p: t.idf ** p))
    for lb in (0.02, 0.05):
        v.append(Variant(f"length penalty {lb}*log(chars)",
                         key=lambda q, h, hits, lb=lb: h.rank - lb * math.log(len(h.text))))
    for m in (0.5, 1.0):
        v.append(Variant(f"project-local idf mix {m}",
                         weigh=lambda q, t, m=m: (1 - m) * t.idf + m * local_idf(q, t)))
    v.append(Variant("question-frame words skipped", weigh=lambda q, t: 0.0 if t.stem in FRAME else t.idf))
    for w in (0.1, 0.2):
        v.append(Variant(f"query-bigram proximity bonus {w}", key=lambda q, h, hits, w=w: h.rank + w * proximity(q, h)))
    v.append(Variant("question-turn penalty 0.1 (dialogue only)",
                     key=lambda q, h, hits: h.rank - (0.1 if h.text.rstrip().endswith("?") else 0.0)))
    for lb in (0.04, 0.08):
        v.append(Variant(f"length bonus {lb}*log(chars)",
                         key=lambda q, h, hits, lb=lb: h.rank + lb * math.log(len(h.text))))
    v.append(Variant("subject label bonus only for the first label named", subject_weight=0.0,
                     key=lambda q, h, hits: h.rank + (W if first_subject(q, h, hits) else 0.0)))
    v += [Variant(f"shipped, {c} candidates", candidates=c) for c in CANDIDATE_COUNTS if c != S.CANDIDATES]
    return v


def questions(info: dict) -> list:
    conn = info["conn"]
    st = Stemmer(conn)
    local_df, local_n = {}, {}
    for project, terms in conn.execute("SELECT project, terms FROM memories"):
        d = local_df.setdefault(project, {})
        local_n[project] = local_n.get(project, 0) + 1
        for t in terms.split():
            d[t] = d.get(t, 0) + 1
    out = []
    for conv in info["convs"]:
        sc = locomo.scope_for(conv)
        for q in conv.questions:
            if q.category in locomo.ANSWERABLE:
                terms, _ = S.analyse(conn, q.question, st)
                out.append(Question(q.question, sc, set(q.evidence), info["maps"][conv.sample_id], terms,
                                    local_n[sc.project], local_df[sc.project]))
    return out


def ranked(conn, st, q: Question, v: Variant) -> list:
    """The dia_ids in the order variant `v` gives the real search's hits."""
    kw = dict(v.kwargs)
    if v.weigh is not None:
        kw["weigh"] = lambda t: v.weigh(q, t)
    hits = S.search(conn, q.text, q.scope, limit=EVERY, floor=0.0, stemmer=st, **kw)
    if v.key is not None:
        hits = sorted(hits, key=lambda h: -v.key(q, h, hits))
    return [q.id2dia[h.id] for h in hits]


def measure(data=None) -> dict:
    """Every variant's hit@1 and recall@5, and how many questions have their evidence among the
    first k candidates (and their thread followers)."""
    _, info = locomo.ask_all(data, categories=(), keep_store=True)  # the store only: rows ask below
    conn = info["conn"]
    try:
        st = Stemmer(conn)
        qs = questions(info)
        n = len(qs) or 1
        out = {}
        for v in variants():
            h1 = r5 = 0
            for q in qs:
                order = ranked(conn, st, q, v)
                h1 += bool(order) and order[0] in q.evidence
                r5 += any(d in q.evidence for d in order[:5])
            out[v.name] = {"hit@1": round(h1 / n, 3), "recall@5": round(r5 / n, 3)}
        ceiling = {}
        for k in CANDIDATE_COUNTS:
            got = sum(any(d in q.evidence for d in ranked(conn, st, q, Variant("", candidates=k))) for q in qs)
            ceiling[f"k={k}"] = round(got / n, 3)
    finally:
        conn.close()
        info["tmp"].cleanup()
    return {"questions": len(qs), "variants": out, "candidates_holding_evidence": ceiling}


def run(quick: bool = False, data=None) -> dict:
    # quick changes nothing: a LoCoMo split is asked whole or its figures mean nothing
    res = measure(data)
    shipped = res["variants"][SHIPPED]
    res["notes"] = [f"{res['questions']} answerable questions, every row through recalld.core.search.search; "
                    f"the first row is the shipped ranking (hit@1 {shipped['hit@1']}, recall@5 "
                    f"{shipped['recall@5']}), each other row differs from it only as its name says "
                    "(recalld/bench/ablations.py)"]
    return res


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("ablations"))

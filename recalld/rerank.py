"""Re-ranking the search's top candidates in the background pass with the local model.

The pre-step has no time for a model; the background pass does. There the top RERANK_TOP
candidates of recalld.search are re-scored by query likelihood, the zero-shot re-ranker that
works with any small causal model: how much a memory helps the model predict the query,

    ql = (log P(query | memory) - log P(query | no memory)) / tokens in the query

which is exactly the judge's score (recalld.judge.score_texts), so one decode per candidate
serves both the re-ranking and the judge's threshold. The final order adds the search's own
ranking key (`Hit.rank`: coverage with thread context, bm25, subject label), weighted by
SEARCH_WEIGHT. docs/evaluation.md has the measurements behind the weight, and the finding that
with the embedded 135M model the re-ranked order is no better than the search's own, which is
why the daemon's pass keeps the search order.

Not on the hook's path: this imports the model runtime.
"""

import time
from dataclasses import dataclass

from recalld import judge, llm
from recalld.scope import Scope
from recalld.search import Hit, search

RERANK_TOP = 10
# On the search's ranking key, not its coverage `score`: adding coverage alone dropped the
# subject-label and bm25 terms, and measured 0.479 hit@1 against 0.512 (121 questions).
SEARCH_WEIGHT = 3.0


@dataclass
class Ranked:
    hit: Hit
    ql: "float | None"  # None when the deadline cut it off before it was scored
    rank_score: "float | None"

    def as_dict(self) -> dict:
        return {**self.hit.as_dict(), "ql": None if self.ql is None else round(self.ql, 4),
                "rank_score": None if self.rank_score is None else round(self.rank_score, 4)}


def rerank(runtime, query: str, hits: list, *, top: int = RERANK_TOP, search_weight: float = SEARCH_WEIGHT,
           deadline: "float | None" = None) -> list:
    """Hits re-ordered: the first `top` by ql + search_weight * the search's ranking key, then any the
    deadline (time.monotonic()) left unscored, then the rest, each in search order."""
    head, tail = hits[:top], hits[top:]
    if not head:
        return []
    try:
        scores = judge.score_texts(runtime, query, [h.text for h in head], deadline)
    except llm.LLMTimeout:  # not even the no-memory baseline fitted: nothing scored
        scores = [None] * len(head)
    scored, unscored = [], []
    for h, s in zip(head, scores):
        if s is None:
            unscored.append(Ranked(h, None, None))
        else:
            scored.append(Ranked(h, s, s + search_weight * h.rank))
    scored.sort(key=lambda r: -r.rank_score)
    return scored + unscored + [Ranked(h, None, None) for h in tail]


@dataclass
class RerankResult:
    ranked: list
    available: bool
    model: "str | None"
    model_ms: float
    search_ms: float
    error: "str | None" = None


def search_reranked(conn, query: str, scope: Scope, cfg: dict, *, runtime=None, top: int = RERANK_TOP,
                    timeout_s: float = 20.0) -> RerankResult:
    """search -> rerank the top `top`. Without a model the search order stands and the result
    says why (available=False), so a caller can tell "re-ranked" from "could not re-rank"."""
    t0 = time.perf_counter()
    hits = search(conn, query, scope, limit=top, floor=0.0) if query and query.strip() else []
    search_ms = (time.perf_counter() - t0) * 1000
    if runtime is None:
        try:
            runtime = llm.require_runtime("judge", cfg)
        except llm.Unavailable as e:
            return RerankResult([Ranked(h, None, None) for h in hits], False, None, 0.0, search_ms, str(e))
    ms0 = runtime.model_ms
    try:
        ranked = rerank(runtime, query, hits, top=top, deadline=time.monotonic() + timeout_s)
        err = None
    except llm.LLMError as e:
        ranked, err = [Ranked(h, None, None) for h in hits], f"rerank failed: {e}"
    return RerankResult(ranked, True, runtime.name, runtime.model_ms - ms0, search_ms, err)

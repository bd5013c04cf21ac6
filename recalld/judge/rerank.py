"""Re-ranking the search's top candidates in the background pass with the local model.

The pre-step has no time for a model; the background pass does. There
(recalld.judge.judge.judge_need) the top judge.max_candidates of recalld.core.search are
re-scored with query likelihood, the zero-shot re-ranker that works with any small causal
model: how much a memory raises the log-probability of each of the query's tokens
(recalld.judge.scoring.token_gains, the judge's own decode, so one decode per candidate serves
both the re-ranking and the judge's threshold).

The search has already counted every query word a memory holds. So the re-ranker adds the
model's gain only on the informative words the memory does *not* match (`unmatched_gain`):

    gain = sum of token gains over the query's unmatched informative words / tokens in the query
    rank_score = gain + SEARCH_WEIGHT * Hit.rank

The intent: the model should speak where the words are silent ("tourney" against
"tournament"), not re-read the words the search has already scored. On LoCoMo dev it ranks at least as well
as query likelihood over all the query's tokens and loses fewer of the questions the search
order had right (docs/evaluation.md, "Re-ranking"). A word search matched only after correcting a typo is
stemmed here as typed, so it counts as unmatched.

Not on the hook's path: it runs a loaded model (recalld.model.runtime).
"""

import sqlite3
from dataclasses import dataclass

from recalld.core.search import Hit
from recalld.core.query_terms import Stemmer, identifier_parts, informative, tokens
from recalld.judge.scoring import need_continuation, token_gains
from recalld.model.errors import LLMTimeout

# On the search's ranking key, not its coverage `score`: adding coverage alone dropped the
# subject-label and bm25 terms. 3 was best of 2 / 2.5 / 3 / 4 / 5 with the gain on unmatched
# words, on every answerable LoCoMo dev question (docs/evaluation.md).
SEARCH_WEIGHT = 3.0


@dataclass
class Ranked:
    hit: Hit
    ql: "float | None"  # the judge score; None when the deadline cut it off before it was scored
    rank_score: "float | None"
    gain: "float | None" = None  # the model's gain on the words the memory does not match

    def as_dict(self) -> dict:
        def r(x):
            return None if x is None else round(x, 4)
        return {**self.hit.as_dict(), "ql": r(self.ql), "gain": r(self.gain), "rank_score": r(self.rank_score)}


def words(pieces: list) -> list:
    """Group a tokenizer's pieces into words: [(token indexes, word text)]. A word starts at a
    piece that starts with a space or a character that is not a letter or digit, or after a
    piece that ends with one ("Caroline's" -> "Caroline", "'s")."""
    out = []
    for i, p in enumerate(pieces):
        if out and p[:1].isalnum() and out[-1][1][-1:].isalnum():
            out[-1][0].append(i)
            out[-1][1] += p
        else:
            out.append([[i], p])
    return [(idx, w.strip()) for idx, w in out]


def query_words(pieces: list) -> list:
    """[(token indexes, stems of the word's informative parts)] for the query's words; a word
    of stopwords only has no stems."""
    grouped = [(idx, [x.lower() for x in informative(tokens(w) + identifier_parts(w))]) for idx, w in words(pieces)]
    flat = [x for _, xs in grouped for x in xs]
    if not flat:
        return [(idx, []) for idx, _ in grouped]
    conn = sqlite3.connect(":memory:")  # the porter stemmer search used, on a private connection
    try:
        stems = iter(Stemmer(conn).stem_each(flat))
        return [(idx, [st for st in (next(stems) for _ in xs) if st]) for idx, xs in grouped]
    finally:
        conn.close()


def unmatched_gain(qwords: list, gains: list, hit: Hit) -> float:
    """The sum of the token gains over the query's informative words that `hit` does not match,
    per query token. A word matched only through the thread's earlier memories counts as
    unmatched: the memory itself does not say it."""
    have = set(hit.matched)
    total = 0.0
    for idx, stems in qwords:
        if stems and have.isdisjoint(stems):
            total += sum(gains[i] for i in idx)
    return total / max(len(gains), 1)


def rerank(runtime, query: str, hits: list, *, top: "int | None" = None,
           search_weight: float = SEARCH_WEIGHT, deadline: "float | None" = None) -> list:
    """Hits re-ordered: the first `top` (default: all) by the model's gain on the words each
    lacks + search_weight * the search's ranking key, then any the deadline (time.monotonic())
    left unscored, then the rest, each in search order."""
    head, tail = (hits, []) if top is None else (hits[:top], hits[top:])
    if not head:
        return []
    try:
        gains = token_gains(runtime, query, [h.text for h in head], deadline)
    except LLMTimeout:  # not even the no-memory baseline fitted: nothing scored
        gains = [None] * len(head)
    qwords = query_words(runtime.pieces(need_continuation(query))) if any(g is not None for g in gains) else []
    scored, unscored = [], []
    for h, g in zip(head, gains):
        if g is None:
            unscored.append(Ranked(h, None, None))
        else:
            u = unmatched_gain(qwords, g, h)
            scored.append(Ranked(h, sum(g) / max(len(g), 1), u + search_weight * h.rank, u))
    scored.sort(key=lambda r: -r.rank_score)
    return scored + unscored + [Ranked(h, None, None) for h in tail]

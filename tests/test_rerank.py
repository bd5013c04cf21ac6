"""Background re-ranking with the real embedded model: order, the words the model's gain
counts, deadline. Without a model the daemon's pass says so (tests/test_judge.py)."""

import time

import pytest

from recalld.judge import rerank, scoring
from recalld.model.resolve import embedded_path
from recalld import memories
from recalld.core.scope import resolve
from recalld.core.search import search

EMBEDDED = embedded_path()

# A need, the memory that answers it, and lexical near misses that search ranks alongside.
NEED = "Which port does the staging Postgres listen on?"
ANSWER = "Staging Postgres listens on port 6543, not 5432; the pgbouncer in front takes 5432."
MISSES = [
    "Postgres staging backups run nightly; the staging dump goes to the backups bucket.",
    "Which staging host runs Postgres is in the inventory file under [db].",
    "The Postgres extension list for staging lives in infra/pg/extensions.sql.",
]


@pytest.fixture
def stocked(conn, project):
    sc = resolve(str(project))
    for text in MISSES + [ANSWER]:
        memories.remember(conn, text, sc, check_similar=False)
    return sc


@pytest.mark.model
def test_rerank_orders_by_likelihood_plus_coverage(conn, stocked, rt):
    hits = search(conn, NEED, stocked, limit=10)
    assert len(hits) == 4
    ranked = rerank.rerank(rt, NEED, hits)
    assert sorted(r.hit.id for r in ranked) == sorted(h.id for h in hits)  # nothing lost or added
    assert all(r.ql is not None for r in ranked)
    scores = [r.rank_score for r in ranked]
    assert scores == sorted(scores, reverse=True)
    for r in ranked:
        assert r.rank_score == pytest.approx(r.gain + rerank.SEARCH_WEIGHT * r.hit.rank)
    assert ranked[0].hit.text == ANSWER
    # the judge score is the mean gain over every token of the need, from the same decode
    gains = scoring.token_gains(rt, NEED, [r.hit.text for r in ranked])
    assert [r.ql for r in ranked] == pytest.approx([sum(g) / len(g) for g in gains])


@pytest.mark.model
def test_words_are_grouped_from_the_tokenizers_pieces(rt):
    pieces = rt.pieces(scoring.need_continuation("Which port does Ingrid's pgbouncer use?"))
    assert len(pieces) > 8  # the tokenizer splits the names: the grouping has work to do
    got = rerank.words(pieces)
    assert [w for _, w in got] == ["Which", "port", "does", "Ingrid", "'s", "pgbouncer", "use", "?"]
    assert [i for idx, _ in got for i in idx] == list(range(len(pieces)))  # every token, once, in order


@pytest.mark.model
def test_the_gain_counts_only_the_informative_words_a_memory_lacks(conn, stocked, rt):
    pieces = rt.pieces(scoring.need_continuation(NEED))
    qwords = rerank.query_words(pieces)
    by_text = {"".join(pieces[i] for i in idx).strip(): stems for idx, stems in qwords}
    # stopwords carry no stems, so the model's gain on them never counts
    assert by_text["Which"] == [] and by_text["does"] == [] and by_text["on"] == []
    assert by_text["listen"] == ["listen"] and by_text["Postgres"] == ["postgr"]
    hits = {h.text: h for h in search(conn, NEED, stocked, limit=10)}
    gains = [float(2 ** i) for i in range(len(pieces))]  # one bit per token: the sum says which counted

    def counted(hit):
        total = round(rerank.unmatched_gain(qwords, gains, hit) * len(gains))
        return {"".join(pieces[i] for i in idx).strip() for idx, _ in qwords
                if all(total >> i & 1 for i in idx)}

    assert counted(hits[ANSWER]) == set()  # it holds every word of the need: the search said it all
    assert counted(hits[MISSES[0]]) == {"port", "listen"}  # holds Postgres and staging only


@pytest.mark.model
def test_only_the_top_are_rescored_and_a_past_deadline_keeps_search_order(conn, stocked, rt):
    hits = search(conn, NEED, stocked, limit=10)
    ranked = rerank.rerank(rt, NEED, hits, top=2)
    assert [r.hit.id for r in ranked[2:]] == [h.id for h in hits[2:]]
    assert all(r.ql is None for r in ranked[2:])
    late = rerank.rerank(rt, NEED, hits, deadline=time.monotonic() - 1)
    assert [r.hit.id for r in late] == [h.id for h in hits]
    assert all(r.ql is None for r in late)


def test_nothing_to_rerank_needs_no_model():
    assert rerank.rerank(None, NEED, []) == []

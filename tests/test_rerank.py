"""Background re-ranking with the real embedded model: order, deadline, no model."""

import time

import pytest

from recalld import llm, rerank, store
from recalld.scope import resolve
from recalld.search import search

EMBEDDED = llm.embedded_path()

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
        store.remember(conn, text, sc, check_similar=False)
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
        assert r.rank_score == pytest.approx(r.ql + rerank.SEARCH_WEIGHT * r.hit.rank)
    assert ranked[0].hit.text == ANSWER


@pytest.mark.model
def test_only_the_top_are_rescored_and_a_past_deadline_keeps_search_order(conn, stocked, rt):
    hits = search(conn, NEED, stocked, limit=10)
    ranked = rerank.rerank(rt, NEED, hits, top=2)
    assert [r.hit.id for r in ranked[2:]] == [h.id for h in hits[2:]]
    assert all(r.ql is None for r in ranked[2:])
    late = rerank.rerank(rt, NEED, hits, deadline=time.monotonic() - 1)
    assert [r.hit.id for r in late] == [h.id for h in hits]
    assert all(r.ql is None for r in late)


def test_without_a_model_the_search_order_stands_and_says_why(conn, stocked):
    res = rerank.search_reranked(conn, NEED, stocked, {"models": {"judge": "off"}})
    assert res.available is False and "disabled" in res.error
    assert [r.hit.id for r in res.ranked] == [h.id for h in search(conn, NEED, stocked, limit=rerank.RERANK_TOP)]
    assert rerank.rerank(None, NEED, []) == []

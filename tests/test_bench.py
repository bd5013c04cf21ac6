"""The benchmark package's own logic, without a model or the LoCoMo data: the shared
statistics and the search parameters the ablations measure through (the judge benchmark's
rules are tested in tests/test_judge.py)."""

import json

import pytest

from recalld.bench import ablations, common, locomo
from recalld.core import search
from recalld.core.query_terms import Stemmer


def test_pct_is_nearest_rank_and_none_when_empty():
    xs = list(range(1, 101))
    assert common.pct(xs, 0.0) == 1 and common.pct(xs, 1.0) == 100
    assert common.pct(xs, 0.5) == 51  # index round(49.5) = 50 (round half to even)
    assert common.pct(xs, 0.99) == 99
    assert common.pct([], 0.5) is None
    assert common.wilson(0, 0) == [None, None]
    lo, hi = common.wilson(50, 100)
    assert lo < 0.5 < hi


def test_interleaved_alternates_the_calls():
    seen = []
    t = common.interleaved({"a": lambda i: seen.append(("a", i)), "b": lambda i: seen.append(("b", i))}, 3)
    assert seen == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert len(t["a"]) == len(t["b"]) == 3 and all(ms >= 0 for ms in t["a"])


@pytest.fixture
def store(tmp_path):
    from tests.test_locomo_harness import _conv

    convs = [_conv("conv-a", "Ada", "Bo", [
        ("1:00 pm on 3 May, 2023", [
            ("Ada", "Hi Bo! I adopted a greyhound named Pixel last week."),
            ("Bo", "Congrats Ada! What breed did the shelter say?"),
            ("Ada", "A retired racer, very calm."),
        ])], [
        {"question": "What did Ada say about the greyhound's breed and shelter?", "answer": "racer",
         "evidence": ["D1:3"], "category": 4}])]
    p = tmp_path / "mini.json"
    p.write_text(json.dumps(convs))
    _, info = locomo.ask_all(p, keep_store=True)
    yield info
    info["conn"].close()
    info["tmp"].cleanup()


def test_search_parameters_change_what_they_name(store):
    conn, conv = store["conn"], store["convs"][0]
    sc, q = locomo.scope_for(conv), conv.questions[0].question
    every = dict(limit=100, floor=0.0)
    base = {h.id: h for h in search.search(conn, q, sc, **every)}
    words = {t.word.lower() for t in search.analyse(conn, q)[0]} | {t.stem for t in search.analyse(conn, q)[0]}
    no_label = {h.id: h for h in search.search(conn, q, sc, subject_weight=0.0, **every)}
    for i, h in base.items():
        named = any(w in words for w in search.subject_label(h.text))
        assert h.rank - no_label[i].rank == pytest.approx(search.SUBJECT_WEIGHT if named else 0.0)
    assert any(search.subject_label(h.text) == ["ada"] for h in base.values())
    # the turn after the question reads it as context; without thread weights it holds only its own words
    no_threads = {h.id: h for h in search.search(conn, q, sc, thread_weights=(0.0, 0.0), **every)}
    assert all(no_threads[i].score <= h.score for i, h in base.items())
    assert any(no_threads[i].score < h.score for i, h in base.items())
    zero = search.search(conn, q, sc, weigh=lambda t: 0.0, **every)
    assert zero and all(h.score == 0.0 for h in zero)


def test_ablations_shipped_row_is_the_real_search(store):
    conv = store["convs"][0]
    v = ablations.variants()
    assert v[0].name == ablations.SHIPPED and not v[0].kwargs and v[0].key is None and v[0].weigh is None
    st = Stemmer(store["conn"])
    (q,) = ablations.questions(store)
    hits = search.search(store["conn"], q.text, locomo.scope_for(conv), limit=100, floor=0.0)
    ids = store["maps"][conv.sample_id]
    assert ablations.ranked(store["conn"], st, q, v[0]) == [ids[h.id] for h in hits]
    names = [x.name for x in v]
    assert len(names) == len(set(names))
    for x in v:  # every variant runs on the store
        assert set(ablations.ranked(store["conn"], st, q, x)) <= set(ids.values())



def test_load_probe_runs_real_hooks_and_finds_every_receipt():
    """A tiny run of recalld.bench.load (2 sessions, 3 s, 300 memories, traced): every run it
    started left exactly one receipt, exited 0, and was traced."""
    from recalld.bench import load

    res = load.run(clients=2, seconds=3.0, memories=300, trace=True)
    every = res["per_event"]["all"]
    assert every["runs"] >= 4 and set(res["per_event"]) >= {"session-start", "prompt-submit", "all"}
    assert every["missing_receipts"] == 0 and every["nonzero_exit"] == 0
    assert sum(v["runs"] for k, v in res["per_event"].items() if k != "all") == every["runs"]
    w = res["waits"]
    assert w["traced_runs"] == every["runs"]
    assert {"start", "import", "connect", "receipt", "run"} <= set(w["all"]["median_ms"])

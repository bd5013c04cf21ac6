"""The judge's features of the candidate set as a whole (recalld.judge.calibrated.SET_FEATURES:
how much of the need's own words the best candidate holds, how far the cosines spread), and the
receipt showing the text and set features the judge read for each candidate."""

import json
import math
import re

import numpy as np
import pytest

from recalld import memories
from recalld.core import settings
from recalld.core.scope import resolve
from recalld.daemon import passes
from recalld.judge import calibrated, judge

NEED = "The nightly backfill stopped writing partitions for the readings table. Where is its schedule set?"


def cand(text, cos, score=0.5, rank=0.5, ql=None):
    return {"id": text, "key": text, "text": text, "score": score, "rank": rank, "ql": ql, "unm": 0.0, "cos": cos}


def test_set_features_are_the_same_for_every_candidate_and_need_the_embedder():
    cands = [cand("The nightly backfill writes partitions of the readings table; its schedule is in schedules.py.", 0.8),
             cand("Readings are stored in Parquet under readings/.", 0.4),
             cand("Deploys run from GitHub Actions.", 0.3)]
    xs = calibrated.features(cands, lm=False, embed=True, need=NEED)
    mean = (0.8 + 0.4 + 0.3) / 3
    spread = math.sqrt(sum((c - mean) ** 2 for c in (0.8, 0.4, 0.3)) / 3)
    assert all(x["cos_spread"] == pytest.approx(spread) for x in xs)
    # the first holds every one of the need's own words but "stopped" and "set": 7 of 9 stems
    assert all(x["held_max"] == pytest.approx(7 / 9) for x in xs)
    # without an embedder neither is a feature: held out, held_max lowered every figure there
    assert not set(calibrated.SET_FEATURES) & set(calibrated.features(cands, lm=False, embed=False, need=NEED)[0])
    assert not set(calibrated.SET_FEATURES) & set(calibrated.feature_names(True, False))
    assert set(calibrated.SET_FEATURES) <= set(calibrated.feature_names(True, True))


def test_held_max_counts_the_needs_own_words_not_its_names_or_function_words():
    need = "What did Caroline realize after her charity race?"
    names_only = [cand("[d] Caroline: What did you do after that?", 0.5)]
    assert calibrated.features(names_only, False, True, need)[0]["held_max"] == 0.0
    words = [cand("[d] Caroline: I realized a lot at the charity race.", 0.5), cand("[d] Melanie: The race!", 0.4)]
    assert calibrated.features(words, False, True, need)[0]["held_max"] == pytest.approx(1.0)  # realiz, charit, race
    assert calibrated.features([], False, True, need) == []


def test_a_wider_spread_and_more_held_words_raise_the_shipped_probability():
    # the shipped embedder models read both with a positive weight: an answer stands out
    for key in ("cheap+embed", "lm+embed"):
        coef = calibrated.MODELS[key]["coef"]
        assert coef["held_max"] > 0 and coef["cos_spread"] > 0


class _Runtime:
    """Stands in for the language model: a memory sharing a need's word raises that word's log
    probability by one."""

    name, model_ms, load_ms = "fake.gguf", 0.0, None

    def pieces(self, text):
        return re.findall(r" ?[^ ]+", text)

    def token_logprobs(self, prompt, cont, timeout_s=None):
        have = set(prompt.lower().split())
        return [(1.0 if p.strip().lower() in have else 0.0) - 2.0 for p in self.pieces(cont)]


class _Encoder:
    """Hashed bag of words: texts that share words are close."""

    model = "fake@0"

    def embed(self, texts):
        out = np.zeros((len(texts), 32), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, sum(map(ord, w)) % 32] += 1.0
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out


def test_the_receipt_shows_the_text_and_set_features_of_each_judged_candidate(conn, project):
    sc = resolve(str(project))
    for text in ("The nightly backfill schedule for the readings table is defined in schedules.py.",
                 "[3 May] Ana: I moved the readings backfill to 02:00, the schedule was too early.",
                 "Readings partitions are daily.", "The backfill writes one partition at a time."):
        memories.remember(conn, text, sc, check_similar=False)
    cfg = settings.load()
    res = judge.judge_need(conn, NEED, sc, cfg, runtime=_Runtime(), encoder=_Encoder())
    assert res.available and res.signals == ["search", "embedding", "lm"]
    read = [v for v in res.candidates if v.judge_score is not None]
    assert read and len(read) == min(calibrated.LM_TOP, len(res.candidates))
    sig = judge.signals([type("H", (), {"id": v.memory_id, "score": v.search_score, "rank": 0.0, "text": v.text})()
                         for v in res.candidates], [v.detail["cos"] for v in res.candidates], None)
    names = calibrated.detail_names(True)
    assert set(names) == set(calibrated.SET_FEATURES) | set(calibrated.SUBJECT_FEATURES)
    cheap = calibrated.features(sig, False, True, NEED)  # the text and set features need no model
    for i, v in enumerate(res.candidates):
        if v.judge_score is None:  # not read by the model: its signals only
            assert set(v.detail) == {"cos"}
        else:
            assert set(v.detail) == {"ql", "gain", "cos"} | set(names)
            assert all(v.detail[k] == pytest.approx(cheap[i][k], abs=1e-3) for k in names)
    r = {"detail": {}}
    passes.fill_from_result(r, res)
    shown = [c["signals"] for c in r["detail"]["candidates"] if c["judge_score"] is not None]
    assert shown and all(set(names) <= set(s) for s in shown)
    assert "nightly" not in json.dumps(r["detail"]["candidates"])  # numbers only, no text

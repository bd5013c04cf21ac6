"""The judge's subject features (recalld.judge.calibrated.SUBJECT_FEATURES): does the memory speak
of the subject the need names? Text only, and 0 for a memory written as a plain note."""

import math

import pytest

from recalld.bench import fit_judge as fj
from recalld.judge import calibrated, judge

NEED = "What did Caroline realize after her charity race?"


def test_names_are_the_subjects_a_need_names_not_its_grammar():
    assert calibrated.names(NEED) == ["caroline"]
    assert calibrated.names("How did Melanie's kids like the Grand Canyon?") == ["melanie", "grand", "canyon"]
    need = ("psycopg.OperationalError: password authentication failed for user \"ledgerly_test\"\n"
            "The integration tests can't log in to Postgres. Let me check `TEST_DATABASE_URL` and --db-port.")
    got = calibrated.names(need)
    assert {"psycopg.operationalerror", "ledgerly_test", "postgres", "test_database_url", "--db-port"} <= set(got)
    assert not {"the", "let", "i"} & set(got)


@pytest.mark.parametrize("text, other, asks", [
    # the other speaker, thanking the named one, tells of herself: not the need's subject
    ("[8 May, 2023] Melanie: Thanks, Caroline! I'm starting to realize that self-care is important.", 1.0, 0.0),
    ("[8 May, 2023] Caroline: I ran a charity race and realized how much I love it.", 0.0, 0.0),
    # the named one asking the other about the other: about the one addressed
    ("[8 May, 2023] Caroline: Wow! What did you realize after the race?", 1.0, 1.0),
    # the other speaker telling the named one about her: about the one addressed
    ("[8 May, 2023] Melanie: You must have realized a lot after your race, Caroline.", 0.0, 0.0),
    # a plain note has no speaker: no subject signal
    ("The charity race realization note: self-care matters.", 0.0, 0.0),
])
def test_a_statement_is_about_its_author_or_whom_it_addresses(text, other, asks):
    names = calibrated.names(NEED)
    o, a, _ = calibrated.subject(names, names, calibrated._content(NEED, set(names)), text)
    assert (o, a) == (other, asks)


def test_only_a_name_that_authors_a_candidate_is_a_person_to_agree_with():
    need = "Why does Tim like Aragorn from Lord of the Rings?"
    cands = [{"text": "[d] Tim: I love Aragorn: he grows into a leader in Lord of the Rings.", "cos": 0.6},
             {"text": "[d] John: I'm a huge fan of Lord of the Rings too!", "cos": 0.5}]
    xs = calibrated.subject_features(cands, need)
    assert [x["other"] for x in xs] == [0.0, 1.0]  # Aragorn and the Rings are no speakers here
    # a note's label is no author: "Decision: we ..." says nothing about whose subject it is
    need = "Should I bump sqlite-utils to 4.0? The upsert test fails after the upgrade."
    cands = [{"text": "Decision: we pin sqlite-utils to 3.x; 4.0 changed upsert semantics.", "cos": 0.7}]
    assert calibrated.subject_features(cands, need) == [{"other": 0.0, "best_other": 0.0, "asks": 0.0}]


def test_best_other_is_the_subject_of_the_memory_holding_the_needs_own_words():
    cands = [{"text": "[d] Caroline: Thanks! Hope your week is going well, Mel.", "cos": 0.6},
             {"text": "[d] Melanie: I'm starting to realize after the charity race that self-care matters.", "cos": 0.4}]
    xs = calibrated.subject_features(cands, NEED)
    assert [x["other"] for x in xs] == [1.0, 1.0]
    assert all(x["best_other"] == 1.0 for x in xs)  # the race and the realizing are Melanie's
    cands[1]["text"] = "[d] Caroline: I'm starting to realize after the charity race that self-care matters."
    xs = calibrated.subject_features(cands, NEED)
    assert xs[1]["other"] == 0.0 and all(x["best_other"] == 0.0 for x in xs)


def test_plain_notes_get_no_subject_signal():
    cands = [{"text": "Integration tests need the Postgres container on port 5433.", "cos": 0.5},
             {"text": "Deploys: GitHub Actions builds the image on merge to main.", "cos": 0.3}]
    xs = calibrated.subject_features(cands, "psycopg fails to reach Postgres on 5432. Which port does the test DB use?")
    assert all(x == {"other": 0.0, "best_other": 0.0, "asks": 0.0} for x in xs)


def test_the_shipped_judge_prefers_the_memory_whose_subject_the_need_names():
    def c(text):
        return {"id": text, "score": 0.6, "rank": 0.9, "ql": 1.5, "unm": 0.0, "cos": 0.5, "text": text}
    own = c("[d] Caroline: I realized after the charity race that self-care matters.")
    # the same signals, second in search order: Caroline's own statement, or Melanie's
    own2 = c("[d] Caroline: I realized after the charity race that self-care matters a lot.")
    other = c("[d] Melanie: I realized after the charity race that self-care matters a lot.")
    for embed in (False, True):
        def p(cands):
            cands = [dict(x, cos=x["cos"] if embed else None) for x in cands]
            return calibrated.probabilities(cands, True, embed, need=NEED)[1], cands
        p_own, _ = p([own, own2])
        p_other, cands = p([own, other])
        assert p_other < p_own
        # and decide() reads the need the same way
        ps, _, _ = judge.decide(cands, embed, 0.5, 1, need=NEED)
        assert ps[1] == pytest.approx(p_other)


def test_an_offset_fit_leaves_rows_without_the_feature_as_the_offset_scored_them():
    import numpy as np

    rng = np.random.default_rng(0)
    n = 400
    chat = rng.random(n) < 0.5
    other = (chat & (rng.random(n) < 0.5)).astype(float)  # 0 on every plain row
    offset = rng.normal(0.0, 1.0, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(offset - 3.0 * other)))).astype(float)
    m = fj.fit_logistic(other[:, None].tolist(), y.tolist(), [1.0] * n, offset=offset.tolist())
    assert m["coef"][0] < -1.5 and m["intercept"] == pytest.approx(0.0, abs=1e-6)
    z = m["intercept"] + other * m["coef"][0]
    assert np.allclose(z[other == 0], 0.0, atol=1e-6)  # a plain row keeps its offset's score


def _row(group, dataset, answerable, texts, good):
    cands = [{"key": f"{group}{i}", "id": i, "score": 0.5, "rank": 0.8 - 0.01 * i, "ql": 1.0, "unm": 0.0,
              "cos": 0.5, "good": answerable and i == good, "rank_score": None, "text": t}
             for i, t in enumerate(texts)]
    return {"need": NEED, "answerable": answerable, "expected": [f"{group}{good}"] if answerable else [],
            "cands": cands, "reranked": [c["key"] for c in cands], "dataset": dataset, "group": group}


def test_the_two_stage_fit_learns_the_subject_from_chat_and_keeps_the_notes_base_fit():
    own = "[d] Caroline: I realized after the charity race that self-care matters."
    other = "[d] Melanie: I realized after the charity race that self-care matters."
    rows = []
    for g in range(6):
        # chat needs: the answer is the named speaker's own statement; adversarial ones only hold the other's
        rows.append(_row(f"c{g}", "locomo", True, [other, own], 1))
        rows.append(_row(f"a{g}", "locomo", False, [other, other], 0))
        rows.append(_row(f"n{g}", "coding", True, ["note one about the race", "note two"], g % 2))
    models = fj.fit_models(rows, lm_top=2)
    for m in models.values():
        assert m["coef"]["other"] < 0 and all(math.isfinite(v) for v in m["coef"].values())
    # the notes' probabilities are the base stage's alone (their subject features are all 0)
    base_only = {k: {"intercept": m["intercept"], "coef": {f: w for f, w in m["coef"].items()
                                                           if f not in calibrated.SUBJECT_FEATURES}}
                 for k, m in models.items()}
    note = [r for r in rows if r["dataset"] == "coding"][0]
    cands = fj.mask(note, 2, True, models)
    assert judge.decide(cands, True, 0.0, 1, models, note["need"])[0] == pytest.approx(
        judge.decide(cands, True, 0.0, 1, base_only, note["need"])[0])

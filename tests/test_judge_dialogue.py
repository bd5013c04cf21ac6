"""A turn of a conversation (recalld.judge.calibrated.dialogue: a threaded memory that opens with
its author's name) is scored by the dialogue model, with the thread features: does it answer
another's question, is it asked about. Its neighbours come from the store, through the caller's
scope; notes (no thread, or a label for an author) keep the notes' model."""

import math

import pytest

from recalld import memories
from recalld.core import settings
from recalld.core.scope import Scope, resolve
from recalld.judge import calibrated, judge

NEED = "How will John share the honey garlic chicken recipe?"
TOPIC = "[5:51 pm on 21 October, 2023] John: I make this yummy honey garlic chicken with roasted veg a lot."
ASK = "[5:51 pm on 21 October, 2023] Tim: Mmm, that sounds delicious, John! Can I get the recipe for it?"
REPLY = "[5:51 pm on 21 October, 2023] John: Sure thing! I can write it down for you and mail it to you."


def cand(text, prev=None, nxt=None, score=0.5, rank=0.5, cos=0.5, ql=None):
    return {"id": text, "text": text, "score": score, "rank": rank, "ql": ql, "unm": 0.0, "cos": cos,
            "prev_text": prev, "next_text": nxt}


def test_a_turn_opens_with_its_author_and_has_another_author_next_to_it_in_its_thread():
    assert calibrated.dialogue(cand(REPLY, prev=ASK))
    assert calibrated.dialogue(cand(TOPIC, nxt=ASK))
    assert not calibrated.dialogue(cand(REPLY))  # not in a thread: a note, whatever its text
    # a thread of one hand's notes is no conversation
    assert not calibrated.dialogue(cand(REPLY, prev=TOPIC))
    assert not calibrated.dialogue(cand("Decision: we keep invoices in PostgreSQL 16.", prev="Decision: x"))
    assert not calibrated.dialogue(cand("Invoices live in PostgreSQL 16.", prev="Schema is in db/."))


def test_the_thread_features_say_who_asked_what():
    xs = calibrated.features([cand(TOPIC, nxt=ASK), cand(ASK, prev=TOPIC, nxt=REPLY), cand(REPLY, prev=ASK)],
                             lm=False, embed=True, need=NEED)
    topic, ask, reply = xs
    assert (topic["replies"], topic["asked"]) == (0.0, 1.0)  # Tim asks about it next
    assert (ask["replies"], ask["asked"]) == (0.0, 0.0)  # the turns around a question are no questions
    assert reply["replies"] == 1.0 and reply["asked"] == 0.0
    # of the need's own words (share, honey, garlic, chicken, recipe; "John" is a name) Tim's
    # question holds one: recipe
    assert reply["replies_held"] == pytest.approx(1 / 5)
    # one's own question before one's turn is no reply
    same = calibrated.features([cand(REPLY, prev=REPLY.replace("Sure thing!", "Shall I?"))], False, True, NEED)[0]
    assert same["replies"] == 0.0


def _models():
    """A notes model that reads coverage, and a dialogue model that passes replies."""
    names = calibrated.feature_names(False, False)
    notes = {"intercept": -2.0, "coef": {f: (4.0 if f == "cov" else 0.0) for f in names}}
    turns = {"intercept": -3.0, "coef": {f: (6.0 if f == "replies" else 0.0)
                                         for f in calibrated.feature_names(False, False, True)},
             "calibration": [0.5, 1.0]}
    return {"cheap": notes, "dialogue/cheap": turns}


def test_a_turn_is_scored_by_the_dialogue_model_and_its_calibration_a_note_by_the_notes_model():
    m = _models()
    turn, note = cand(REPLY, prev=ASK, score=0.9), cand("Recipes are in recipes/.", score=0.9)
    p_turn, p_note = calibrated.probabilities([turn, note], False, False, m, NEED)
    sigmoid = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    assert p_turn == pytest.approx(sigmoid(0.5 + 1.0 * (-3.0 + 6.0)))  # its model, then its calibration
    assert p_note == pytest.approx(sigmoid(-2.0 + 4.0 * 0.9))
    # without a dialogue model (the judge before it) a turn is scored as a note
    assert calibrated.probabilities([turn], False, False, {"cheap": m["cheap"]}, NEED)[0] == pytest.approx(p_note)


def test_neighbours_come_from_the_store_through_the_callers_scope(conn, project):
    sc = resolve(str(project))
    ids = [memories.remember(conn, t, sc, thread="D15", check_similar=False).memory["id"] for t in (TOPIC, ASK, REPLY)]
    note = memories.remember(conn, "Recipes live in the shared drive.", sc, check_similar=False).memory["id"]
    nb = judge.neighbours(conn, ids + [note], sc)
    assert nb[ids[0]] == (None, ASK) and nb[ids[1]] == (TOPIC, REPLY) and nb[ids[2]] == (ASK, None)
    assert note not in nb  # not in a thread
    # another project's caller reads none of them; a superseded turn is no neighbour
    assert judge.neighbours(conn, ids, Scope(project="/elsewhere", agent="main")) == {}
    memories.remember(conn, ASK.replace("Can I", "Could I"), sc, supersedes=[ids[1]], check_similar=False)
    assert judge.neighbours(conn, [ids[0], ids[2]], sc) == {}


def test_judge_need_reads_a_threaded_turn_with_its_neighbours(conn, project):
    from test_judge_set import _Encoder, _Runtime

    sc = resolve(str(project))
    for t in (TOPIC, ASK, REPLY):
        memories.remember(conn, t, sc, thread="D15", check_similar=False)
    res = judge.judge_need(conn, NEED, sc, settings.load(), runtime=_Runtime(), encoder=_Encoder())
    read = [v for v in res.candidates if v.judge_score is not None]
    assert read and all(v.detail.get("turn") == 1 and set(calibrated.THREAD_FEATURES) <= set(v.detail) for v in read)


def _row(group, answerable, turns, good, dataset="locomo"):
    """A need whose candidates are `turns`, (text, the turn before, the turn after), in search order."""
    cands = [{"key": f"{group}{i}", "id": i, "score": 0.6 - 0.05 * i, "rank": 0.8 - 0.05 * i, "ql": 1.0, "unm": 0.0,
              "cos": 0.5, "good": answerable and i == good, "rank_score": None, "text": t, "prev_text": p,
              "next_text": n} for i, (t, p, n) in enumerate(turns)]
    return {"need": NEED, "answerable": answerable, "expected": [f"{group}{good}"] if answerable else [],
            "cands": cands, "reranked": [c["key"] for c in cands], "dataset": dataset, "group": group}


def test_the_fit_learns_replies_from_conversations_and_calibrates_the_most_probable_turn():
    import random

    from recalld.bench import fit_judge as fj

    rng = random.Random(1)
    turns = {"topic": (TOPIC, None, ASK), "ask": (ASK, TOPIC, REPLY), "reply": (REPLY, ASK, None)}
    rows = []
    for g in range(60):
        order = rng.sample(list(turns), 3)  # search order carries nothing: only the thread does
        answer = "reply" if rng.random() < 0.8 else "topic"
        rows.append(_row(f"c{g}", rng.random() < 0.75, [turns[k] for k in order], order.index(answer)))
    for g in range(6):  # the notes' model is fitted on the coding set
        rows.append(_row(f"n{g}", True, [("note one", None, None), ("note two", None, None)], g % 2, "coding"))
    models = fj.fit_models(rows, lm_top=3)
    for lm in (False, True):
        for embed in (False, True):
            m = models[calibrated.kind(lm, embed, True)]
            assert tuple(m["coef"]) == calibrated.feature_names(lm, embed, True)
            assert m["coef"]["replies"] > 0 and len(m["calibration"]) == 2
    # calibrated: over the needs, the most probable turn's probability averages its accuracy
    tops, right = [], []
    for r in rows[:60]:
        cands = fj.mask(r, 3, True, models)
        ps = calibrated.probabilities(cands, True, True, models, NEED)
        i = max(range(len(ps)), key=lambda i: ps[i])
        assert cands[i]["text"] == REPLY
        tops.append(ps[i])
        right.append(cands[i]["good"])
    assert sum(tops) / len(tops) == pytest.approx(sum(right) / len(right), abs=0.02)
    # rows without a conversation's turns get no dialogue model (the notes' model scores everything)
    plain = [dict(r, cands=[dict(c, prev_text=None, next_text=None) for c in r["cands"]]) for r in rows]
    assert not any(k.startswith("dialogue/") for k in fj.fit_models(plain, lm_top=3))


def test_fitting_rows_without_neighbours_says_no_dialogue_model_was_fitted(tmp_path, capsys):
    import json

    from recalld.bench import fit_judge as fj

    rows = [_row(f"c{g}", True, [(TOPIC, None, None), (REPLY, None, None)], g % 2) for g in range(4)]
    rows += [_row(f"n{g}", True, [("note one", None, None), ("note two", None, None)], g % 2, "coding")
             for g in range(4)]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    assert fj.main(["fit", str(path)]) == 0
    out = capsys.readouterr()
    assert "no dialogue model fitted" in out.err
    assert not any(k.startswith("dialogue/") for k in json.loads(out.out)["models"])

"""Fitting the calibrated judge (recalld.judge.calibrated) on development data.

Two steps, so the slow one runs once:

    python3 -m recalld.bench.fit_judge collect --set coding --out ROWS.json
    python3 -m recalld.bench.fit_judge collect --set locomo --n 300 --out ROWS2.json
    python3 -m recalld.bench.fit_judge fit ROWS.json ROWS2.json [--write]

`collect` runs the real signals for every need: the scoped search's top judge.max_candidates,
the embedder's cosines, and the language model's query likelihood and re-ranking gain on every
candidate (recalld.judge.judge's own functions), and writes one row per need. The two sets:

- coding: recalld/bench/data/coding_needs.json, memories and mid-task needs of three projects,
  a third of them answered by nothing in the store (each project is a group);
- locomo: a sample of LoCoMo's development split (the shared data folder's data/locomo, read where it lies,
  never copied; rows files belong outside the repository), answerable questions (categories
  1-4) against adversarial ones (category 5, which nothing in the conversation answers); each
  conversation is a group.

`fit` fits one logistic regression per set of available signals (calibrated.kind), in two
stages: the base signals with each set weighted by WEIGHTS, then the subject group
(calibrated.SUBJECT_FEATURES) by SUBJECT_WEIGHTS with the base score held fixed. It validates
the fit leave-one-group-out (each group's needs are scored by a model fitted without that
group), picks the threshold on those held-out scores, and prints the constants for
recalld/judge/calibrated.py (`--write` puts them there). numpy is used here, on the slow path;
the judge itself reads plain numbers. The subject features are computed from the rows' need
and candidate texts at fit time, so rows collected before the group existed serve as they are.
"""

import json
import random
import sys
import tempfile
import time
from pathlib import Path

from recalld.bench.common import Unavailable, wilson
from recalld.judge import calibrated, judge, rerank

DATA = Path(__file__).resolve().parent / "data" / "coding_needs.json"
K = 5  # candidates per need: settings judge.max_candidates
L2 = 1.0  # ridge on the standardized coefficients; the sets are small
# How much each set weighs in the fit, in total (each of its needs alike), in two stages.
# The base signals (calibrated.base_feature_names): LoCoMo's weight is 0, because any weight
# measured cost the coding set held-out expected memories at the same silence
# (docs/evaluation.md, "What each stage of the fit measured"). The subject group (calibrated.SUBJECT_FEATURES) is then fitted on
# both sets with the base model's score held fixed: it is 0 for a plain note that asks nothing,
# so it moves chat-like memories (LoCoMo's) and leaves the coding set's notes as the base fit
# scores them.
WEIGHTS = {"coding": 1.0, "locomo": 0.0}
SUBJECT_WEIGHTS = {"coding": 1.0, "locomo": 1.0}
# The dialogue models (calibrated.dialogue: a turn of a conversation) are fitted on the turns
# alone, both stages, the thread features in the second: LoCoMo's, the coding set having none.
# Without a model of their own, a conversation's turns were scored by the notes' model, whose
# base LoCoMo could not weigh in, and its probability meant less there: of its passes at 0.6,
# half were right (docs/judge.md, "Conversations").
DIALOGUE_WEIGHTS = {"coding": 1.0, "locomo": 1.0}
THRESHOLDS = [round(0.05 * i, 2) for i in range(1, 20)]
# The judge before this one, for comparison: query likelihood at or above 1.3, first in
# recalld.judge.rerank's order, every candidate read.
OLD_THRESHOLD = 1.3


def coding_data(path=None) -> dict:
    return json.loads(Path(path or DATA).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- collecting


def _row_for(hits, need, ranked, cos, expected: set, answerable: bool, names: dict, threads=None) -> dict:
    sig = judge.signals(hits, cos, ranked, threads)
    rs = {r.hit.id: r.rank_score for r in ranked}
    for s, h in zip(sig, hits):
        s["key"] = names[h.id]
        s["good"] = answerable and names[h.id] in expected
        s["rank_score"] = rs.get(h.id)
        s["text"] = h.text
    return {"need": need, "answerable": answerable, "expected": sorted(expected), "cands": sig,
            "reranked": [names[r.hit.id] for r in ranked]}


def _signals(rt, enc, need: str, hits: list):
    cos = judge.cosines(enc, " ".join(need.split()), hits) if enc and hits else None
    ranked = rerank.rerank(rt, need, hits, deadline=None) if hits else []
    return ranked, cos


def collect_coding(rt, enc, path=None, k: int = K, verbose: bool = False) -> list:
    """One row per need of the coding set, its store built fresh through the real write path."""
    from recalld import memories
    from recalld.core import db
    from recalld.core.scope import Scope
    from recalld.core.search import search

    data = coding_data(path)
    rows = []
    with tempfile.TemporaryDirectory(prefix="recalld-fit-") as tmp:
        conn = db.connect(Path(tmp) / "recalld.db")
        for p in data["projects"]:
            sc = Scope(project=p["project"], agent="main")
            names = {}
            for m in p["memories"]:
                names[memories.remember(conn, m["text"], sc, kind=m["kind"], check_similar=False).memory["id"]] = m["key"]
            for i, n in enumerate(p["needs"]):
                hits = search(conn, n["need"], sc, limit=k, floor=0.0)
                ranked, cos = _signals(rt, enc, n["need"], hits)
                threads = judge.neighbours(conn, [h.id for h in hits], sc)
                row = _row_for(hits, n["need"], ranked, cos, set(n["expected"]), bool(n["expected"]), names, threads)
                row.update(dataset="coding", group=p["name"])
                rows.append(row)
                if verbose:
                    print(f"  coding {p['name']} {i + 1}/{len(p['needs'])}", file=sys.stderr, flush=True)
        conn.close()
    return rows


def sample_locomo(asked: list, n: "int | None", seed: int, adversarial_share: float = 1 / 3) -> list:
    """A fixed random sample of n questions, a third adversarial (more than the split's quarter:
    the adversarial questions are what the judge must learn to stay silent on)."""
    if n is None or n >= len(asked):
        return list(asked)
    rng = random.Random(seed)
    adv = [a for a in asked if a.category == 5]
    ans = [a for a in asked if a.category != 5]
    k_adv = min(len(adv), round(n * adversarial_share))
    picked = rng.sample(ans, n - k_adv) + rng.sample(adv, k_adv)
    rng.shuffle(picked)
    return picked


def collect_locomo(rt, enc, n: int = 300, seed: int = 0, data=None, k: int = K, verbose: bool = False,
                   skip: int = 0, limit: "int | None" = None) -> list:
    from recalld.bench import locomo
    from recalld.core.search import search

    asked, info = locomo.ask_all(data, keep_store=True)
    conn, maps = info["conn"], info["maps"]
    scopes = {c.sample_id: locomo.scope_for(c) for c in info["convs"]}
    qs = sample_locomo(asked, n, seed)[skip:None if limit is None else skip + limit]
    rows = []
    try:
        for i, a in enumerate(qs):
            hits = search(conn, a.question, scopes[a.sample_id], limit=k, floor=0.0)
            ranked, cos = _signals(rt, enc, a.question, hits)
            answerable = a.category != 5
            threads = judge.neighbours(conn, [h.id for h in hits], scopes[a.sample_id])
            row = _row_for(hits, a.question, ranked, cos, set(a.evidence), answerable, maps[a.sample_id], threads)
            row.update(dataset="locomo", group=a.sample_id, category=a.category)
            rows.append(row)
            if verbose and (i + 1) % 10 == 0:
                print(f"  locomo {i + 1}/{len(qs)}", file=sys.stderr, flush=True)
    finally:
        conn.close()
        info["tmp"].cleanup()
    return rows


def load_models(cfg=None):
    """(the language model runtime, the encoder or None, why no encoder)."""
    from recalld.core import settings
    from recalld.model import runtime as llm
    from recalld.model.resolve import resolve

    cfg = cfg or settings.load()
    choice = resolve("judge", cfg)
    if not choice.available:
        raise Unavailable(f"judge unavailable: {choice.reason}")
    rt = llm.Runtime(choice.path)
    enc, why = judge.load_embedder(cfg)
    return rt, enc, why


# --------------------------------------------------------------------------- deciding


def mask(row: dict, lm_top: int, embed: bool, models: "dict | None" = None) -> list:
    """The row's signal dicts as judge_need would have them: the language model's fields only
    on the candidates calibrated.lm_picks chooses, cosines only with the embedder."""
    cands = [dict(c) for c in row["cands"]]
    if not embed:
        for c in cands:
            c["cos"] = None
    picks = set(calibrated.lm_picks(cands, embed, lm_top, models, row.get("need", "")))
    for i, c in enumerate(cands):
        if i not in picks:
            c["ql"] = c["unm"] = None
    return cands


def new_judge(embed: bool, threshold: float, lm_top: int = calibrated.LM_TOP, models=None, max_pass: int = 1):
    """passes(row) -> candidate keys, by judge.decide (the rule judge_need applies)."""
    def passes(row):
        cands = mask(row, lm_top, embed, models)
        _, _, passed = judge.decide(cands, embed, threshold, max_pass, models, row.get("need", ""))
        return [cands[i]["key"] for i in passed]
    return passes


def old_judge(threshold: float = OLD_THRESHOLD):
    """The judge before: query likelihood >= threshold, the first in re-ranked order."""
    def passes(row):
        by = {c["key"]: c for c in row["cands"]}
        for key in row["reranked"]:
            ql = by[key]["ql"]
            if ql is not None and ql >= threshold:
                return [key]
        return []
    return passes


def floor_top1(floor: float):
    """The pre-step floor alone, one pass: the search's first if its coverage clears the floor."""
    return lambda row: [c["key"] for c in row["cands"][:1] if c["score"] >= floor]


def floor_all(floor: float, k: int = K):
    """What the pre-step injects: every one of the first k that clears the floor."""
    return lambda row: [c["key"] for c in row["cands"][:k] if c["score"] >= floor]


def outcomes(rows: list, passes) -> dict:
    """The judge's target figures, with 95% Wilson intervals: expected memory passed
    (answerable), silent (unanswerable), precision over answerable needs, and wrong passes per
    need (anything passed for an unanswerable need, or a memory that is not the answer)."""
    ans = [r for r in rows if r["answerable"]]
    una = [r for r in rows if not r["answerable"]]
    got = n_inj = n_good = wrong = silent = 0
    for r in ans:
        inj = passes(r)
        ev = set(r["expected"])
        got += any(k in ev for k in inj)
        n_inj += len(inj)
        n_good += sum(k in ev for k in inj)
        wrong += sum(k not in ev for k in inj)
    for r in una:
        inj = passes(r)
        silent += not inj
        wrong += len(inj)
    return {"needs": len(rows), "answerable": len(ans), "unanswerable": len(una),
            "expected_passed": _share(got, len(ans)), "silent_unanswerable": _share(silent, len(una)),
            "precision": _share(n_good, n_inj), "wrong_passes": wrong,
            "wrong_per_need": round(wrong / len(rows), 3) if rows else None}


def _share(k: int, n: int) -> dict:
    return {"k": k, "n": n, "share": round(k / n, 3) if n else None, "ci95": wilson(k, n)}


# --------------------------------------------------------------------------- fitting


def _described(r: dict, lm: bool, embed: bool, lm_top: int, models=None) -> list:
    """The row's candidates as judge_need describes them to the model of these signals."""
    if lm:
        return mask(r, lm_top, embed, models)
    return [dict(c, cos=c["cos"] if embed else None) for c in r["cands"]]


def design(rows: list, lm: bool, embed: bool, lm_top: int, models=None, weights: "dict | None" = None,
           dialogue: bool = False) -> tuple:
    """(X, y, weight, need index) over the candidates judge_need would describe, the columns
    calibrated.feature_names. Each set weighs `weights` in total, each of its needs the same.
    `dialogue`: only the turns of conversations (calibrated.dialogue), with the thread features."""
    names = calibrated.feature_names(lm, embed, dialogue)
    per_set = {}
    for r in rows:
        per_set[r["dataset"]] = per_set.get(r["dataset"], 0) + 1
    X, y, w, idx = [], [], [], []
    for j, r in enumerate(rows):
        cands = _described(r, lm, embed, lm_top, models)
        for c, x in zip(cands, calibrated.features(cands, lm, embed, r.get("need", ""))):
            if x is None or (dialogue and not calibrated.dialogue(c)):
                continue
            X.append([x[f] for f in names])
            y.append(1.0 if c["good"] else 0.0)
            w.append((weights or WEIGHTS).get(r["dataset"], 1.0) / per_set[r["dataset"]])
            idx.append(j)
    return X, y, w, idx


def fit_logistic(X, y, w, l2: float = L2, offset=None) -> dict:
    """Weighted ridge logistic regression by Newton's method on standardized features;
    returns the coefficients on the raw features. With `offset` (a fixed logit per row, the
    stage before's score) there is no intercept of its own, and a feature that is 0 in a row
    leaves that row's score as the offset gave it (the features are scaled, not centred)."""
    import numpy as np

    X, y, w = np.asarray(X, float), np.asarray(y, float), np.asarray(w, float)
    w = w * (len(w) / w.sum())
    mu, sd = X.mean(0), X.std(0)
    sd[sd < 1e-9] = 1.0
    if offset is not None:
        mu = np.zeros_like(mu)
    z0 = np.zeros(len(X)) if offset is None else np.asarray(offset, float)
    Z = np.hstack([np.ones((len(X), 1)), (X - mu) / sd])
    beta = np.zeros(Z.shape[1])
    pen = np.full(Z.shape[1], l2)
    pen[0] = 0.0 if offset is None else 1e9  # with an offset, the intercept stays 0
    def loss(b):
        z = z0 + Z @ b
        return float((w * (np.logaddexp(0.0, z) - y * z)).sum() + 0.5 * (pen * b * b).sum())

    # Newton's method with step halving: a full step can overshoot and oscillate (it did, on a
    # second stage whose offset already separates most rows: a coefficient of 76 on `asks`).
    f = loss(beta)
    for _ in range(100):
        p = 1 / (1 + np.exp(-np.clip(z0 + Z @ beta, -30, 30)))
        g = Z.T @ (w * (p - y)) + pen * beta
        H = (Z * (w * p * (1 - p))[:, None]).T @ Z + np.diag(pen)
        step = np.linalg.solve(H, g)
        t = 1.0
        while True:
            nxt = beta - t * step
            f_nxt = loss(nxt)
            if f_nxt <= f or t < 1e-6:
                break
            t /= 2
        beta, f = nxt, f_nxt
        if np.abs(t * step).max() < 1e-8:
            break
    coef = beta[1:] / sd
    return {"intercept": float(beta[0] - (coef * mu).sum()), "coef": coef.tolist()}


def fit_models(rows: list, lm_top: int = calibrated.LM_TOP, l2: float = L2, weights: "dict | None" = None,
               subject_weights: "dict | None" = None, subject: bool = True, without: tuple = (),
               dialogue: bool = True) -> dict:
    """The models on `rows`: four for notes (calibrated.kind), then, when `rows` hold turns of
    conversations and `dialogue`, four for them. The cheap ones first: they choose what the
    others read. Each in two stages: the base features on `weights` (WEIGHTS; for the turns
    DIALOGUE_WEIGHTS), then the subject group (and for the turns the thread features) on
    `subject_weights` (SUBJECT_WEIGHTS; DIALOGUE_WEIGHTS) with the base score as a fixed offset
    (`subject=False`: its coefficients stay 0, the judge before the group). The features in
    `without` are left out of the fit, their coefficients 0 (calibrated.SET_FEATURES: the judge
    before them). A dialogue model's score is then calibrated (_calibration)."""
    if not subject:
        without = tuple(without) + calibrated.SUBJECT_FEATURES
    models: dict = {}
    for embed in (False, True):
        for lm in (False, True):
            models[calibrated.kind(lm, embed)] = _fit_kind(rows, lm, embed, lm_top, models, l2, weights or WEIGHTS,
                                                           subject_weights or SUBJECT_WEIGHTS, without, False)
    if not dialogue:
        return models
    for embed in (False, True):
        for lm in (False, True):
            m = _fit_kind(rows, lm, embed, lm_top, models, l2, DIALOGUE_WEIGHTS, DIALOGUE_WEIGHTS, without, True)
            if m is None:
                return models  # no turns of a conversation among the rows
            key = calibrated.kind(lm, embed, True)
            models[key] = m
            m["calibration"] = _calibration(rows, lm, embed, lm_top, models)
    return models


def _fit_kind(rows, lm, embed, lm_top, models, l2, weights, subject_weights, without, dialogue) -> "dict | None":
    import numpy as np

    names = calibrated.feature_names(lm, embed, dialogue)
    second = calibrated.SUBJECT_FEATURES + calibrated.THREAD_FEATURES
    base = [f for f in calibrated.base_feature_names(lm, embed, dialogue) if f not in without]
    cols = [names.index(f) for f in base]
    extra = [i for i, f in enumerate(names) if f in second and f not in without]
    X, y, w, idx = design(rows, lm, embed, lm_top, models, weights, dialogue)
    if not X or (dialogue and sum(y) == 0):
        return None
    X = np.asarray(X, float)
    m = fit_logistic(X[:, cols], y, w, l2)
    offset = m["intercept"] + X[:, cols] @ np.asarray(m["coef"])
    coef = {f: 0.0 for f in names} | dict(zip(base, m["coef"]))
    if extra:
        n_set = {}
        for r in rows:
            n_set[r["dataset"]] = n_set.get(r["dataset"], 0) + 1
        w2 = [subject_weights.get(rows[j]["dataset"], 1.0) / n_set[rows[j]["dataset"]] for j in idx]
        s = fit_logistic(X[:, extra], y, w2, l2, offset=offset)
        coef |= dict(zip((names[i] for i in extra), s["coef"]))
    return {"intercept": round(m["intercept"], 4), "coef": {f: round(coef[f], 4) for f in names}}


def _calibration(rows: list, lm: bool, embed: bool, lm_top: int, models: dict) -> list:
    """[a, b] such that sigmoid(a + b * logit(p)), for the most probable turn of each need whose
    candidates hold turns, is the probability that it is the answer: a turn's score is fitted
    over all the candidates, and the judge passes only the most probable one, which is right
    more often than its own score says (docs/judge.md, "Conversations")."""
    import math

    zs, ys = [], []
    for r in rows:
        cands = _described(r, lm, embed, lm_top, models)
        ps = calibrated.probabilities(cands, lm, embed, models, r.get("need", ""))
        turns = [i for i, (c, p) in enumerate(zip(cands, ps)) if p is not None and calibrated.dialogue(c)]
        if not turns:
            continue
        i = max(turns, key=lambda i: (ps[i], -i))
        p = min(max(ps[i], 1e-9), 1 - 1e-9)
        zs.append(math.log(p / (1 - p)))
        ys.append(1.0 if cands[i]["good"] else 0.0)
    if not zs or not any(ys):
        return [0.0, 1.0]
    m = fit_logistic([[z] for z in zs], ys, [1.0] * len(zs), l2=0.01)
    return [round(m["intercept"], 4), round(m["coef"][0], 4)]


def logo(rows: list, lm_top: int = calibrated.LM_TOP, l2: float = L2, weights: "dict | None" = None,
         subject_weights: "dict | None" = None, subject: bool = True, without: tuple = (),
         dialogue: bool = True) -> dict:
    """{group: models fitted without that group's rows}."""
    groups = sorted({r["group"] for r in rows})
    return {g: fit_models([r for r in rows if r["group"] != g], lm_top, l2, weights, subject_weights, subject, without,
                          dialogue)
            for g in groups}


def held_out(per_group: dict, embed: bool, threshold: float, lm_top: int = calibrated.LM_TOP):
    """passes(row) judged by the models fitted without the row's group."""
    fns = {g: new_judge(embed, threshold, lm_top, m) for g, m in per_group.items()}
    return lambda row: fns[row["group"]](row)


def by_set(rows: list, passes) -> dict:
    return {ds: outcomes([r for r in rows if r["dataset"] == ds], passes) for ds in sorted({r["dataset"] for r in rows})}


def choose_threshold(rows: list, per_group: dict, embed: bool, lm_top: int = calibrated.LM_TOP) -> tuple:
    """The threshold on the held-out scores with the best mean, over the sets the fit weighs,
    of the F1 of 'silent on unanswerable' and 'expected memory passed', less the wrong passes
    per need; ties: the higher threshold. Returns (threshold, {threshold: figures per set})."""
    curve = {}
    best = None
    for t in THRESHOLDS:
        o = by_set(rows, held_out(per_group, embed, t, lm_top))
        curve[t] = o
        fitted = [x for ds, x in o.items() if WEIGHTS.get(ds, 1.0) > 0] or list(o.values())
        score = sum(_objective(x) for x in fitted) / len(fitted)
        if best is None or score >= best[0]:
            best = (score, t)
    return best[1], curve


def _objective(o: dict) -> float:
    a, s = o["expected_passed"]["share"] or 0.0, o["silent_unanswerable"]["share"] or 0.0
    f = 2 * a * s / (a + s) if a + s else 0.0
    return f - (o["wrong_per_need"] or 0.0)


def read_rows(paths) -> list:
    rows = []
    for p in paths:
        rows += json.loads(Path(p).read_text(encoding="utf-8"))
    return rows


def write_models(models: dict) -> None:
    """Replace calibrated.py's MODELS constant with the fitted one (the threshold is settings
    judge.threshold's default, in recalld/core/settings.py)."""
    path = Path(calibrated.__file__)
    src = path.read_text(encoding="utf-8")
    start = src.index("MODELS: dict = ")
    end = src.index("\n\n", start)
    path.write_text(src[:start] + "MODELS: dict = " + json.dumps(models, indent=4) + src[end:], encoding="utf-8")


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m recalld.bench.fit_judge", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--set", choices=("coding", "locomo"), required=True)
    c.add_argument("--n", type=int, default=300)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--skip", type=int, default=0, help="start this far into the LoCoMo sample (to split a run)")
    c.add_argument("--limit", type=int, help="at most this many of the LoCoMo sample")
    c.add_argument("--data")
    c.add_argument("--out", required=True)
    f = sub.add_parser("fit")
    f.add_argument("rows", nargs="+")
    f.add_argument("--lm-top", type=int, default=calibrated.LM_TOP)
    f.add_argument("--l2", type=float, default=L2)
    f.add_argument("--write", action="store_true", help="write the constants into recalld/judge/calibrated.py")
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        rt, enc, why = load_models()
        if enc is None:
            print(f"no embedder: {why}; cosines are not collected", file=sys.stderr)
        t0 = time.perf_counter()
        rows = (collect_coding(rt, enc, a.data, verbose=True) if a.set == "coding"
                else collect_locomo(rt, enc, a.n, a.seed, a.data, verbose=True, skip=a.skip, limit=a.limit))
        Path(a.out).write_text(json.dumps(rows), encoding="utf-8")
        print(f"{len(rows)} rows in {time.perf_counter() - t0:.0f} s -> {a.out}", file=sys.stderr)
        rt.close()
        return 0
    rows = read_rows(a.rows)
    per_group = logo(rows, a.lm_top, a.l2)
    out = {}
    for embed in (True, False):
        t, curve = choose_threshold(rows, per_group, embed, a.lm_top)
        out["embed" if embed else "no_embed"] = {"threshold": t, "held_out": curve[t]}
    models = fit_models(rows, a.lm_top, a.l2)
    out["models"] = models
    if any(r["dataset"] == "locomo" for r in rows) and not any(k.startswith("dialogue/") for k in models):
        print("no dialogue model fitted: no candidate is a turn of a conversation (rows collected before "
              "`collect` stored the thread neighbours? collect them again)", file=sys.stderr)
    print(json.dumps(out, indent=1))
    if a.write:
        write_models(models)
    return 0


if __name__ == "__main__":
    sys.exit(main())

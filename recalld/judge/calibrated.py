"""The calibrated judge score: the probability that a candidate answers the need.

No single signal says "nothing here answers it". The search's coverage is lexical and blind to
paraphrase; the small model's query likelihood (recalld.judge.scoring) orders candidates well
but its scale drifts from need to need; an embedding similarity sees paraphrase but not
negation or a swapped name. Combined, and read relative to the need's other candidates, they
separate "this answers it" from "this shares its words" a little better than any of them
alone (docs/judge.md has the measurements, and where none of them works).

So each candidate gets a feature vector (`features`) and a logistic model turns it into
P(answers the need):

    p = 1 / (1 + exp(-(intercept + sum of coef[f] * x[f])))

fitted offline on development data (recalld.bench.fit_judge: the coding-needs set in
recalld/bench/data/coding_needs.json; LoCoMo dev is judged and reported too, and weighs 0 in
the fit, docs/judge.md says why), validated leave-one-group-out (a group is a project or a
conversation), and shipped here as constants. One model per set of available signals: with the language model or without it
(the cheap model only picks which candidates the language model reads), with the embedder or
without it. A probability means the same for every need, so one threshold (settings
judge.threshold) decides.

Standard library only, and no model is run here: recalld.judge.judge computes the signals.
"""

import math

# Per candidate, in the order search() returned them. Every feature is either comparable
# across needs by construction (coverage 0..1, a cosine, a per-token likelihood gain) or
# relative to the need's best candidate, so a need whose every score is high or low does not
# move the probability by itself.
SEARCH_FEATURES = ("cov", "cov_gap", "rank_gap", "first")
LM_FEATURES = ("ql", "ql_gap")
EMBED_FEATURES = ("cos", "cos_gap")
AGREE_FEATURES = ("agree",)

# Fitted by `python3 -m recalld.bench.fit_judge` (the run, its data and its cross-validated
# figures are in docs/judge.md); never edited by hand. Keys: which signals were available.
MODELS: dict = {
    "cheap": {
        "intercept": -3.877,
        "coef": {
            "cov": 10.5977,
            "cov_gap": 8.4649,
            "rank_gap": 10.8267,
            "first": 0.3952,
            "agree": 0.3952
        }
    },
    "lm": {
        "intercept": -2.7969,
        "coef": {
            "cov": 9.2136,
            "cov_gap": 9.9806,
            "rank_gap": 10.3456,
            "first": 0.03,
            "ql": 0.3337,
            "ql_gap": 2.4227,
            "agree": -0.0827
        }
    },
    "cheap+embed": {
        "intercept": -5.2734,
        "coef": {
            "cov": 5.006,
            "cov_gap": 7.8304,
            "rank_gap": 9.5802,
            "first": 0.7153,
            "cos": 7.1573,
            "cos_gap": 4.6429,
            "agree": -0.2844
        }
    },
    "lm+embed": {
        "intercept": -4.1846,
        "coef": {
            "cov": 5.0467,
            "cov_gap": 12.9639,
            "rank_gap": 10.5502,
            "first": 0.8113,
            "ql": 0.0788,
            "ql_gap": 1.7168,
            "cos": 7.3003,
            "cos_gap": 5.5399,
            "agree": -1.6963
        }
    }
}

# The language model reads only this many candidates, the cheap model's best (each costs one
# decode of the memory and the need); docs/judge.md, "Latency".
LM_TOP = 2


def kind(lm: bool, embed: bool) -> str:
    """The model's key for a set of available signals."""
    return ("lm" if lm else "cheap") + ("+embed" if embed else "")


def feature_names(lm: bool, embed: bool) -> tuple:
    return SEARCH_FEATURES + (LM_FEATURES if lm else ()) + (EMBED_FEATURES if embed else ()) + AGREE_FEATURES


def features(cands: list, lm: bool, embed: bool) -> list:
    """One {feature: value} per candidate. `cands`: dicts in search order with `score` (the
    search's coverage), `rank` (its ordering key), and, when available, `ql` (the mean token
    gain) and `cos` (the embedding cosine). With `lm`, only candidates whose `ql` is not None
    are described (the others were not read by the model and cannot pass)."""
    if not cands:
        return []
    top_score = max(c["score"] for c in cands)
    top_rank = max(c["rank"] for c in cands)
    scored = [c for c in cands if c.get("ql") is not None] if lm else list(cands)
    top_ql = max((c["ql"] for c in scored), default=0.0) if lm else 0.0
    top_cos = max(c["cos"] for c in cands) if embed else 0.0
    best_ql = max(scored, key=lambda c: c["ql"]) if lm and scored else None
    best_cos = max(cands, key=lambda c: c["cos"]) if embed else None
    out = []
    for i, c in enumerate(cands):
        if lm and c.get("ql") is None:
            out.append(None)
            continue
        x = {"cov": c["score"], "cov_gap": c["score"] - top_score, "rank_gap": c["rank"] - top_rank,
             "first": 1.0 if i == 0 else 0.0}
        votes = [i == 0]
        if lm:
            x.update(ql=c["ql"], ql_gap=c["ql"] - top_ql)
            votes.append(c is best_ql)
        if embed:
            x.update(cos=c["cos"], cos_gap=c["cos"] - top_cos)
            votes.append(c is best_cos)
        # Agreement: the share of the signals that put this candidate first.
        x["agree"] = sum(votes) / len(votes)
        out.append(x)
    return out


def probability(x: dict, model: dict) -> float:
    z = model["intercept"] + sum(w * x[f] for f, w in model["coef"].items())
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def probabilities(cands: list, lm: bool, embed: bool, models: "dict | None" = None) -> list:
    """P(answers the need) per candidate (None for one the language model did not read)."""
    model = (MODELS if models is None else models)[kind(lm, embed)]
    return [None if x is None else probability(x, model) for x in features(cands, lm, embed)]


def lm_picks(cands: list, embed: bool, top: int = LM_TOP, models: "dict | None" = None) -> list:
    """Indexes (into `cands`, search order) of the candidates the language model should read:
    the `top` best by the cheap model (search signals, and the embedding when there is one)."""
    if top >= len(cands):
        return list(range(len(cands)))
    ps = probabilities(cands, False, embed, models)
    order = sorted(range(len(cands)), key=lambda i: (-ps[i], i))
    return sorted(order[:max(0, top)])

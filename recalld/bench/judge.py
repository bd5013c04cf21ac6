"""Judge quality on the LoCoMo development split, next to the no-judge baseline in the same run.

Each conversation's turns are memories (one per dia_id, each conversation its own project,
through recalld.bench.locomo). Every sampled question goes through the real judge pipeline
(recalld.judge.judge.judge_need: search -> top judge.max_candidates -> judge score and
re-ranking), with the real embedded model. What passes at each threshold is decided by the
library's own rule, recalld.judge.judge.select, applied to the re-ranked order judge_need chose
from (JudgeResult.ranked). Reported, at the default threshold and across thresholds:

- answerable (categories 1-4): share where a correct evidence turn passes
- adversarial (category 5, no answer in the conversation): share where nothing passes
- precision: share of passed memories that are evidence (answerable questions), and the same
  counting every adversarial injection as wrong (all questions)

next to the baselines that always inject the top results (top-1 and top-k, k =
max_candidates) and the pre-step's coverage floor, computed on the same candidates. The earlier
rules are kept for comparison as the same select() over another order: search order (before
re-ranking), and the judge score itself, highest first (before threads). Also: judge time per
candidate, model load time.

    recalld bench judge [--quick] [--data PATH] [--json]
    python3 -m recalld.bench.judge [--quick] [--n N] [--all] [--seed S] [--compare] [--rows FILE] [--data PATH] [--json]

The data is read where it lies (CC BY-NC 4.0), never copied into the repository.
"""

import json
import math
import random
import statistics
import sys
import time
from collections import namedtuple
from pathlib import Path

from recalld.bench import locomo
from recalld.bench.common import Unavailable, pct
from recalld.core import settings
from recalld.judge import judge, scoring
from recalld.model import runtime as llm
from recalld.model.resolve import resolve

QUICK_N = 12  # questions in --quick: a couple of minutes on a busy 2-core machine
DEFAULT_N = 150  # the default sample; --all asks every question (hours on 2 cores)
THRESHOLDS = [round(0.1 * i, 1) for i in range(31)]  # 0.0 .. 3.0


def _features(rt, need: str, res, id2dia: dict) -> list:
    """The alternative scores for the candidates judge_need just scored: the model's yes/no
    answer after the same frame (log P(yes) - log P(no)) and the search's coverage."""
    feats = []
    need_c = scoring.need_continuation(need)
    for v in res.candidates:
        if v.judge_score is None:
            continue
        ctx = scoring.WITH_MEMORY.format(memory=scoring.clip_memory(v.text)) + need_c + scoring.YES_NO
        (yes, _), (no, _) = rt.logliks(ctx, [" yes", " no"], timeout_s=600)
        feats.append({"dia": id2dia[v.memory_id], "judge": v.judge_score, "search": v.search_score, "yes_no": yes - no})
    return feats


def sample(asked: list, n: "int | None", seed: int = 0) -> list:
    """A fixed random sample keeping the split's share of adversarial questions."""
    if n is None or n >= len(asked):
        return list(asked)
    rng = random.Random(seed)
    adv = [a for a in asked if a.category == 5]
    ans = [a for a in asked if a.category != 5]
    k_adv = round(n * len(adv) / len(asked))
    picked = rng.sample(ans, n - k_adv) + rng.sample(adv, k_adv)
    rng.shuffle(picked)
    return picked


# What judge.select reads of a candidate (its judge_score), with what the figures need.
Cand = namedtuple("Cand", "dia search judge_score rank_score")


def search_order(row: dict) -> list:
    return [Cand(*c) for c in row["cands"]]


def reranked_order(row: dict) -> list:
    """The candidates in the order judge_need chose from (JudgeResult.ranked)."""
    by = {c.dia: c for c in search_order(row)}
    return [by[d] for d in row["reranked"]]


def by_score(cands: list) -> list:
    """Highest judge_score first, unscored last (stable: ties keep their order)."""
    return sorted(cands, key=lambda c: (c.judge_score is None, -(c.judge_score or 0.0)))


def selected(cands: list, t: float, m: int) -> list:
    """The dia_ids judge.select passes of `cands` at threshold t, at most m."""
    return [c.dia for c in judge.select(cands, t, m)]


def outcomes(rows: list, passes) -> dict:
    """rows: one per question, {category, evidence, cands: [(dia, search, judge, rank_score)] in
    search order, reranked: [dia, ...]}; passes(row) -> the dia_ids injected."""
    ans = [r for r in rows if r["category"] != 5]
    adv = [r for r in rows if r["category"] == 5]
    got = n_inj = n_good = n_inj_adv = 0
    for r in ans:
        inj = passes(r)
        ev = set(r["evidence"])
        got += any(d in ev for d in inj)
        n_inj += len(inj)
        n_good += sum(d in ev for d in inj)
    silent = 0
    for r in adv:
        inj = passes(r)
        silent += not inj
        n_inj_adv += len(inj)

    def share(a, b):
        return round(a / b, 3) if b else None

    return {
        "answerable_evidence_passed": share(got, len(ans)),
        "adversarial_silent": share(silent, len(adv)),
        "precision": share(n_good, n_inj),
        "precision_all": share(n_good, n_inj + n_inj_adv),
        "injected_per_question": share(n_inj + n_inj_adv, len(rows)),
    }


def auc(pos: list, neg: list) -> "float | None":
    """P(score of an evidence candidate > score of a non-evidence one), ties count half."""
    if not pos or not neg:
        return None
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return round(wins / (len(pos) * len(neg)), 3)


def f1(o: dict) -> float:
    """Harmonic mean of precision (every adversarial injection counted wrong) and the share of
    answerable questions whose evidence passes: the calibration objective."""
    p, r = o["precision_all"] or 0.0, o["answerable_evidence_passed"] or 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def compare(rows: list, m: int) -> dict:
    """Candidate-level AUC (evidence vs other candidates of answerable questions) and the best
    threshold by F1 for each scoring that was tried, on the same candidates."""
    scorers = {
        "query_likelihood": lambda c: c["judge"],
        "yes_no": lambda c: c["yes_no"],
        "coverage": lambda c: c["search"],
        "ql+coverage": lambda c: c["judge"] + c["search"],
        "ql+0.5*yes_no": lambda c: c["judge"] + 0.5 * c["yes_no"],
    }
    out = {}
    for name, f in scorers.items():
        pos = [f(c) for r in rows if r["category"] != 5 for c in r["feats"] if c["dia"] in r["evidence"]]
        neg = [f(c) for r in rows if r["category"] != 5 for c in r["feats"] if c["dia"] not in r["evidence"]]
        values = sorted({round(f(c), 3) for r in rows for c in r["feats"]})
        best = None
        for t in values[:: max(1, len(values) // 300)]:
            o = _outcomes_feats(rows, f, t, m)
            if best is None or f1(o) > best[0]:
                best = (f1(o), t, o)
        out[name] = {"candidate_auc": auc(pos, neg), "best_f1": round(best[0], 3) if best else None,
                     "at": best[1] if best else None, **(best[2] if best else {})}
    return out


def _outcomes_feats(rows: list, f, t: float, m: int) -> dict:
    """outcomes() when scoring f(candidate features) takes the judge score's place, highest first."""
    by = []
    for r in rows:
        score = {c["dia"]: f(c) for c in r["feats"]}
        by.append({"category": r["category"], "evidence": r["evidence"],
                   "cands": by_score([Cand(d, s, score.get(d), None) for d, s, _, _ in r["cands"]])})
    return outcomes(by, lambda r: selected(r["cands"], t, m))


def calibrate(curve: dict) -> tuple:
    """The threshold of the curve with the best F1 (ties: the higher threshold, fewer injections)."""
    best = max(curve.items(), key=lambda kv: (round(f1(kv[1]), 6), float(kv[0])))
    return float(best[0]), round(f1(best[1]), 3)


def run(quick: bool = False, data=None, n: "int | None" = None, all_questions: bool = False,
        seed: int = 0, verbose: bool = False, compare_methods: bool = False,
        rows_file: "str | None" = None) -> dict:
    """The figures above; `rows` holds every question's candidates (also written to rows_file)."""
    cfg = settings.load()
    cfg["judge"] = dict(cfg["judge"])
    threshold = float(settings.DEFAULTS["judge"]["threshold"])
    k = int(cfg["judge"]["max_candidates"])
    floor = float(settings.DEFAULTS["floor"])
    choice = resolve("judge", cfg)
    if not choice.available:
        raise Unavailable(f"judge unavailable: {choice.reason}")
    t0 = time.perf_counter()
    rt = llm.Runtime(choice.path)
    load_ms = (time.perf_counter() - t0) * 1000

    asked, info = locomo.ask_all(data, keep_store=True)
    conn, maps = info["conn"], info["maps"]
    qs = sample(asked, None if all_questions else (n or (QUICK_N if quick else DEFAULT_N)), seed)
    scopes = {c.sample_id: locomo.scope_for(c) for c in info["convs"]}
    run_cfg = dict(cfg, judge=dict(cfg["judge"], threshold=-math.inf, timeout_s=600))
    rows, per_cand_ms, per_need_ms, unjudged = [], [], [], 0
    t_judge = time.perf_counter()
    for i, a in enumerate(qs):
        res = judge.judge_need(conn, a.question, scopes[a.sample_id], run_cfg, runtime=rt)
        if res.error:
            unjudged += 1
        id2dia = maps[a.sample_id]
        cands = [(id2dia[v.memory_id], v.search_score, v.judge_score, v.rank_score) for v in res.candidates]
        row = {"category": a.category, "evidence": a.evidence, "cands": cands,
               "reranked": [id2dia[v.memory_id] for v in res.ranked]}
        if compare_methods:
            row["feats"] = _features(rt, a.question, res, id2dia)
        rows.append(row)
        if res.candidates:
            per_need_ms.append(res.model_ms)
            per_cand_ms.append(res.model_ms / len(res.candidates))
        if verbose:
            print(f"  {i + 1}/{len(qs)} cat {a.category} {res.model_ms:.0f} ms", file=sys.stderr)
    judge_s = time.perf_counter() - t_judge
    rt.close()
    conn.close()
    info["tmp"].cleanup()

    max_pass = int(cfg["judge"].get("max_pass", 1))

    def judged(t, m=max_pass):
        return lambda r: selected(reranked_order(r), t, m)

    curve = {f"{t:.2f}": outcomes(rows, judged(t)) for t in sorted(set(THRESHOLDS + [threshold]))}
    curve_all = {f"{t:.2f}": outcomes(rows, judged(t, k)) for t in sorted(set(THRESHOLDS + [threshold]))}
    ans = [r for r in rows if r["category"] != 5]
    best_t, best_f1 = calibrate(curve)
    extra = {"compare": compare(rows, max_pass)} if compare_methods else {}
    if rows_file:
        Path(rows_file).write_text(json.dumps(rows))
    return {
        "data": info["path"],
        "model": Path(choice.path).name,
        "model_source": choice.source,
        "method": judge.METHOD,
        "questions": len(rows),
        "answerable": len(ans),
        "adversarial": len(rows) - len(ans),
        "max_candidates": k,
        "threshold": threshold,
        "evidence_in_candidates": round(sum(any(c[0] in set(r["evidence"]) for c in r["cands"])
                                            for r in ans) / len(ans), 3) if ans else None,
        "judge": curve[f"{threshold:.2f}"],
        "judge_f1": round(f1(curve[f"{threshold:.2f}"]), 3),
        "calibrated_threshold": best_t,
        "calibrated_f1": best_f1,
        "baseline_top1": outcomes(rows, lambda r: [c.dia for c in search_order(r)[:1]]),
        f"baseline_top{k}": outcomes(rows, lambda r: [c.dia for c in search_order(r)[:k]]),
        "baseline_floor": outcomes(rows, lambda r: [c.dia for c in search_order(r)[:k] if c.search >= floor]),
        "reranked_top1": outcomes(rows, lambda r: [c.dia for c in reranked_order(r)[:1]]),
        "max_pass": max_pass,
        "curve": curve,
        "curve_pass_all_above": curve_all,
        "judge_rerank_top1": outcomes(rows, lambda r: selected(by_score(search_order(r)), -math.inf, 1)),
        "best_judged_above_threshold": outcomes(rows, lambda r: selected(by_score(search_order(r)), threshold, max_pass)),
        "search_order_above_threshold": outcomes(rows, lambda r: selected(search_order(r), threshold, max_pass)),
        "judge_ms_per_candidate_p50": round(statistics.median(per_cand_ms), 1) if per_cand_ms else None,
        "judge_ms_per_need_p50": round(statistics.median(per_need_ms), 1) if per_need_ms else None,
        "judge_ms_per_need_p90": round(pct(per_need_ms, 0.9), 1) if per_need_ms else None,
        "model_load_ms": round(load_ms, 1),
        "judge_wall_s": round(judge_s, 1),
        "unjudged_questions": unjudged,
        "threads": rt.n_threads,
        **extra,
        "rows": rows,
    }


OPTIONS = (
    ("--n", {"type": int, "dest": "n", "help": f"questions to sample (default {DEFAULT_N}; --quick: {QUICK_N})"}),
    ("--all", {"action": "store_true", "dest": "all_questions", "help": "every question of the split (slow)"}),
    ("--seed", {"type": int, "default": 0, "dest": "seed"}),
    ("--compare", {"action": "store_true", "dest": "compare_methods",
                   "help": "also score the candidates with the alternatives tried (yes/no, coverage, combinations)"}),
    ("--rows", {"metavar": "FILE", "dest": "rows_file", "help": "also write the per-question scores as JSON here"}),
    ("--verbose", {"action": "store_true", "dest": "verbose", "help": "one line per question on stderr"}),
)

if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("judge", OPTIONS))

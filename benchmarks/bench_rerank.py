"""Background re-ranking on LoCoMo: the pre-step order next to the local model's re-ranked
order (recalld.rerank: query likelihood + the search's ranking key) on the same sampled questions.

    python3 benchmarks/bench_rerank.py [--n N] [--quick] [--data PATH] [--json]

Each question costs one model decode per candidate (RERANK_TOP of them); on a small CPU that
is seconds per question, so a fixed random sample of answerable questions (categories 1-4,
seeded) is scored and the figures carry 95% Wilson intervals. The re-ranker can only reorder
what search found: recall@RERANK_TOP of the sample is its ceiling, reported alongside.
"""

import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402

from recalld import llm, rerank, settings  # noqa: E402
from recalld.search import search  # noqa: E402

DEFAULT_N = 60
QUICK_N = 10


def wilson(k: int, n: int, z: float = 1.96) -> list:
    if not n:
        return [None, None]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(c - h, 3), round(c + h, 3)]


def run(quick: bool = False, data=None, n: "int | None" = None) -> dict:
    n = n or (QUICK_N if quick else DEFAULT_N)
    asked, info = locomo.ask_all(data, categories=locomo.ANSWERABLE, keep_store=True)
    try:
        try:
            rt = llm.require_runtime("judge", settings.DEFAULTS)
        except llm.Unavailable as e:
            return {"available": False, "error": str(e),
                    "notes": [f"no local model, re-ranking not measured: {e}"]}
        qs = [(c, q) for c in info["convs"] for q in c.questions if q.category in locomo.ANSWERABLE]
        random.Random(0).shuffle(qs)
        qs = qs[:n]
        counts = {"search": [0, 0], "reranked": [0, 0]}
        ceiling = 0
        ms0, t0 = rt.model_ms, time.perf_counter()
        for c, q in qs:
            sc, id2dia = locomo.scope_for(c), info["maps"][c.sample_id]
            hits = search(info["conn"], q.question, sc, limit=rerank.RERANK_TOP)
            before = [id2dia[h.id] for h in hits]
            after = [id2dia[r.hit.id] for r in rerank.rerank(rt, q.question, hits)]
            for name, order in (("search", before), ("reranked", after)):
                counts[name][0] += locomo.hit_at(order, q.evidence, 1)
                counts[name][1] += locomo.hit_at(order, q.evidence, 5)
            ceiling += locomo.hit_at(before, q.evidence, rerank.RERANK_TOP)
        wall = time.perf_counter() - t0
        out = {"available": True, "model": rt.name, "questions": len(qs), "candidates": rerank.RERANK_TOP,
               "search_weight": rerank.SEARCH_WEIGHT, "seconds_per_question": round(wall / max(1, len(qs)), 2),
               "model_ms_per_candidate": round((rt.model_ms - ms0) / max(1, len(qs) * rerank.RERANK_TOP), 1)}
        out["sample"] = {
            name: {"hit@1": round(h1 / len(qs), 3), "hit@1 95% CI": wilson(h1, len(qs)),
                   "recall@5": round(r5 / len(qs), 3), "recall@5 95% CI": wilson(r5, len(qs))}
            for name, (h1, r5) in counts.items()}
        out["sample"]["ceiling"] = {"hit@1": round(ceiling / len(qs), 3), "recall@5": None}
        q_all = locomo.quality(asked)
        out["pre_step_all_questions"] = {"recalld": q_all["recalld"]["overall"], "baseline": q_all["baseline"]["overall"]}
        out["plots"] = [{"file": "rerank.png", "kind": "bar", "title": f"Background re-ranking ({len(qs)} sampled questions)",
                         "x": ["hit@1", "recall@5"], "ylabel": "share of questions",
                         "series": {"pre-step search": [out["sample"]["search"]["hit@1"], out["sample"]["search"]["recall@5"]],
                                    "re-ranked (local model)": [out["sample"]["reranked"]["hit@1"],
                                                                out["sample"]["reranked"]["recall@5"]]}}]
        return out
    finally:
        info["conn"].close()
        info["tmp"].cleanup()


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--n", type=int)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.quick, args.data, args.n)
    res.pop("plots", None)
    print(json.dumps(res, indent=None if not args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

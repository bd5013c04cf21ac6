"""Recall quality on LoCoMo: recalld's pre-step search next to plain FTS5 BM25, same run.

    python3 benchmarks/bench_locomo.py [--data PATH] [--quick] [--json]

Figures: hit@1 and recall@5 per category and overall (categories 1-4) for recalld and the
baseline; the pre-step floor as an abstention curve (adversarial questions that inject nothing
vs answerable ones whose evidence is injected); the memory-text styles compared; the same
turns imported without threads; and, when a local model is available, the background pass's
re-ranked hit@1.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402

from recalld.core import settings  # noqa: E402

CATS = ["multi-hop", "temporal", "open-domain", "single-hop", "overall"]


def run(quick: bool = False, data=None) -> dict:
    asked, info = locomo.ask_all(data, locomo.DEFAULT_STYLE)
    q = locomo.quality(asked)
    out = {
        "data": info["path"], "style": info["style"], "conversations": info["conversations"],
        "memories": info["memories"], "questions": info["questions"],
        "dropped_no_evidence": info["dropped_no_evidence"],
        "side_by_side": {c: {"n": q["recalld"][c]["n"],
                             "recalld hit@1": q["recalld"][c]["hit@1"], "bm25 hit@1": q["baseline"][c]["hit@1"],
                             "recalld recall@5": q["recalld"][c]["recall@5"],
                             "bm25 recall@5": q["baseline"][c]["recall@5"]} for c in CATS},
        "recalld": q["recalld"], "baseline": q["baseline"],
        **locomo.latency(asked),
    }
    floor = float(settings.DEFAULTS["floor"])
    curve = locomo.abstention(asked)
    out["floor"] = floor
    out["abstention"] = curve
    at = curve.get(f"{floor:.2f}") or locomo.abstention(asked, floors=(floor,))[f"{floor:.2f}"]
    out["at_default_floor"] = at
    out["equal_error_floor"] = locomo.equal_error_floor(asked)
    if not quick:
        styles = {}
        for style in locomo.STYLES:
            a, _ = locomo.ask_all(data, style)
            s = locomo.quality(a)
            styles[style] = {"recalld hit@1": s["recalld"]["overall"]["hit@1"],
                             "recalld recall@5": s["recalld"]["overall"]["recall@5"],
                             "bm25 hit@1": s["baseline"]["overall"]["hit@1"],
                             "bm25 recall@5": s["baseline"]["overall"]["recall@5"]}
        out["styles"] = styles
        a, _ = locomo.ask_all(data, locomo.DEFAULT_STYLE, threads=False)
        s = locomo.quality(a)
        out["without_threads"] = {"recalld hit@1": s["recalld"]["overall"]["hit@1"],
                                  "recalld recall@5": s["recalld"]["overall"]["recall@5"],
                                  "bm25 hit@1": s["baseline"]["overall"]["hit@1"],
                                  "bm25 recall@5": s["baseline"]["overall"]["recall@5"]}
        # What threads add in each conversation: a split-level gain could hide one that loses.
        out["by_conversation"] = {}
        for sid in sorted({x.sample_id for x in asked}):
            with_, without = (locomo.summarize([x for x in qs if x.sample_id == sid])["overall"] for qs in (asked, a))
            out["by_conversation"][sid] = {"n": with_["n"], "hit@1": with_["hit@1"], "recall@5": with_["recall@5"],
                                           "without threads hit@1": without["hit@1"],
                                           "without threads recall@5": without["recall@5"]}
    out["plots"] = [
        {"file": "locomo_quality.png", "kind": "bar", "title": "LoCoMo recall: recalld pre-step vs FTS5 BM25",
         "x": CATS, "ylabel": "share of questions",
         "series": {"recalld hit@1": [q["recalld"][c]["hit@1"] for c in CATS],
                    "bm25 hit@1": [q["baseline"][c]["hit@1"] for c in CATS],
                    "recalld recall@5": [q["recalld"][c]["recall@5"] for c in CATS],
                    "bm25 recall@5": [q["baseline"][c]["recall@5"] for c in CATS]}},
        {"file": "locomo_floor.png", "kind": "line", "title": "Pre-step floor: abstention vs evidence injected",
         "x": [float(f) for f in curve], "xlabel": "floor (coverage score)", "ylabel": "share",
         "series": {"unrelated (other conversation) injecting nothing": [v["unrelated_silent"] for v in curve.values()],
                    "adversarial (cat 5) injecting nothing": [v["adversarial_silent"] for v in curve.values()],
                    "answerable: evidence injected": [v["answerable_injected"] for v in curve.values()],
                    "precision of injected memories": [v["precision"] for v in curve.values()]}},
    ]
    return out


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.quick, args.data)
    res.pop("plots", None)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"LoCoMo {res['data']}: {res['questions']} questions ({res['dropped_no_evidence']} without evidence left out)")
    for c in CATS:
        r, b = res["recalld"][c], res["baseline"][c]
        print(f"  {c:<12} n={r['n']:<4} recalld hit@1 {r['hit@1']:.3f} recall@5 {r['recall@5']:.3f}"
              f"   bm25 hit@1 {b['hit@1']:.3f} recall@5 {b['recall@5']:.3f}")
    print(f"  at the default floor {res['floor']}: {json.dumps(res['at_default_floor'])}")
    print(f"  equal-error floor (unrelated leaks = answerable misses): {res['equal_error_floor']}")
    for f, v in res["abstention"].items():
        print(f"    floor {f}: {json.dumps(v)}")
    for s, v in (res.get("styles") or {}).items():
        print(f"  style {s:<13} {json.dumps(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

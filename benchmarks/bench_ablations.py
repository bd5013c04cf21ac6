"""What was tried to make the pre-step search better, and did not measure better, re-made in
the report (issue 6 asks the report to record it): every ranking variant of
benchmarks/search_ablations.py re-scores the same LoCoMo candidates (dev split, categories
1-4), the shipped ranking first.

    python3 benchmarks/bench_ablations.py [--data PATH] [--json]

About 2.5 minutes on the 2-core machine (candidates are collected at four candidate counts,
each with its thread followers). Variants that are not a re-scoring of the same candidates
(pseudo-relevance feedback with a second query, MMR diversity) were measured once through
the full search and are recorded in docs/evaluation.md.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_ablations  # noqa: E402


def run(quick: bool = False, data=None) -> dict:
    # quick changes nothing: the variants re-score candidates collected once
    res = search_ablations.measure(data)
    shipped = next(iter(res["variants"].values()))
    res["notes"] = [f"{res['questions']} answerable questions; the first row is the shipped ranking "
                    f"(hit@1 {shipped['hit@1']}, recall@5 {shipped['recall@5']}); each other row "
                    "re-scores the same first 40 candidates (and their thread followers) one other way"]
    return res


if __name__ == "__main__":
    out = run(data=sys.argv[sys.argv.index("--data") + 1] if "--data" in sys.argv else None)
    if "--json" in sys.argv:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out["variants"].items():
            print(f"{k:<56} {v['hit@1']:.3f} {v['recall@5']:.3f}")

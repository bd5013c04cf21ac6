"""The budget curve: how much of what search found actually reaches the model after packing.

    python3 benchmarks/bench_budget.py [--data PATH] [--quick] [--json]

For character budgets from 500 to 8,000: the share of answerable LoCoMo questions (categories
1-4) whose evidence memory is delivered by the pre-step (through the hook's own memory source
and recalld.pack.pack: delivered whole, or cut/told with the answer inside what was delivered),
at the default floor and max_results, and with max_results raised to 20 (what budget alone
buys). The unlimited-budget ceiling is search's own recall above the floor. When crystals exist
(recalld/crystals.py), also the share of marked claims withheld per budget.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402

BUDGETS = (500, 1000, 2000, 3000, 4000, 6000, 8000)


def run(quick: bool = False, data=None) -> dict:
    asked, info = locomo.ask_all(data, locomo.DEFAULT_STYLE, categories=locomo.ANSWERABLE, keep_store=True)
    try:
        curve = locomo.budget_curve(info["conn"], info["maps"], info["convs"], BUDGETS)
    finally:
        info["conn"].close()
        info["tmp"].cleanup()
    out = {"data": info["path"], "questions": info["questions"], "budgets": list(BUDGETS),
           "evidence_reaches_model": curve}
    plots_series = {f"LoCoMo evidence delivered ({k})": list(v.values()) for k, v in curve.items()}
    crystal = crystal_curve(BUDGETS)
    if crystal is not None:
        out["crystals"] = crystal
        if crystal.get("claims_withheld"):
            plots_series["crystal claims withheld"] = list(crystal["claims_withheld"].values())
    else:
        out["notes"] = ["crystals: recalld/crystals.py is not available in this checkout; crystal claims not measured"]
    out["plots"] = [{"file": "budget_curve.png", "kind": "line", "title": "What reaches the model vs budget",
                     "x": list(BUDGETS), "xlabel": "budget (characters)", "ylabel": "share",
                     "series": plots_series}]
    return out


def crystal_curve(budgets) -> "dict | None":
    """Share of marked claims (⛔ ❗ ⚠ lines) withheld or cut away per budget, over the crystals
    shipped in the repository; None when there is no crystals module."""
    try:
        from recalld import crystals  # noqa: F401
    except ImportError:
        return None
    try:
        import bench_crystal_budget  # written once the crystals API is settled
    except ImportError:
        return {"note": "recalld/crystals.py exists but the crystal budget measurement is not wired yet"}
    return bench_crystal_budget.curve(budgets)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.quick, args.data)
    res.pop("plots", None)
    print(json.dumps(res, indent=2) if args.json else json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

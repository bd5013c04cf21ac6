"""The budget curve: how much of what search found actually reaches the model after packing.

    recalld bench budget [--data PATH] [--quick] [--json]

For character budgets from 500 to 8,000: the share of answerable LoCoMo questions (categories
1-4) whose evidence memory is delivered by the pre-step (through the hook's own memory source
and recalld.core.packer.pack: delivered whole, or cut/told with the answer inside what was delivered),
at the default floor and max_results, and with max_results raised to 20 (what budget alone
buys). The unlimited-budget ceiling is search's own recall above the floor. With crystals
(recalld/crystals/__init__.py): the share of marked claims that do not reach the model per budget,
for the shipped crystals (contrib/crystals/ of a source checkout) all matching one act, and for
the crystals benchmark's generated corpus over a session of acts (recalld.bench.crystal_budget,
fair rotation included).
"""

import sys
from pathlib import Path

from recalld.bench import crystal_budget, locomo
from recalld.bench.common import source_root
from recalld import crystals
from recalld.core import packer, settings
from recalld.hook import crystal_source

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
    out["crystals"] = crystal
    if crystal.get("claims_withheld"):
        plots_series["crystal claims withheld (shipped crystals, all matched)"] = list(
            crystal["claims_withheld"].values())
    syn = crystal_budget.curve(BUDGETS, n_acts=60 if quick else 200)
    out["crystals_generated_corpus"] = syn
    plots_series["crystal claims not delivered (generated corpus, a session of acts)"] = [
        syn["claims_withheld"][b] for b in BUDGETS]
    out["plots"] = [{"file": "budget_curve.png", "kind": "line", "title": "What reaches the model vs budget",
                     "x": list(BUDGETS), "xlabel": "budget (characters)", "ylabel": "share",
                     "series": plots_series}]
    return out


def crystal_curve(budgets, directory=None) -> dict:
    """Share of marked claims (lines opening with a claim marker) that do not reach the model
    when every crystal in `directory` (default: the shipped contrib/crystals/ of the source
    checkout) matches one act and is packed at each budget with the default per-item cap, in
    the hook's order (fairest first: never served, then smallest). A crystal delivered as its
    tell counts its claims as withheld (the tell is reported separately)."""
    if directory is None:
        root = source_root()
        if root is None:
            return {"crystals": 0, "note": "contrib/crystals/ ships with the source, not the installed package"}
        directory = root / "contrib" / "crystals"
    directory = Path(directory)
    found = []
    for f in sorted(directory.glob("*.md")):
        try:
            found.append(crystals.parse_file(str(f)))
        except crystals.ParseError:
            continue
    found = [c for c in found if c.claims]
    if not found:
        return {"crystals": 0, "note": f"no crystal with marked claims in {directory}"}
    items, _ = crystal_source.to_items(crystal_source.order([(c, list(c.keys)) for c in found], {}))
    claims = {f"c:{c.id}": c.claims for c in found}
    total = sum(claims.values())
    cap = int(settings.DEFAULTS["item_cap_chars"])
    withheld, told = {}, {}
    for b in budgets:
        placed = packer.pack(items, b, cap).placed
        got = sum(claims[p.item.key] - p.cut_claims for p in placed if p.outcome in ("whole", "cut"))
        withheld[str(b)] = round(1 - got / total, 3)
        told[str(b)] = sum(1 for p in placed if p.outcome == "tell")
    return {"directory": str(directory), "crystals": len(found), "claims": total,
            "essence_chars": sum(c.essence_chars for c in found), "item_cap_chars": cap,
            "claims_withheld": withheld, "delivered_as_tell": told}


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("budget"))

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
            plots_series["crystal claims withheld (shipped crystals, all matched)"] = list(
                crystal["claims_withheld"].values())
        import tempfile

        with tempfile.TemporaryDirectory(prefix="recalld-crystals-") as d:
            synthetic_crystals(Path(d))
            syn = crystal_acts_curve(BUDGETS, Path(d))
        out["crystals_synthetic"] = syn
        plots_series["crystal claims withheld (synthetic corpus, 3 per act)"] = list(syn["claims_withheld"].values())
        out["notes"] = ["Crystal claims: the shipped crystals (contrib/crystals/) are few, so a seeded synthetic "
                        "corpus (40 crystals, 150-5,000 character essences, a third with a second claim in the "
                        "tail) is packed too, 3 crystals per act; it measures the packer, not real crystals."]
    else:
        out["notes"] = ["crystals: recalld/crystals.py is not available in this checkout; crystal claims not measured"]
    out["plots"] = [{"file": "budget_curve.png", "kind": "line", "title": "What reaches the model vs budget",
                     "x": list(BUDGETS), "xlabel": "budget (characters)", "ylabel": "share",
                     "series": plots_series}]
    return out


def crystal_curve(budgets, directory=None) -> "dict | None":
    """Share of marked claims (lines opening with a claim marker) that do not reach the model
    when every crystal in `directory` (default: the shipped contrib/crystals/) matches one act
    and is packed at each budget with the default per-item cap, in the hook's order (fairest
    first: never served, then smallest). A crystal delivered as its tell counts its claims as
    withheld (the tell is reported separately). None without recalld/crystals.py."""
    try:
        from recalld import crystal_source, crystals
    except ImportError:
        return None
    from recalld import pack, settings

    directory = Path(directory) if directory else Path(__file__).resolve().parent.parent / "contrib" / "crystals"
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
        placed = pack.pack(items, b, cap).placed
        got = sum(claims[p.item.key] - p.cut_claims for p in placed if p.outcome in ("whole", "cut"))
        withheld[str(b)] = round(1 - got / total, 3)
        told[str(b)] = sum(1 for p in placed if p.outcome == "tell")
    return {"directory": str(directory), "crystals": len(found), "claims": total,
            "essence_chars": sum(c.essence_chars for c in found), "item_cap_chars": cap,
            "claims_withheld": withheld, "delivered_as_tell": told}


FILLER = ("The history behind this rule: a session ran the command on a shared tree, the person lost "
          "work, and the review found that nothing earlier would have caught it. ")


def synthetic_crystals(directory: Path, n: int = 40, seed: int = 13) -> None:
    """A seeded corpus of crystal files shaped like the seed's: essences from 150 to 5,000
    characters (log-uniform), one leading marked claim, and in a third of them one or two more
    claims further down (a second idea in the tail, the case a head-first cut loses)."""
    import math
    import random

    r = random.Random(seed)
    for i in range(n):
        size = int(math.exp(r.uniform(math.log(150), math.log(5000))))
        body = (FILLER * (size // len(FILLER) + 1))[:size]
        lines = [f"⛔ RULE {i}: check the shared tree before acting."] + [
            body[j:j + 90] for j in range(0, len(body), 90)]
        if r.random() < 1 / 3:
            for _ in range(r.choice((1, 2))):
                lines.insert(r.randrange(2, len(lines) + 1), f"❗ ALSO {i}: a second claim further down.")
        text = (f"crystal:\non: bash\nmatch: synthetic-{i}\ntell: Rule {i} in one line.\n\n"
                "<!-- crystal:essence -->\n" + "\n".join(lines) + "\n<!-- /crystal:essence -->\n")
        (directory / f"synthetic-{i:02d}.md").write_text(text, encoding="utf-8")


def crystal_acts_curve(budgets, directory: Path, per_act: int = 3, acts: int = 200, seed: int = 5) -> dict:
    """Acts that each match `per_act` crystals drawn from `directory`: the share of their marked
    claims that do not reach the model, per budget."""
    import random

    from recalld import crystal_source, crystals, pack, settings

    found = [crystals.parse_file(str(f)) for f in sorted(directory.glob("*.md"))]
    cap = int(settings.DEFAULTS["item_cap_chars"])
    r = random.Random(seed)
    draws = [r.sample(found, min(per_act, len(found))) for _ in range(acts)]
    withheld = {}
    for b in budgets:
        total = got = 0
        for cs in draws:
            items, _ = crystal_source.to_items(crystal_source.order([(c, list(c.keys)) for c in cs], {}))
            claims = {c.key: c.claims for c in cs}
            total += sum(claims.values())
            got += sum(claims[p.item.key] - p.cut_claims for p in pack.pack(items, b, cap).placed
                       if p.outcome in ("whole", "cut"))
        withheld[str(b)] = round(1 - got / total, 3) if total else None
    return {"crystals": len(found), "claims": sum(c.claims for c in found), "acts": acts,
            "crystals_per_act": per_act, "claims_withheld": withheld}


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

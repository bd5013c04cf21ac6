"""Crystal claims vs budget: of the marked claims (⛔ ❗ ⚠ lines) in crystals an act matched,
how many never reached the model (withheld, stale, degraded to a tell, or in a cut tail), per
budget, over a session of acts with the real fair order and packer.

    recalld bench crystal_budget [--quick] [--json]

Corpus and acts are recalld.bench.crystals' generated 300 crystals and four-phrase acts (median act
matches ~5). `curve(budgets)` is what recalld.bench.budget calls.
"""

import shutil
import sys
import tempfile
from pathlib import Path

from recalld.bench import crystals as generated
from recalld import crystals
from recalld.core import packer
from recalld.hook import crystal_source

BUDGETS = (1000, 2000, 4000, 8000, 16000)


def curve(budgets=BUDGETS, n_acts: int = 200, cap: int = 2000) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="recalld-bench-crystal-budget-"))
    try:
        generated.generate(tmp / "crystals")
        entries, failures, _ = crystals.load_dir(str(tmp / "crystals"), "project", use_cache=False)
        index = crystals.Index(entries, failures, [], "off")
        texts = generated.acts(n_acts)
        withheld, cut_away, total, over = {}, {}, {}, {}
        for budget in budgets:
            stats: dict = {}
            lost = cut_lost = claims = n_over = 0
            for i, text in enumerate(texts):
                matched = index.match("bash", text)
                items, _ = crystal_source.to_items(crystal_source.order(matched, stats))
                packed = packer.pack(items, budget, cap)
                n_over += packed.accounting()["over_budget"]
                for p in packed.placed:
                    n = packer.count_claims(p.item.body)
                    claims += n
                    if p.outcome in ("withheld", "stale", "tell"):
                        lost += n
                    elif p.outcome == "cut":
                        cut_lost += p.cut_claims
                    if p.outcome in ("whole", "cut"):
                        c, _ = stats.get(p.item.key, (0, ""))
                        stats[p.item.key] = (c + 1, f"{i:08d}")
            total[budget] = claims
            withheld[budget] = round((lost + cut_lost) / claims, 4) if claims else None
            cut_away[budget] = round(cut_lost / claims, 4) if claims else None
            over[budget] = round(n_over / len(texts), 4)
        return {"acts": len(texts), "crystals": len(entries), "cap": cap, "claims_matched": total,
                "claims_withheld": withheld, "claims_in_cut_tails": cut_away, "share_acts_over_budget": over}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(quick: bool = False) -> dict:
    return curve(BUDGETS, n_acts=60 if quick else 200)


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("crystal_budget"))

"""Crystal figures from hook receipts: matches per act, wanted characters against the budget,
what was withheld or cut, which crystals never matched or were never delivered.

Used by `recalld crystals stats` and the crystals benchmark (recalld.bench.crystals); it reads
receipts and never writes.
"""

import statistics

from recalld.core import crystals


def _median(xs):
    return statistics.median(xs) if xs else None


def stats(index: crystals.Index, recs: list) -> dict:
    """The seed's own figures, from hook receipts of acts crystals can fire on."""
    acts = [r for r in recs if r.get("source") == "hook" and r.get("act") in crystals.ACTS
            and isinstance((r.get("detail") or {}).get("crystals"), dict)]
    matched, wanted, budgets, over = [], [], [], 0
    totals = {k: 0 for k in ("whole", "cut", "tell", "withheld", "stale", "cut_chars", "cut_claims",
                             "withheld_chars", "delivered_chars")}
    delivered_ids, matched_ids, per_act = set(), set(), {}
    for r in acts:
        det = r["detail"]
        m = int(det["crystals"].get("matched") or 0)
        packed = det.get("packed") or {}
        src = (packed.get("by_source") or {}).get("crystal") or {}
        w = int(src.get("wanted_chars") or 0)
        b = packed.get("budget")
        matched.append(m)
        wanted.append(w)
        if b is not None:
            budgets.append(b)
            over += w > b
        for k in totals:
            totals[k] += int(src.get(k) or 0)
        for it in packed.get("items") or []:
            if str(it[0]).startswith("c:"):
                matched_ids.add(it[0][2:])
                if it[1] in ("whole", "cut"):
                    delivered_ids.add(it[0][2:])
        pa = per_act.setdefault(r["act"], [])
        pa.append(m)
    ids = [c.id for c in index.crystals]
    return {
        "acts": len(acts),
        "matches_per_act": {"median": _median(matched), "mean": round(statistics.fmean(matched), 2) if matched else None,
                            "max": max(matched) if matched else None},
        "by_act": {a: {"acts": len(ms), "median_matches": _median(ms)} for a, ms in sorted(per_act.items())},
        "wanted_chars": {"median": _median(wanted), "max": max(wanted) if wanted else None},
        "budget": _median(budgets),
        "share_over_budget": round(over / len(acts), 4) if acts else None,
        "outcomes": {k: totals[k] for k in ("whole", "cut", "tell", "withheld", "stale")},
        "chars_withheld": totals["withheld_chars"],
        "chars_cut": totals["cut_chars"],
        "claims_cut": totals["cut_claims"],
        "chars_delivered": totals["delivered_chars"],
        "crystals": len(ids),
        "never_matched": sorted(i for i in ids if i not in matched_ids),
        "never_delivered": sorted(i for i in ids if i not in delivered_ids),
    }

"""Managing crystals, outside the hook: trusting a project's crystal folder and how its trust
reads (`recalld crystals trust`, `recalld doctor`), and crystal figures from hook receipts
(`recalld crystals stats`, the crystals benchmark). The hook only matches crystals
(recalld.crystals) and reads trust.state; nothing here runs on its path.
"""

import statistics

from recalld import crystals
from recalld.crystals import trust
from recalld.crystals import directories, scan_dir

# --- trust ----------------------------------------------------------------------------------


def trust_project(project: str) -> tuple:
    """Trust the project's crystal folder as it is now: (the trust record, entries, failures).
    Every file is read and hashed afresh (not from the hook's cache), so what is trusted is
    what was just listed. ValueError (one line) when there is nothing that can be trusted."""
    directory = directories(project)[0][1]
    entries, failures, _, hashes = scan_dir(directory, "project", use_cache=False)
    for f in failures:
        if f.path == directory:
            raise ValueError(f"{directory}: {f.reason}")
    if not hashes:
        raise ValueError(f"no crystal files in {directory}")
    return trust.record(directory, "trust", project, hashes), entries, failures


def trust_summary(project: "str | None") -> "dict | None":
    """The project's crystal folder as `crystals list` and `doctor` show it (None when the
    project has no crystal files): its trust state, what changed, and the command to trust it."""
    if not project:
        return None
    import shlex

    directory = directories(project)[0][1]
    es, fs, _, hashes = scan_dir(directory, "project")
    escaped = [f for f in fs if f.path == directory]
    if not hashes and not escaped:
        return None
    log = trust.read()
    st = "untrusted" if escaped else trust.state(directory, hashes, log)
    rec = log.get(directory) or {}
    return {"dir": directory, "project": project, "state": st, "crystals": len(es),
            "files": len(hashes or {}), "trusted_at": rec.get("time") if rec.get("action") == "trust" else None,
            "diff": trust.diff(directory, hashes, log) if st == "changed" else None,
            "reason": escaped[0].reason if escaped else None,
            "command": None if escaped or st == "trusted" else f"recalld crystals trust {shlex.quote(project)}"}


# --- figures from receipts ---------------------------------------------------------------


def _median(xs):
    return statistics.median(xs) if xs else None


def stats(index: crystals.Index, recs: list) -> dict:
    """What crystals cost the acts they fire on (matches per act, wanted chars against the budget,
    acts over budget, chars withheld and cut), from hook receipts."""
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

"""Ranking variants tried on LoCoMo (dev split, categories 1-4), measured in one run.

    python3 benchmarks/search_ablations.py [--data PATH]

Every question's candidates come from recalld.search.candidate_rows (40 unless a row says
otherwise) with the memories that follow them in their threads (recalld.search.thread_context);
each variant re-scores the same candidates, so differences are the ranking function's alone.
The first row is the shipped ranking. docs/evaluation.md records the outcome; kept variants are in
recalld/search.py, the others are here so the numbers can be re-made.
"""

import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402

from recalld.core import search as S  # noqa: E402
from recalld.core.textproc import Stemmer  # noqa: E402


SHIPPED = "shipped: coverage (thread context 0.8 / 0.4) + 0.15 bm25 + 0.2 subject label"
CANDIDATE_COUNTS = (20, 40, 100, 200)


def collect(data=None) -> list:
    asked, info = locomo.ask_all(data, categories=locomo.ANSWERABLE, keep_store=True)
    conn = info["conn"]
    st = Stemmer(conn)
    proj_df, proj_n = {}, {}
    for project, terms in conn.execute("SELECT project, terms FROM memories"):
        d = proj_df.setdefault(project, {})
        proj_n[project] = proj_n.get(project, 0) + 1
        for t in terms.split():
            d[t] = d.get(t, 0) + 1
    out = []
    try:
        for conv in info["convs"]:
            sc, id2dia = locomo.scope_for(conv), info["maps"][conv.sample_id]
            for q in conv.questions:
                if q.category not in locomo.ANSWERABLE:
                    continue
                terms, n = S.analyse(conn, q.question, st)
                present = [t for t in terms if t.df > 0]
                local = {t.stem: S._idf(proj_n[sc.project], proj_df[sc.project].get(t.stem, 0)) for t in terms}
                by_count = {}
                for c in CANDIDATE_COUNTS:
                    rows, before = S.thread_context(conn, S.candidate_rows(conn, present, sc, c) if present else [], sc)
                    by_count[c] = [(id2dia[r["id"]], set(r["terms"].split()), r["bm"], r["text"], before.get(r["id"], []))
                                   for r in rows]
                out.append({"q": q.question, "ev": q.evidence, "terms": terms, "local_idf": local,
                            "rows": by_count[S.CANDIDATES], "by_count": by_count})
    finally:
        conn.close()
        info["tmp"].cleanup()
    return out


def has(t, terms, prefix=0) -> bool:
    if t.in_(terms):
        return True
    if prefix and len(t.stem) >= prefix:
        return any(len(x) >= prefix and (x.startswith(t.stem) or t.stem.startswith(x)) for x in terms)
    return False


def cover(d, r, p=1.0, prefix=0, skip=(), local_mix=0.0, threads=None) -> float:
    ts = [t for t in d["terms"] if t.stem not in skip]
    w = {t.stem: ((1 - local_mix) * t.idf + local_mix * d["local_idf"][t.stem]) ** p for t in ts}
    tot = sum(w.values()) or 1.0
    got = 0.0
    for t in ts:
        if has(t, r[1], prefix):
            got += w[t.stem]
            continue
        for weight, prev in zip(S.THREAD_WEIGHTS if threads is None else threads, r[4]):
            if has(t, prev, prefix):
                got += weight * w[t.stem]
                break
    return got / tot


def subject(d, r) -> bool:
    words = {t.word.lower() for t in d["terms"]} | {t.stem for t in d["terms"]}
    return S._names_subject(r[3], words)


_TOK = re.compile(r"[^\W_]+")


def proximity(d, r, win=3) -> float:
    toks = [x.lower() for x in _TOK.findall(r[3].split("] ", 1)[-1])]
    qs = d["terms"]
    pos = {}
    for i, x in enumerate(toks):
        for j, t in enumerate(qs):
            if x == t.word.lower() or x.startswith(t.stem):
                pos.setdefault(j, []).append(i)
    tot = sum(t.idf for t in qs) or 1.0
    bonus = 0.0
    for j in range(len(qs) - 1):
        a, b = pos.get(j), pos.get(j + 1)
        if a and b and any(abs(x - y) <= win for x in a for y in b):
            bonus += min(qs[j].idf, qs[j + 1].idf)
    return bonus / tot


FRAME = {"kind", "often", "reason", "like", "specif", "main", "type", "sort", "done", "get", "take", "thing",
         "activ", "way", "feel", "think"}


def variants() -> dict:
    B, W = S.BM25_WEIGHT, S.SUBJECT_WEIGHT

    def base(d, r, best, **kw):
        return cover(d, r, **kw) + B * r[2] / best + (W if subject(d, r) else 0.0)

    v = {SHIPPED: lambda d, r, b: base(d, r, b)}
    for tw in ((0.0, 0.0), (0.5, 0.25), (1.0, 0.5), (0.8, 0.0), (1.0, 1.0)):
        v[f"thread weights {tw[0]} / {tw[1]}" + (" (no thread context)" if tw == (0.0, 0.0) else "")] = (
            lambda d, r, b, tw=tw: base(d, r, b, threads=tw))
    v["no subject label"] = lambda d, r, b: cover(d, r) + B * r[2] / b
    for w in (0.1, 0.3):
        v[f"subject label weight {w}"] = lambda d, r, b, w=w: cover(d, r) + B * r[2] / b + (w if subject(d, r) else 0)
    for a in (0.0, 0.3, 1.0):
        v[f"bm25 weight {a}"] = lambda d, r, b, a=a: cover(d, r) + a * r[2] / b + (W if subject(d, r) else 0)
    v["bm25 only"] = lambda d, r, b: r[2] / b
    for p in (0.5, 2.0):
        v[f"idf^{p} in coverage"] = lambda d, r, b, p=p: base(d, r, b, p=p)
    for lb in (0.02, 0.05):
        v[f"length penalty {lb}*log(chars)"] = lambda d, r, b, lb=lb: base(d, r, b) - lb * math.log(len(r[3]))
    for m in (0.5, 1.0):
        v[f"project-local idf mix {m}"] = lambda d, r, b, m=m: base(d, r, b, local_mix=m)
    for L in (4, 5):
        v[f"prefix match stems >= {L}"] = lambda d, r, b, L=L: base(d, r, b, prefix=L)
    v["question-frame words skipped"] = lambda d, r, b: base(d, r, b, skip=FRAME)
    for w in (0.1, 0.2):
        v[f"query-bigram proximity bonus {w}"] = lambda d, r, b, w=w: base(d, r, b) + w * proximity(d, r)
    v["question-turn penalty 0.1 (dialogue only)"] = lambda d, r, b: base(d, r, b) - (0.1 if r[3].rstrip().endswith("?") else 0)
    for lb in (0.04, 0.08):
        v[f"length bonus {lb}*log(chars)"] = lambda d, r, b, lb=lb: base(d, r, b) + lb * math.log(len(r[3]))
    v["subject label bonus only for the first label named"] = lambda d, r, b: (
        cover(d, r) + B * r[2] / b + (W if first_subject(d, r) else 0.0))
    return v


def first_subject(d, r) -> bool:
    """Does the memory's label hold the first query word that is any candidate's label?"""
    if "_first" not in d:
        labels = {}
        for row in d["rows"]:
            m = S._SUBJECT.match(row[3])
            if m and len(S.tokens(m.group(1).lower())) <= 3:
                labels[row[0]] = set(S.tokens(m.group(1).lower()))
        every = set().union(*labels.values()) if labels else set()
        d["_labels"] = labels
        d["_first"] = next((t.word.lower() for t in d["terms"] if t.word.lower() in every), None)
    return d["_first"] is not None and d["_first"] in d["_labels"].get(r[0], ())


def evaluate(data_rows: list, fn, cands: int = S.CANDIDATES) -> tuple:
    h1 = r5 = 0
    for d in data_rows:
        rows = d["by_count"][cands]
        if not rows:
            continue
        best = min(r[2] for r in rows) or -1.0
        order = [r[0] for r in sorted(rows, key=lambda r: -fn(d, r, best))]
        h1 += order[0] in d["ev"]
        r5 += any(x in d["ev"] for x in order[:5])
    n = len(data_rows)
    return round(h1 / n, 3), round(r5 / n, 3)


def measure(data=None) -> dict:
    """Every variant's hit@1 and recall@5 on the same candidates, and how many questions have
    their evidence among the first k candidates."""
    rows = collect(data)
    out = {}
    for name, fn in variants().items():
        out[name] = evaluate(rows, fn)
    shipped = variants()[SHIPPED]
    for c in CANDIDATE_COUNTS:
        if c != S.CANDIDATES:
            out[f"shipped, {c} candidates"] = evaluate(rows, shipped, c)
    ceiling = {f"k={k}": round(sum(any(r[0] in d["ev"] for r in d["by_count"][k]) for d in rows) / len(rows), 3)
               for k in CANDIDATE_COUNTS}
    return {"questions": len(rows),
            "variants": {k: {"hit@1": h1, "recall@5": r5} for k, (h1, r5) in out.items()},
            "candidates_holding_evidence": ceiling}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.data)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{res['questions']} questions (categories 1-4); variant: hit@1 recall@5 over the first {S.CANDIDATES} candidates"
          " and the memories that follow them in their threads")
    for k, v in res["variants"].items():
        print(f"  {k:<52} {v['hit@1']:.3f} {v['recall@5']:.3f}")
    print("  evidence among the first k candidates (with their thread followers): "
          + ", ".join(f"{k}: {v}" for k, v in res["candidates_holding_evidence"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

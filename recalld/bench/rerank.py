"""Background re-ranking on LoCoMo: the pre-step order next to the local model's re-ranked
order (recalld.judge.rerank: the search's ranking key + the model's gain on the words a memory
lacks) on the same questions.

    recalld bench rerank [--quick] [--data PATH] [--json]
    python3 -m recalld.bench.rerank [--n N] [--quick] [--top K] [--workers W] [--data PATH] [--json]

Every answerable question (categories 1-4) is asked unless --n samples a fixed random subset
(sampled with random.Random(0)); figures carry 95% Wilson intervals. The first K search results are re-ranked,
by default judge.max_candidates (5): what the daemon's pass re-ranks. Each question costs one
model decode per candidate plus one without a memory, so the questions are shared among W
worker processes (default: one per core), each with its own store and model on one thread.

The re-ranker can only reorder what search found: the share of questions with evidence among
the K candidates is its ceiling. Alongside, on the same candidates: the order the re-ranker
had before (query likelihood over every token + SEARCH_WEIGHT x the ranking key) and query
likelihood alone, and how many questions re-ranking wins and loses against the search order.
The re-ranked order is recalld.judge.rerank.rerank's own; the two others are computed here from
the same decode's numbers, exactly as named: query likelihood + SEARCH_WEIGHT x Hit.rank, and
query likelihood alone, highest first, unscored candidates after them in search order.
"""

import multiprocessing
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from recalld.bench import locomo
from recalld.bench.common import Unavailable, wilson
from recalld.core import settings
from recalld.core.search import search
from recalld.judge import rerank as reranker
from recalld.model import runtime as llm
from recalld.model.resolve import resolve

QUICK_N = 10

_state = {}  # per worker process: the store and the model


def _questions(convs: list, n: "int | None") -> list:
    """(conversation index, question index) of the answerable questions, or a seeded sample."""
    qs = [(ci, qi) for ci, c in enumerate(convs) for qi, q in enumerate(c.questions)
          if q.category in locomo.ANSWERABLE]
    if n is not None and n < len(qs):
        random.Random(0).shuffle(qs)
        qs = qs[:n]
    return qs


def _init(data):
    os.environ["RECALLD_LLM_THREADS"] = "1"
    asked, info = locomo.ask_all(data, categories=locomo.ANSWERABLE, keep_store=True)
    _state.update(info=info, rt=llm.require_runtime("judge", settings.DEFAULTS))


def _ask(job: tuple) -> list:
    top, batch = job
    info, rt = _state["info"], _state["rt"]
    out = []
    for ci, qi in batch:
        c = info["convs"][ci]
        q = c.questions[qi]
        id2dia = info["maps"][c.sample_id]
        hits = search(info["conn"], q.question, locomo.scope_for(c), limit=top)
        ms0 = rt.model_ms
        order = reranker.rerank(rt, q.question, hits, top=top)
        ranked = {r.hit.id: r for r in order}
        out.append({"category": q.category, "evidence": q.evidence, "model_ms": rt.model_ms - ms0,
                    "reranked": [id2dia[r.hit.id] for r in order],
                    "cands": [{"dia": id2dia[h.id], "rank": h.rank, "ql": ranked[h.id].ql,
                               "gain": ranked[h.id].gain} for h in hits]})
    return out


def _orders(row: dict, k: int) -> dict:
    """dia_ids in each order, re-ranking the first k candidates: the library's re-ranked order,
    and the two comparisons (unscored candidates after the scored, in search order)."""
    cands = row["cands"]
    head, tail = cands[:k], [c["dia"] for c in cands[k:]]

    def by(key):
        scored = [c for c in head if c["ql"] is not None]
        rest = [c["dia"] for c in head if c["ql"] is None]
        return [c["dia"] for c in sorted(scored, key=key)] + rest + tail

    return {
        "search": [c["dia"] for c in cands],
        "reranked": row["reranked"][:k] + tail,
        "ql_all_tokens + ranking key": by(lambda c: -(c["ql"] + reranker.SEARCH_WEIGHT * c["rank"])),
        "ql_only": by(lambda c: -c["ql"]),
    }


def _figures(rows: list, k: int) -> dict:
    n = len(rows)
    counts, wins, losses = {}, {}, {}
    for r in rows:
        orders = _orders(r, k)
        first = locomo.hit_at(orders["search"], r["evidence"], 1)
        for name, order in orders.items():
            h1 = locomo.hit_at(order, r["evidence"], 1)
            a, b = counts.setdefault(name, [0, 0])
            counts[name] = [a + h1, b + locomo.hit_at(order, r["evidence"], 5)]
            wins[name] = wins.get(name, 0) + (h1 and not first)
            losses[name] = losses.get(name, 0) + (first and not h1)
    out = {name: {"hit@1": round(h1 / n, 3), "hit@1 95% CI": wilson(h1, n), "recall@5": round(r5 / n, 3),
                  **({} if name == "search" else {"wins_vs_search": wins[name], "losses_vs_search": losses[name]})}
           for name, (h1, r5) in counts.items()}
    out["ceiling"] = {"hit@1": round(sum(locomo.hit_at([c["dia"] for c in r["cands"]], r["evidence"], k)
                                         for r in rows) / n, 3)}
    return out


def run(quick: bool = False, data=None, n: "int | None" = None, workers: "int | None" = None,
        top: "int | None" = None) -> dict:
    n = QUICK_N if quick and n is None else n
    choice = resolve("judge", settings.DEFAULTS)
    if not choice.available:
        raise Unavailable(f"no local model, re-ranking not measured: {choice.reason}")
    convs = locomo.load(data)
    qs = _questions(convs, n)
    workers = max(1, min(workers or os.cpu_count() or 1, len(qs)))
    top = top or int(settings.DEFAULTS["judge"]["max_candidates"])
    jobs = [(top, qs[i::workers * 4]) for i in range(workers * 4)]  # small batches even out the workers
    # Spawned, not forked: a forked worker would inherit the parent's loaded model (if an
    # earlier benchmark left one) without its worker thread. Spawned workers find functions by
    # module name, so they are named through the package even when this file runs as __main__.
    from recalld.bench import rerank as worker

    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=worker._init, initargs=(data,)) as pool:
        rows = [row for part in pool.map(worker._ask, jobs) for row in part]
    wall = time.perf_counter() - t0
    decodes = sum(len(r["cands"]) + 1 for r in rows)  # + the need without a memory
    out = {"available": True, "model": Path(choice.path).name, "questions": len(rows),
           "sampled": n is not None and n < len(_questions(convs, None)), "candidates": top,
           "search_weight": reranker.SEARCH_WEIGHT, "workers": workers, "wall_s": round(wall, 1),
           "model_ms_per_decode": round(sum(r["model_ms"] for r in rows) / max(1, decodes), 1)}
    out["sample"] = fig = _figures(rows, top)
    by_cat = {}
    for cat in locomo.ANSWERABLE:
        sub = [r for r in rows if r["category"] == cat]
        if sub:
            f = _figures(sub, top)
            by_cat[locomo.CATEGORIES[cat]] = {"n": len(sub), "search": f["search"]["hit@1"],
                                              "reranked": f["reranked"]["hit@1"]}
    out["hit@1_by_category"] = by_cat
    out["plots"] = [{"file": "rerank.png", "kind": "bar",
                     "title": f"Background re-ranking ({len(rows)} questions, top {top})",
                     "x": ["hit@1", "recall@5"], "ylabel": "share of questions",
                     "series": {"pre-step search": [fig["search"]["hit@1"], fig["search"]["recall@5"]],
                                "re-ranked (local model)": [fig["reranked"]["hit@1"], fig["reranked"]["recall@5"]]}}]
    return out


OPTIONS = (
    ("--n", {"type": int, "dest": "n", "help": "a seeded sample of this many questions (default: all)"}),
    ("--top", {"type": int, "dest": "top", "help": "candidates re-ranked (default: judge.max_candidates)"}),
    ("--workers", {"type": int, "dest": "workers", "help": "worker processes (default: one per core)"}),
)

if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("rerank", OPTIONS))

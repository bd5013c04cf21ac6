"""Small stores on LoCoMo: does the pre-step floor recall what a store of 1, 3 or 10 memories
holds, and stay quiet on questions it does not hold? (issue 16, docs/evaluation.md "A small
store")

For each answerable question (categories 1-4) whose evidence is at most `size` turns, a fresh
store holds its evidence turns plus other turns of the same conversation up to `size`
memories (default memory text, no threads: the store is a handful of notes, not a session).
Then:
- answerable: the question is asked; it counts when an evidence turn is injected (among the
  first max_results hits at or above the floor), as the pre-step hook would;
- unrelated: UNRELATED_PER_STORE questions of other conversations are asked of the same store;
  each counts when nothing is injected.

Each weighting is measured on the same stores: the store's statistics alone (PRIOR_MEMORIES
0), the blend with an empty prior (the pseudo-memories alone, every word equally rare), and
the shipped prior at several strengths.

    python3 scripts/small_store_eval.py [--data PATH] [--stores N] [--json]
    python3 scripts/small_store_eval.py --hook ROUNDS

--hook times the whole `recalld hook prompt-submit` process (the issue's store of one memory,
tests/test_small_store.py; a prompt whose terms are all looked up but that injects nothing
with or without the prior), interleaved with the same process reading no
prior table and with a bare `python3 -c pass`, and the table's load alone in process.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from recalld import memories  # noqa: E402
from recalld.bench import locomo  # noqa: E402
from recalld.core import db, search as search_mod, settings  # noqa: E402
from recalld.core.scope import Scope  # noqa: E402

SIZES = (1, 3, 10)
UNRELATED_PER_STORE = 5
STRENGTHS = (100, 300, 1000, 3000)  # and the shipped search.PRIOR_MEMORIES
FLOORS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)


def stores(convs: list, size: int, n: int, seed: int = 16) -> list:
    """[(conversation, memory texts, {text index: dia_id}, question)] for up to n questions."""
    r = random.Random(seed + size)
    cases = []
    for conv in convs:
        by_id = {t.dia_id: t for t in conv.turns}
        for q in conv.questions:
            if q.category in locomo.ANSWERABLE and len(set(q.evidence)) <= size:
                cases.append((conv, by_id, q))
    r.shuffle(cases)
    out = []
    for conv, by_id, q in cases[:n]:
        ev = sorted(set(q.evidence))
        others = [t.dia_id for t in conv.turns if t.dia_id not in ev]
        chosen = ev + r.sample(others, size - len(ev))
        r.shuffle(chosen)
        out.append((conv, [locomo.memory_text(by_id[d]) for d in chosen], chosen, q))
    return out


def _injected(hits: list, floor: float, limit: int) -> list:
    # recalld.hook.run.memory_items: 3 * max_results candidates, the first max_results above the floor
    return [h for h in hits if h.score >= floor][:limit]


def measure(cases: list, convs: list, weightings: dict, floors=FLOORS, seed: int = 16) -> dict:
    """{weighting: {floor: {"answerable injected", "unrelated silent"}}}."""
    limit = int(settings.DEFAULTS["max_results"])
    r = random.Random(seed)
    # The same unrelated questions for every weighting.
    unrelated = []
    for conv, _, _, _ in cases:
        pool = [q.question for c in convs if c.sample_id != conv.sample_id for q in c.questions
                if q.category in locomo.ANSWERABLE]
        unrelated.append(r.sample(pool, UNRELATED_PER_STORE))
    conns = []
    for conv, texts, _, _ in cases:
        conn = db.connect(":memory:")
        sc = Scope(project=f"/small/{conv.sample_id}", agent="main")
        memories.import_jsonl(conn, [json.dumps({"text": t}) for t in texts], sc)
        conns.append((conn, sc))
    out = {}
    for name, (strength, prior) in weightings.items():
        search_mod.PRIOR_MEMORIES, search_mod._PRIOR = strength, prior
        asked = []
        for (conn, sc), (_, _, ids, q), others in zip(conns, cases, unrelated):
            hits = search_mod.search(conn, q.question, sc, limit=3 * limit)
            elsewhere = [search_mod.search(conn, u, sc, limit=3 * limit) for u in others]
            asked.append((hits, set(ids[i] for i, d in enumerate(ids) if d in q.evidence), ids, elsewhere))
        out[name] = {}
        for f in floors:
            got = silent = 0
            for hits, evidence, ids, elsewhere in asked:
                got += any(ids[h.id - 1] in evidence for h in _injected(hits, f, limit))
                silent += sum(not _injected(h, f, limit) for h in elsewhere)
            out[name][f"{f:.2f}"] = {"answerable injected": round(got / len(cases), 3),
                                     "unrelated silent": round(silent / (len(cases) * UNRELATED_PER_STORE), 3)}
    for conn, _ in conns:
        conn.close()
    return out


def _lookup_us() -> float:
    """Median microseconds per prior_of() lookup, over the stems of the SUBJECTS' prompts."""
    import sqlite3

    from recalld.core.query_terms import Stemmer, informative, tokens
    from test_small_store import SUBJECTS

    words = informative([w for _, p in SUBJECTS for w in tokens(p)])
    stems = [x for x in Stemmer(sqlite3.connect(":memory:")).stem_each(words) if x]
    runs = []
    for _ in range(20):
        t0 = time.perf_counter()
        for x in stems:
            search_mod.prior_of(x)
        runs.append((time.perf_counter() - t0) * 1e6 / len(stems))
    return round(statistics.median(runs), 2)


HOOK = ("import sys, recalld.core.search as s\n"
        "if sys.argv[1] == 'off': s.PRIOR_PATH = '/nonexistent/wordprior.txt'\n"
        "from recalld.hook.run import main\n"
        "sys.exit(main(['prompt-submit'], exit_process=True))\n")


def hook_timing(rounds: int) -> dict:
    """{variant: p50 ms} of the hook process, and the table's load in process."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from test_small_store import SUBJECTS, UNRELATED  # noqa: E402  (realistic memories and prompts)

    from recalld.bench.common import child_env, interleaved, process

    tmp = tempfile.mkdtemp(prefix="recalld-prior-")
    project = os.path.join(tmp, "proj")
    os.makedirs(project)
    subprocess.run(["git", "init", "-q", project], check=True)
    env = child_env(RECALLD_HOME=os.path.join(tmp, "home"), HOME=tmp)
    env.pop("RECALLD_AGENT", None)
    lines = json.dumps({"text": SUBJECTS[0][0]}) + "\n"  # the one-memory store
    subprocess.run([sys.executable, "-m", "recalld", "import", "-"], input=lines.encode(), cwd=project,
                   env=env, check=True, capture_output=True)
    def prompt(text):
        return json.dumps({"session_id": "prior-bench", "cwd": project, "hook_event_name": "UserPromptSubmit",
                           "prompt": text}).encode()

    # Timed on a prompt that injects nothing either way (its six terms are still looked up),
    # so the two differ only by the table; the Ledgerly prompt shows what the table changes.
    stdin = prompt(UNRELATED[2])
    on = process([sys.executable, "-c", HOOK, "on"], stdin, env)
    off = process([sys.executable, "-c", HOOK, "off"], stdin, env)
    bare = process([sys.executable, "-c", "pass"], b"", env)
    injected = {}
    for name, variant in (("with prior", "on"), ("without prior", "off")):
        # Also warms the page cache and the store.
        p = subprocess.run([sys.executable, "-c", HOOK, variant], input=prompt(SUBJECTS[0][1]), env=env,
                           capture_output=True)
        injected[name] = p.returncode == 0 and "Ledgerly" in p.stdout.decode()
    bare()
    t = interleaved({"with prior": on, "without prior": off, "bare python": bare}, rounds)
    loads = []
    for _ in range(max(rounds, 20)):
        search_mod._PRIOR = None
        t0 = time.perf_counter()
        search_mod._load_prior()
        loads.append((time.perf_counter() - t0) * 1000)
    out = {k: round(statistics.median(v), 2) for k, v in t.items()}
    # Each round runs both hooks back to back: their difference is what the table costs.
    out["with - without, median of rounds"] = round(statistics.median(
        a - b for a, b in zip(t["with prior"], t["without prior"])), 2)
    out["injects the Ledgerly memory"] = injected
    out["table load in process"] = round(statistics.median(loads), 3)
    out["table bytes"] = os.path.getsize(search_mod.PRIOR_PATH)
    out["table stems"] = len(search_mod.prior_table())
    out["lookup us"] = _lookup_us()
    out["rounds"] = rounds
    out["load average"] = round(os.getloadavg()[0], 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="LoCoMo JSON (default: the development split in ../shared)")
    ap.add_argument("--stores", type=int, default=300, help="stores (questions) per size")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--hook", type=int, metavar="ROUNDS", help="time the hook process instead")
    a = ap.parse_args(argv)
    if a.hook:
        print(json.dumps(hook_timing(a.hook), indent=2))
        return 0
    convs = locomo.load(a.data)
    shipped = search_mod.PRIOR_MEMORIES
    table = search_mod._load_prior()
    # "empty prior": the blend with a table that lists no real stem (every word equally rare),
    # what the pseudo-memories alone do.
    weightings = {"store alone": (0, table), f"empty prior, {shipped}": (shipped, "~ 99\n")}
    weightings.update({f"word prior, {k}": (k, table) for k in sorted({*STRENGTHS, shipped})})
    result = {"floor": settings.DEFAULTS["floor"], "shipped strength": shipped, "sizes": {}}
    for size in SIZES:
        cases = stores(convs, size, a.stores)
        result["sizes"][size] = {"stores": len(cases), **measure(cases, convs, weightings)}
    search_mod.PRIOR_MEMORIES, search_mod._PRIOR = shipped, table
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    at = f"{float(settings.DEFAULTS['floor']):.2f}"
    for size, row in result["sizes"].items():
        print(f"{size} memories ({row['stores']} stores), answerable injected / unrelated silent:")
        print(f"  {'floor':20s} " + "  ".join(f"{f:>11.2f}" for f in FLOORS))
        for name, by_floor in row.items():
            if name != "stores":
                print(f"  {name:20s} " + "  ".join(
                    f"{v['answerable injected']:.3f}/{v['unrelated silent']:.3f}" + ("*" if f == at else " ")
                    for f, v in by_floor.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""In-process pre-step search latency at 1k / 10k / 100k synthetic coding-agent memories.

    recalld bench search [--quick] [--json]

The store mixes the shared synthetic memories (recalld/bench/synth.py: components, tools, error
strings, flags, decisions) with memories that carry rarer vocabulary (random identifiers,
paths, hashes), spread over several projects so the scope filter does real work. Prompts are
the synthetic prompts plus verbatim-style ones (a pasted traceback, a long instruction, a
stopword-only line). Next to recalld.search.search, the same run times plain FTS5 (the query's
words OR-ed, ranked by bm25, no scope filter) on the same database: the floor any search on
this index pays. Target: search p50 under 5 ms at 100k memories.

The same memories are also written as threads (each run of 20 consecutive writes is one
thread; see docs/architecture.md, "Threads"), and the same prompts timed on that store:
thread context reads the candidates' followers and predecessors, which a store without
threads skips.
"""

import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from recalld import memories
from recalld.bench import synth
from recalld.bench.common import interleaved, load_average, pct
from recalld.core import db, settings
from recalld.core.scope import Scope
from recalld.core.search import search
from recalld.core.query_terms import STOPWORDS

FLOOR = float(settings.DEFAULTS["floor"])
PROJECTS = ["/src/ledgerly", "/src/ledgerly-web", "/src/infra", "/src/dotfiles", "/src/scratch"]
WORDS = ("account balance batch cursor deadline export fixture flaky gateway header index invoice "
         "journal ledger lock migration payload queue quota refund replica retry rollback schema "
         "session shard snapshot token tracing vendor webhook worker timezone currency rounding "
         "tenant pagination backoff idempotency checksum manifest sidecar daemon socket").split()


def rare_memory(r: random.Random) -> dict:
    ident = "".join(w.capitalize() for w in r.sample(WORDS, 2)) + r.choice(["Service", "Error", "Handler", "Config"])
    path = f"{r.choice(['src', 'lib', 'tests'])}/{r.choice(WORDS)}/{r.choice(WORDS)}_{r.randrange(10**4)}.py"
    sha = "%07x" % r.randrange(16 ** 7)
    text = r.choice([
        f"{ident} in {path} swallows the {r.choice(WORDS)} {r.choice(WORDS)}; commit {sha} added a test.",
        f"Run `make {r.choice(WORDS)}-{r.choice(WORDS)}` before touching {path}, or the {r.choice(WORDS)} check fails.",
        f"We chose {r.choice(WORDS)} {r.choice(WORDS)} over {r.choice(WORDS)} for {ident} (see {sha}).",
        f"The env var {r.choice(WORDS).upper()}_{r.choice(WORDS).upper()} must be set for {path} to load.",
    ])
    return {"text": text, "kind": r.choice(memories.KINDS)}


THREAD_LEN = 20


def build(conn, n: int, seed: int = 5, threaded: bool = False) -> float:
    r = random.Random(seed)
    common = synth.memories(n // 2, seed=seed)
    mems = common + [rare_memory(r) for _ in range(n - len(common))]
    r.shuffle(mems)
    # 60% in the benchmarked project, the rest spread over four others, interleaved in time
    # as several projects' sessions are.
    owner = [PROJECTS[0] if r.random() < 0.6 else r.choice(PROJECTS[1:]) for _ in mems]
    lines = [json.dumps({**m, "cwd": o, **({"thread": f"w{i // THREAD_LEN}"} if threaded else {})})
             for i, (m, o) in enumerate(zip(mems, owner))]  # a cwd outside git is its own project
    t = time.perf_counter()
    for i in range(0, len(lines), 5000):
        memories.import_jsonl(conn, lines[i:i + 5000], Scope(PROJECTS[0], "main"))
    return time.perf_counter() - t


def prompts(n: int = 60) -> list:
    ps = synth.prompts(n - 6, seed=3)
    ps += [
        "Traceback (most recent call last):\n  File \"src/ledger/models_12.py\", line 88, in flush\n"
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked",
        "ok thanks, go ahead",
        "please run alembic downgrade -1 on the billing database and check ledgerly/legacy/ for the old schema",
        "Can you refactor the whole ingest pipeline so that every worker retries with exponential backoff, "
        "the scheduler stops overlapping with backups, the exporter keeps cents as integers, the webhook "
        "handler validates signatures, and the docs explain the new --dry-run flag? Also add tests.",
        "what is the capital of France",
        "IdempotencyCheckerService throws on replay",
    ]
    return ps


def plain_fts(conn, text: str, k: int = 15) -> list:
    words = [w for w in dict.fromkeys(re.findall(r"[^\W_]+", text.lower())) if w not in STOPWORDS]
    if not words:
        return []
    match = " OR ".join('"' + w + '"' for w in words)
    return conn.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?",
                        (match, k)).fetchall()


def run(quick: bool = False) -> dict:
    sizes = [1000, 10_000] if quick else [1000, 10_000, 100_000]
    rounds = 3 if quick else 5
    ps = prompts()
    sc = Scope(PROJECTS[0], "main")
    out = {"prompts": len(ps), "rounds": rounds, "load_average_at_start": load_average(), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="recalld-bench-search-") as tmp:
        for n in sizes:
            for threaded in (False, True):
                conn = db.connect(Path(tmp) / f"s{n}{'t' * threaded}.db")
                conn.execute("PRAGMA synchronous = OFF")  # build speed only; durability is bench_core's
                seconds = build(conn, n, threaded=threaded)
                if not threaded:
                    build_s = seconds  # the figure stays the plain store's, as before
                conn.close()
            # fresh connections, as a hook has
            conn, tconn = db.connect(Path(tmp) / f"s{n}.db"), db.connect(Path(tmp) / f"s{n}t.db")
            for p in ps[:5]:  # warm the page cache the same for all three
                search(conn, p, sc, limit=15)
                search(tconn, p, sc, limit=15)
                plain_fts(conn, p)
            # interleaved prompt by prompt, so the machine's drift hits all three alike
            t = interleaved({"ours": lambda i: search(conn, ps[i % len(ps)], sc, limit=15, floor=0.0),
                             "threaded": lambda i: search(tconn, ps[i % len(ps)], sc, limit=15, floor=0.0),
                             "base": lambda i: plain_fts(conn, ps[i % len(ps)])}, rounds * len(ps))
            ours, base, threaded_lat = t["ours"], t["base"], t["threaded"]
            tconn.close()
            injected = sum(bool(search(conn, p, sc, limit=5, floor=FLOOR)) for p in ps)
            out["sizes"][str(n)] = {
                "build_s": round(build_s, 1),
                "search_p50_ms": round(statistics.median(ours), 3), "search_p99_ms": round(pct(ours, 0.99), 3),
                "plain_fts_p50_ms": round(statistics.median(base), 3), "plain_fts_p99_ms": round(pct(base, 0.99), 3),
                "threaded_store_search_p50_ms": round(statistics.median(threaded_lat), 3),
                "threaded_store_search_p99_ms": round(pct(threaded_lat, 0.99), 3),
                "prompts_injecting_at_floor": f"{injected}/{len(ps)}",
            }
            conn.close()
            out["sizes"][str(n)]["load_average"] = load_average()
            print(f"{n:>7}: {json.dumps(out['sizes'][str(n)])}", flush=True)
    xs = [int(n) for n in out["sizes"]]
    out["target"] = "search p50 < 5 ms at 100k"
    out["plots"] = [{"file": "search_latency.png", "kind": "line", "logx": True,
                     "title": "In-process search latency vs store size", "x": xs,
                     "xlabel": "memories", "ylabel": "ms",
                     "series": {k: [out["sizes"][str(n)][k] for n in xs]
                                for k in ("search_p50_ms", "search_p99_ms", "threaded_store_search_p50_ms",
                                          "plain_fts_p50_ms", "plain_fts_p99_ms")}}]
    return out


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("search"))

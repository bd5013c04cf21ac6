"""The embedder: time per embedding (query- and memory-length texts), the backfill rate on a
synthetic store, dense_search at 10k / 100k vectors (plain and with a warm VectorIndex), and
the memory each takes.

    python3 -m recalld.bench.embed [--quick] [--json] [--backfill N] [--sizes 10000,100000]

The memories are recalld/bench/search.py's store (synthetic coding-agent memories over five
projects). Query-length texts are its prompts cut to their first 12 words; memory-length texts
are its memories. The backfill embeds the first `backfill` memories of a `backfill_store`
store with recalld.model.vectors.embed_pending, as `recalld embed --backfill` does (batches
of 32, a transaction each). dense_search is timed on random unit vectors (its cost does not
depend on what the vectors say), the plain scan and the warm index interleaved query by query.
BLAS threads: whatever OPENBLAS_NUM_THREADS says when the process starts (recalld.model.embed
sets 1 unless told otherwise); the figures record it.
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from recalld.bench import search as bench_search
from recalld.bench.common import Unavailable, load_average, pct
from recalld.core import db
from recalld.core.scope import Scope


def _rss_mb(field: str = "VmRSS") -> "float | None":
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _ms(values) -> dict:
    return {"p50_ms": round(statistics.median(values), 2), "p90_ms": round(pct(values, 0.9), 2),
            "p99_ms": round(pct(values, 0.99), 2), "n": len(values)}


def _timed(fn, n: int) -> dict:
    """Wall and CPU ms per call: on a shared machine the wall time says what a caller waited,
    the process's CPU time what the work itself costs (one BLAS thread: about the wall time on
    an idle core)."""
    wall, cpu = [], []
    for i in range(n):
        w, c = time.perf_counter(), time.process_time()
        fn(i)
        cpu.append((time.process_time() - c) * 1000)
        wall.append((time.perf_counter() - w) * 1000)
    return {**_ms(wall), "cpu_p50_ms": round(statistics.median(cpu), 2), "cpu_p90_ms": round(pct(cpu, 0.9), 2)}


def _merge(one_call_timings: list) -> dict:
    wall = [t["p50_ms"] for t in one_call_timings]
    cpu = [t["cpu_p50_ms"] for t in one_call_timings]
    return {**_ms(wall), "cpu_p50_ms": round(statistics.median(cpu), 2), "cpu_p90_ms": round(pct(cpu, 0.9), 2)}


def _texts():
    mems = [m["text"] for m in bench_search.synth.memories(200, seed=5)]
    queries = [" ".join(p.split()[:12]) for p in bench_search.prompts()]
    return mems, queries


def run(quick: bool = False, backfill: "int | None" = None, backfill_store: int = 10_000,
        sizes: "str | None" = None, parts: str = "embed,backfill,dense") -> dict:
    from recalld.model import embed, resolve  # before numpy: embed sets the BLAS threads

    choice = resolve.resolve_embedder({"models": {}})
    if not choice.available:
        raise Unavailable(f"no embedder: {choice.reason}")
    sizes_l = [int(s) for s in sizes.split(",")] if sizes else ([10_000] if quick else [10_000, 100_000])
    backfill = backfill if backfill is not None else (300 if quick else backfill_store)
    out = {"blas_threads": embed.BLAS_THREADS, "cpus": os.cpu_count(),
           "sched_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
           "load_average_at_start": load_average()}

    rss0 = _rss_mb()
    t = time.perf_counter()
    enc = embed.load(choice)
    out["load"] = {"ms": round((time.perf_counter() - t) * 1000, 1), "rss_before_mb": rss0,
                   "rss_after_mb": _rss_mb(), "source": choice.source, "model": enc.model}

    todo = set(parts.split(","))
    mems, queries = _texts()
    if "embed" in todo:
        out["per_embedding"] = _per_embedding(enc, mems, queries, quick)
        print(f"per embedding: {out['per_embedding']}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="recalld-bench-embed-") as tmp:
        if "backfill" in todo:
            out["backfill"] = _backfill(enc, Path(tmp), backfill, backfill_store)
            print(f"backfill: {out['backfill']}", file=sys.stderr, flush=True)
        if "dense" in todo:
            out["dense_search"] = _dense(enc, Path(tmp), sizes_l, quick)
        if "served" in todo:
            out["served_answer"] = _served(enc, Path(tmp), sizes_l, quick)
    out["peak_rss_mb"] = _rss_mb("VmHWM")
    return out


def _per_embedding(enc, mems, queries, quick) -> dict:
    qtok = [len(x) for x in enc.tokens(queries)]
    mtok = [len(x) for x in enc.tokens(mems)]
    enc.embed(queries[:4])  # first-call costs out of the way
    rounds = 2 if quick else 5
    t_q = _timed(lambda i: enc.embed_one(queries[i % len(queries)]), rounds * len(queries))
    single_m = _timed(lambda i: enc.embed_one(mems[i % len(mems)]), len(mems))
    t, c = time.perf_counter(), time.process_time()
    enc.embed(mems)
    batched = (time.perf_counter() - t) * 1000 / len(mems)
    batched_cpu = (time.process_time() - c) * 1000 / len(mems)
    return {
        "query": {**t_q, "tokens_mean": round(statistics.mean(qtok), 1)},
        "memory_one_at_a_time": {**single_m, "tokens_mean": round(statistics.mean(mtok), 1)},
        "memory_batched_32_ms_each": round(batched, 2), "memory_batched_32_cpu_ms_each": round(batched_cpu, 2),
        "load_average": load_average(),
        "rss_after_mb": _rss_mb(), "peak_rss_mb": _rss_mb("VmHWM"),
    }


def _backfill(enc, tmp: Path, backfill: int, backfill_store: int) -> dict:
    from recalld.model import vectors

    conn = db.connect(tmp / "backfill.db")
    conn.execute("PRAGMA synchronous = OFF")  # build speed only
    bench_search.build(conn, backfill_store)
    conn.execute("PRAGMA synchronous = FULL")  # the backfill writes as `recalld embed` does
    done = [0]

    class _Stop:
        def is_set(self):
            return done[0] >= backfill

    t, c = time.perf_counter(), time.process_time()
    written, _ = vectors.embed_pending(conn, enc, stop=_Stop(), progress=lambda n: done.__setitem__(0, done[0] + n))
    secs, cpu = time.perf_counter() - t, time.process_time() - c
    texts = [r[0] for r in conn.execute("SELECT m.text FROM memories m JOIN memory_vectors v ON v.memory_id = m.id")]
    tokens = sum(len(x) for x in enc.tokens(texts))
    conn.close()
    return {"store_memories": backfill_store, "embedded": written, "seconds": round(secs, 1),
            "per_second": round(written / secs, 1), "cpu_seconds": round(cpu, 1),
            "per_cpu_second": round(written / cpu, 1), "tokens_mean": round(tokens / max(written, 1), 1),
            "cpu_ms_per_token": round(cpu * 1000 / max(tokens, 1), 3),
            "projected_s_for_store": round(backfill_store / (written / secs)),
            "projected_cpu_s_for_store": round(backfill_store / (written / cpu)),
            "peak_rss_mb": _rss_mb("VmHWM"), "load_average": load_average()}


def _dense(enc, tmp: Path, sizes_l: list, quick: bool) -> dict:
    import numpy as np

    from recalld.model import vectors

    out = {}
    rng = np.random.default_rng(0)
    sc = Scope(bench_search.PROJECTS[0], "main")
    where, params = sc.where("m")
    for n in sizes_l:
        conn = db.connect(tmp / f"d{n}.db")
        conn.execute("PRAGMA synchronous = OFF")
        build_s = bench_search.build(conn, n)
        ids = [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY id")]
        for s in range(0, len(ids), 5000):
            v = rng.standard_normal((len(ids[s:s + 5000]), enc.dim)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            vectors.write(conn, "bench", zip(ids[s:s + 5000], v))
        qs = rng.standard_normal((60, enc.dim)).astype(np.float32)
        qs /= np.linalg.norm(qs, axis=1, keepdims=True)
        rss = _rss_mb()
        index = vectors.VectorIndex("bench", enc.dim)
        t = time.perf_counter()
        index.refresh(conn)
        cold = (time.perf_counter() - t) * 1000
        index_mb = round(_rss_mb() - rss, 1)
        vectors.dense_search(conn, qs[0], sc, 10, model="bench")  # page cache warm for both
        plain, warm = [], []
        for i in range(20 if quick else 60):  # interleaved, so the machine's drift hits both alike
            plain.append(_timed(lambda _: vectors.dense_search(conn, qs[i % 60], sc, 10, model="bench"), 1))
            warm.append(_timed(lambda _: vectors.dense_search(conn, qs[i % 60], sc, 10, model="bench",
                                                              index=index), 1))
        same = all([m for m, _ in vectors.dense_search(conn, q, sc, 10, model="bench")]
                   == [m for m, _ in vectors.dense_search(conn, q, sc, 10, model="bench", index=index)]
                   for q in qs[:10])
        in_scope = conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]
        out[str(n)] = {"vectors": len(ids), "in_scope": in_scope, "store_build_s": round(build_s, 1),
                       "plain": _merge(plain), "index": _merge(warm), "index_cold_refresh_ms": round(cold, 1),
                       "index_rss_mb": index_mb, "same_results": same, "load_average": load_average()}
        out[str(n)]["graph"] = _graph(conn, enc, index, qs, sc, 20 if quick else 60)
        print(f"dense {n}: {out[str(n)]}", file=sys.stderr, flush=True)
        del index
        conn.close()
    return out

class _Pass:
    """What QueryServer reads of the embedding pass, holding the encoder loaded here."""

    def __init__(self, enc):
        self.encoder = enc
        self.state = {"available": True, "running": True, "reason": None}


def _served(enc, tmp: Path, sizes_l: list, quick: bool) -> dict:
    """What the semantic step adds to a hook run the daemon serves, in this process as the
    daemon's hook thread runs it (semantic.start -> the lexical search -> semantic.ranked):
    `lexical` the search alone (the hook without the channel), `new prompt` the whole step for
    a prompt not seen before (its embedding made on the query server's thread meanwhile),
    `repeated` one whose vector is cached, `scan` a new prompt with the graphs set aside. Real
    query embeddings, random unit vectors for the memories, interleaved round by round."""
    import threading

    import numpy as np

    from recalld.core.search import search
    from recalld.daemon.query import QueryServer
    from recalld.model import vectors

    out = {}
    rng = np.random.default_rng(1)
    sc = Scope(bench_search.PROJECTS[0], "main")
    prompts = bench_search.prompts()
    for n in sizes_l:
        conn = db.connect(tmp / f"s{n}.db")
        conn.execute("PRAGMA synchronous = OFF")
        bench_search.build(conn, n)
        ids = [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY id")]
        for s in range(0, len(ids), 5000):
            v = rng.standard_normal((len(ids[s:s + 5000]), enc.dim)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            vectors.write(conn, enc.model, zip(ids[s:s + 5000], v))
        srv = QueryServer(_Pass(enc))
        srv.enc, srv.index = enc, vectors.VectorIndex(enc.model, enc.dim)
        srv.index.refresh(conn)
        t = time.perf_counter()
        srv.index.build_ann(srv.lock)
        build_s = time.perf_counter() - t
        stop = threading.Event()
        path = tmp / f"s{n}.db"  # the embedding thread's own connection, to this store
        th = threading.Thread(target=srv._embed_jobs, args=(stop, lambda: (db.connect(path), None)), daemon=True)
        th.start()
        graphs = {k: (p.ann, p.ann_n) for k, p in srv.index.parts.items()}

        def step(text, fresh=True, graph=True):
            if fresh:
                srv._cache.clear()
            for k, p in srv.index.parts.items():
                p.ann, p.ann_n = graphs[k] if graph else (None, 0)

            def call(_):
                job = srv.ask(text, sc, 15, 0.3)
                hits = search(conn, text, sc, limit=15, floor=0.0)
                if job.answer(conn, hits, time.perf_counter() + 2.0) is None:
                    raise RuntimeError("no answer in 2 s")
            return call

        step(prompts[0])(0)
        res = {"lexical": [], "new prompt": [], "repeated": [], "scan": []}
        for i in range(20 if quick else 60):
            text = prompts[i % len(prompts)]
            res["lexical"].append(_timed(lambda _: search(conn, text, sc, limit=15, floor=0.0), 1))
            res["new prompt"].append(_timed(step(text), 1))
            res["repeated"].append(_timed(step(text, fresh=False), 1))
            res["scan"].append(_timed(step(text, graph=False), 1))
        for k, p in srv.index.parts.items():
            p.ann, p.ann_n = graphs[k]
        stop.set()
        srv._jobs.put(None)
        th.join(5)
        out[str(n)] = {"vectors": len(ids), "graph_build_s": round(build_s, 1),
                       **{k: _merge(v) for k, v in res.items()}, "load_average": load_average()}
        print(f"served {n}: {out[str(n)]}", file=sys.stderr, flush=True)
        conn.close()
    return out


def _graph(conn, enc, index, qs, sc, rounds: int) -> dict:
    """The same searches once the index has its approximate graphs (VectorIndex.build_ann),
    interleaved with an index of the same rows that scans, and how often the graph's top 20
    is the scan's (its candidates are rescored exactly, so a found id has the exact score)."""
    import threading

    from recalld.model import vectors

    if vectors._ann_class() is None:
        return {"skipped": "usearch is not installed"}
    t = time.perf_counter()
    built = index.build_ann(threading.Lock())
    build_s = time.perf_counter() - t
    if not built:
        return {"skipped": f"no partition of {vectors.ANN_MIN_ROWS} rows"}
    scan = vectors.VectorIndex("bench", enc.dim)
    scan.refresh(conn)
    g, e, same = [], [], []
    for i in range(rounds):
        q = qs[i % len(qs)]
        e.append(_timed(lambda _: vectors.dense_search(conn, q, sc, 20, model="bench", index=scan), 1))
        g.append(_timed(lambda _: vectors.dense_search(conn, q, sc, 20, model="bench", index=index), 1))
        a = {m for m, _ in vectors.dense_search(conn, q, sc, 20, model="bench", index=scan)}
        b = {m for m, _ in vectors.dense_search(conn, q, sc, 20, model="bench", index=index)}
        same.append(len(a & b) / max(1, len(a)))
    return {"build_s": round(build_s, 1), "partitions": built, "scan": _merge(e), "graph": _merge(g),
            "top20_recall": round(statistics.fmean(same), 4)}


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("embed", options=(
        ("--backfill", {"type": int, "dest": "backfill", "help": "memories to embed in the backfill (default: the whole store)"}),
        ("--backfill-store", {"type": int, "dest": "backfill_store", "default": 10_000, "help": "memories in the backfill's store"}),
        ("--sizes", {"dest": "sizes", "help": "dense_search store sizes, comma-separated (default 10000,100000)"}),
        ("--parts", {"dest": "parts", "default": "embed,backfill,dense", "help": "which parts to run (embed, backfill, dense, served)"}),
    )))

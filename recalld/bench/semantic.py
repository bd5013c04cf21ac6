"""The semantic pre-step: recall of the lexical search, the dense search and the shipped fusion
(recalld.daemon.query.fuse) on LoCoMo dev and the coding dev sets, the fusion's weights fitted
and validated across groups; and its cost: the hook's whole process with the daemon answering
and with it stopped at 1k / 10k / 100k memories (interleaved, one run), the query embedding,
the socket round trip, and the backfill rate.

    python3 -m recalld.bench.semantic [--quick] [--json] [--data LOCOMO.json]

Coding sets (recalld/bench/data/): coding_needs.json (three projects' memories and needs as
the daemon's need detector writes them, some unanswerable), semantic_needs.json (prompts
over the same memories: paraphrased, lexical, unanswerable) and tells_needs.json (three more
projects' memories and prompts), read as recalld/bench/tells.py reads them. Every answerable need is also
asked in the next project's scope, where nothing answers it (`unrelated`). hit@1 on the coding
sets is what the hook would inject first (the floor applied); on LoCoMo it is the first result
at floor 0, as recalld/bench/locomo.py counts it. The dense side on LoCoMo embeds all 2,760
turns (minutes on one core); --quick takes the first conversation only.

The fit: a grid over the fusion's five constants; a setting is admissible when, on the groups
it is fitted on, lexical-style needs stay perfect, unanswerable and unrelated needs inject no
more often than the lexical search alone, and LoCoMo hit@1 and recall@5 do not drop; of those,
the best paraphrased hit@1 wins. Validated leaving one coding project (and as large a share of
LoCoMo's conversations) out in turn; the shipped constants are reported beside the fits, not replaced
by them. `injection_gates`: the best any gate of the family coverage + a x cosine + b x z >= t
injects on paraphrased needs while staying as quiet as lexical search (an upper bound: fitted
on all the coding needs at once).

The recall part's embeddings are kept between runs in the temporary directory
(recalld-bench-embeddings.sqlite, keyed by model and text; delete it to embed afresh). The
cost part also reports one answer's CPU in the daemon and the warm dense scan (wall and CPU)
at each size, and at the largest a project of a tenth as many memories added to that store.
"""

import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from recalld.bench.common import Unavailable, child_env, interleaved, pct, process, restore_home

DATA = Path(__file__).resolve().parent / "data"
FLOOR = 0.3
GRID = {"weight": (2.0, 4.0, 8.0), "base": (0.0, 0.2), "dense_floor": (0.55, 0.6, 0.65), "margin": (0.05, 0.1),
        "strong": (0.27, 0.3, 0.33, 0.36, 0.4)}

# The wait the semantic path's process cost is measured with.
MEASURED_WAIT_MS = 60
RRF_K = 60  # reciprocal-rank fusion's usual constant, not fitted


class Lex:
    """What fuse() reads of a search Hit."""

    __slots__ = ("id", "score", "rank")

    def __init__(self, id, score, rank):
        self.id, self.score, self.rank = id, score, rank


class Cached:
    """An encoder whose embeddings are kept between runs in a file under the temporary
    directory, keyed by the model and the text: LoCoMo's 2,760 turns take minutes to embed
    on one core, and the figures do not depend on when they were embedded."""

    def __init__(self, enc, path: "Path | None" = None):
        import sqlite3

        self.enc, self.model, self.dim = enc, enc.model, enc.dim
        self.path = path or Path(tempfile.gettempdir()) / "recalld-bench-embeddings.sqlite"
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS vec (model TEXT, text TEXT, v BLOB, PRIMARY KEY (model, text))")
        self.hits = self.misses = 0

    def embed(self, texts, batch: int = 32):
        import numpy as np

        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        missing = []
        for i, t in enumerate(texts):
            r = self.db.execute("SELECT v FROM vec WHERE model = ? AND text = ?", (self.model, t)).fetchone()
            if r is None:
                missing.append(i)
            else:
                out[i] = np.frombuffer(r[0], dtype="<f4")
        if missing:
            vecs = self.enc.embed([texts[i] for i in missing], batch=batch)
            with self.db:
                for i, v in zip(missing, vecs):
                    out[i] = v
                    self.db.execute("INSERT OR REPLACE INTO vec VALUES (?,?,?)",
                                    (self.model, texts[i], np.ascontiguousarray(v, dtype="<f4").tobytes()))
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        return out

    def embed_one(self, text: str):
        return self.embed([text])[0]


def shipped() -> dict:
    from recalld.daemon import query

    return {"weight": query.DENSE_WEIGHT, "base": query.DENSE_BASE, "dense_floor": query.DENSE_FLOOR,
            "margin": query.DENSE_MARGIN, "strong": query.STRONG_LEXICAL}


# --- collecting both rankings ----------------------------------------------------------------


def _both(conn, enc, text, sc, qvec):
    from recalld.core.search import search
    from recalld.model import vectors

    from recalld.daemon.query import DENSE_K

    lex = [Lex(h.id, h.score, h.rank) for h in search(conn, text, sc, limit=20, floor=0.0)]
    dense = vectors.dense_search(conn, qvec, sc, DENSE_K, model=enc.model)
    got = {i for i, _ in dense}
    return lex, dense, vectors.cosines(conn, qvec, [h.id for h in lex if h.id not in got], model=enc.model)


def coding_sets() -> list:
    """[(project dict, [(style, need, expected keys)])] for every coding project."""
    out = []
    extra = json.loads((DATA / "semantic_needs.json").read_text(encoding="utf-8"))["needs"]
    for name in ("coding_needs.json", "tells_needs.json"):
        for p in json.loads((DATA / name).read_text(encoding="utf-8"))["projects"]:
            needs = [(n.get("style") or ("judge-set" if n["expected"] else "unanswerable"), n["need"], n["expected"])
                     for n in p["needs"]]
            needs += [(n["style"], n["need"], n["expected"]) for n in extra if n["project"] == p["name"]]
            out.append((p, needs))
    return out


def collect_coding(enc, tmp: Path) -> list:
    from recalld import memories
    from recalld.core import db
    from recalld.core.scope import Scope
    from recalld.model import vectors

    conn = db.connect(tmp / "coding.db")
    conn.execute("PRAGMA synchronous = OFF")
    projs, needs = {}, []
    for p, pneeds in coding_sets():
        sc = Scope(p["project"], "main")
        lines = [json.dumps({"text": m["text"], "kind": m["kind"]}) for m in p["memories"]]
        res = memories.import_jsonl(conn, lines, sc, source="bench")
        projs[p["name"]] = (p, sc, {m["key"]: r.memory["id"] for m, r in zip(p["memories"], res)})
        needs += [(p["name"], style, text, exp) for style, text, exp in pneeds]
    vectors.embed_pending(conn, enc)
    names = list(projs)
    rows = []
    for g, style, text, exp in needs:
        _, sc, key2id = projs[g]
        q = enc.embed_one(text)
        lex, dense, cos = _both(conn, enc, text, sc, q)
        rows.append({"group": g, "style": style, "expected": [key2id[k] for k in exp], "lex": lex, "dense": dense,
                     "cos": cos})
        if exp:  # the same need where nothing answers it
            other = projs[names[(names.index(g) + 1) % len(names)]][1]
            olex, odense, ocos = _both(conn, enc, text, other, q)
            rows.append({"group": g, "style": "unrelated", "expected": [], "lex": olex, "dense": odense, "cos": ocos})
    conn.close()
    return rows


def collect_locomo(enc, tmp: Path, data=None, quick: bool = False) -> list:
    from recalld.bench import locomo
    from recalld.core import db
    from recalld.model import vectors

    convs = locomo.load(data)
    if quick:
        convs = convs[:1]
    conn = db.connect(tmp / "locomo.db")
    conn.execute("PRAGMA synchronous = OFF")
    maps = {c.sample_id: locomo.index(conn, c) for c in convs}
    vectors.embed_pending(conn, enc)
    rows = []
    for ci, c in enumerate(convs):
        sc = locomo.scope_for(c)
        id2dia = maps[c.sample_id]
        for q in c.questions:
            if q.category not in locomo.ANSWERABLE:
                continue
            ev = set(q.evidence)
            lex, dense, cos = _both(conn, enc, q.question, sc, enc.embed_one(q.question))
            rows.append({"group": c.sample_id, "style": "locomo", "expected": [m for m, d in id2dia.items() if d in ev],
                         "lex": lex, "dense": dense, "cos": cos})
    conn.close()
    return rows


# --- scoring ---------------------------------------------------------------------------------


def ranked(row: dict, how: str, params: dict, floor: "float | None") -> list:
    """Memory ids in the order `how` ("lexical", "dense", "fused") would inject them at `floor`
    (dense alone has no floor: its order is what it is compared by)."""
    from recalld.daemon.query import fuse

    if how == "lexical":
        return [h.id for h in row["lex"] if floor is None or h.score >= floor]
    if how == "dense":
        return [i for i, _ in row["dense"]]
    if how == "rrf":  # reciprocal-rank fusion: nothing fitted, an order only (no floor)
        score: dict = {}
        for ids in ([h.id for h in row["lex"]], [i for i, _ in row["dense"]]):
            for r, i in enumerate(ids):
                score[i] = score.get(i, 0.0) + 1.0 / (RRF_K + r + 1)
        return sorted(score, key=lambda i: -score[i])
    return [i for i, _, _ in fuse(row["lex"], row["dense"], floor, 20, cos=row.get("cos"), **params)]


def measure(rows: list, params: dict) -> dict:
    """{style: {figure: value}}. Answerable styles: hit@1 / hit@5 of each ranking's order (no
    floor: what the targets and recalld/bench/locomo.py count) and, for lexical and
    fused, `injected hit@1`: the first memory the hook would inject at the shipped floor is
    the answer. Quiet styles (unanswerable, unrelated): the share that injects anything."""
    out = {}
    for st in sorted({r["style"] for r in rows}):
        rs = [r for r in rows if r["style"] == st]
        fig = {"n": len(rs)}
        for how in ("lexical", "dense", "fused", "rrf"):
            if st in ("unanswerable", "unrelated"):
                if how in ("lexical", "fused"):
                    fig[f"{how} injects"] = round(sum(bool(ranked(r, how, params, FLOOR)) for r in rs) / len(rs), 3)
                continue
            got = [ranked(r, how, params, None) for r in rs]
            fig[f"{how} hit@1"] = round(sum(bool(g) and g[0] in r["expected"] for g, r in zip(got, rs)) / len(rs), 3)
            fig[f"{how} hit@5"] = round(sum(any(i in r["expected"] for i in g[:5]) for g, r in zip(got, rs)) / len(rs), 3)
            if how in ("lexical", "fused") and st != "locomo":
                inj = [ranked(r, how, params, FLOOR) for r in rs]
                fig[f"{how} injected hit@1"] = round(
                    sum(bool(g) and g[0] in r["expected"] for g, r in zip(inj, rs)) / len(rs), 3)
        out[st] = fig
    return out


def admissible(m: dict) -> bool:
    ok = True
    if "lexical" in m:
        ok &= m["lexical"]["fused injected hit@1"] >= m["lexical"]["lexical injected hit@1"]
        ok &= m["lexical"]["fused hit@1"] >= m["lexical"]["lexical hit@1"]
    for st in ("unanswerable", "unrelated"):
        if st in m:
            ok &= m[st]["fused injects"] <= m[st]["lexical injects"]
    if "locomo" in m:
        ok &= m["locomo"]["fused hit@1"] >= m["locomo"]["lexical hit@1"]
        ok &= m["locomo"]["fused hit@5"] >= m["locomo"]["lexical hit@5"]
    return bool(ok)


def fit(rows: list) -> "tuple[dict | None, dict | None]":
    """The admissible grid point with the best paraphrased hit@1 (then paraphrased injected
    hit@1, the judge set's hit@1, LoCoMo's hit@1 and recall@5)."""
    best, best_key = None, None
    for vals in itertools.product(*GRID.values()):
        params = dict(zip(GRID, vals))
        m = measure(rows, params)
        if not admissible(m):
            continue
        p, j, lo = m.get("paraphrased", {}), m.get("judge-set", {}), m.get("locomo", {})
        key = (p.get("fused hit@1", 0), p.get("fused injected hit@1", 0), j.get("fused hit@1", 0),
               lo.get("fused hit@1", 0), lo.get("fused hit@5", 0))
        if best_key is None or key > best_key:
            best, best_key = (params, m), key
    return best if best else (None, None)


GATE_GRID = {"cos": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0), "z": (0.0, 0.05, 0.1, 0.15, 0.2),
             "t": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)}


def gates(rows: list, params: dict) -> dict:
    """How far any injection gate of one family can go on the coding sets: a candidate (in the
    fused order) is injected when coverage + a x cosine + b x z >= t, z being its cosine's
    standing among the query's dense top k ((c - mean) / sd), so that "one memory is clearly
    about this" counts apart from "all are about equally close". The best paraphrased injected
    hit@1 (then the judge set's) of the settings that stay quiet, fitted on all the coding
    needs at once: an upper bound for this family, not a held-out figure."""
    from recalld.daemon.query import fuse

    styles = ("paraphrased", "judge-set", "lexical", "unanswerable", "unrelated")
    feats = {st: [] for st in styles}
    for r in rows:
        if r["style"] not in feats:
            continue
        cs = [c for _, c in r["dense"]]
        mu = statistics.fmean(cs) if cs else 0.0
        sd = statistics.pstdev(cs) if len(cs) > 1 else 0.0
        cos = {**(r.get("cos") or {}), **dict(r["dense"])}
        cov = {h.id: h.score for h in r["lex"]}
        cands = [(i, cov.get(i, 0.0), cos.get(i, 0.0)) for i, _, _ in fuse(r["lex"], r["dense"], None, 20,
                                                                          cos=r.get("cos"), **params)]
        feats[r["style"]].append((set(r["expected"]), [(i, v, c, (c - mu) / sd if sd > 0 else 0.0)
                                                       for i, v, c in cands]))
    quiet = {st: sum(bool(ranked(r, "lexical", params, FLOOR)) for r in rows if r["style"] == st)
             for st in ("unanswerable", "unrelated")}
    best = None
    for a, b, t in itertools.product(*GATE_GRID.values()):
        got = {}
        for st, L in feats.items():
            firsts = [next((i for i, v, c, z in cands if v + a * c + b * z >= t), None) for _, cands in L]
            got[st] = sum(f is not None and (not exp or f in exp) for (exp, _), f in zip(L, firsts))
        if got["unanswerable"] > quiet["unanswerable"] or got["unrelated"] > quiet["unrelated"] \
                or got["lexical"] < len(feats["lexical"]):
            continue
        key = (got["paraphrased"], got["judge-set"])
        if best is None or key > best[0]:
            best = (key, {"cos": a, "z": b, "t": t}, got)
    if best is None:
        return {"best": None}
    (_, _), setting, got = best
    n = {st: len(L) for st, L in feats.items()}
    return {"best": setting, "paraphrased injected hit@1": round(got["paraphrased"] / n["paraphrased"], 3),
            "judge-set injected hit@1": round(got["judge-set"] / n["judge-set"], 3),
            "unanswerable injects": round(got["unanswerable"] / n["unanswerable"], 3),
            "unrelated injects": round(got["unrelated"] / n["unrelated"], 3)}


def validate(rows: list) -> list:
    """Leave one coding project (and every n-th LoCoMo conversation, n the number of coding
    projects) out: fit on the rest, measure on what was left out."""
    coding = sorted({r["group"] for r in rows if r["style"] != "locomo"})
    convs = sorted({r["group"] for r in rows if r["style"] == "locomo"})
    folds = []
    for k, g in enumerate(coding):
        held = {g} | {c for j, c in enumerate(convs) if j % len(coding) == k}
        params, _ = fit([r for r in rows if r["group"] not in held])
        test = [r for r in rows if r["group"] in held]
        folds.append({"held_out": sorted(held), "fitted": params,
                      "held_out_figures": measure(test, params) if params else None,
                      "shipped_on_held_out": measure(test, shipped())})
    return folds


# --- cost --------------------------------------------------------------------------------------


class _Pass:
    """The embedding pass as QueryServer reads it, holding an encoder loaded here."""

    def __init__(self, enc):
        self.encoder = enc
        self.state = {"available": True, "running": True, "reason": None}


def _random_vectors(conn, enc, seed: int = 3) -> int:
    """A unit vector for every memory: the scan's cost does not depend on what they say, and
    embedding 100k memories would take an hour here (the backfill rate below says how long)."""
    import numpy as np

    from recalld.model import vectors

    rng = np.random.default_rng(seed)
    ids = [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY id")]
    for s in range(0, len(ids), 5000):
        chunk = ids[s:s + 5000]
        m = rng.standard_normal((len(chunk), enc.dim)).astype(np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        vectors.write(conn, enc.model, zip(chunk, m))
    return len(ids)


def _recall_paths(conn, since: int) -> "tuple[dict, dict]":
    """How many runs each path served, and the hook's own time (its receipt's duration, what
    the deadline bounds: the interpreter's start is not in it) by path."""
    out: dict = {}
    own: dict = {}
    for d, ms in conn.execute("SELECT detail, duration_ms FROM receipts WHERE id > ? AND hook = 'prompt-submit'",
                              (since,)):
        k = (json.loads(d or "{}")).get("recall", "none")
        out[k] = out.get(k, 0) + 1
        own.setdefault(k, []).append(ms)
    return out, {k: _ms(v) for k, v in own.items()}


def _ms(xs) -> dict:
    return {"p50_ms": round(statistics.median(xs), 2), "p99_ms": round(pct(xs, 0.99), 2), "n": len(xs)}


def _scan(conn, enc, sc, prompts, rounds: int) -> dict:
    """The warm dense search alone (VectorIndex, the scope's top DENSE_K), wall and this
    thread's CPU time: the CPU figure is what other work on the machine does not inflate."""
    from recalld.daemon.query import DENSE_K
    from recalld.model import vectors

    index = vectors.VectorIndex(enc.model, enc.dim)
    qs = enc.embed(prompts[:8])
    vectors.dense_search(conn, qs[0], sc, DENSE_K, model=enc.model, index=index)  # the first fill
    wall, cpu = [], []
    for i in range(rounds):
        t, c = time.perf_counter(), time.thread_time()
        vectors.dense_search(conn, qs[i % len(qs)], sc, DENSE_K, model=enc.model, index=index)
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return {**_ms(wall), "cpu_p50_ms": round(statistics.median(cpu), 2), "rows": index.n}


def _answer_cpu(conn, enc, sc, prompts, rounds: int) -> dict:
    """What one answer costs the daemon in CPU (the query's embedding, both searches, the
    fusion), on a server of its own in this thread: wall times here grow with the machine's
    load, this does not."""
    from recalld.daemon.query import QueryServer
    from recalld.model import vectors

    srv = QueryServer(_Pass(enc))
    srv.index = vectors.VectorIndex(enc.model, enc.dim)
    srv.index.refresh(conn)
    ms = []
    for i in range(rounds):
        c = time.thread_time()
        srv.answer(conn, enc, {"q": prompts[i % len(prompts)], "project": sc.project, "agent": sc.agent,
                               "limit": 15, "floor": FLOOR})
        ms.append((time.thread_time() - c) * 1000)
    return {"p50_ms": round(statistics.median(ms), 2), "p99_ms": round(pct(ms, 0.99), 2), "n": len(ms)}


def _other_project(conn, enc, tmp: Path, prompts, n: int, rounds: int) -> dict:
    """The warm dense search for a project of `n` memories added to the store: the index
    scans that project's rows (and the shared ones), not the whole store."""
    from recalld import memories
    from recalld.bench import synth
    from recalld.core.scope import Scope

    sc = Scope(str(tmp / "another-project"), "main")
    lines = [json.dumps(m) for m in synth.memories(n)]
    for i in range(0, len(lines), 5000):
        memories.import_jsonl(conn, lines[i:i + 5000], sc)
    total = _random_vectors(conn, enc, seed=5)
    return {"store": total, "project": n, **_scan(conn, enc, sc, prompts, rounds)}


def latency(enc, quick: bool = False) -> dict:
    from recalld.bench import scale, synth
    from recalld.core import db, settings
    from recalld.core.scope import Scope
    from recalld.daemon.query import QueryServer
    from recalld.hook import semantic
    from recalld.model import vectors

    sizes = [1000, 10_000] if quick else [1000, 10_000, 100_000]
    runs = 10 if quick else 20
    prompts = synth.prompts(40)
    out = {"sizes": {}, "runs_per_size": runs, "deadline_ms": settings.DEFAULTS["deadline_ms"],
           "semantic_wait_ms": MEASURED_WAIT_MS}
    for p in prompts[:3]:  # warm
        enc.embed_one(p)
    t = interleaved({"embed": lambda i: enc.embed_one(prompts[i % len(prompts)])}, 20 if quick else 60)
    out["query_embed"] = _ms(t["embed"])
    tmp = Path(tempfile.mkdtemp(prefix="recalld-bench-semantic-"))
    project = str(tmp / "project")
    os.makedirs(project)
    saved = os.environ.get("RECALLD_HOME")
    try:
        for n in sizes:
            home = tmp / f"home-{n}"
            core.build_store(home, n, project)  # sets RECALLD_HOME
            settings.save({"semantic_wait_ms": MEASURED_WAIT_MS})  # the channel is off by default
            conn = db.connect()
            _random_vectors(conn, enc)
            server = QueryServer(_Pass(enc))
            stop = threading.Event()
            th = threading.Thread(target=server.serve, args=(stop, lambda: (db.connect(), None),
                                                             lambda c, i, w: (c, i)), daemon=True)
            th.start()
            for _ in range(6000):  # the index is filled before the socket appears
                if server.state["listening"] or not server.state["enabled"]:
                    break
                time.sleep(0.01)
            sock = semantic.socket_path()
            sc = Scope(project, "main")

            def round_trip(i):
                a = semantic.ask(prompts[i % len(prompts)], sc, 15, FLOOR, 1.0, time.perf_counter())
                if semantic.answer(a, time.perf_counter() + 1.0, time.perf_counter) is None:
                    raise RuntimeError(f"no semantic answer: {a.status}")
            round_trip(0)
            rt = interleaved({"rt": round_trip}, 20 if quick else 60)["rt"]
            scan = _scan(conn, enc, sc, prompts, 20 if quick else 60)
            cpu = _answer_cpu(conn, enc, sc, prompts, 20 if quick else 60)
            env = child_env(RECALLD_HOME=str(home))
            payloads = [json.dumps({"session_id": f"bench-{i}", "cwd": project, "hook_event_name": "UserPromptSubmit",
                                    "prompt": p}).encode() for i, p in enumerate(prompts)]

            def hook(up):
                def call(i):
                    if not up:
                        os.rename(sock, sock + ".away")  # the daemon "stopped": no socket file
                    try:
                        process(core.hook_command(), payloads[i % len(payloads)], env)()
                    finally:
                        if not up:
                            os.rename(sock + ".away", sock)
                return call
            since = conn.execute("SELECT coalesce(max(id), 0) FROM receipts").fetchone()[0]
            t = interleaved({"bare": process([sys.executable, "-c", "pass"], env=env),
                             "daemon up": hook(True), "daemon stopped": hook(False)}, runs)
            paths, own = _recall_paths(conn, since)
            stop.set()
            th.join(5)
            if n == sizes[-1]:  # a user's store holds every project's memories: scan one of them
                out["dense scan, another project"] = _other_project(conn, enc, tmp, prompts, n // 10, runs * 3)
            conn.close()
            out["sizes"][n] = {"hook daemon up": _ms(t["daemon up"]), "hook daemon stopped": _ms(t["daemon stopped"]),
                               "bare python": _ms(t["bare"]), "socket round trip": _ms(rt), "dense scan": scan,
                               "answer cpu": cpu,
                               "served by": paths, "hook's own time by path": own,
                               "server answered": server.state["answered"],
                               "index fill ms": server.state.get("index_fill_ms")}
        # the backfill: real embeddings of synthetic memories, as `recalld embed --backfill`
        home = tmp / "backfill"
        core.build_store(home, 160 if quick else 320, project)
        conn = db.connect()
        t0 = time.perf_counter()
        done, _ = vectors.embed_pending(conn, enc)
        s = time.perf_counter() - t0
        out["backfill"] = {"memories": done, "seconds": round(s, 2), "per_s": round(done / s, 1)}
        conn.close()
    finally:
        restore_home(saved)
        shutil.rmtree(tmp, ignore_errors=True)  # stores of up to 100k memories: hundreds of MB
    return out


# --- the report ------------------------------------------------------------------------------


def run(quick: bool = False, data=None, cost: bool = True) -> dict:
    from recalld.model import embed
    from recalld.model.errors import LLMError

    try:
        enc = embed.require()
    except LLMError as e:
        raise Unavailable(f"no embedder: {e}") from None
    tmp = Path(tempfile.mkdtemp(prefix="recalld-bench-semantic-recall-"))
    cached = Cached(enc)  # the recall figures only: the cost below times the encoder itself
    try:
        rows = collect_coding(cached, tmp)
        try:
            rows += collect_locomo(cached, tmp, data, quick)
        except Unavailable as e:
            locomo_skipped = str(e)
        else:
            locomo_skipped = None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"model": enc.model, "shipped": shipped(), "recall": measure(rows, shipped())}
    if locomo_skipped:
        out["locomo_skipped"] = locomo_skipped
    params, figs = fit(rows)
    out["fitted_on_all"] = {"params": params, "figures": figs}
    out["validation"] = validate(rows)
    # every coding project alone, under the shipped constants (fitted with it) and under RRF
    # (nothing fitted: each project's figure is a held-out one)
    out["by_project"] = {g: measure([r for r in rows if r["group"] == g], shipped())
                         for g in sorted({r["group"] for r in rows if r["style"] != "locomo"})}
    out["injection_gates"] = gates(rows, shipped())
    if cost:
        out["cost"] = latency(enc, quick)
    out["notes"] = [
        "hit@1 on the coding sets is what the hook injects first at the shipped floor "
        f"({FLOOR}); dense alone is its plain cosine order (no floor).",
        "hook times: the whole `recalld hook prompt-submit` process; 'daemon stopped' is the same "
        "store with the socket file moved away, interleaved with 'daemon up' in one run.",
    ]
    return out


def main(argv=None) -> int:
    from recalld.bench.run import main_one

    return main_one("semantic", argv=argv, options=(
        ("--no-cost", {"dest": "cost", "action": "store_false", "help": "the recall figures only"}),))


if __name__ == "__main__":
    sys.exit(main())

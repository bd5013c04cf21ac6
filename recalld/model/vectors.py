"""Memory vectors in the store, and the dense search over them.

The table is memory_vectors (migration 6): one row per memory, the embedder's model id, a
float32 blob, and `seq`, which every write advances. The embedding pass
(recalld.daemon.embedder) writes it; a memory write never does, so `remember` and `import`
stay as fast as they were and never wait for a model.

`dense_search(conn, query_vec, scope, limit, model=...)` scores the scope's current memories
by cosine (the vectors are unit length, so a dot product) and returns the best `limit`. Plain,
it reads the scope's vectors from SQLite on every call; with a `VectorIndex` (the daemon keeps
one warm) it scans matrices held in memory, one per project plus one for shared memories
(only the scope's two are multiplied), refreshed from the rows after its last `seq`. float16
storage would halve the memory but numpy has no float16 BLAS: a 100k scan took 181 ms of CPU
against 10 ms in float32 here. Either way the scope and validity are checked in SQL for every id it returns, so an
invalidated memory is never returned, however old the cache.

numpy is imported here, so this module is never on the hook's path.
"""

import os
import sqlite3

from recalld.core import scope as scope_mod
from recalld.model import embed as _embed  # noqa: F401  (first: it sets numpy's BLAS threads)

import numpy as np  # noqa: E402

BATCH = 32
# Memories read, embedded and written per transaction. The encoder sorts a page by length before
# it cuts batches of 32, so a page of 128 pads far less than 32 memories in id order do (their
# lengths vary 15-80 word pieces); a stop request waits for at most one page.
PAGE = 128
_SCOPES = {"agent": 0, "project": 1, "shared": 2}
# A partition of at least ANN_MIN_ROWS rows gets an approximate graph (usearch HNSW over int8
# copies of its vectors) once VectorIndex.build_ann has run; its candidates are rescored
# exactly in float32, so a graph changes only which rows are looked at, never a score. Below
# ANN_MIN_ROWS a scan is cheap enough that a graph buys little; ANN_OVERFETCH candidates per
# wanted id keep the exact top k nearly always (the figures: docs/evaluation.md, "The vector index").
ANN_MIN_ROWS = 20_000
ANN_OVERFETCH = 8
ANN_CONNECTIVITY = 16
ANN_EXPANSION = 64


def to_blob(vec) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def from_blob(blob: bytes, dim: "int | None" = None) -> np.ndarray:
    v = np.frombuffer(blob, dtype="<f4")
    if dim is not None and v.shape[0] != dim:
        raise ValueError(f"vector of {v.shape[0]} values where {dim} were expected")
    return v


# ---------------------------------------------------------------- what needs a vector


def pending(conn: sqlite3.Connection, model: str, after_id: int = 0, limit: int = BATCH) -> list:
    """[(memory id, text)] of current memories with no vector of `model`, ids above
    `after_id`, in id order (so a caller can page through a whole store in one pass)."""
    rows = conn.execute(
        "SELECT m.id, m.text FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id "
        "WHERE m.id > ? AND m.invalid_at IS NULL AND (v.memory_id IS NULL OR v.model != ?) "
        "ORDER BY m.id LIMIT ?", (after_id, model, limit)).fetchall()
    return [(r[0], r[1]) for r in rows]


def count_pending(conn: sqlite3.Connection, model: str) -> int:
    return conn.execute(
        "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id "
        "WHERE m.invalid_at IS NULL AND (v.memory_id IS NULL OR v.model != ?)", (model,)).fetchone()[0]


def counts(conn: sqlite3.Connection, model: "str | None" = None) -> dict:
    """How many current memories there are, how many have a vector of `model`, and the
    vectors of every model (an old model's rows wait to be replaced)."""
    current = conn.execute("SELECT count(*) FROM memories WHERE invalid_at IS NULL").fetchone()[0]
    by_model = {r[0]: r[1] for r in conn.execute("SELECT model, count(*) FROM memory_vectors GROUP BY model")}
    out = {"current_memories": current, "vectors_by_model": by_model}
    if model is not None:
        out["embedded"] = current - count_pending(conn, model)
        out["pending"] = current - out["embedded"]
    return out


def write(conn: sqlite3.Connection, model: str, rows) -> int:
    """Store [(memory id, vector)] in one transaction; returns how many rows it wrote. A memory
    that already has a vector of this model keeps it (a backfill and the daemon may meet)."""
    rows = list(rows)
    if not rows:
        return 0
    written = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        seq = conn.execute("SELECT coalesce(max(seq), 0) FROM memory_vectors").fetchone()[0]
        for mid, vec in rows:
            blob = to_blob(vec)
            seq += 1
            cur = conn.execute(
                "INSERT INTO memory_vectors (memory_id, model, dim, vec, seq) VALUES (?,?,?,?,?) "
                "ON CONFLICT(memory_id) DO UPDATE SET model = excluded.model, dim = excluded.dim, "
                "vec = excluded.vec, seq = excluded.seq WHERE memory_vectors.model != excluded.model",
                (int(mid), model, len(blob) // 4, blob, seq))
            written += cur.rowcount
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return written


def embed_pending(conn: sqlite3.Connection, encoder, *, after_id: int = 0, stop=None, progress=None,
                  batch: int = BATCH, page: int = PAGE) -> tuple:
    """Embed every current memory that lacks a vector of the encoder's model, id above
    `after_id`, a page per transaction. Returns (vectors written, the highest id handled).
    `stop` (an Event) is checked between pages; `progress(n)` is called after each."""
    done, last = 0, after_id
    while stop is None or not stop.is_set():
        rows = pending(conn, encoder.model, last, page)
        if not rows:
            break
        vecs = encoder.embed([t for _, t in rows], batch=batch)
        done += write(conn, encoder.model, zip((i for i, _ in rows), vecs))
        last = rows[-1][0]
        if progress is not None:
            progress(len(rows))
    return done, last


# ---------------------------------------------------------------- dense search


def _visible(conn: sqlite3.Connection, ids: list, sc: "scope_mod.Scope") -> set:
    """Which of `ids` the scope may read and are current, asked of the store now."""
    where, params = sc.where("m")
    out = set()
    for s in range(0, len(ids), 500):
        chunk = ids[s:s + 500]
        q = f"SELECT m.id FROM memories m WHERE m.id IN ({','.join('?' * len(chunk))}) AND {where}"
        out.update(r[0] for r in conn.execute(q, (*chunk, *params)))
    return out


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores, best first (ties: lower index first)."""
    k = min(k, scores.shape[0])
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
    return part[np.lexsort((part, -scores[part]))]


def dense_search(conn: sqlite3.Connection, query_vec, sc: "scope_mod.Scope", limit: int = 10, *,
                 model: str, index: "VectorIndex | None" = None) -> list:
    """[(memory id, cosine)] of the scope's current memories with a vector of `model`, best
    first, at most `limit`."""
    q = np.ascontiguousarray(query_vec, dtype=np.float32).reshape(-1)
    if limit <= 0:
        return []
    if index is not None:
        return index.search(conn, q, sc, limit)
    where, params = sc.where("m")
    rows = conn.execute(
        f"SELECT v.memory_id, v.vec FROM memory_vectors v JOIN memories m ON m.id = v.memory_id "
        f"WHERE v.model = ? AND v.dim = ? AND {where}", (model, q.shape[0], *params)).fetchall()
    if not rows:
        return []
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    mat = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), q.shape[0])
    scores = mat @ q
    best = _top(scores, limit)
    return [(int(ids[i]), float(scores[i])) for i in best]


def cosines(conn: sqlite3.Connection, query_vec, ids, *, model: str, index: "VectorIndex | None" = None) -> dict:
    """{memory id: cosine} for those of `ids` that have a vector of `model` (the fusion scores
    the lexical candidates that the dense top k left out by their own cosine, not by none).
    The ids come from a search that has already applied the scope; nothing here widens it."""
    q = np.ascontiguousarray(query_vec, dtype=np.float32).reshape(-1)
    ids = [int(i) for i in ids]
    if not ids:
        return {}
    if index is not None:
        index.refresh(conn)
        return index.cosines(q, ids)
    out = {}
    for s in range(0, len(ids), 500):
        chunk = ids[s:s + 500]
        for mid, blob in conn.execute(
                f"SELECT memory_id, vec FROM memory_vectors WHERE model = ? AND dim = ? "
                f"AND memory_id IN ({','.join('?' * len(chunk))})", (model, q.shape[0], *chunk)):
            out[mid] = float(from_blob(blob) @ q)
    return out


class _Part:
    """The rows of one partition: one project's agent and project memories, or every shared
    memory. A scope reads its project's partition and the shared one, so a search scans the
    rows it may see and not the whole store (a user's store holds every project's memories)."""

    def __init__(self, dim: int):
        self.n = 0
        self.ids = np.zeros(0, dtype=np.int64)
        self.mat = np.zeros((0, dim), dtype=np.float32)
        self.scope = np.zeros(0, dtype=np.int8)
        self.agent = np.zeros(0, dtype=np.int32)
        self.dead = np.zeros(0, dtype=bool)
        self.ann = None  # VectorIndex.build_ann's graph over rows [0, ann_n), or None: a scan
        self.ann_n = 0

    def add(self) -> int:
        if self.n >= self.ids.shape[0]:
            self.reserve(self.n + 1)
        self.n += 1
        return self.n - 1

    def reserve(self, need: int) -> None:
        if need > self.ids.shape[0]:
            cap = max(need, self.n + self.n // 4, 256)  # a quarter spare: 100k vectors are 154 MB already
            for name in ("ids", "scope", "agent", "dead"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=old.dtype)
                new[:self.n] = old[:self.n]
                setattr(self, name, new)
            mat = np.zeros((cap, self.mat.shape[1]), dtype=np.float32)
            mat[:self.n] = self.mat[:self.n]
            self.mat = mat


_SHARED = -1  # the partition key of shared memories (projects' keys are codes >= 0)


class VectorIndex:
    """One model's vectors of one store file, in memory, for repeated dense searches.

    The store's rules make the cache exact where it can be: a memory's scope, project and
    agent never change (memories_no_rewrite) and an invalid memory never becomes current
    again, so the cache keeps those per row and only learns of invalidations when it checks
    its candidates in SQL (and then remembers them). New and replaced vectors come from the
    rows after the last `seq` it read. The rows are kept in partitions (_Part), each a
    contiguous float32 matrix: a search multiplies the query with its project's and the
    shared one only. Not thread-safe: one per thread, or a lock around it."""

    def __init__(self, model: str, dim: int):
        self.model, self.dim = model, dim
        self._reset()

    def _reset(self) -> None:
        self.n = 0
        self.seq = 0
        self.file = None
        self.parts = {}  # partition key -> _Part
        self.row = {}  # memory id -> (its _Part, row)
        self.codes = {}  # project or agent string -> code

    def _code(self, s: str) -> int:
        return self.codes.setdefault(s, len(self.codes))

    @staticmethod
    def _file_id(conn: sqlite3.Connection):
        path = next((r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"), None)
        try:
            st = os.stat(path)
        except (OSError, TypeError):
            return (path, None)
        return (path, st.st_dev, st.st_ino)

    def refresh(self, conn: sqlite3.Connection) -> int:
        """Read the rows written since the last refresh; returns how many it read. A different
        store file (the daemon reopened one) starts the cache again."""
        f = self._file_id(conn)
        top = conn.execute("SELECT coalesce(max(seq), 0) FROM memory_vectors").fetchone()[0]
        if f != self.file or top < self.seq:
            self._reset()
            self.file = f
        if top == self.seq:
            return 0
        # room for every new row first: growing 100k rows a quarter at a time copied the
        # matrix some 25 times (a third of the first fill)
        for sc, project, count in conn.execute(
                "SELECT m.scope = 'shared', CASE WHEN m.scope = 'shared' THEN '' ELSE m.project END, count(*) "
                "FROM memory_vectors v JOIN memories m ON m.id = v.memory_id WHERE v.seq > ? AND v.seq <= ? "
                "GROUP BY 1, 2", (self.seq, top)):
            key = _SHARED if sc else self._code(project)
            part = self.parts.get(key)
            if part is None:
                part = self.parts[key] = _Part(self.dim)
            part.reserve(part.n + count)
        cur = conn.execute(
            "SELECT v.seq, v.memory_id, v.model, v.dim, v.vec, m.scope, m.project, m.agent, m.invalid_at IS NOT NULL "
            "FROM memory_vectors v JOIN memories m ON m.id = v.memory_id WHERE v.seq > ? AND v.seq <= ? "
            "ORDER BY v.seq", (self.seq, top))
        read = 0
        # row by row off the cursor: a fetchall of 100k blobs would hold a second copy (154 MB)
        for seq, mid, model, dim, blob, sc, project, agent, invalid in cur:
            read += 1
            self.seq = max(self.seq, seq)
            at = self.row.get(mid)
            if model != self.model or dim != self.dim:
                if at is not None:
                    at[0].dead[at[1]] = True  # replaced by another model's vector
                continue
            if at is None:
                key = _SHARED if sc == "shared" else self._code(project)
                part = self.parts.get(key)
                if part is None:
                    part = self.parts[key] = _Part(self.dim)
                r = part.add()
                at = self.row[mid] = (part, r)
                self.n += 1
                part.ids[r] = mid
                part.scope[r] = _SCOPES.get(sc, -1)
                part.agent[r] = self._code(agent)
            at[0].mat[at[1]] = from_blob(blob, dim)
            at[0].dead[at[1]] = bool(invalid)
        self.seq = max(self.seq, top)
        self._ann_catch_up()
        return read

    def cosines(self, q: np.ndarray, ids: list) -> dict:
        found = [(mid, self.row.get(mid)) for mid in ids]
        found = [(mid, at) for mid, at in found if at is not None and not at[0].dead[at[1]]]
        if q.shape[0] != self.dim:
            return {}
        return {mid: float(at[0].mat[at[1]] @ q) for mid, at in found}

    def _candidates(self, part: "_Part", key: int, q: np.ndarray, agent: int, k: int) -> tuple:
        """(rows, exact cosines, complete) of one partition: the rows the scope may read among
        about its best k (all of them when `complete`). A partition with an approximate graph
        (build_ann) gives ANN_OVERFETCH x k candidates from it, rescored exactly here in
        float32, plus every row added since the graph was built; a small one is scanned."""
        n = part.n
        ann, an = part.ann, part.ann_n
        if ann is not None and k * ANN_OVERFETCH < an:
            got = ann.search(q, k * ANN_OVERFETCH, threads=1)
            keys = np.asarray(got.keys, dtype=np.int64)
            rows = np.concatenate([keys[(keys >= 0) & (keys < an)], np.arange(an, n, dtype=np.int64)])
            scores, complete = part.mat[rows] @ q, False
        else:
            rows, scores, complete = np.arange(n, dtype=np.int64), part.mat[:n] @ q, True
        if key == _SHARED:
            mask = part.scope[rows] == 2
        else:
            s = part.scope[rows]
            mask = (s == 1) | ((s == 0) & (part.agent[rows] == agent))
        mask &= ~part.dead[rows]
        return rows[mask], scores[mask], complete

    def search(self, conn: sqlite3.Connection, q: np.ndarray, sc: "scope_mod.Scope", limit: int) -> list:
        self.refresh(conn)
        if self.n == 0 or q.shape[0] != self.dim:
            return []
        a = self.codes.get(sc.agent, -1)
        keys = [(key, self.parts.get(key)) for key in (self.codes.get(sc.project, -2), _SHARED)]
        keys = [(key, part) for key, part in keys if part is not None and part.n]
        k = limit
        while True:
            got = [(part, *self._candidates(part, key, q, a, k)) for key, part in keys]
            if not got:
                return []
            owner = np.concatenate([np.full(len(r), j, dtype=np.int64) for j, (_, r, _, _) in enumerate(got)])
            rows = np.concatenate([r for _, r, _, _ in got])
            scores = np.concatenate([s for _, _, s, _ in got])
            out, want = [], limit
            while len(out) < limit:
                best = [i for i in _top(scores, want) if scores[i] > -np.inf]
                if not best:
                    break
                at = [(got[owner[i]][0], int(rows[i])) for i in best]
                ids = [int(p.ids[r]) for p, r in at]
                ok = _visible(conn, ids, sc)
                for i, (p, r), mid in zip(best, at, ids):
                    if mid in ok:
                        out.append((mid, float(scores[i])))
                    else:
                        p.dead[r] = True  # invalidated since it was cached: stays so
                    scores[i] = -np.inf
                want = max(want, limit - len(out)) * 2
            if len(out) >= limit or all(c for _, _, _, c in got):
                out.sort(key=lambda t: -t[1])
                return out[:limit]
            k *= 4  # the graph's candidates were mostly invalid or another agent's: ask for more

    # --- the approximate graph ------------------------------------------------------------------

    def ann_wanted(self) -> list:
        """The partitions big enough for a graph that have none yet."""
        if _ann_class() is None:
            return []
        return [p for p in self.parts.values() if p.ann is None and p.n >= ANN_MIN_ROWS]

    def build_ann(self, lock, parts: "list | None" = None) -> int:
        """Build the graph of each partition in `parts` (default: ann_wanted()). The slow part
        (seconds at 100k rows) runs without `lock`, on the rows there when it began (a row of
        this model is written once, so they cannot change under it); the rows added meanwhile
        are added and the graph put in place under `lock`. Returns how many it built."""
        cls = _ann_class()
        if cls is None:
            return 0
        with lock:
            todo = [(p, p.n, p.mat) for p in (self.ann_wanted() if parts is None else parts)]
        built = 0
        for part, n0, mat in todo:
            g = cls(ndim=self.dim, metric="ip", dtype="i8", connectivity=ANN_CONNECTIVITY,
                    expansion_add=ANN_EXPANSION, expansion_search=ANN_EXPANSION)
            g.add(np.arange(n0, dtype=np.int64), mat[:n0], threads=1)
            with lock:
                if part.n > n0:
                    g.add(np.arange(n0, part.n, dtype=np.int64), part.mat[n0:part.n], threads=1)
                part.ann, part.ann_n = g, part.n
            built += 1
        return built

    def _ann_catch_up(self) -> None:
        for part in self.parts.values():
            if part.ann is not None and part.ann_n < part.n:
                part.ann.add(np.arange(part.ann_n, part.n, dtype=np.int64), part.mat[part.ann_n:part.n], threads=1)
                part.ann_n = part.n


def _ann_class():
    """usearch's Index, or None when it is not installed (then every search is a scan)."""
    global _ANN
    if _ANN is False:
        try:
            # onnxruntime (the embedder's runtime, recalld/model/onnxbert.py) first: loaded after
            # usearch 2.26 it crashed the process (onnxruntime 1.32; the other order is fine)
            import onnxruntime  # noqa: F401
        except ImportError:
            pass
        try:
            from usearch.index import Index
        except ImportError:
            Index = None
        _ANN = Index
    return _ANN


_ANN = False

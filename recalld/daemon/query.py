"""The daemon's side of the semantic channel: answer the hook's pre-step question with the
lexical ranking and the embedder's dense ranking fused.

One thread (`recalld-query`), started by the service when there is an embedding pass. It waits
for that pass to load the encoder (it shares it: no second copy of the weights), then listens
on RECALLD_HOME/run/query.sock (recalld.hook.semantic says the protocol): the directory is
made 0700 and must belong to this user, the socket is bound under a temporary name, made 0600
and renamed into place, so there is no moment at which another user could connect. No encoder,
no socket: the hook then sees `down` and answers lexically.
The warm VectorIndex is filled before the socket appears (the first fill reads every vector), so
no hook meets that first read; each request then reads only the vectors written since.

A request names the scope the hook resolved (project, agent). The answer is computed for that
scope only: the lexical side through core.search with that Scope, the dense side through
model.vectors' VectorIndex with the same rule (core/scope.py's `where`, checked again in SQL
for every id it returns), and the hook reads the ids back through its own scope filter too.

Requests are answered one at a time: an answer takes one query embedding and two searches, and
hook runs of different sessions rarely coincide; a hook that finds the daemon busy past its
wait answers lexically. A hook run the daemon serves asks in-process instead (`ask`, `Job`).
"""

import json
import queue
import socket
import sqlite3
import threading
import time

from recalld.core import receipts
from recalld.core.scope import Scope
from recalld.core.search import search
from recalld.daemon import sockets
from recalld.hook import semantic
from recalld.model import vectors

ACCEPT_S = 0.5  # how often an idle server looks at the stop event
READ_S = 1.0  # a client that connects and sends nothing is dropped after this
MAX_REQUEST = 256 * 1024
DENSE_K = 20  # dense candidates per question (the fusion reads the top few)
CACHE_SIZE = 256  # query vectors kept (1.5 KB each): a prompt asked again is not embedded again

# The fusion, fitted by recalld/bench/semantic.py on LoCoMo dev and the coding dev sets
# (docs/architecture.md, "The semantic pre-step"). Two decisions, kept apart:
# - the order: a memory's lexical ranking key (0 when lexical search did not find it) plus
#   DENSE_WEIGHT x how far its cosine is above DENSE_BASE, only when no lexical hit covers
#   STRONG_LEXICAL of the query (there the words already say which memory it is, and LoCoMo
#   loses when the embedding re-orders them);
# - what may be injected: what passes the lexical floor as before, plus the dense first
#   choice alone when its cosine clears DENSE_FLOOR and stands DENSE_MARGIN above the next
#   one (a paraphrase has one clear answer; an unrelated coding question is about equally
#   close to many memories).
# Fitted (recalld/bench/semantic.py; the figures: docs/evaluation.md, "The semantic pre-step"): the
# embedding re-orders only below 0.33 coverage, a little above the lexical floor (0.3): a
# paraphrase often shares one or two words with its answer, and LoCoMo's strong lexical hits
# stay as they are; a dense-only memory is injected only above 0.6 cosine, which no
# unanswerable coding need of the dev sets reached with a 0.1 lead. Every lexical candidate
# is scored with its own cosine, also when it is not in the dense top DENSE_K (0 before).
# Neither a gate on the cosine's standing among the query's candidates (its z-score) nor
# any mix of coverage and cosine injected more paraphrased answers without injecting on
# as many more unanswerable needs (the benchmark's `injection_gates`), so the gate stays.
DENSE_WEIGHT = 4.0
DENSE_BASE = 0.0
DENSE_FLOOR = 0.6
DENSE_MARGIN = 0.1
STRONG_LEXICAL = 0.33


def _fused(lex, dense, floor, cos, weight, base, dense_floor, margin, strong) -> tuple:
    """(whether the dense ranking re-orders, [(key, id, lexical, cosine, via, inject, bonus)]
    sorted best first): the two decisions of the fusion, described above."""
    top_lex = max((h.score for h in lex), default=0.0)
    use_dense = bool(dense) and top_lex < strong
    known = {**(cos or {}), **dict(dense)}
    gate = None
    if use_dense:
        first, c1 = dense[0]
        c2 = dense[1][1] if len(dense) > 1 else 0.0
        if c1 >= dense_floor and c1 - c2 >= margin:
            gate = first
    out, seen = [], set()
    for h in lex:
        seen.add(h.id)
        c = known.get(h.id)
        bonus = weight * (c - base) if use_dense and c is not None and c > base else 0.0
        out.append((h.rank + bonus, h.id, h.score, c, "both" if bonus > 0 else "lexical",
                    floor is None or h.score >= floor or h.id == gate, bonus))
    for mid, c in dense:
        if mid not in seen:
            bonus = weight * (c - base) if use_dense and c > base else 0.0
            out.append((bonus, mid, None, c, "dense", use_dense and (floor is None or mid == gate), bonus))
    out.sort(key=lambda t: -t[0])
    return use_dense, out


def order(lex: list, dense: list, floor: "float | None", limit: int, *, cos: "dict | None" = None,
          weight: float = DENSE_WEIGHT, base: float = DENSE_BASE, dense_floor: float = DENSE_FLOOR,
          margin: float = DENSE_MARGIN, strong: float = STRONG_LEXICAL) -> list:
    """The fused order of every candidate, best first, at most `limit`: [(memory id, key,
    lexical, cosine, via, inject)]. `lex` are search() Hits (found at floor 0), `dense` (id,
    cosine) best first, `cos` the cosines of lexical candidates the dense top k left out
    (vectors.cosines). `key` is what the order sorts by (the lexical ranking key plus the dense
    bonus), `lexical` the coverage (None: lexical search did not find it), `cosine` None when
    it was not scored densely, `via` "lexical", "dense" or "both" (which ranking placed it),
    `inject` whether it may be injected at `floor` (None: any may). Behind a strong lexical hit
    the dense candidates still come, last, with their cosines (key 0): evidence for a tell."""
    _, got = _fused(lex, dense, floor, cos, weight, base, dense_floor, margin, strong)
    return [(mid, round(key, 4), lexical, None if c is None else round(float(c), 4), via, inject)
            for key, mid, lexical, c, via, inject, _ in got[:limit]]


def fuse(lex: list, dense: list, floor: "float | None", limit: int, *, cos: "dict | None" = None,
         weight: float = DENSE_WEIGHT, base: float = DENSE_BASE, dense_floor: float = DENSE_FLOOR,
         margin: float = DENSE_MARGIN, strong: float = STRONG_LEXICAL) -> list:
    """[(memory id, score, via)] best first, at most `limit`, only what may be injected at
    `floor` (None: every candidate of the fused order, what the pre-step's tells choose from:
    behind a strong lexical hit the dense candidates come last, unweighted). The score is the
    lexical coverage plus the dense bonus (the receipt's figure)."""
    use_dense, got = _fused(lex, dense, floor, cos, weight, base, dense_floor, margin, strong)
    out = [(mid, round((lexical or 0.0) + bonus, 4), via) for _, mid, lexical, _, via, inject, bonus in got
           if floor is None or (inject and (via != "dense" or use_dense))]
    return out[:limit]


class Embedding:
    """One query text's vector, made on the server's thread: `done` is set once `vec` (or
    `error`) is there. Shared by every ask of the same text while it is being made."""

    __slots__ = ("text", "done", "vec", "error", "cached", "ms")

    def __init__(self, text: str):
        self.text, self.done, self.vec, self.error, self.cached, self.ms = text, threading.Event(), None, None, False, None


class Job:
    """A served hook's question, asked inside this process (recalld/hook/semantic.py's LOCAL):
    the server's own thread makes the query's embedding and then the dense ranking for the
    job's scope while the hook thread runs its lexical search; the hook thread then fuses its
    own hits with that ranking (`answer`), so the lexical search is not run twice and no socket
    or JSON is in between."""

    __slots__ = ("srv", "emb", "sc", "limit", "floor", "waited_ms", "ready", "dense", "dense_ms", "error")

    def __init__(self, srv, emb: Embedding, sc: Scope, limit: int, floor: float):
        self.srv, self.emb, self.sc, self.limit, self.floor = srv, emb, sc, limit, floor
        self.waited_ms = self.dense = self.dense_ms = self.error = None
        self.ready = threading.Event()  # set once `dense` (or `error`) is there

    def answer(self, conn, hits: "list | None", deadline: float) -> "dict | None":
        """The answer as the socket gives it ({"hits", "order", ...}), or None when the
        dense ranking is not ready by `deadline` (perf_counter); raises when it failed. `hits`:
        the hook's lexical candidates at floor 0 (None: searched here)."""
        t0 = time.perf_counter()
        ready = self.ready.wait(max(0.0, deadline - t0))
        t1 = time.perf_counter()
        self.waited_ms = round((t1 - t0) * 1000, 2)
        if not ready:
            return None
        if self.error is not None:
            raise RuntimeError(self.error)
        if hits is None:
            hits = search(conn, self.emb.text, self.sc, limit=self.limit, floor=0.0)
        out = self.srv.fused(conn, self.emb.vec, hits, self.sc, self.limit, self.floor, dense=self.dense)
        out["ms"] = {"waited": self.waited_ms, "embed": self.emb.ms, "cached": self.emb.cached,
                     "dense": self.dense_ms, "fuse": round((time.perf_counter() - t1) * 1000, 2)}
        return out


class QueryServer:
    def __init__(self, embedder, cfg: "dict | None" = None):
        self.embedder = embedder
        self.cfg = cfg
        self.index = None
        self.enc = None
        self.lock = threading.Lock()  # the index: the socket's thread, hook threads, the graph's builder
        self._cache: dict = {}  # query text -> its vector, oldest first
        self._inflight: dict = {}  # query text -> its Embedding while it is being made
        self._cache_lock = threading.Lock()
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self._builder = None
        self._touch = lambda: None
        self.state = {"enabled": True, "listening": False, "socket": None, "reason": None, "answered": 0,
                      "errors": 0, "last_ms": None, "last_answer_at": None, "error": None,
                      "served_in_process": 0, "cache_hits": 0, "ann_parts": 0, "ann_build_s": None}

    def snapshot(self) -> dict:
        return dict(self.state)

    # --- the socket ----------------------------------------------------------------------------

    def bind(self) -> socket.socket:
        """The listening socket, reachable by this user only (recalld/daemon/sockets.py)."""
        s, self._inode = sockets.bind(semantic.socket_path())
        self.state.update(listening=True, socket=semantic.socket_path())
        return s

    def unbind(self, s) -> None:
        try:
            sockets.unbind(s, semantic.socket_path(), getattr(self, "_inode", None))
        finally:
            self.state["listening"] = False

    # --- the threads ---------------------------------------------------------------------------

    def _encoder(self, stop):
        """The embedding pass's encoder once it is loaded; None when it never will be."""
        while not stop.is_set():
            enc = self.embedder.encoder
            if enc is not None:
                return enc
            st = self.embedder.state
            if st.get("available") is False or (st.get("available") is not None and not st.get("running")):
                self.state["reason"] = f"no embedder: {st.get('reason') or 'not loaded'}"
                return None
            stop.wait(0.1)
        return None

    def serve(self, stop, open_store, follow, log=None, touch=lambda: None) -> None:
        """The thread's body, until `stop` is set; `touch()` tells the daemon its status changed
        (listening, the graphs built: not every answer)."""
        self._touch = touch
        enc = self._encoder(stop)
        if enc is None:
            self.state["enabled"] = False
            touch()
            return
        conn, ident = open_store()
        self.enc = enc
        self.index = vectors.VectorIndex(enc.model, enc.dim)
        try:
            # filled before the socket exists: the first fill reads every vector, which a waiting
            # hook must not meet; later requests read only the rows written since
            t0 = time.perf_counter()
            with self.lock:
                self.index.refresh(conn)
            self.state.update(index_rows=self.index.n, index_fill_ms=round((time.perf_counter() - t0) * 1000, 1))
            worker = threading.Thread(target=self._embed_jobs, args=(stop, open_store, follow),
                                      name="recalld-query-embed", daemon=True)
            worker.start()
            semantic.LOCAL = self  # served hooks in this process ask here, not through the socket
            s = self.bind()
        except (OSError, sqlite3.Error) as e:
            self._stop_local()
            conn.close()
            self.state.update(enabled=False, reason=f"cannot listen: {type(e).__name__}: {e}"[:300])
            if log is not None:
                log.error("query_socket_failed", reason=self.state["reason"])
            touch()
            return
        if log is not None:
            log.info("query_listening", socket=self.state["socket"], model=enc.model, rows=self.index.n,
                     fill_ms=self.state["index_fill_ms"])
        touch()
        self._build_graphs(log)
        s.settimeout(ACCEPT_S)
        try:
            while not stop.is_set():
                try:
                    c, _ = s.accept()
                except socket.timeout:
                    self._build_graphs(log)
                    continue
                try:
                    try:
                        conn, ident = follow(conn, ident, "query")
                    except Exception as e:  # StoreLost: follow has stopped the daemon and said why
                        self.state.update(enabled=False, reason=f"store lost: {e}"[:300])
                        return
                    self.handle(c, conn, enc)
                finally:
                    c.close()
        finally:
            self._stop_local()
            self.unbind(s)
            try:
                conn.close()
            except Exception:
                pass

    def _stop_local(self) -> None:
        if semantic.LOCAL is self:
            semantic.LOCAL = None
        self._jobs.put(None)

    def _build_graphs(self, log) -> None:
        """Start the graph builder when a partition has grown big enough and none is running:
        until it is done, those partitions are scanned, as before."""
        if self._builder is not None and self._builder.is_alive():
            return
        with self.lock:
            wanted = self.index.ann_wanted()
        if not wanted:
            return

        def build():
            t0 = time.perf_counter()
            try:
                n = self.index.build_ann(self.lock, wanted)
            except Exception as e:  # a broken graph library: the scan stays
                self.state["error"] = f"graph: {type(e).__name__}: {e}"[:300]
                return
            self.state.update(ann_parts=self.state["ann_parts"] + n,
                              ann_build_s=round(time.perf_counter() - t0, 2))
            self._touch()
            if log is not None:
                log.info("query_graph_built", partitions=n, seconds=self.state["ann_build_s"])

        self._builder = threading.Thread(target=build, name="recalld-query-graph", daemon=True)
        self._builder.start()

    def _embed_jobs(self, stop, open_store, follow=None) -> None:
        """The embedding thread: query embeddings (Embedding) and, behind them in the same
        queue, each served prompt's dense ranking (Job), on a store connection of its own
        (`open_store()`, followed to a new file by `follow` as the daemon's threads are)."""
        conn = ident = None
        try:
            while not stop.is_set():
                item = self._jobs.get()
                if item is None:
                    return
                if isinstance(item, Job):
                    try:
                        if conn is None:
                            conn, ident = open_store()
                        elif follow is not None:
                            conn, ident = follow(conn, ident, "query")
                        self._dense(conn, item)
                    except Exception as e:  # StoreLost, a broken index: this prompt answers lexically
                        item.error = f"{type(e).__name__}: {e}"[:300]
                        item.ready.set()
                    continue
                self._embed(item)
        finally:
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass

    def _embed(self, emb: Embedding) -> None:
        t0 = time.perf_counter()
        try:
            emb.vec = self.enc.embed_one(emb.text)
            self._keep(emb.text, emb.vec)
        except Exception as e:
            emb.error = f"{type(e).__name__}: {e}"[:300]
        emb.ms = round((time.perf_counter() - t0) * 1000, 2)
        with self._cache_lock:
            self._inflight.pop(emb.text, None)
        emb.done.set()

    def _dense(self, conn, job: Job) -> None:
        """The job's dense ranking; its embedding was queued before it on this one thread (or
        came from the cache), so it is made by now."""
        emb = job.emb
        emb.done.wait()
        if emb.error is not None:
            job.error = emb.error
        else:
            t0 = time.perf_counter()
            with self.lock:
                job.dense = vectors.dense_search(conn, emb.vec, job.sc, DENSE_K, model=self.enc.model,
                                                 index=self.index)
            job.dense_ms = round((time.perf_counter() - t0) * 1000, 2)
        job.ready.set()

    # --- answering -----------------------------------------------------------------------------

    def ask(self, text: str, sc, limit: int, floor: float) -> Job:
        """semantic.LOCAL.ask: the question's embedding (made, being made or cached) and then its
        dense ranking in `sc`, both on the embedding thread; the hook thread fuses (Job.answer)."""
        self.state["served_in_process"] += 1
        job = Job(self, self._embedding(str(text)[:semantic.MAX_SENT_CHARS]), Scope(sc.project, sc.agent),
                  max(1, min(100, int(limit))), None if floor is None else float(floor))
        self._jobs.put(job)
        return job

    def prefetch(self, text: str) -> None:
        """Start a prompt's embedding as soon as its hook run arrives (recalld/daemon/hookserver.py),
        before the run reaches its search: the ask then finds it made or under way."""
        self._embedding(str(text)[:semantic.MAX_SENT_CHARS])

    def _embedding(self, text: str) -> Embedding:
        with self._cache_lock:
            vec = self._cache.pop(text, None)
            if vec is not None:
                self._cache[text] = vec  # now the newest
                self.state["cache_hits"] += 1
                emb = Embedding(text)
                emb.vec, emb.cached, emb.ms = vec, True, 0.0
                emb.done.set()
                return emb
            emb = self._inflight.get(text)
            if emb is None:
                emb = self._inflight[text] = Embedding(text)
                self._jobs.put(emb)
            return emb

    def _keep(self, text: str, vec) -> None:
        with self._cache_lock:
            self._cache[text] = vec
            while len(self._cache) > CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))

    def embed(self, text: str) -> tuple:
        """(the query's vector, whether it came from the cache): a prompt sent again, or the
        same prompt asked by a retry, is not embedded twice."""
        with self._cache_lock:
            vec = self._cache.pop(text, None)
            if vec is not None:
                self._cache[text] = vec  # now the newest
                self.state["cache_hits"] += 1
                return vec, True
        vec = self.enc.embed_one(text)
        self._keep(text, vec)
        return vec, False

    def fused(self, conn, q, lex: list, sc: Scope, limit: int, floor: "float | None", dense=None) -> dict:
        """Dense ranking for `sc` (unless given), cosines of the lexical candidates it left out,
        and the fusion."""
        with self.lock:
            if dense is None:
                dense = vectors.dense_search(conn, q, sc, DENSE_K, model=self.enc.model, index=self.index)
            got = {i for i, _ in dense}
            cos = vectors.cosines(conn, q, [h.id for h in lex if h.id not in got], model=self.enc.model,
                                  index=self.index)
        # the whole order when no floor is asked: the tells pick by cosine from all of it
        hits = fuse(lex, dense, floor, limit + DENSE_K if floor is None else limit, cos=cos)
        known = {**cos, **dict(dense)}
        return {"v": 1, "hits": [list(h) for h in hits],
                "cos": {str(i): round(float(known[i]), 4) for i, _, _ in hits if i in known},
                "order": [list(o) for o in order(lex, dense, floor, limit + DENSE_K, cos=cos)]}

    def handle(self, c, conn, enc) -> None:
        t0 = time.perf_counter()
        try:
            c.settimeout(READ_S)
            buf = b""
            while not buf.endswith(b"\n") and len(buf) <= MAX_REQUEST:
                chunk = c.recv(65536)
                if not chunk:
                    break
                buf += chunk
            req = json.loads(buf)
            out = self.answer(conn, enc, req)
        except Exception as e:  # a bad request or a failure here: say so, keep serving
            self.state["errors"] += 1
            self.state["error"] = f"{type(e).__name__}: {e}"[:300]
            out = {"v": 1, "error": self.state["error"]}
        out["ms"] = round((time.perf_counter() - t0) * 1000, 2)
        try:
            c.sendall(json.dumps(out).encode("utf-8") + b"\n")
        except OSError:
            pass  # the hook gave up waiting: it has answered lexically
        if "hits" in out:
            self.state.update(answered=self.state["answered"] + 1, last_ms=out["ms"],
                              last_answer_at=receipts.now_iso())

    def answer(self, conn, enc, req: dict) -> dict:
        text, project, agent = req["q"], req["project"], req["agent"]
        if not (isinstance(text, str) and isinstance(project, str) and isinstance(agent, str)):
            raise ValueError("q, project and agent must be strings")
        limit = max(1, min(100, int(req.get("limit", 15))))
        floor = req.get("floor", 0.3)
        floor = None if floor is None else float(floor)  # None: the whole fused order
        sc = Scope(project, agent)
        t0 = time.perf_counter()
        if self.enc is None:  # answer() called on its own (tests, the benchmark)
            self.enc = enc
        if self.index is None:
            self.index = vectors.VectorIndex(enc.model, enc.dim)
        q, cached = self.embed(text)
        embed_ms = (time.perf_counter() - t0) * 1000
        lex = search(conn, text, sc, limit=limit, floor=0.0)
        out = self.fused(conn, q, lex, sc, limit, floor)
        out.update(embed_ms=round(embed_ms, 2), cached=cached)
        return out

"""The daemon's embedding pass: every current memory gets a vector soon after it is written.

Memory writes (remember, import, an approved proposal) never wait for the embedder; this pass
finds what lacks a vector instead. At start it embeds every current memory without a vector of
the loaded model (an upgraded store, a new model), then it polls `max(memories.id)` every
`POLL_S` and embeds what is new, a batch per transaction. It runs on its own thread and holds
the encoder warm, so whatever else in the daemon needs a query vector (the judge, a query
channel) can take `EmbedPass.encoder` instead of loading a second copy.

No embedder (no weights, `models.embedder` off, tokenizers missing): the thread says why in
the status and ends; nothing else in the daemon changes.
"""

import time

from recalld.core import receipts
from recalld.daemon.service import StoreLost
from recalld.model import embed, vectors  # first, so numpy starts with embed's BLAS threads

POLL_S = 2.0
ERROR_WAIT_S = 30.0  # after a failed batch: do not spin on a persistent failure


class EmbedPass:
    def __init__(self, cfg: "dict | None" = None, poll_s: float = POLL_S):
        self.cfg = cfg
        self.poll_s = poll_s
        self.encoder = None
        self.state = {"enabled": True, "available": None, "model": None, "path": None, "source": None,
                      "reason": None, "loaded": False, "load_ms": None, "embedded": 0, "batches": 0,
                      "last_batch_ms": None, "last_embedded_at": None, "error": None, "running": False}

    def snapshot(self) -> dict:
        return dict(self.state)

    def load(self) -> bool:
        """Resolve and load the encoder; False (and the reason in the state) when there is none."""
        from recalld.core import settings
        from recalld.model import resolve

        choice = resolve.resolve_embedder(self.cfg if self.cfg is not None else settings.load())
        self.state.update(available=choice.available, path=choice.path, source=choice.source, reason=choice.reason)
        if not choice.available:
            return False
        t0 = time.perf_counter()
        try:
            self.encoder = embed.load(choice)
        except Exception as e:
            self.state.update(available=False, reason=f"{type(e).__name__}: {e}"[:300])
            return False
        self.state.update(loaded=True, model=self.encoder.model, runtime=self.encoder.runtime,
                          load_ms=round((time.perf_counter() - t0) * 1000, 1))
        return True

    def run_once(self, conn, after_id: int = 0, stop=None) -> int:
        """Embed what lacks a vector above `after_id`; returns the highest memory id handled."""
        def progress(n):
            self.state["batches"] += 1
            self.state["embedded"] += n
            self.state["last_batch_ms"] = round((time.perf_counter() - t0[0]) * 1000, 1)
            self.state["last_embedded_at"] = receipts.now_iso()
            t0[0] = time.perf_counter()

        t0 = [time.perf_counter()]
        _, last = vectors.embed_pending(conn, self.encoder, after_id=after_id, stop=stop, progress=progress)
        return last

    def serve(self, stop, open_store, follow, touch=lambda: None, log=None) -> None:
        """The thread's body, until `stop` is set. `open_store() -> (conn, ident)` and
        `follow(conn, ident, who) -> (conn, ident)` are the daemon's (the second reopens the
        store when its file was replaced, and raises StoreLost when it cannot)."""
        self.state["running"] = True
        try:
            if not self.load():
                if log is not None:
                    log.info("embedder_unavailable", reason=self.state["reason"])
                return
            if log is not None:
                log.info("embedder_loaded", model=self.state["model"], source=self.state["source"],
                         load_ms=self.state["load_ms"])
            touch()
            conn, ident = open_store()
            try:
                self._loop(stop, conn, ident, follow, touch, log)
            finally:
                try:
                    conn.close()
                except Exception:
                    pass
        finally:
            self.state["running"] = False
            touch()

    def _loop(self, stop, conn, ident, follow, touch, log) -> None:
        low, seen = 0, None
        while not stop.is_set():
            wait = self.poll_s
            try:
                new, ident = follow(conn, ident, "embedder")
                if new is not conn:
                    conn, low, seen = new, 0, None  # another store file: start from its first memory
                top = conn.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()[0]
                if top != seen:
                    before = self.state["embedded"]
                    low = self.run_once(conn, low, stop)
                    if not stop.is_set():
                        seen = top
                    if self.state["embedded"] != before:
                        touch()
                self.state["error"] = None
            except StoreLost:
                return
            except Exception as e:
                self.state["error"] = f"{type(e).__name__}: {e}"[:300]
                if log is not None:
                    log.error("embedder_error", message=self.state["error"])
                touch()
                wait = ERROR_WAIT_S
            stop.wait(wait)

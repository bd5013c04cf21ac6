"""The recalld daemon: tail transcripts, detect needs, judge, queue what passes.

Threads (all joined on shutdown; none outlives `Daemon.run`):

- main: waits for SIGTERM/SIGINT (or `stop()`), then shuts everything down in order.
- watchdog observer: marks transcript files dirty and wakes the loop (recalld.daemon.tailer.Watcher).
- loop: reads dirty files (and rescans the roots every `daemon.rescan_s`), stores events,
  feeds the need detector, hands due needs to the passer and finished turns to the turn
  worker. It sleeps on an Event until woken or until the next due need / rescan, so an idle
  daemon costs (almost) no CPU.
- passer: runs one background pass at a time: need -> recalld.judge.judge.judge_need (on the
  judge worker, with a time limit) -> queue rows -> one receipt (recalld.daemon.passes).
- judge worker: where judge_need runs, so a slow model never blocks the passer past its limit.
- model workers (recalld/daemon/models.py): the judge's and the proposer's models run in child
  processes, never in this one; a crash there fails the pass in flight (its receipt says so)
  and the worker is restarted with backoff, or switched off after daemon.model_crash_limit.
- turn worker: calls the turn-end hooks (the proposer plugs in there).
- hook threads (`recalld-hook-N`, settings daemon.serve_hooks): run hook processes' hooks for
  them (recalld/daemon/hookserver.py); a hook process that finds none runs its hook itself.

A pass for a session that is waiting (not yet started) is replaced by a newer one for the same
session. Hooks never depend on the daemon: they read the queue from the store and run
themselves when it does not serve them, so a dead daemon means an empty queue, nothing worse.

Turn-end hooks (the proposer) are passed in by whoever assembles the daemon: `recalld daemon
run` (recalld/cli/daemon.py) is that one place, with `Daemon(turn_end_hooks=(...))`. Hooks run
serially on the turn worker thread, only for live turns (not for history ingested at start),
with the events of that (session, agent) since its previous turn end; an exception is logged
and counted, never fatal.
"""

import json
import os
import queue
import signal
import sqlite3
import threading
import time
from collections import deque
from pathlib import Path

from recalld import __version__
from recalld.core import db, paths, receipts, scope, settings
from recalld.daemon import needs, passes, tailer
from recalld.daemon.lock import InstanceLock
from recalld.daemon.log import open_log
from recalld.hook import autostart
from recalld.model.errors import ModelFailed

MAX_TURN_EVENTS = 2000
STORE_CHECK_S = 2.0  # how often an idle loop checks that the store's file is still the one it opened


def _now() -> str:
    return receipts.now_iso()


class Daemon:
    def __init__(self, cfg: "dict | None" = None, roots: "list | None" = None, log=None,
                 judge_fn=None, turn_end_hooks: tuple = (), embedder=None, models=None):
        self.cfg = cfg if cfg is not None else settings.load()
        d = self.cfg.get("daemon") or {}
        self.roots = [(Path(p), k) for p, k in (roots if roots is not None else tailer.default_roots(self.cfg))]
        self.rescan_s = float(d.get("rescan_s", 30.0))
        self.poll_s = float(d.get("poll_s", 2.0))
        self.stop_event = threading.Event()
        self.turn_end_hooks = tuple(turn_end_hooks)
        # The embedding pass (recalld.daemon.embedder.EmbedPass), passed in by `daemon run`
        self.embedder = embedder
        self.log, self._log_file = (log, None) if log is not None else open_log()
        self._judge_fn = judge_fn  # tests and benchmarks may pass their own pipeline entry
        self.models = models  # recalld.daemon.models.Models, made at start() when not given
        self.lock = InstanceLock()
        self.started_at: "str | None" = None
        self.passes = {"run": 0, "injected": 0, "nothing": 0, "error": 0, "timeout": 0, "skipped": 0,
                       "queued": 0, "replaced": 0}
        self.last_pass: "dict | None" = None
        self.last_error: "dict | None" = None
        self.turns = {"dispatched": 0, "hook_errors": 0}
        self.judge_status: dict = {"model": None, "source": None, "available": None, "reason": None,
                                   "loaded": False, "load_ms": None}
        self.tailer: "tailer.Tailer | None" = None
        self.watcher: "tailer.Watcher | None" = None
        self.detector = needs.NeedDetector(self.cfg)
        self._pass_lock = threading.Condition()
        self._pass_pending: dict = {}  # (session, agent) -> Need, waiting for the passer
        self._turn_q: queue.Queue = queue.Queue()
        self._turn_buf: dict = {}
        self._threads: list = []
        self.judge_worker: "passes.JudgeWorker | None" = None
        self._status_dirty = True
        self._status_written = 0.0
        self.ready = threading.Event()  # set once the first scan is stored
        # The store file each thread opened, by (device, inode): deleting or replacing the
        # database under a running daemon would otherwise leave it writing to unlinked files.
        self.store = {"path": None, "reopened": 0, "last_reopen": None, "error": None}
        self._store_ident: "tuple | None" = None
        self._store_lock = threading.Lock()
        # One thread reopens at a time: another that noticed the new file while the first was
        # still creating it would otherwise count it first, as "replaced" instead of "deleted".
        self._reopen_lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------------

    def run(self, install_signals: bool = True) -> int:
        """Foreground: hold the lock, run until SIGTERM/SIGINT or stop(). Returns an exit code."""
        if not self.lock.acquire():
            self.log.warning("already_running", pid=autostart.running_pid())
            return 3
        old = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, lambda s, f: self.stop(f"signal {s}"))
        try:
            self.start()
            while not self.stop_event.wait(3600):
                pass
        finally:
            self.shutdown()
            for sig, h in old.items():
                signal.signal(sig, h)
            self.lock.release()
        return 0

    def start(self) -> None:
        self.started_at = _now()
        self._started_mono = time.monotonic()
        # a daemon that dies while it loads leaves this line for `daemon status` to show
        self.log.info("daemon_starting", version=__version__)
        from recalld.daemon.models import Models
        from recalld.model import runtime

        if self.models is None:
            self.models = Models(self.cfg, self.log, lambda kind, detail: self._event(kind, None, detail),
                                 changed=self._touch)
        runtime.use_provider(self.models)  # from here on no model loads in this process
        self._resolve_judge()
        self.judge_worker = passes.JudgeWorker()
        if (self.cfg.get("daemon") or {}).get("preload_model", True) and self.judge_status.get("available"):
            self.judge_worker.submit(self._preload)
        workers = [("recalld-loop", self._loop), ("recalld-passer", self._passer),
                   ("recalld-turns", self._turn_worker)]
        if self.embedder is not None:
            workers.append(("recalld-embedder", lambda: self.embedder.serve(
                self.stop_event, self._open_store, self._follow, self._touch, self.log)))
            # the hook's semantic channel shares the pass's encoder (recalld/daemon/query.py)
            from recalld.daemon.query import QueryServer

            self.query = QueryServer(self.embedder, self.cfg)
            workers.append(("recalld-query", lambda: self.query.serve(
                self.stop_event, self._open_store, self._follow, self.log, self._touch)))
        serve_hooks = int((self.cfg.get("daemon") or {}).get("serve_hooks", 0))
        if serve_hooks > 0:  # hook processes hand their runs to these threads (recalld/hook/served.py)
            from recalld.daemon.hookserver import HookServer

            self.hooks = HookServer(serve_hooks)
            workers.append(("recalld-hook-1", lambda: self.hooks.serve(
                self.stop_event, self._open_store, self._follow, self.log)))
        # `recalld daemon status` reads this file: there before any thread could write it
        self._write_status(force=True)
        for name, target in workers:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        self._event("start", None, {"pid": os.getpid(), "roots": [str(r) for r, _ in self.roots]})
        self.log.info("daemon_started", roots=[str(r) for r, _ in self.roots],
                      turn_end_hooks=[_name(f) for f in self.turn_end_hooks])

    def stop(self, why: str = "stop") -> None:
        if not self.stop_event.is_set():
            self._stop_reason = why
        self.stop_event.set()
        if self.tailer is not None:
            self.tailer.wake.set()
        with self._pass_lock:
            self._pass_lock.notify_all()
        self._turn_q.put(None)

    def shutdown(self) -> None:
        self.stop(getattr(self, "_stop_reason", "shutdown"))
        left = []
        for t in self._threads:
            t.join(30)
            if t.is_alive():
                left.append(t.name)
        if self.watcher is not None:
            self.watcher.stop()
        if self.judge_worker is not None and not self.judge_worker.stop(30):
            left.append("recalld-judge")
        try:
            from recalld.model import runtime

            if self.models is not None:
                self.models.shutdown()
                runtime.use_provider(None)
        except Exception:
            pass
        self._event("stop", None, {"reason": getattr(self, "_stop_reason", "shutdown"), "threads_left": left})
        self._write_status(force=True, running=False)
        self.log.info("daemon_stopped", reason=getattr(self, "_stop_reason", None), threads_left=left)
        if self._log_file is not None:
            try:
                self._log_file.close()
            except OSError:
                pass

    # --- judge model ---------------------------------------------------------------------------

    def _resolve_judge(self) -> None:
        try:
            from recalld.model.resolve import resolve
        except Exception as e:
            self.judge_status.update(available=False, reason=f"recalld.model.resolve unavailable: {e}")
            return
        try:
            ch = resolve("judge", self.cfg)
            self.judge_status.update(model=ch.path, source=ch.source, available=ch.available,
                                     reason=ch.reason)
        except Exception as e:
            self.judge_status.update(available=False, reason=f"{type(e).__name__}: {e}")

    def _preload(self) -> None:
        from recalld.model import runtime

        t0 = time.perf_counter()
        try:
            runtime.require_runtime("judge", self.cfg)
            self.judge_status.update(loaded=True, available=True, reason=None,
                                     load_ms=round((time.perf_counter() - t0) * 1000, 1))
            self.log.info("judge_loaded", model=self.judge_status.get("model"),
                          load_ms=self.judge_status.get("load_ms"))
        except Exception as e:
            self.judge_status.update(available=False, loaded=False, reason=str(e)[:300])
            self._error(f"judge model: {e}")
        self._touch()

    def _touch(self) -> None:
        """The status changed off the loop thread: let the loop write it soon."""
        self._status_dirty = True
        if self.tailer is not None:
            self.tailer.wake.set()

    # --- the loop --------------------------------------------------------------------------------

    def _loop(self) -> None:
        conn, ident = self._open_store()
        try:
            d = self.cfg.get("daemon") or {}
            self.tailer = tailer.Tailer(conn, self.roots, recent_days=float(d.get("recent_days", 2)),
                                        live_s=float(d.get("live_s", 300)), log=self.log)
            self._tail_ident = ident
            self.tailer.before_write = self._follow_tailer  # checked before every batch's commit
            store_checked = time.monotonic()
            self.watcher = tailer.Watcher(self.tailer, self.log)
            if not self.stop_event.is_set():
                self.watcher.start()
            interval = self.rescan_s if self.watcher.mode == "watchdog" else self.poll_s
            next_scan = 0.0
            while not self.stop_event.is_set():
                try:
                    now = time.monotonic()
                    if now >= next_scan:
                        self.watcher.refresh()
                        self.tailer.take_dirty()  # the rescan covers them
                        for r in self.tailer.rescan():
                            self._dispatch(self.tailer.conn, r)
                        self.detector.forget_idle()
                        next_scan = time.monotonic() + interval
                        self.ready.set()
                    for r in self.tailer.poll_many(sorted(self.tailer.take_dirty())):
                        self._dispatch(self.tailer.conn, r)
                    if time.monotonic() - store_checked >= STORE_CHECK_S:
                        self._follow_tailer()  # an idle daemon notices too, and status says so
                        store_checked = time.monotonic()
                    for need in self.detector.take_due():
                        self._submit(self.tailer.conn, need)
                    self._write_status()
                except StoreLost:
                    break  # _follow said why and stopped the daemon
                except Exception as e:
                    self._error(f"loop: {type(e).__name__}: {e}")
                    self.stop_event.wait(1.0)  # do not spin on a persistent failure
                now = time.monotonic()
                timeout = next_scan - now
                due = self.detector.next_due()
                if due is not None:
                    timeout = min(timeout, due - now)
                if self._status_dirty:
                    timeout = min(timeout, 1.0)
                timeout = min(timeout, STORE_CHECK_S)
                self.tailer.wake.wait(max(0.0, timeout))
                self.tailer.wake.clear()
        finally:
            (self.tailer.conn if self.tailer is not None else conn).close()

    def _dispatch(self, conn, r: "tailer.PollResult") -> None:
        if r.events or r.reset:
            self._status_dirty = True
        if not r.events:
            return
        self.detector.observe(r.events, live=r.live)
        if not r.live:
            return  # history (first start, catching up): stored, but no passes and no turn hooks
        for ev in r.events:
            key = (ev.session, ev.agent)
            if ev.kind != "turn_end":
                buf = self._turn_buf.setdefault(key, deque(maxlen=MAX_TURN_EVENTS))
                buf.append(ev)
                continue
            events = list(self._turn_buf.pop(key, ()))
            self._event("turn_end", ev.session, {"agent": ev.agent, "source": ev.source,
                                                 "line_no": ev.line_no, "events": len(events)}, conn)
            if self.turn_end_hooks:
                self._turn_q.put((ev.session, events))

    def _submit(self, conn, need: "needs.Need") -> None:
        self._event("need", need.session, need.as_dict(), conn)
        with self._pass_lock:
            key = (need.session, need.agent)
            if key in self._pass_pending:
                self.passes["replaced"] += 1  # the waiting pass is superseded by the newer need
            self._pass_pending[key] = need
            self._pass_lock.notify()

    # --- passes ----------------------------------------------------------------------------------

    def _passer(self) -> None:
        conn, ident = self._open_store()
        try:
            while True:
                with self._pass_lock:
                    while not self._pass_pending and not self.stop_event.is_set():
                        self._pass_lock.wait()
                    if self.stop_event.is_set():
                        return
                    key = min(self._pass_pending, key=lambda k: self._pass_pending[k].due)
                    need = self._pass_pending.pop(key)
                try:
                    conn, ident = self._follow(conn, ident, "passer")
                    self.run_pass(conn, need)
                except StoreLost:
                    return
                except Exception as e:  # run_pass writes its own receipt; this is a bug guard
                    self._error(f"pass: {type(e).__name__}: {e}")
        finally:
            conn.close()

    def _judge_call(self, need_text: str, sc: scope.Scope, cfg: dict):
        if self._judge_fn is not None:
            return self._judge_fn(need_text, sc, cfg)
        from recalld.judge import judge

        c = getattr(self, "_judge_conn", None)
        if c is None:
            self._judge_conn, self._judge_ident = self._open_store()
        else:
            self._judge_conn, self._judge_ident = self._follow(c, self._judge_ident, "judge")
        return judge.judge_need(self._judge_conn, need_text, sc, cfg)

    def run_pass(self, conn: sqlite3.Connection, need: "needs.Need") -> dict:
        """One background pass; appends exactly one receipt and returns it."""
        t0 = time.perf_counter()
        cfg = settings.load()
        r = passes.new_receipt(need)
        project = r["project"]
        queued_rows = []
        try:
            if not project:
                raise ValueError("no project: the transcript names no cwd")
            sc = passes.session_scope(conn, need, project)
            r["agent"] = sc.agent
            limit = passes.time_limit(cfg, self._model_warm())
            res = self._run_judge(need.query, sc, cfg, limit)
            passes.fill_from_result(r, res)
            if not getattr(res, "available", False):
                r["outcome"] = "skipped"
                r["error"] = f"judge_unavailable: {res.error or 'no model'}"[:300]
                self.judge_status.update(available=False, reason=res.error)
            else:
                if not self.judge_status.get("loaded"):
                    self.judge_status.update(loaded=True, available=True, reason=None)
                passed = list(res.passed) + passes.middle_band(res, cfg)  # the band: queued as tells
                queued_rows, already = passes.new_for_session(conn, need.session, passed)
                r["detail"]["already_queued"] = already
                r["outcome"] = "injected" if queued_rows else "nothing"
                if res.error:
                    r["error"] = str(res.error)[:300]
        except passes.PassTimeout as e:
            r["outcome"], r["error"] = "timeout", str(e)
        except ModelFailed as e:  # the worker died or hung: this pass fails, the daemon goes on
            r["outcome"], r["error"] = e.outcome, str(e)[:300]
            r["detail"]["model_failure"] = dict(e.detail, need="not retried (docs/daemon.md)")
        except Exception as e:
            r["outcome"], r["error"] = "error", f"{type(e).__name__}: {str(e)[:200]}"
        r["duration_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        where = passes.commit_pass(conn, r, queued_rows, cfg)
        self._count_pass(r, where)
        return r

    def _model_warm(self) -> bool:
        """Whether the judge's model worker is up (else a pass waits for its load too)."""
        if self.models is None:
            return bool(self.judge_status.get("loaded"))
        return bool(self.judge_status.get("loaded")) and bool(self.models.loaded())

    def _run_judge(self, text: str, sc: scope.Scope, cfg: dict, limit: float):
        if self.judge_worker is None:  # run_pass called outside a started daemon (tests, bench)
            return self._judge_call(text, sc, cfg)
        stuck = getattr(self, "_timed_out_job", None)
        if stuck is not None and not stuck.done.is_set():
            # An abandoned call still holds the worker: do not pile more work behind it.
            raise passes.PassTimeout("judge_busy: a timed-out pass is still running")
        job = self.judge_worker.submit(lambda: self._judge_call(text, sc, cfg))
        if not job.done.wait(limit):
            self._timed_out_job = job
            raise passes.PassTimeout(f"judge_timeout: no verdict within {limit:g} s")
        if job.error is not None:
            raise job.error
        return job.result

    def _count_pass(self, r: dict, where: str) -> None:
        self.passes["run"] += 1
        self.passes[r["outcome"]] = self.passes.get(r["outcome"], 0) + 1
        self.passes["queued"] += len(r["detail"].get("queued") or [])
        self.last_pass = {"time": r["time"], "session": r["session"], "outcome": r["outcome"],
                          "queued": len(r["detail"].get("queued") or []), "error": r["error"],
                          "duration_ms": r["duration_ms"], "receipt": r["uid"], "stored": where}
        if r["outcome"] in ("error", "timeout"):
            self._error(f"pass {r['uid']}: {r['error']}", log=False)
        self.log.info("pass", session=r["session"], outcome=r["outcome"], error=r["error"],
                      candidates=r["candidates"], passed=r["above_floor"],
                      queued=len(r["detail"].get("queued") or []), duration_ms=r["duration_ms"],
                      need_chars=r["detail"]["need_chars"], trigger=r["detail"]["trigger"])
        self._touch()

    # --- turn ends -------------------------------------------------------------------------------

    def _turn_worker(self) -> None:
        while True:
            item = self._turn_q.get()
            if item is None or self.stop_event.is_set():
                return
            session, events = item
            for fn in self.turn_end_hooks:
                try:
                    fn(session, events)
                except Exception as e:
                    self.turns["hook_errors"] += 1
                    self._error(f"turn_end hook {_name(fn)}: {type(e).__name__}: {e}")
            self.turns["dispatched"] += 1
            self._touch()

    # --- the store under the daemon -------------------------------------------------------------

    def _open_store(self) -> tuple:
        conn = db.connect()
        ident = _store_id()
        with self._store_lock:
            if self._store_ident is None:
                self._store_ident = ident
                self.store["path"] = paths.db_path()
        return conn, ident

    def _follow(self, conn, ident, who: str) -> tuple:
        """(conn, ident) while the file at the store's path is the one conn opened; else a new
        connection to the file there now (created and migrated anew when it is missing).
        Raises StoreLost (and stops the daemon) when that cannot be opened."""
        now = _store_id()
        if now is not None and now == ident:
            return conn, ident
        with self._reopen_lock:
            return self._reopen(conn, now, who)

    def _reopen(self, conn, now, who: str) -> tuple:
        try:
            new = db.connect()
        except (sqlite3.Error, OSError) as e:
            msg = (f"the store at {paths.db_path()} was {'deleted' if now is None else 'replaced'} "
                   f"and cannot be reopened: {type(e).__name__}: {e}")
            with self._store_lock:
                first = self.store["error"] is None
                self.store["error"] = msg[:500]
            if first:
                self._error(msg)
                self.stop("store lost")
            raise StoreLost(msg) from e
        new_ident = _store_id()
        try:
            conn.close()
        except sqlite3.Error:
            pass
        with self._store_lock:
            counted = new_ident != self._store_ident  # one count per new file, whichever thread saw it
            if counted:
                self._store_ident = new_ident
                self.store["reopened"] += 1
                # "deleted": the file this thread found (if any) was created anew by one of this
                # process's threads, which may have got there first (a hook thread opening it)
                deleted = now is None or db.created_here(new_ident)
                self.store["last_reopen"] = {"time": _now(), "why": "deleted" if deleted else "replaced",
                                             "noticed_by": who}
        if counted:
            self.log.warning("store_reopened", path=paths.db_path(), why=self.store["last_reopen"]["why"],
                             noticed_by=who, count=self.store["reopened"])
            self._event("store_reopened", None, dict(self.store["last_reopen"]), new)
            self._touch()
        return new, new_ident

    def _follow_tailer(self) -> None:
        t = self.tailer
        conn, self._tail_ident = self._follow(t.conn, self._tail_ident, "tailer")
        if conn is not t.conn:
            conn.execute("PRAGMA synchronous = NORMAL")  # the tailer's setting (see Tailer.__init__)
            t.conn = conn

    # --- bookkeeping -----------------------------------------------------------------------------

    def _event(self, kind: str, session, detail: dict, conn=None) -> None:
        own = conn is None
        try:
            if own:
                conn = db.connect()
            conn.execute("INSERT INTO daemon_events (time, kind, session, detail) VALUES (?,?,?,?)",
                         (_now(), kind, session, json.dumps(detail, default=str)))
        except sqlite3.Error as e:
            self.log.warning("daemon_event_not_stored", kind=kind, error=str(e)[:200])
        finally:
            if own and conn is not None:
                conn.close()

    def _error(self, msg: str, log: bool = True) -> None:
        self.last_error = {"time": _now(), "message": msg[:500]}
        self._status_dirty = True
        if log:
            self.log.error("error", message=msg[:500])

    def snapshot(self, running: bool = True) -> dict:
        t = self.tailer
        w = self.watcher
        return {
            "running": running,
            "pid": os.getpid(),
            "started_at": self.started_at,
            "uptime_s": round(time.monotonic() - getattr(self, "_started_mono", time.monotonic()), 1),
            "roots": [{"path": str(p), "agent": k, "exists": p.is_dir(),
                       "watched": bool(w and str(p) in w.watched)} for p, k in self.roots],
            "watch_mode": w.mode if w else None,
            "watch_error": w.error if w else None,
            "files_tracked": len(t.cursors) if t else 0,
            "tailer": dict(t.stats) if t else {},
            "sessions_active": len(self.detector.sessions),
            "needs": dict(self.detector.stats),
            "passes": dict(self.passes),
            "last_pass": self.last_pass,
            "turns": dict(self.turns),
            "turn_end_hooks": [_name(f) for f in self.turn_end_hooks],
            "judge": dict(self.judge_status),
            "models": self.models.snapshot() if self.models is not None else {},
            "embedder": self.embedder.snapshot() if self.embedder is not None else {"enabled": False},
            "query": self.query.snapshot() if getattr(self, "query", None) is not None else {"enabled": False},
            "hooks": self.hooks.snapshot() if getattr(self, "hooks", None) is not None else {"listening": False},
            "store_reopened": self.store["reopened"],
            "store": dict(self.store),
            "last_error": self.last_error,
            "written_at": _now(),
        }

    def _write_status(self, force: bool = False, running: bool = True) -> None:
        if not force and (not self._status_dirty or time.monotonic() - self._status_written < 1.0):
            return
        self._status_dirty = False
        self._status_written = time.monotonic()
        try:
            p = Path(autostart.status_path())
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f"status.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.snapshot(running), indent=2, default=str), encoding="utf-8")
            os.replace(tmp, p)
        except OSError as e:
            self.log.warning("status_not_written", error=str(e)[:200])


class StoreLost(Exception):
    """The store's file went away under the daemon and no new one could be opened at its path."""


def _store_id() -> "tuple | None":
    """(device, inode) of the file at the store's path now; None when there is none."""
    try:
        st = os.stat(paths.db_path())
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _name(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"

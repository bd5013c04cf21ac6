"""The daemon's models, each in a worker process: a model that crashes costs one pass, never
the daemon.

One worker (recalld.model.worker) per model file, started on first use (or by the preload) and
kept warm; the roles that resolve to one file (the judge and the proposer, by default) share it,
as they shared one loaded model in-process. `Models.runtime(role)` gives a `RemoteRuntime`,
which has the calls of recalld.model.runtime.Runtime that the judge and the proposer use, so
they run unchanged: `recalld daemon run` installs `Models` as the model runtime's provider
(runtime.use_provider), and from then on this process cannot load a model itself.

A worker that exits while a call is in flight (any signal, any exit status) fails that call
with ModelCrashed ("model crashed (SIGILL)"); one that does not answer by the call's deadline
plus a grace is killed and the call fails with ModelTimedOut; one that answers something that
is not the call's result is killed and the call fails with ModelGarbage. The pass waiting on it
writes that in its receipt and queues nothing. Each such end is counted against the model
file: the worker is restarted after a backoff (1, 2, 4, ... 60 s) and, after
daemon.model_crash_limit ends in a row with no good call between them, the file's roles are
switched off until the file or the llama-cpp-python build changes. That state is kept in
RECALLD_HOME/daemon/models.json, so a restarted daemon does not walk into the same crash, and
`recalld daemon status` and `recalld doctor` read it from there too.
"""

import itertools
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from recalld.core import paths, receipts
from recalld.model import faults
from recalld.model import worker as proto
from recalld.model.errors import (LLMError, LLMPreempted, LLMTimeout, ModelCrashed, ModelFailed,
                                  ModelGarbage, ModelTimedOut, Unavailable)
from recalld.model.resolve import ROLES, resolve

BACKOFF_S = (1, 2, 4, 8, 15, 30, 60)
CALL_TIMEOUT_S = 30.0  # a call that brings no limit of its own (tokenizing)
EXIT_WAIT_S = 10.0
_ERRORS = {"LLMTimeout": LLMTimeout, "LLMPreempted": LLMPreempted, "Unavailable": Unavailable}


def grace_s(timeout_s: float) -> float:
    """How long past a call's own deadline the worker may stay silent before it is killed.
    The worker checks the deadline itself between batches and tokens; this only catches a
    worker stuck in native code. Kept under the pass's slack (passes.time_limit: a quarter of
    judge.timeout_s, at least 1 s) so the pass hears "model timed out", not its own timeout."""
    return min(2.0, 0.25 + 0.05 * timeout_s)


def health_path() -> Path:
    return Path(paths.home()) / "daemon" / "models.json"


def worker_log(path: str) -> Path:
    return Path(paths.home()) / "logs" / f"model-{Path(path).stem}.log"


def read_health() -> dict:
    try:
        data = json.loads(health_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class _Slot:
    __slots__ = ("event", "reply", "error")

    def __init__(self):
        self.event = threading.Event()
        self.reply = None
        self.error: "ModelFailed | None" = None


class ModelProcess:
    """One worker process for one model file, and the calls in flight to it."""

    def __init__(self, path: str, on_exit):
        self.path = path
        self.on_exit = on_exit  # called once, from the reader thread, when the process is gone
        self.proc: "subprocess.Popen | None" = None
        self.sock: "socket.socket | None" = None
        self.info: dict = {}
        self.model_ms = 0.0
        self.calls = 0
        self.dead = threading.Event()
        self._pending: dict = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._ending: "tuple | None" = None  # (why we killed it, message)
        self._log_offset = 0
        self.reader: "threading.Thread | None" = None

    @property
    def pid(self) -> "int | None":
        return self.proc.pid if self.proc is not None else None

    def start(self, load_timeout_s: float) -> dict:
        """Spawn the worker and wait for its hello. Raises Unavailable (the model does not
        load: the worker said why) or ModelFailed (it died or hung while loading)."""
        log = worker_log(self.path)
        log.parent.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        pkg_parent = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(log, "ab") as lf:
            self._log_offset = lf.tell()
            lf.write(f"--- {receipts.now_iso()} worker for {self.path}\n".encode())
            lf.flush()
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "recalld.model.worker", "--fd", str(theirs.fileno()), self.path],
                    stdin=subprocess.DEVNULL, stdout=lf, stderr=lf, env=env, close_fds=True,
                    pass_fds=(theirs.fileno(),))
            finally:
                theirs.close()
        self.sock = ours
        ours.settimeout(load_timeout_s)
        try:
            hello = proto.recv(ours)
        except socket.timeout:
            self._kill("timeout")
            raise self._closed(ModelTimedOut, f"model timed out while loading (no answer in {load_timeout_s:g} s; killed)")
        except (OSError, proto.ProtocolError) as e:
            self._kill("garbage")
            raise self._closed(ModelGarbage, f"model worker answered garbage while loading: {e}")
        if hello is None:
            exc = self._closed(ModelCrashed, None)
            raise exc
        if not isinstance(hello, dict) or not isinstance(hello.get("ok"), dict):
            err = hello.get("err") if isinstance(hello, dict) else None
            self._kill("shutdown")
            self._closed(ModelCrashed, None)
            if isinstance(err, list) and len(err) == 2:
                raise Unavailable(f"model {self.path} failed to load: {err[1]}")
            raise ModelGarbage(f"model worker answered garbage while loading ({_shape(hello)})")
        ours.settimeout(None)
        self.info = hello["ok"]
        self.reader = threading.Thread(target=self._read, name=f"recalld-model:{Path(self.path).name}", daemon=True)
        self.reader.start()
        return self.info

    def _tail(self) -> str:
        try:
            with open(worker_log(self.path), "rb") as f:
                f.seek(self._log_offset)
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _closed(self, cls, message: "str | None") -> ModelFailed:
        """Wait for the process to be gone; the failure that says how it ended."""
        rc = None
        try:
            rc = self.proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(EXIT_WAIT_S)
        detail = faults.ended(rc, self._tail())
        detail["pid"] = self.proc.pid
        if cls is not ModelCrashed:  # we killed it: its SIGKILL says nothing about the model
            detail.update(faults.KILLED[cls.__name__])
        if message is None:
            message = f"model crashed ({detail['how']})"
        try:
            self.sock.close()
        except OSError:
            pass
        self.dead.set()
        return cls(message, detail)

    def _kill(self, why: str, message: str = "") -> None:
        if self._ending is None:
            self._ending = (why, message)
        if self.proc is None:
            return
        try:
            self.proc.kill()
        except OSError:
            pass

    def _read(self) -> None:
        try:
            while True:
                msg = proto.recv(self.sock)
                if msg is None:
                    break
                with self._lock:
                    slot = self._pending.pop(msg.get("id"), None) if isinstance(msg, dict) else None
                if slot is None:
                    self._kill("garbage", f"model worker answered a call nobody made ({_shape(msg)})")
                    break
                slot.reply = msg
                slot.event.set()
        except (OSError, proto.ProtocolError) as e:
            self._kill("garbage", f"model worker answered garbage: {e}")
        why, message = self._ending or (None, None)
        cls = {"timeout": ModelTimedOut, "garbage": ModelGarbage}.get(why, ModelCrashed)
        if why == "shutdown":
            message = "model worker stopped (the daemon is shutting down)"
        exc = self._closed(cls, message or None)
        with self._lock:
            slots, self._pending = list(self._pending.values()), {}
        for s in slots:
            s.error = exc
            s.event.set()
        if why != "shutdown":
            self.on_exit(self, exc)

    def call(self, method: str, args: list, kwargs: dict, timeout_s: "float | None"):
        if self.dead.is_set():
            raise ModelCrashed("model worker is not running")
        limit = CALL_TIMEOUT_S if timeout_s is None else float(timeout_s)
        rid, slot = next(self._ids), _Slot()
        with self._lock:
            self._pending[rid] = slot
        try:
            proto.send(self.sock, {"id": rid, "m": method, "a": args, "k": kwargs}, self._send_lock)
        except OSError:
            pass  # the reader sees the same end and fails the slot
        if not slot.event.wait(limit + grace_s(limit)):
            self._kill("timeout", f"model timed out (no answer in {limit + grace_s(limit):.1f} s; killed)")
            slot.event.wait(EXIT_WAIT_S + 1)
        if slot.error is not None:
            raise slot.error
        reply = slot.reply
        if reply is None:
            raise ModelCrashed("model worker did not end after it was killed")
        if "err" in reply:
            err = reply["err"]
            name, msg = (err[0], err[1]) if isinstance(err, list) and len(err) == 2 else ("LLMError", str(err))
            raise _ERRORS.get(name, LLMError)(msg if name in _ERRORS else f"{name}: {msg}")
        if isinstance(reply.get("ms"), (int, float)):
            self.model_ms = float(reply["ms"])
        self.calls += 1
        return reply.get("ok")

    def garbage(self, message: str) -> ModelGarbage:
        """The reply was not the call's result: kill the worker; the failure to raise."""
        self._kill("garbage", message)
        self.dead.wait(EXIT_WAIT_S + 1)
        return ModelGarbage(message, dict(faults.KILLED["ModelGarbage"], pid=self.pid))

    def stop(self) -> None:
        self._kill("shutdown")
        if self.reader is not None:
            self.reader.join(EXIT_WAIT_S + 1)


def _shape(x) -> str:
    """What a reply holds, never its text (a receipt must not quote the need or a memory)."""
    if isinstance(x, (list, tuple)):
        kinds = sorted({type(v).__name__ for v in x})
        bad = sum(isinstance(v, float) and not math.isfinite(v) for v in x)
        return f"a list of {len(x)} ({', '.join(kinds) or 'empty'}{f'; {bad} not finite' if bad else ''})"
    return f"type {type(x).__name__}"


def _floats(x, n: "int | None" = None) -> bool:
    return (isinstance(x, list) and (n is None or len(x) == n)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v <= 1e-6
                    for v in x))


class RemoteRuntime:
    """recalld.model.runtime.Runtime's calls, run by a worker process; every answer is checked
    for the shape the call returns before anyone reads it."""

    def __init__(self, proc: ModelProcess, models: "Models"):
        self._proc = proc
        self._models = models
        self.model_path = proc.path
        self.name = proc.info.get("name") or Path(proc.path).name
        self.load_ms = float(proc.info.get("load_ms") or 0.0)
        self.n_threads = proc.info.get("n_threads")
        self.pid = proc.pid

    @property
    def model_ms(self) -> float:
        return self._proc.model_ms

    @property
    def calls(self) -> int:
        return self._proc.calls

    def _call(self, method: str, args: list, kwargs: dict, ok, what: str):
        out = self._proc.call(method, args, kwargs, kwargs.get("timeout_s"))
        if not ok(out):
            raise self._proc.garbage(f"model returned garbage: {method} gave {_shape(out)}, not {what}")
        self._models.good(self._proc.path)
        return out

    def tokenize(self, text: str, bos: bool = False) -> list:
        return self._call("tokenize", [text], {"bos": bos},
                          lambda o: isinstance(o, list) and all(isinstance(t, int) for t in o), "token ids")

    def pieces(self, text: str) -> list:
        return self._call("pieces", [text], {}, lambda o: isinstance(o, list) and all(isinstance(t, str) for t in o),
                          "strings")

    def count_tokens(self, text: str) -> int:
        return self._call("count_tokens", [text], {}, lambda o: isinstance(o, int) and o >= 0, "a count")

    def token_logprobs(self, context: str, continuation: str, timeout_s: "float | None" = 30.0) -> list:
        return self._call("token_logprobs", [context, continuation], {"timeout_s": timeout_s}, _floats,
                          "log-probabilities")

    def logliks(self, context: str, continuations: list, timeout_s: "float | None" = 30.0) -> list:
        def ok(o):
            return (isinstance(o, list) and len(o) == len(continuations)
                    and all(isinstance(p, list) and len(p) == 2 and _floats([p[0]]) and isinstance(p[1], int)
                            for p in o))

        out = self._call("logliks", [context, list(continuations)], {"timeout_s": timeout_s}, ok,
                         "(log-likelihood, tokens) pairs")
        return [(float(a), int(b)) for a, b in out]

    def generate_json(self, prompt: str, schema: dict, max_tokens: int = 256, timeout_s: "float | None" = 20.0,
                      system: "str | None" = None, yield_to_urgent: bool = True):
        return self._call("generate_json", [prompt, schema],
                          {"max_tokens": max_tokens, "timeout_s": timeout_s, "system": system,
                           "yield_to_urgent": yield_to_urgent},
                          lambda o: isinstance(o, (dict, list)), "JSON")


class Models:
    """The daemon's model workers, their crash counts and the roles switched off."""

    def __init__(self, cfg: dict, log=None, record_event=None, changed=None):
        self.cfg = cfg
        d = cfg.get("daemon") or {}
        self.crash_limit = int(d.get("model_crash_limit", 3))
        self.load_timeout_s = float(d.get("load_allowance_s", 60)) or 60.0
        self.log = log
        self.record_event = record_event  # (kind, detail) -> None: a daemon_events row
        self.changed = changed  # () -> None: the daemon's status should be written again
        self._procs: dict = {}  # model path -> ModelProcess (the live one, or the last one)
        self._runtimes: dict = {}  # model path -> RemoteRuntime of the live process
        self._health = read_health()
        self._lock = threading.RLock()  # the dicts and the health file; held briefly
        self._start_lock = threading.Lock()  # one worker start at a time
        self._timers: list = []
        self._build = faults.build_id()
        self.stopping = False

    # ------------------------------------------------------------ the runtime provider

    def runtime(self, role: str = "judge", cfg: "dict | None" = None) -> RemoteRuntime:
        """The warm worker for `role`'s model, started when there is none; Unavailable says
        why not (no model, switched off and the fix, restarting after a crash)."""
        choice = resolve(role, cfg if cfg is not None else self.cfg)
        if not choice.available:
            raise Unavailable(choice.reason)
        rt = self._ready(choice.path)
        if rt is not None:
            return rt
        # One start at a time, and never under self._lock: a load takes seconds, and the
        # daemon's status (snapshot) must not wait for it.
        with self._start_lock:
            return self._ready(choice.path) or self._start(choice.path)

    def _ready(self, path: str) -> "RemoteRuntime | None":
        """The live runtime for `path`, None when one may be started; Unavailable says why not."""
        with self._lock:
            rt = self._runtimes.get(path)
            if rt is not None and not rt._proc.dead.is_set():
                return rt
            h = self._record(path)
            if h.get("off"):
                raise Unavailable(h["off"])
            if h.get("load_error"):
                raise Unavailable(h["load_error"])
            wait = float(h.get("retry_at") or 0) - time.time()
            if wait > 0:
                last = h.get("last") or {}
                raise Unavailable(f"the model worker ended ({last.get('message')}) and restarts in {wait:.1f} s")
            if self.stopping:
                raise Unavailable("the daemon is shutting down")
            return None

    def _start(self, path: str) -> RemoteRuntime:
        p = ModelProcess(path, self._exited)
        with self._lock:
            self._procs[path] = p  # so that shutdown stops it even mid-load
        try:
            p.start(self.load_timeout_s)
        except Unavailable as e:
            with self._lock:
                h = self._record(path)
                h["load_error"] = str(e)[:500]  # a file that does not load is not retried until it changes
                self._save()
            raise
        except ModelFailed as e:
            self._count(path, e)
            raise
        with self._lock:
            rt = self._runtimes[path] = RemoteRuntime(p, self)
            h = self._record(path)
            h["starts"] = int(h.get("starts", 0)) + 1
            h["pid"] = p.pid
            self._save()
        if self.log is not None:
            self.log.info("model_worker_started", model=path, pid=p.pid, load_ms=rt.load_ms)
        return rt

    def loaded(self) -> list:
        with self._lock:
            return [rt for rt in self._runtimes.values() if not rt._proc.dead.is_set()]

    def good(self, path: str) -> None:
        """A call answered: the crashes before it are no longer 'in a row'."""
        h = self._health.get(path)
        if h is not None and h.get("crashes"):
            with self._lock:
                h["crashes"] = 0
                h.pop("retry_at", None)
                self._save()

    # ------------------------------------------------------------ failures

    def _record(self, path: str) -> dict:
        """The file's health record, started afresh when the file or the build changed."""
        h = self._health.get(path)
        fid = faults.file_id(path)
        if h is None or h.get("file") != fid or h.get("build") != self._build:
            h = self._health[path] = {"file": fid, "build": self._build, "crashes": 0}
        return h

    def _exited(self, proc: ModelProcess, exc: ModelFailed) -> None:
        with self._lock:
            if self._runtimes.get(proc.path) is not None and self._runtimes[proc.path]._proc is proc:
                del self._runtimes[proc.path]
            if not self.stopping:
                self._count(proc.path, exc)

    def _count(self, path: str, exc: ModelFailed) -> None:
        if self.stopping:  # a worker stopped by the shutdown is no failure of its model
            return
        with self._lock:
            h = self._record(path)
            n = h["crashes"] = int(h.get("crashes", 0)) + 1
            d = dict(exc.detail)
            h["last"] = {"time": receipts.now_iso(), "message": str(exc), "how": d.get("how"),
                         "signal": d.get("signal"), "returncode": d.get("returncode"),
                         "fix": d.get("fix"), "stderr": d.get("stderr"), "pid": d.get("pid")}
            h["ends"] = int(h.get("ends", 0)) + 1
            if n >= self.crash_limit:
                fix = d.get("fix") or "see the worker's log"
                h["off"] = (f"switched off after {n} model failures in a row (last: {exc}); fix: {fix}; "
                            f"it comes back when the model file or the llama-cpp-python build changes")
                h.pop("retry_at", None)
            else:
                backoff = BACKOFF_S[min(n - 1, len(BACKOFF_S) - 1)]
                h["retry_at"] = time.time() + backoff
                self._schedule(path, backoff + 0.05)  # retry_at is wall-clock, the timer monotonic
            self._save()
        if self.log is not None:
            self.log.error("model_failed", model=path, error=str(exc), how=d.get("how"), in_a_row=n,
                           off=bool(h.get("off")), stderr=d.get("stderr"))
        if self.record_event is not None:
            self.record_event("model_failed", {"model": path, "error": str(exc), "how": d.get("how"),
                                               "in_a_row": n, "off": bool(h.get("off"))})

    def _schedule(self, path: str, delay: float) -> None:
        """Restart the worker after the backoff, so the next pass finds it warm."""
        def revive():
            with self._start_lock:
                try:
                    if self._ready(path) is None:
                        self._start(path)
                except (ModelFailed, LLMError) as e:
                    if self.log is not None:
                        self.log.warning("model_restart_failed", model=path, error=str(e)[:300])

        t = threading.Timer(delay, revive)
        t.daemon = True
        t.name = "recalld-model-restart"
        self._timers = [x for x in self._timers if x.is_alive()] + [t]
        t.start()

    def _save(self) -> None:
        if self.changed is not None:
            self.changed()
        try:
            p = health_path()
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f"models.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self._health, indent=1, default=str), encoding="utf-8")
            os.replace(tmp, p)
        except OSError as e:
            if self.log is not None:
                self.log.warning("model_health_not_written", error=str(e)[:200])

    # ------------------------------------------------------------ status, shutdown

    def snapshot(self) -> dict:
        with self._lock:
            return role_report(self.cfg, self._health, {p: rt for p, rt in self._runtimes.items()
                                                        if not rt._proc.dead.is_set()})

    def shutdown(self) -> None:
        with self._lock:
            self.stopping = True
            timers, procs = list(self._timers), list(self._procs.values())
            self._runtimes.clear()
        for t in timers:
            t.cancel()
        for p in procs:
            if not p.dead.is_set():
                p.stop()


def role_report(cfg: dict, health: "dict | None" = None, live: "dict | None" = None) -> dict:
    """{role: what its model worker is doing}: running (pid, RSS), off (why, and the fix),
    restarting after a crash, or not started; from the health file when no daemon runs."""
    health = read_health() if health is None else health
    live = live or {}
    build = faults.build_id()
    out = {}
    for role in ROLES:
        try:
            ch = resolve(role, cfg)
        except Exception as e:
            out[role] = {"state": "unavailable", "reason": f"{type(e).__name__}: {e}"}
            continue
        if not ch.available:
            out[role] = {"state": "unavailable", "reason": ch.reason}
            continue
        h = dict(health.get(ch.path) or {})
        current = h.get("file") == faults.file_id(ch.path) and h.get("build") == build
        r = {"model": ch.path, "crashes_in_a_row": h.get("crashes", 0) if current else 0,
             "failures": h.get("ends", 0), "last_failure": h.get("last")}
        rt = live.get(ch.path)
        if rt is not None:
            r.update(state="running", pid=rt.pid, rss_mb=_rss_mb(rt.pid), load_ms=rt.load_ms)
        elif current and h.get("off"):
            r.update(state="off", reason=h["off"])
        elif current and h.get("load_error"):
            r.update(state="does not load", reason=h["load_error"])
        elif current and float(h.get("retry_at") or 0) > time.time():
            r.update(state="restarting", restart_in_s=round(float(h["retry_at"]) - time.time(), 1))
        else:
            r["state"] = "not started"
        out[role] = r
    return out


def _rss_mb(pid: "int | None") -> "float | None":
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return None

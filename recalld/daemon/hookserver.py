"""The daemon's side of the served hook: run a hook process's hook on a warm connection.

recalld/hook/served.py has the protocol and why it exists. A few threads (`recalld-hook-N`)
accept on RECALLD_HOME/run/hook.sock (recalld/daemon/sockets.py: this user only), each with
its own store connection, and run the hook with recalld.hook.run's own begin / work / finish,
the same code a hook process runs, with the hook process's arguments, input, directory and
RECALLD_* environment (scope.resolve and settings.load read that environment, not the
daemon's). What differs is only what is warm: the imports, the connection and its schema,
the stemmer's temporary table, the crystal index and the word table.

The receipt is written after the hook process says the output reached its stdout (K), in the
same transaction as the rows the run records (served items, queue deliveries, holds); the hook
process waits for it (D) except where the output's line lets it go first (LEAVE_ACTS); F (the
write failed) writes it as an error with nothing delivered; a hook process that goes away
before either falls back to running the hook itself, so the daemon writes nothing for it and
the receipt is the one that process writes. The receipt takes the uid the hook process sent: a
hook process that gets no D writes one under the same uid, and only the first is stored. A
request from another version of recalld, or for another RECALLD_HOME, or any request once the
hook's code on disk is not what this daemon imported (an upgrade it has not restarted for), is
refused (R): the hook process runs it itself.

The threads stop with the daemon; the socket file goes with them (only our own: a newer
daemon's is left alone).
"""

import gc
import json
import os
import socket
import sys
import threading
import time

from recalld import __version__
from recalld import crystals
from recalld.core import paths
from recalld.daemon import folderwatch, sockets
from recalld.core import jsonio
from recalld.hook import payloads, semantic, served
from recalld.hook import run as hook_run

ACCEPT_S = 0.5  # how often an idle thread looks at the stop event
READ_S = 1.0  # a client that connects and sends too little is dropped after this
ACK_S = 2.0  # for the hook process's K or F
# Threads answering hook processes (settings daemon.serve_hooks, default 8). One run takes a few
# ms; what the threads buy is that a hook process is taken at once (it runs itself when the
# daemon has not taken it within served.CONNECT_S). Under many sessions' hooks at once, 8 threads
# leave few runs to run themselves (figures: docs/evaluation.md, "Hooks under load").
THREADS = 8
MAX_HEADER = 64 * 1024
# Acts whose hook process may exit before the receipt's commit (served.py, "L"): after a prompt
# or a session start the agent's next hook of that session follows a model call. After a tool's
# hook the next (a parallel call's) can start at once, and must find this one's deliveries.
LEAVE_ACTS = ("prompt", "boot")


# A full collection walks every object the daemon keeps (the vector index's rows, the word table,
# the crystal indexes): 13-82 ms at 100k memories, on whichever thread allocates when the counts
# say so, often a hook run's. When no hook has come for IDLE_S, the first thread collects and
# freezes what survives (the first time a pause of that size, which a hook arriving then waits
# out or, past CONNECT_S, runs itself), so later collections walk only what was made since; now
# and then it thaws first, so that cycles among frozen objects that became garbage are freed.
IDLE_S = 5.0
FREEZE_EVERY_S = 60.0
THAW_EVERY_S = 1800.0


class Refused(Exception):
    pass


def _code_sig():
    """The hook's code on disk: an upgrade (or an edit of an editable install) while the daemon
    runs changes it, and the daemon, still running what it imported, then refuses to serve."""
    out = []
    for path in (hook_run.__file__, served.__file__):
        try:
            st = os.stat(path)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def _same_home(theirs) -> bool:
    try:
        return isinstance(theirs, str) and os.path.realpath(theirs) == os.path.realpath(paths.home())
    except (OSError, ValueError):
        return False


def _warm() -> None:
    """What a hook run imports or reads on first use, before the first hook waits for it."""
    from recalld.core import search
    from recalld.hook import crystal_source, proposal_source  # noqa: F401

    search.keep_prior_table()
    # A hook waiting on this process should not wait out another thread's 5 ms slice of the GIL
    # (the tailer parsing a transcript, the proposer): hand it over every millisecond.
    sys.setswitchinterval(0.001)


def _prefetch(data: bytes) -> None:
    """Start the prompt's query embedding now, before the run reaches its search, when the query
    server runs in this process (it sets semantic.LOCAL): the embedding then overlaps the run's
    settings, scope, crystals and queue. The text is the one the run will ask with (the same
    normalization); anything odd here is for the run itself to meet and report."""
    srv = semantic.LOCAL
    if srv is None:
        return
    try:
        hi = payloads.normalize("prompt-submit", jsonio.loads(data))
        if hi.text.strip():
            srv.prefetch(hi.text)
    except Exception:
        pass


class HookServer:
    def __init__(self, threads: int = THREADS):
        # one connection each; SQLite lets go of the GIL inside its queries
        self.threads = max(1, int(threads))
        self.state = {"listening": False, "socket": None, "reason": None, "served": 0, "dropped": 0,
                      "refused": 0, "errors": 0, "last_ms": None, "error": None}
        self._lock = threading.Lock()
        self._sock = None
        self._inode = None
        self._code = _code_sig()
        self._frozen_at = self._thawed_at = None
        self._busy_at = time.monotonic()  # the last run's start

    def snapshot(self) -> dict:
        with self._lock:
            return dict(self.state)

    def _count(self, key: str, **extra) -> None:
        with self._lock:
            self.state[key] += 1
            self.state.update(extra)

    def serve(self, stop, open_store, follow, log=None) -> None:
        """Bind, then answer on `threads` threads until `stop` is set (this call is one of them)."""
        path = served.socket_path()
        _warm()
        try:
            self._sock, self._inode = sockets.bind(path, backlog=64)
        except OSError as e:
            self.state.update(reason=f"cannot listen: {type(e).__name__}: {e}"[:300])
            if log is not None:
                log.error("hook_socket_failed", reason=self.state["reason"])
            return
        watch = crystals.FOLDER_WATCH = folderwatch.start()  # crystal folders by inotify, not 300 stats an act
        self.state["folder_watch"] = watch is not None
        self._sock.settimeout(ACCEPT_S)
        self.state.update(listening=True, socket=path)
        if log is not None:
            log.info("hook_listening", socket=path, threads=self.threads)
        others = [threading.Thread(target=self._worker, args=(stop, open_store, follow), daemon=True,
                                   name=f"recalld-hook-{i + 2}") for i in range(self.threads - 1)]
        for t in others:
            t.start()
        try:
            self._worker(stop, open_store, follow, first=True)
        finally:
            for t in others:
                t.join(ACCEPT_S * 4)
            sockets.unbind(self._sock, path, self._inode)
            self.state["listening"] = False
            if watch is not None:
                if crystals.FOLDER_WATCH is watch:
                    crystals.FOLDER_WATCH = None
                watch.close()

    def settle(self, now: float) -> bool:
        """Collect and freeze once no run has started for IDLE_S, at most every FREEZE_EVERY_S
        (thawing first every THAW_EVERY_S); called by one thread between accepts. True: it did."""
        if now - self._busy_at < IDLE_S or (self._frozen_at is not None and now - self._frozen_at < FREEZE_EVERY_S):
            return False
        if self._thawed_at is None or now - self._thawed_at >= THAW_EVERY_S:
            gc.unfreeze()
            self._thawed_at = now
        gc.collect()
        gc.freeze()
        self._frozen_at = time.monotonic()
        return True

    def _open(self, stop, open_store) -> tuple:
        """open_store(), tried again until it works or `stop` is set: a store being deleted or
        created at this moment fails to open for a moment, and a thread that died of it would
        leave one fewer to answer hooks."""
        delay = 0.02
        while not stop.is_set():
            try:
                return open_store()
            except Exception as e:
                self._count("errors", error=f"opening the store: {type(e).__name__}: {e}"[:300])
                stop.wait(delay)
                delay = min(delay * 2, 1.0)
        return None, None

    def _worker(self, stop, open_store, follow, first=False) -> None:
        conn, ident = self._open(stop, open_store)
        if conn is None:
            return
        try:
            while not stop.is_set():
                try:
                    c, _ = self._sock.accept()
                except socket.timeout:
                    if first:
                        self.settle(time.monotonic())
                    continue
                except OSError:
                    if stop.is_set():
                        return
                    raise
                try:
                    try:
                        conn, ident = follow(conn, ident, "hook")
                    except Exception as e:  # StoreLost: follow has stopped the daemon and said why
                        self.state.update(reason=f"store lost: {e}"[:300])
                        return
                    try:
                        self.handle(c, conn)
                    except Exception as e:  # a bug in one run must not end the thread; that hook runs itself
                        self._count("errors", error=f"{type(e).__name__}: {e}"[:300])
                finally:
                    c.close()
        finally:
            try:
                conn.close()
            except Exception:
                pass

    # --- one run -----------------------------------------------------------------------------

    def _request(self, c) -> tuple:
        """(header, input bytes) from the hook process, or Refused."""
        c.settimeout(READ_S)
        buf = bytearray()
        while b"\n" not in buf:
            chunk = c.recv(65536)
            if not chunk:
                raise EOFError("closed before its request")
            buf += chunk
            if len(buf) > MAX_HEADER and b"\n" not in buf[:MAX_HEADER]:
                raise Refused("header too long")
        i = buf.index(b"\n")
        head = json.loads(bytes(buf[:i]))
        del buf[:i + 1]
        if not isinstance(head, dict) or head.get("v") != served.PROTOCOL:
            raise Refused("protocol")
        if head.get("version") != __version__ or _code_sig() != self._code:
            # an upgrade the daemon has not restarted for: the hook process runs its own code
            raise Refused(f"daemon runs recalld {__version__} as it was when it started; restart it")
        if not _same_home(head.get("home")):
            raise Refused("another RECALLD_HOME")
        argv, env, cwd, n = head.get("argv"), head.get("env"), head.get("cwd"), head.get("n")
        uid = head.get("uid")
        if not (isinstance(uid, str) and len(uid) == 32 and all(ch in "0123456789abcdef" for ch in uid)
                and isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(env, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
                and isinstance(cwd, str) and isinstance(n, int) and 0 <= n <= served.MAX_INPUT + 1):
            raise Refused("bad request")
        while len(buf) < n:
            chunk = c.recv(max(65536, n - len(buf)))
            if not chunk:
                raise EOFError("closed inside its input")
            buf += chunk
        return head, bytes(buf[:n])

    def handle(self, c, conn) -> None:
        t0 = time.perf_counter()
        self._busy_at = time.monotonic()
        try:
            head, data = self._request(c)
        except Refused as e:
            self._count("refused")
            try:
                c.sendall(b"R " + str(e).encode("utf-8", "replace")[:200] + b"\n")
            except OSError:
                pass
            return
        except (OSError, EOFError, ValueError) as e:  # gone, slow, or not JSON: it runs itself
            self._count("dropped", error=f"{type(e).__name__}: {e}"[:300])
            return
        if "prompt-submit" in head["argv"]:
            _prefetch(data)
        try:
            this_run = hook_run.begin(head["argv"], head["env"])
            # the hook process's uid: without our D it writes the receipt itself under it, and the
            # store's unique uid keeps the run at one receipt whichever commits first
            this_run.receipt["uid"] = head["uid"]
            c.sendall(b"A %d\n" % this_run.deadline_ms)
            out, after = hook_run.work(this_run, data, alarm=False, cwd=head["cwd"], conn=conn)
            body = out.encode("utf-8", "replace")
            leave = this_run.receipt.get("act") in LEAVE_ACTS and "gated" not in this_run.receipt["detail"]
            c.sendall(b"O %d%s\n" % (len(body), b" L" if leave else b"") + body)
            c.settimeout(ACK_S)
            ack = b""
            while not ack.endswith(b"\n") and len(ack) < 8:
                chunk = c.recv(8)
                if not chunk:
                    break
                ack += chunk
        except (OSError, ValueError) as e:  # it gave up waiting and runs the hook itself
            self._count("dropped", error=f"{type(e).__name__}: {e}"[:300])
            return
        except Exception as e:  # a bug here: the hook process falls back; never a receipt from both
            self._count("errors", error=f"{type(e).__name__}: {e}"[:300])
            return
        if ack not in (b"K\n", b"F\n"):
            self._count("dropped", error="no confirmation")
            return
        if ack == b"F\n":  # the agent never read it: the receipt must not claim a delivery
            this_run.receipt["outcome"], this_run.receipt["error"], after = "error", "stdout", []
            hook_run._reset_delivery(this_run.receipt)
        this_run.receipt["detail"]["served"] = "daemon"
        if not this_run.opened:  # it stopped before opening the store (bad input): the receipt still goes in
            this_run.opened.append(conn)
        hook_run.finish(this_run, after, keep=True)
        try:
            c.sendall(b"D\n")
        except OSError:
            pass
        self._count("served", last_ms=round((time.perf_counter() - t0) * 1000, 2))

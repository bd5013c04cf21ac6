"""The daemon's replicator thread: local writes out to the team's PostgreSQL, the team's in.

One thread, one loop, every step idempotent and transactional on each side:
1. scan: the change log since the scan cursor -> outbox events (recalld/team/outbox.py);
2. push: unpushed outbox events -> the server (unique event ids), then marked pushed here;
3. pull: the server's events after the pull cursor -> the local store (recalld/team/inbox.py).
A kill between any two of these repeats the last step, which then changes nothing. The loop
sleeps on the server's notification channel (LISTEN), waking when a teammate pushes, and
checks the local change log every TICK_S; a pull runs at least every `poll_s` in case a
notification was lost (a reconnect, a proxy that drops them, a read replica). With the server
away, events queue in the outbox and go out on reconnect (backoff up to BACKOFF_MAX_S).

Receipts (source `team`): one per pass that moved an event or failed, and one "nothing" pass
at most every QUIET_RECEIPT_S, so "never ran", "ran and found nothing" and "ran and failed"
stay distinguishable. The latest state is RECALLD_HOME/team-status.json, for `recalld team
status` and `recalld doctor`.
"""

import json
import os
import select
import threading
import time

from recalld.core import db, paths, receipts
from recalld.team import config, inbox, outbox, server

TICK_S = 0.2
POLL_S = 10.0
BACKOFF_MAX_S = 10.0
QUIET_RECEIPT_S = 60.0
PUSH_BATCH = 500
REPLICA_WAIT_S = 2.0
STATUS_FILE = "team-status.json"


def status_path() -> str:
    return os.path.join(paths.home(), STATUS_FILE)


def read_status() -> dict:
    try:
        with open(status_path(), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _short(e: BaseException) -> str:
    if isinstance(e, ImportError) and "psycopg" in str(e):
        return "psycopg is not installed: pip install 'recalld[team]'"
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]


class Replicator:
    def __init__(self, db_path=None, log=None, poll_s: float = POLL_S):
        self.db_path = db_path
        self.log = log
        self.poll_s = poll_s
        self.pg = None
        self.listen = None
        self.reader = None  # a read replica's connection, when the membership names one
        self.conn = None
        self.member: "config.Membership | None" = None
        self.state = {"started_at": receipts.now_iso(), "passes": 0, "pushed": 0, "applied": 0, "errors": 0,
                      "last_pass": None, "last_push": None, "last_pull": None, "last_error": None,
                      "connected": False, "server": None}
        self._last_pull = 0.0
        self._seen_change = -1
        self._backlog = True
        self._failing_since: "float | None" = None
        self._next_try = 0.0
        self._last_quiet = 0.0
        self._last_status = 0.0
        self._last_error_receipt = (0.0, None)  # when, and for which message

    # --- the loop ------------------------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        self.conn = db.connect(self.db_path)
        seen_version = None
        said_unjoined = False
        try:
            while not stop.is_set():
                # data_version moves only when another connection commits: an idle store costs
                # this one pragma per tick, not a read of the team log and the change log
                version = self.conn.execute("PRAGMA data_version").fetchone()[0]
                if version != seen_version or self.member is None:
                    self.member = config.current(self.conn)
                if self.member is None:
                    if self.pg is not None or not said_unjoined:  # once, not every second
                        self._disconnect()
                        self._status(force=True, joined=False)
                        said_unjoined = True
                    stop.wait(1.0)
                    continue
                said_unjoined = False
                if not self._connected(stop):
                    seen_version = None
                    continue
                woke = self._wait(TICK_S)
                if self.pg is None:  # the wait lost the server: reconnect (with backoff) first
                    continue
                after = self.conn.execute("PRAGMA data_version").fetchone()[0]
                if woke or after != seen_version or self._backlog or \
                        time.monotonic() - self._last_pull >= self.poll_s:
                    self.step(force_pull=woke)
                elif time.monotonic() - self._last_quiet >= QUIET_RECEIPT_S:
                    self.step()
                seen_version = after
        finally:
            self._status(force=True, joined=self.member is not None, running=False)
            self._disconnect()
            self.conn.close()

    def _connected(self, stop) -> bool:
        if self.pg is not None and self.listen is not None:
            return True
        if time.monotonic() < self._next_try:
            # offline: local writes still become outbox events (nothing waits on the network)
            self._scan_only()
            stop.wait(min(TICK_S * 5, max(0.0, self._next_try - time.monotonic())))
            return False
        try:
            self.pg = server.connect(self.member.conninfo)
            self.listen = server.connect(self.member.conninfo, autocommit=True)
            self.listen.execute(f"LISTEN {server.CHANNEL}")
            self.state["server"] = server.whoami(self.pg)
            self.pg.commit()
            if self.member.read_conninfo:
                self.reader = server.connect(self.member.read_conninfo)
                self.state["reader"] = server.whoami(self.reader)
                self.reader.commit()
            self.state["connected"] = True
            self._failing_since = None
            self._last_pull = 0.0  # a pull right away: whatever was missed while away
            self._backlog = True
            if self.log:
                self.log.info("team_connected", team=self.member.team, **self.state["server"])
            return True
        except Exception as e:
            self._failed("connect", e)
            return False

    def _wait(self, timeout: float) -> bool:
        """Sleep until a teammate's push is notified or `timeout` passes. True if notified.
        A select on libpq's socket: psycopg's notifies() generator cost 7 ms of CPU a call
        here, a third of a second a minute at five ticks a second."""
        from psycopg import pq

        try:
            if not select.select([self.listen.fileno()], [], [], timeout)[0]:
                return False
            pgconn = self.listen.pgconn
            pgconn.consume_input()
            if pgconn.status != pq.ConnStatus.OK:
                raise ConnectionError("the server closed the listening connection")
            got = False
            while pgconn.notifies() is not None:
                got = True
            return got
        except Exception as e:
            self._failed("listen", e)
            return False

    def step(self, force_pull: bool = False) -> dict:
        """One pass: scan, push, pull (each only when there can be work). Returns what moved."""
        m = self.member
        t0 = time.perf_counter()
        moved = {"queued": 0, "pushed": 0, "read": 0, "applied": {}}
        stage = "scan"
        try:
            moved["queued"] = self._scan()
            stage = "push"
            if self._backlog:
                moved["pushed"] = self._push()
            stage = "pull"
            if force_pull or time.monotonic() - self._last_pull >= self.poll_s:
                moved["read"], moved["applied"] = self._pull(woke=force_pull)
        except Exception as e:
            self._failed(stage, e, moved, t0)
            return moved
        if self._failing_since is not None:
            self._failing_since = None
        did = moved["queued"] or moved["pushed"] or moved["read"]
        if did or time.monotonic() - self._last_quiet >= QUIET_RECEIPT_S:
            self._receipt("synced" if did else "nothing", moved, t0)
            if not did:
                self._last_quiet = time.monotonic()
        self._status(force=bool(did), joined=True)
        return moved

    # --- the three steps -----------------------------------------------------------------------

    def _scan(self) -> int:
        top = self.conn.execute("SELECT max(id) FROM memory_changes").fetchone()[0] or 0
        if top == self._seen_change:
            return 0
        total, more = 0, True
        while more:
            n, more = outbox.scan(self.conn, self.member)
            total += n
        self._seen_change = top
        if total:
            self._backlog = True
        return total

    def _scan_only(self) -> None:
        try:
            self._scan()
        except Exception as e:  # the store itself failed: say so, keep going
            self.state["last_error"] = {"time": receipts.now_iso(), "stage": "scan", "error": _short(e)}
        self._status(force=False, joined=True)

    def _push(self) -> int:
        total = 0
        while True:
            rows = outbox.pending(self.conn, self.member.team, PUSH_BATCH)
            if not rows:
                break
            done = server.push(self.pg, self.member.team, self.member.machine, rows)
            outbox.mark_pushed(self.conn, done)
            total += len(done)
            if len(rows) < PUSH_BATCH:
                break
        self._backlog = False
        if total:
            self.state["pushed"] += total
            self.state["last_push"] = receipts.now_iso()
        return total

    def _pull(self, woke: bool = False) -> tuple[int, dict]:
        """Read and apply. From a replica, after a notification: until the replica has replayed
        what the primary says is there (at most REPLICA_WAIT_S; the poll catches the rest)."""
        m = self.member
        read, counts = 0, {}
        source = self.reader or self.pg
        target = server.last_seq(self.pg, m.team, m.keys()) if self.reader is not None and woke else 0
        deadline = time.monotonic() + REPLICA_WAIT_S
        while True:
            after = config.cursor(self.conn, m.team, "pull")
            events, upto = server.pull(source, m.team, after, m.keys())
            if not events:
                if after < target and time.monotonic() < deadline:
                    time.sleep(0.02)  # the replica has not replayed it yet
                    continue
                break
            me = (self.state.get("server") or {}).get("user")
            for k, v in inbox.apply(self.conn, m, events, upto, user=me).items():
                counts[k] = counts.get(k, 0) + v
            read += len(events)
            if len(events) < server.PULL_BATCH:
                break
        self._last_pull = time.monotonic()
        self.state["last_pull"] = receipts.now_iso()
        self.state["applied"] += counts.get("applied", 0)
        return read, counts

    # --- failure, receipts, status -------------------------------------------------------------

    def _failed(self, stage: str, e: BaseException, moved=None, t0=None) -> None:
        msg = _short(e)
        first = self._failing_since is None
        now = time.monotonic()
        if first:
            self._failing_since = now
        self.state["errors"] += 1
        self.state["connected"] = False
        self.state["last_error"] = {"time": receipts.now_iso(), "stage": stage, "error": msg}
        self._disconnect()
        # back off: 1 s, 2 s, 4 s ... up to BACKOFF_MAX_S while it keeps failing
        self._next_try = now + min(BACKOFF_MAX_S, max(1.0, 2 * (now - self._failing_since)))
        # one receipt per failure, not per retry: a new error, or the same one a minute later
        when, last_msg = self._last_error_receipt
        if first or msg != last_msg or now - when >= QUIET_RECEIPT_S:
            self._receipt("error", moved or {}, t0 or time.perf_counter(), error=f"{stage}: {msg}")
            self._last_error_receipt = (now, msg)
        if self.log:
            self.log.warning("team_sync_failed", stage=stage, error=msg)
        self._status(force=True, joined=True)

    def _receipt(self, outcome: str, moved: dict, t0: float, error: "str | None" = None) -> None:
        r = receipts.new("team", "sync")
        r["act"] = "sync"
        r["outcome"] = outcome
        r["duration_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        r["candidates"] = moved.get("read", 0)
        r["delivered"] = (moved.get("applied") or {}).get("applied", 0)
        r["error"] = error
        r["detail"] = {"team": self.member.team if self.member else None, "queued": moved.get("queued", 0),
                       "pushed": moved.get("pushed", 0), "read": moved.get("read", 0),
                       "applied": moved.get("applied") or {}}
        self.state["passes"] += 1
        self.state["last_pass"] = {"time": r["time"], "outcome": outcome, **r["detail"]}
        receipts.record(self.conn, r)

    def _status(self, force: bool, joined: bool, running: bool = True) -> None:
        now = time.monotonic()
        if not force and now - self._last_status < 1.0:
            return
        self._last_status = now
        st = dict(self.state, joined=joined, running=running, pid=os.getpid(), written_at=receipts.now_iso(),
                  team=self.member.team if self.member else None)
        path = status_path()
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(st, f)
            os.replace(tmp, path)
        except OSError:
            pass

    def _disconnect(self) -> None:
        for c in (self.pg, self.listen, self.reader):
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass
        self.pg = self.listen = self.reader = None


def start_for_daemon(dm) -> "threading.Thread | None":
    """The replicator beside a daemon (`recalld daemon run`): a thread that starts once the
    daemon holds its lock (its `ready` event) and ends with its stop event. Started whether or
    not the store has joined a team: a `recalld team join` takes effect without a restart."""
    def run():
        while not (dm.ready.wait(0.5) or dm.stop_event.is_set()):
            pass
        if dm.stop_event.is_set():
            return
        try:
            Replicator(log=dm.log).serve(dm.stop_event)
        except Exception as e:  # the store could not be opened: the daemon goes on without sync
            dm.log.error("team_replicator_failed", error=_short(e))

    t = threading.Thread(target=run, name="recalld-team", daemon=True)
    t.start()
    return t

"""Incremental transcript reading: new complete lines -> normalized events -> the store.

Where the tailer is in each file lives in `tail_offsets`, an append-only table: every read
appends (path, device, inode, size, generation, offset, lines, malformed, events) in the same
transaction as the events it produced, so the store can never hold events past its offset nor
an offset past its events. A restart resumes at the latest row: nothing is read twice, nothing
is skipped.

- A partial last line is left for the next read (the writer has not finished it).
- Truncation (the file is shorter than the offset) and replacement (another inode at the same
  path) start a new generation at offset 0 and say so in a row of their own.
- A file the store has never seen is read from the start only when it was modified within
  `daemon.recent_days`; older ones are left alone until they change (the first start does
  not drown in months of history).
- The parse state a line depends on (tool names by call id, the session and cwd a Codex
  rollout declared on its first line, which turns are open) is rebuilt after a restart by
  parsing the already-read prefix again without storing it.

Watching: watchdog (inotify/FSEvents) marks files dirty and wakes the daemon; a periodic
rescan of the roots catches anything a watcher missed (and is all there is without watchdog).
"""

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from recalld import agents
from recalld.core import receipts
from recalld.daemon import transcripts
from recalld.core.redact import redact

READ_CHUNK = 8 * 1024 * 1024
BATCH_S = 0.25  # reading this long (parse, redact) is stored in one transaction
WRITE_EVENTS = {"modified", "created", "moved", "closed"}  # watchdog event types that mean new bytes


def default_roots(cfg: "dict | None" = None) -> list:
    """(path, agent) for every transcript root: each adapter's (recalld/agents/), then
    settings daemon.roots."""
    roots = [(Path(p), a.name) for a in agents.ADAPTERS for p in a.transcript_roots()]
    for extra in ((cfg or {}).get("daemon") or {}).get("roots") or []:
        if isinstance(extra, str) and extra.strip():
            roots.append((Path(extra).expanduser(), "custom"))
    seen, out = set(), []
    for p, kind in roots:
        key = os.path.abspath(str(p))
        if key not in seen:
            seen.add(key)
            out.append((Path(key), kind))
    return out


@dataclass
class Cursor:
    path: str
    dev: int
    inode: int
    size: int
    generation: int
    offset: int
    lines: int
    malformed: int
    events: int
    state: "transcripts.ParseState | None" = None  # rebuilt lazily after a restart


@dataclass
class PollResult:
    path: str
    events: list = field(default_factory=list)
    lines: int = 0
    bytes: int = 0
    malformed: int = 0
    reset: "str | None" = None  # "truncated" | "replaced" when the file started over
    live: bool = False  # the file was written recently (its events may trigger passes)


class Tailer:
    def __init__(self, conn: sqlite3.Connection, roots: list, *, recent_days: float = 2.0,
                 live_s: float = 300.0, log=None):
        # Events and their offset row commit together, so a power cut can only lose both:
        # the lines are then read again, never skipped and never doubled. That makes the last
        # fsync of synchronous=FULL unnecessary here (WAL + NORMAL is still crash-safe).
        conn.execute("PRAGMA synchronous = NORMAL")
        self.conn = conn
        self.roots = [(Path(p), k) for p, k in roots]
        self.recent_s = float(recent_days) * 86400
        self.live_s = float(live_s)
        self.log = log
        self.cursors: dict = {}
        self.dirty: set = set()
        self._pending: "list | None" = None  # inside poll_many: writes waiting for the batch
        # Called before every write transaction; the daemon's check that the store's file is
        # still the one self.conn opened (it may replace self.conn).
        self.before_write = None
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stats = {"lines": 0, "bytes": 0, "events": 0, "malformed": 0, "truncated": 0,
                      "replaced": 0, "polls": 0, "zst_skipped": 0, "store_failed": 0}

    # --- marking (called from watcher threads) ---------------------------------------------

    def mark(self, path: str) -> None:
        if transcripts.is_transcript(path):
            with self.lock:
                self.dirty.add(os.path.abspath(path))
            self.wake.set()

    def take_dirty(self) -> set:
        with self.lock:
            d, self.dirty = self.dirty, set()
        return d

    # --- discovery ---------------------------------------------------------------------------

    def discover(self) -> list:
        out = []
        for root, _kind in self.roots:
            if not root.is_dir():
                continue
            for dirpath, _dirs, files in os.walk(root):
                for name in files:
                    if transcripts.is_transcript(name):
                        out.append(os.path.join(dirpath, name))
        return sorted(out)

    def rescan(self) -> list:
        """Poll every transcript under the roots (the safety net for missed events)."""
        return self.poll_many(self.discover())

    def poll_many(self, paths) -> list:
        """Poll several files and store what they held with one commit per BATCH_S of reading,
        not one per file: fewer commits, more throughput (docs/evaluation.md, "Tailing throughput").

        Reading, parsing and redaction happen outside any transaction: the write lock is held
        only while a batch's rows go in, so a hook writing its receipt meanwhile waits
        milliseconds, not the batch. Each file's rows and offset rows are one savepoint: a file
        that fails to store rolls back alone (logged, counted in stats["store_failed"], its
        cursor reloaded from the store so the next poll reads it again) and the rest commits.
        Returns the results of what was stored."""
        done, batch, started = [], [], time.monotonic()
        self._pending = []
        try:
            for p in paths:
                r = self.poll(p)
                if r is not None:
                    batch.append(r)
                if time.monotonic() - started >= BATCH_S:
                    done += self._flush(batch)
                    batch, started = [], time.monotonic()
            done += self._flush(batch)
        finally:
            for path, _, _, _ in self._pending or ():  # an exception left these unwritten
                self.cursors.pop(path, None)
            self._pending = None
        return done

    def _store(self, path: str, rows: list, offset_row: tuple, counts: dict) -> None:
        """Write one read's rows with its offset row: now, or with the batch (poll_many)."""
        if self._pending is not None:
            self._pending.append((path, rows, offset_row, counts))
            return
        try:
            if self.before_write is not None:
                self.before_write()
            self.conn.execute("BEGIN IMMEDIATE")
            self._insert(rows, offset_row)
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            # The cursor moved in memory only; reload it from the store on the next poll.
            self.cursors.pop(path, None)
            raise
        self.conn.execute("COMMIT")
        self._count(counts)

    def _flush(self, batch: list) -> list:
        pending, self._pending = self._pending, []
        if not pending:
            return batch
        failed: dict = {}
        try:
            if self.before_write is not None:
                self.before_write()
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                for path, rows, offset_row, _ in pending:
                    if path in failed:
                        continue  # a later read of a file whose earlier read did not store
                    self.conn.execute("SAVEPOINT tail_file")
                    try:
                        self._insert(rows, offset_row)
                    except sqlite3.Error as e:
                        self.conn.execute("ROLLBACK TO tail_file")
                        failed[path] = e
                    self.conn.execute("RELEASE tail_file")
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        except BaseException:
            for path, _, _, _ in pending:
                self.cursors.pop(path, None)
            raise
        for path, _, _, counts in pending:
            if path not in failed:
                self._count(counts)
        for path, e in failed.items():
            self.cursors.pop(path, None)
            self.stats["store_failed"] += 1
            if self.log:
                self.log.warning("transcript_store_failed", path=path, error=str(e)[:200])
        return [r for r in batch if r.path not in failed]

    def _insert(self, rows: list, offset_row: tuple) -> None:
        if rows:
            self.conn.executemany(
                "INSERT OR IGNORE INTO transcript_events (ingested_at, time, session, cwd, project, agent, role, kind, "
                "text, tool, tool_input, is_error, uuid, source, generation, line_no, seq) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        self.conn.execute(
            "INSERT INTO tail_offsets (time, path, dev, inode, size, generation, offset, lines, malformed, events, reason) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?)", offset_row)

    def _count(self, counts: dict) -> None:
        for k, v in counts.items():
            self.stats[k] += v

    # --- cursors -----------------------------------------------------------------------------

    def _load(self, path: str) -> "Cursor | None":
        row = self.conn.execute(
            "SELECT * FROM tail_offsets WHERE path = ? ORDER BY id DESC LIMIT 1", (path,)).fetchone()
        if row is None:
            return None
        return Cursor(path=path, dev=row["dev"], inode=row["inode"], size=row["size"],
                      generation=row["generation"], offset=row["offset"], lines=row["lines"],
                      malformed=row["malformed"], events=row["events"])

    @staticmethod
    def _offset_row(c: Cursor, reason: str) -> tuple:
        return (receipts.now_iso(), c.path, c.dev, c.inode, c.size, c.generation, c.offset, c.lines,
                c.malformed, c.events, reason)

    def _restart(self, c: Cursor, st: os.stat_result, reason: str) -> None:
        c.generation += 1
        c.dev, c.inode, c.size = st.st_dev, st.st_ino, st.st_size
        c.offset = c.lines = c.malformed = c.events = 0
        c.state = transcripts.new_state(c.path)
        self.stats[reason] += 1
        self._store(c.path, [], self._offset_row(c, reason), {})
        if self.log:
            self.log.info("transcript_restarted", path=c.path, reason=reason, generation=c.generation)

    def _rebuild_state(self, c: Cursor) -> None:
        """Parse the already-stored prefix again (nothing stored) to recover the parse state."""
        st = transcripts.new_state(c.path)
        if c.offset > 0:
            with transcripts.open_text(c.path) as f:
                remaining = c.offset
                buf = b""
                while remaining > 0:
                    chunk = f.read(min(READ_CHUNK, remaining))
                    if not chunk:
                        break
                    remaining -= len(chunk)
                    buf += chunk
                    *complete, buf = buf.split(b"\n")
                    for line in complete:
                        transcripts.parse_line(line, st)
        # The stored counters are the truth for numbering, whatever the prefix says now.
        st.line_no, st.malformed = c.lines, c.malformed
        c.state = st

    # --- reading -----------------------------------------------------------------------------

    def poll(self, path: str) -> "PollResult | None":
        """Read what is new in one file. None when there is nothing to read."""
        path = os.path.abspath(path)
        self.stats["polls"] += 1
        try:
            st = os.stat(path)
        except OSError:
            self.cursors.pop(path, None)
            return None
        c = self.cursors.get(path)
        if c is None:
            c = self._load(path)
            if c is None:
                if time.time() - st.st_mtime > self.recent_s:
                    return None  # old and never seen: not ours to ingest until it changes
                c = Cursor(path, st.st_dev, st.st_ino, 0, 0, 0, 0, 0, 0)
                c.state = transcripts.new_state(path)
            self.cursors[path] = c
        compressed = transcripts.is_compressed(path)
        if compressed and not transcripts.zstd_available():
            self.stats["zst_skipped"] += 1
            return None
        reset = None
        if (c.dev, c.inode) != (st.st_dev, st.st_ino) and (c.offset or c.lines or c.size):
            self._restart(c, st, "replaced")
            reset = "replaced"
        elif ((not compressed and (st.st_size < c.offset or (st.st_size > c.offset and not _ends_line(path, c.offset))))
              or (compressed and st.st_size < c.size)):
            # Shorter than what we read, or what we read no longer ends a line there: the
            # file was cut (and perhaps written again past our offset while we were away).
            self._restart(c, st, "truncated")
            reset = "truncated"
        c.dev, c.inode = st.st_dev, st.st_ino
        if not compressed and st.st_size == c.offset:
            return PollResult(path, reset=reset) if reset else None
        if compressed and st.st_size == c.size and c.size:
            return PollResult(path, reset=reset) if reset else None
        if c.state is None:
            self._rebuild_state(c)
        res = PollResult(path, reset=reset, live=time.time() - st.st_mtime <= self.live_s)
        try:
            self._read(c, st, res, compressed)
        except OSError as e:
            if self.log:
                self.log.warning("transcript_read_failed", path=path, error=str(e)[:200])
        return res

    def _read(self, c: Cursor, st: os.stat_result, res: PollResult, compressed: bool) -> None:
        with transcripts.open_text(c.path) as f:
            if compressed:
                _skip(f, c.offset)
            else:
                f.seek(c.offset)
            pending = b""
            while True:
                chunk = f.read(READ_CHUNK)
                if not chunk:
                    break
                data = pending + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    pending = data  # one long line still being written: keep reading
                    continue
                complete, pending = data[: cut + 1], data[cut + 1:]
                self._ingest(c, complete, st.st_size, res)
        if compressed:
            c.size = st.st_size

    def _ingest(self, c: Cursor, data: bytes, size: int, res: PollResult) -> None:
        state = c.state
        rows, events = [], []
        malformed0 = state.malformed
        now = receipts.now_iso()
        lines = data.split(b"\n")[:-1]
        for line in lines:
            evs = transcripts.parse_line(line, state)
            for seq, ev in enumerate(evs or ()):
                # Transcripts carry whatever the agent saw, secrets included: redact before
                # anything is stored or handed on (the same policy the proposer's drafts get).
                ev.text = redact(ev.text)[0] if ev.text else ev.text
                tool_input = None
                if ev.tool_input is not None:
                    tool_input, found = redact(json.dumps(ev.tool_input, ensure_ascii=False, default=str))
                    if found:
                        try:
                            ev.tool_input = json.loads(tool_input)
                        except ValueError:
                            ev.tool_input = {"redacted": tool_input}
                events.append(ev)
                rows.append((now, ev.time, ev.session, ev.cwd, ev.project, ev.agent, ev.role, ev.kind,
                             ev.text, ev.tool, tool_input,
                             1 if ev.is_error else 0, ev.uuid, ev.source, c.generation, ev.line_no, seq))
        c.offset += len(data)
        c.lines = state.line_no
        c.malformed = state.malformed
        c.events += len(rows)
        c.size = size
        res.events.extend(events)
        res.lines += len(lines)
        res.bytes += len(data)
        res.malformed += state.malformed - malformed0
        self._store(c.path, rows, self._offset_row(c, "read"),
                    {"lines": len(lines), "bytes": len(data), "events": len(rows),
                     "malformed": state.malformed - malformed0})


def _ends_line(path: str, offset: int) -> bool:
    """Does byte offset-1 still hold the newline our last read ended on?"""
    if offset <= 0:
        return True
    try:
        with open(path, "rb") as f:
            f.seek(offset - 1)
            return f.read(1) == b"\n"
    except OSError:
        return True


def _skip(f, n: int) -> None:
    while n > 0:
        chunk = f.read(min(READ_CHUNK, n))
        if not chunk:
            break
        n -= len(chunk)


# --- offsets, for status ------------------------------------------------------------------


def offsets(conn: sqlite3.Connection, limit: int = 50) -> list:
    """The latest offset row of each file, most recently read first."""
    rows = conn.execute(
        """SELECT t.* FROM tail_offsets t
           JOIN (SELECT path, max(id) AS id FROM tail_offsets GROUP BY path) last ON last.id = t.id
           ORDER BY t.id DESC LIMIT ?""", (limit,)).fetchall()
    return [dict(r) for r in rows]


# --- watching -----------------------------------------------------------------------------


class Watcher:
    """watchdog observer over the roots; marks transcripts dirty on the tailer.

    A root that does not exist yet (a first install: `~/.claude/projects` appears with the
    first session) is waited for: its nearest existing parent is watched, not recursively, and
    when a directory on the way appears the watch moves down, until the root itself is
    watched; then every transcript already under it is marked dirty, so the file the new
    session is writing is read now (its events are live) instead of at the next rescan, after
    the turn it could have helped has ended.

    Without watchdog (or when the OS refuses a watch) it reports mode "polling" and the
    daemon's periodic rescan does the work.
    """

    def __init__(self, tailer: Tailer, log=None):
        self.tailer = tailer
        self.log = log
        self.observer = None
        self.watched: set = set()
        self.waiting: dict = {}  # existing parent directory -> its watch, for roots not there yet
        self.mode = "polling"
        self.error: "str | None" = None
        self.attached = 0  # roots attached after the start (a root that appeared later)
        self._lock = threading.RLock()

    def start(self) -> None:
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:
            self.error = "watchdog is not installed"
            return
        tailer, watcher = self.tailer, self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                # "opened" / "closed_no_write" are reads (ours included): not a change
                if event.event_type not in WRITE_EVENTS:
                    return
                for p in (getattr(event, "src_path", None), getattr(event, "dest_path", None)):
                    if isinstance(p, bytes):
                        p = os.fsdecode(p)
                    if not p:
                        continue
                    if event.is_directory:
                        if watcher.waiting and watcher.leads_to_a_root(p):
                            watcher.refresh()
                    elif not watcher.waiting or watcher.under_a_root(p):
                        # a parent's watch also sees its own files (~/.claude/history.jsonl)
                        tailer.mark(p)

        self._handler = Handler()
        self.observer = Observer()
        self.observer.daemon = True
        self.observer.start()
        self.mode = "watchdog"
        self.refresh(started=True)

    def leads_to_a_root(self, path: str) -> bool:
        """Is `path` a root not watched yet, or a directory on the way to one?"""
        p = os.path.abspath(path).rstrip(os.sep) + os.sep
        return any(str(r).rstrip(os.sep) + os.sep == p or str(r).startswith(p)
                   for r, _ in self.tailer.roots if str(r) not in self.watched)

    def under_a_root(self, path: str) -> bool:
        p = os.path.abspath(path)
        return any(p.startswith(r.rstrip(os.sep) + os.sep) for r in list(self.watched))

    def refresh(self, started: bool = False) -> None:
        """Watch roots that exist now, and wait on the nearest existing parent of the rest
        (also called from the observer's thread when a directory on the way appears)."""
        if self.observer is None:
            return
        with self._lock:
            # A directory made between the event that brought us here and the new watch being
            # in place sends no event to anyone: so look again once the watches are set, until
            # nothing moved (each pass goes at least one directory deeper, so this ends).
            for _ in range(16):
                if not self._refresh_once(started):
                    break

    def _refresh_once(self, started: bool) -> bool:
        """One look at the roots; True when it attached a root or moved a wait."""
        moved = False
        wanted = set()
        for root, _kind in self.tailer.roots:
            key = str(root)
            if key in self.watched:
                continue
            if root.is_dir():
                if self._schedule(key, recursive=True) is not None:
                    self.watched.add(key)
                    moved = True
                    if not started:
                        self.attached += 1
                        self._catch_up(key)
                continue
            parent = _nearest_existing(root)
            if parent is not None:
                wanted.add(parent)
        for parent in wanted - set(self.waiting):
            w = self._schedule(parent, recursive=False)
            if w is not None:
                self.waiting[parent] = w
                moved = True
        for parent in set(self.waiting) - wanted:
            try:
                self.observer.unschedule(self.waiting.pop(parent))
            except (KeyError, ValueError, OSError):
                pass
        return moved

    def _schedule(self, path: str, recursive: bool):
        try:
            return self.observer.schedule(self._handler, path, recursive=recursive)
        except OSError as e:  # inotify watch limit, permissions, the directory just went away
            self.error = f"{path}: {e}"[:200]
            if self.log:
                self.log.warning("watch_failed", root=path, error=self.error)
            return None

    def _catch_up(self, root: str) -> None:
        """A root that appeared after the start: what is already in it was written just now."""
        n = 0
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                if transcripts.is_transcript(name):
                    self.tailer.mark(os.path.join(dirpath, name))
                    n += 1
        if self.log:
            self.log.info("transcript_root_attached", root=root, files=n)

    def stop(self) -> None:
        if self.observer is not None:
            try:
                self.observer.stop()
                self.observer.join(timeout=5)
            except Exception:
                pass
            self.observer = None


def _nearest_existing(path: Path) -> "str | None":
    for p in (path, *path.parents):
        if p.is_dir():
            return str(p)
    return None

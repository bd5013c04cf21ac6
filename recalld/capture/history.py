"""A day-one store: past sessions of a project mined into proposals (`recalld propose --history`).

A new user already has months of transcripts. The agent adapters know where each agent keeps
them (recalld/agents: Claude Code under ~/.claude/projects, Codex under ~/.codex/sessions;
the daemon's extra `daemon.roots` too); this module finds the sessions of one project, oldest
first, and runs the proposer over each turn of each, exactly as the daemon would have at each
turn end. Resumable: every pass advances the transcript's drafts cursor (proposal_passes), so
a second run, or the daemon later, reads only what no pass has read. A session's last turn is
read when the file has been idle for IDLE_S (a finished session often ends without a turn-end
record); a live session's open turn is left to the daemon.
"""

import datetime as dt
import os
import time
from dataclasses import dataclass

from recalld import agents
from recalld.capture import proposer
from recalld.core import proposal_db

IDLE_S = 600
HEAD_LINES = 400  # lines read to learn a transcript's project (its first cwd)


@dataclass
class Session:
    path: str
    agent: str  # the adapter's name: claude, codex
    project: "str | None"
    mtime: float
    size: int


def roots(cfg: "dict | None" = None) -> list:
    """(adapter name, directory) for every transcript root the adapters and settings name."""
    out = []
    for a in agents.TRANSCRIPT_ADAPTERS:
        out.extend((a.name, r) for r in a.transcript_roots())
    for r in ((cfg or {}).get("daemon") or {}).get("roots") or []:
        out.append(("", os.path.expanduser(r)))
    seen, uniq = set(), []
    for name, r in out:
        real = os.path.realpath(r)
        if real not in seen and os.path.isdir(real):
            seen.add(real)
            uniq.append((name, real))
    return uniq


def project_of(path: str) -> "str | None":
    """The project of a transcript: its first record that names a cwd, resolved like the hook's."""
    from recalld.daemon import transcripts

    st = transcripts.new_state(path)
    try:
        with transcripts.open_text(path) as f:
            for n, line in enumerate(f):
                if n >= HEAD_LINES:
                    break
                for ev in transcripts.parse_line(line, st) or ():
                    if ev.project:
                        return ev.project
    except OSError:
        return None
    return None


def parse_since(value: "str | None") -> "float | None":
    """A date (YYYY-MM-DD, or an ISO time) or an age (30d, 12h, 2w) -> a Unix time; None: no bound."""
    if not value:
        return None
    v = value.strip().lower()
    units = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    if v[:-1].isdigit() and v[-1] in units:
        return time.time() - int(v[:-1]) * units[v[-1]]
    try:
        d = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"not a date or an age: {value!r} (use YYYY-MM-DD, or 30d, 12h, 2w)") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.datetime.now().astimezone().tzinfo)
    return d.timestamp()


def find_sessions(project: "str | None", since: "float | None" = None, cfg: "dict | None" = None) -> list:
    """The transcripts of `project` (None: every project) modified since `since`, oldest first."""
    from recalld.daemon import transcripts

    out = []
    for name, root in roots(cfg):
        for dirpath, _dirs, files in os.walk(root):
            for fn in files:
                path = os.path.join(dirpath, fn)
                if not transcripts.is_transcript(path):
                    continue
                if transcripts.is_compressed(path) and not transcripts.zstd_available():
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if since is not None and st.st_mtime < since:
                    continue
                proj = project_of(path)
                if project is not None and proj != project:
                    continue
                out.append(Session(path=path, agent=name or transcripts.guess_format(path), project=proj,
                                   mtime=st.st_mtime, size=st.st_size))
    out.sort(key=lambda s: (s.mtime, s.path))
    return out


@dataclass
class Mined:
    path: str
    passes: int = 0
    proposals: int = 0
    turns_read: int = 0
    skipped_lines: int = 0  # lines a pass had already read (resumed)
    errors: int = 0
    seconds: float = 0.0


def mine_session(session: Session, *, runtime=None, cfg: "dict | None" = None, conn=None,
                 now: "float | None" = None) -> Mined:
    """One proposer pass per turn of the session that no pass has read."""
    from recalld.daemon import transcripts

    t0 = time.perf_counter()
    out = Mined(path=session.path)
    own = conn is None
    conn = conn or proposal_db.connect()
    try:
        cursor = proposal_db.cursor(conn, os.path.realpath(session.path))
        out.skipped_lines = cursor
        turns, cur = [], []
        for ev in transcripts.parse_file(session.path):
            if ev.line_no <= cursor:
                continue
            if ev.kind == "turn_end":
                cur.append(ev)
                turns.append(cur)
                cur = []
            else:
                cur.append(ev)
        idle = (now or time.time()) - session.mtime >= IDLE_S
        if cur and idle:
            turns.append(cur)
        for a, b in zip(turns, turns[1:]):
            # A turn end written on the next prompt's line (older Claude Code) must not move the
            # cursor past that prompt: the next run would never read it.
            if a[-1].kind == "turn_end" and b and b[0].line_no == a[-1].line_no:
                a.pop()
        for turn in turns:
            if not any(ev.kind != "turn_end" for ev in turn):
                continue
            res = proposer.run_pass(session.path, session=turn[0].session, events=turn, origin="history",
                                    cfg=cfg, runtime=runtime, conn=conn)
            out.passes += 1
            out.turns_read += 1
            out.proposals += len(res.stored_ids)
            out.errors += res.outcome in ("error", "timeout")
    finally:
        if own:
            conn.close()
    out.seconds = time.perf_counter() - t0
    return out

"""The daemon end to end: real transcripts appended while it runs (restart, truncation, partial
lines), needs and receipts, the real embedded judge, delivery at the next hook, lifecycle
(start/stop/status, single instance, kill -9 while hooks keep answering), autostart."""

import json
import os
import random
import signal
import sqlite3
import threading
import time

import pytest

from tests.helpers import TRANSCRIPTS, payload, run_recalld, wait_for
from recalld.hook import autostart
from recalld.daemon import passes, service as daemon
from recalld.core import db, receipts, scope, settings
from recalld import memories
from test_tailer import appender, expected_keys, layout, stored_keys

FAST = {"rescan_s": 0.5, "poll_s": 0.5, "debounce_s": 0.2, "max_wait_s": 1.0, "min_pass_interval_s": 0,
        "max_passes_per_minute": 10_000}
SPOTTER = "/home/marco/projects/spotter"
SHORT_SESSION = "55604662-cf2a-4331-851a-ec234028f8ca"


def configure(**over):
    # the proposer (wired by `recalld daemon run`) is off: these tests are
    # about the daemon's own passes and hooks, and a second model would only slow them down
    values = {"daemon": dict(FAST), "models": {"judge": "off"}, "proposals": {"enabled": False}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(values.get(k), dict):
            values[k].update(v)
        else:
            values[k] = v
    settings.save(values)
    return settings.load()


class Running:
    """A daemon in this process (its threads, not a subprocess), stopped on exit."""

    def __init__(self, root, hooks=()):
        self.d = daemon.Daemon(cfg=settings.load(), roots=[(root, "claude")], turn_end_hooks=tuple(hooks))
        self.code = None
        self.th = threading.Thread(target=self._run)

    def _run(self):
        self.code = self.d.run(install_signals=False)

    def __enter__(self):
        self.th.start()
        assert self.d.ready.wait(30), "the daemon never finished its first scan"
        return self.d

    def __exit__(self, *exc):
        self.d.stop("test")
        self.th.join(60)
        assert not self.th.is_alive()
        assert self.code == 0
        names = {t.name for t in threading.enumerate()}
        assert not names & {"recalld-loop", "recalld-passer", "recalld-turns", "recalld-judge"}


def test_replay_while_running_exactly_once_with_restart_truncation_and_needs(home, tmp_path, shared_transcripts):
    configure()
    root = tmp_path / "projects"
    root.mkdir()
    files = layout(root)
    gen = appender(files, random.Random(11))  # appends one piece per step (often mid-line)
    conn = db.connect()
    half = None
    with Running(root) as d1:
        for i, _ in enumerate(gen):
            time.sleep(0.01)
            if i == 40:
                half = i
                break
    assert half is not None
    passes = d1.passes["run"]
    # the daemon is down: lines keep arriving (one file even ends mid-line)
    for _ in range(5):
        next(gen, None)
    with Running(root) as d:
        for _ in gen:
            time.sleep(0.01)
        short = files[TRANSCRIPTS / "spotter-short.jsonl"]
        want = expected_keys(files.values())
        assert wait_for(lambda: stored_keys(conn) == want), "not every record was stored exactly once"
        # truncate one file in place and write it again in pieces (a partial line included)
        data = short.read_bytes()
        with open(short, "r+b") as f:
            f.truncate(0)
        pos = 0
        for cut in (3000, 3001, 7000, len(data)):
            with open(short, "ab") as f:
                f.write(data[pos:cut])
            pos = cut
            time.sleep(0.3)
        gen1 = [(s, 1, *rest) for (s, g, *rest) in expected_keys([short])]
        assert wait_for(lambda: stored_keys(conn) == sorted(want + gen1))
        assert wait_for(lambda: d.passes["run"] > 0)
        time.sleep(0.5)  # let a pass that is running finish before the count is read
    passes += d.passes["run"]
    reasons = {r["reason"] for r in conn.execute("SELECT reason FROM tail_offsets")}
    assert "truncated" in reasons
    # needs were detected and every pass left one receipt saying the judge is off, without the text
    needs = conn.execute("SELECT detail FROM daemon_events WHERE kind = 'need'").fetchall()
    assert needs
    recs = receipts.read(conn, source="daemon")
    assert len(recs) == passes
    for r in recs:
        assert r["outcome"] == "skipped" and r["error"].startswith("judge_unavailable")
        det = r["detail"]
        assert len(det["need_sha256"]) == 64 and det["need_chars"] > 0 and det["trigger"]
        blob = json.dumps(r)
        assert "Let me" not in blob and "phx.server" not in blob
    starts = conn.execute("SELECT count(*) FROM daemon_events WHERE kind = 'start'").fetchone()[0]
    stops = conn.execute("SELECT count(*) FROM daemon_events WHERE kind = 'stop'").fetchone()[0]
    assert (starts, stops) == (2, 2)


def test_idle_and_history_raise_no_passes(home, tmp_path, shared_transcripts):
    """Files already there at start (history) are stored but never judged; nothing new, no pass."""
    configure()
    root = tmp_path / "projects"
    files = layout(root)
    for src, dst in files.items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
        old = time.time() - 3600  # within recent_days, older than live_s
        os.utime(dst, (old, old))
    conn = db.connect()
    with Running(root) as d:
        want = expected_keys(files.values())
        assert wait_for(lambda: stored_keys(conn) == want)
        time.sleep(1.5)  # a few debounce periods and rescans
        assert d.passes["run"] == 0 and d.detector.stats["needs"] == 0
    assert receipts.read(conn, source="daemon") == []


def test_turn_end_hooks_get_the_turns_events(home, tmp_path, shared_transcripts):
    configure()
    root = tmp_path / "projects"
    p = root / "-home-marco-projects-spotter" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"
    p.parent.mkdir(parents=True)
    got = []

    def hook(session, events):
        got.append((session, events))

    with Running(root, hooks=[hook]) as d:
        with open(p, "ab") as f:
            for line in (TRANSCRIPTS / "spotter-subagent.jsonl").read_bytes().splitlines(keepends=True):
                f.write(line)
                f.flush()
        # three turns: closed by the interrupt (line 69), by the next prompt (71), and by the
        # stop_hook_summary record (96)
        assert wait_for(lambda: d.turns["dispatched"] == 3)
    assert [s for s, _ in got] == ["491e126e-1e71-469c-ade2-fcc8af567c74"] * 3
    for _, events in got:
        assert events and all(e.kind != "turn_end" for e in events)
    assert [e.kind for e in got[1][1]] == ["prompt"]  # the interrupt, alone in its turn
    assert got[2][1][0].text == "create the beads" and got[2][1][-1].line_no < 96
    assert sum(e.kind == "tool_call" for _, evs in got for e in evs) == 16


def test_broken_turn_end_hook_is_logged_not_fatal(home, tmp_path, shared_transcripts):
    configure()
    root = tmp_path / "projects"
    p = root / "-path-to-Demo" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7" / "subagents" / "agent-test-hash-123.jsonl"
    p.parent.mkdir(parents=True)

    def broken(session, events):
        raise RuntimeError("boom")

    conn = db.connect()
    with Running(root, hooks=[broken]) as d:
        p.write_bytes((TRANSCRIPTS / "viewer-agent-test-hash-123.jsonl").read_bytes())
        assert wait_for(lambda: d.turns["hook_errors"] == 1)
        assert "boom" in d.last_error["message"]
        # tailing goes on
        q = root / "-path-to-Demo" / "x.jsonl"
        q.write_bytes((TRANSCRIPTS / "spotter-short.jsonl").read_bytes())
        assert wait_for(lambda: conn.execute("SELECT count(*) FROM transcript_events WHERE source = ?",
                                             (str(q),)).fetchone()[0] > 0)


# --- the real judge --------------------------------------------------------------------------


def embedded_judge_or_skip():
    pytest.importorskip("llama_cpp")
    from recalld.model.resolve import resolve

    ch = resolve("judge", {"models": {}})
    if not ch.available:
        pytest.skip(f"no judge model: {ch.reason}")


@pytest.mark.model
def test_need_to_judge_to_queue_to_next_hook_delivers_once(home, tmp_path, shared_transcripts):
    embedded_judge_or_skip()
    # The judge's best passes whatever its probability (threshold 0): this test is about
    # the pipeline with the real model; the threshold's calibration is the judge's own tests.
    configure(models={"judge": None}, judge={"threshold": 0.0, "max_candidates": 5, "timeout_s": 30})
    conn = db.connect()
    sc = scope.Scope(project=SPOTTER, agent="main")
    m1 = memories.remember(conn, "mix phx.server does not start when Postgres is down: run docker compose up -d db first, then mix ecto.migrate",
                        sc, kind="procedure").memory["id"]
    memories.remember(conn, "The Phoenix server listens on port 4000; set PORT to change it", sc, kind="fact")
    root = tmp_path / "projects"
    p = root / "-home-marco-projects-spotter" / f"{SHORT_SESSION}.jsonl"
    p.parent.mkdir(parents=True)
    lines = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes().splitlines(keepends=True)
    with Running(root) as d:
        # up to the rejected tool calls; the interrupt prompt (line 13) would cancel the need
        for line in lines[:12]:
            with open(p, "ab") as f:
                f.write(line)
            time.sleep(0.05)
        assert wait_for(lambda: receipts.read(conn, source="daemon"), timeout=120)
    recs = receipts.read(conn, source="daemon")
    r = recs[-1]
    assert r["outcome"] == "injected", r
    det = r["detail"]
    assert det["judge_available"] and det["model"] and det["model_ms"] > 0
    assert r["candidates"] >= 1 and all(c["judge_score"] is not None for c in det["candidates"])
    # the receipt says why the passed one was chosen: the most probable at or above the threshold
    above = sorted((c for c in det["candidates"] if c["judge_score"] >= det["threshold"]), key=lambda c: -c["judge_score"])
    assert [c["id"] for c in det["candidates"] if c["passed"]] == [c["id"] for c in above[:1]]
    assert m1 in [q["memory_id"] for q in det["queued"]]
    rows = conn.execute("SELECT * FROM queue WHERE receipt_uid = ?", (r["uid"],)).fetchall()
    assert {row["id"] for row in rows} == {q["queue_id"] for q in det["queued"]}
    assert all(row["session"] == SHORT_SESSION and row["expires_at"] for row in rows)

    # The hook runs in the session's project (the transcript's cwd): it delivers only what its
    # own scope sees (tests/test_delivery.py).
    pre_tool = payload(session_id=SHORT_SESSION, transcript_path=str(p), cwd=SPOTTER,
                       hook_event_name="PreToolUse", tool_name="Bash",
                       tool_input={"command": "mix phx.server"}, tool_use_id="toolu_1")
    out = run_recalld(["hook", "pre-tool"], pre_tool)
    assert out.returncode == 0
    ctx = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "docker compose up -d db" in ctx
    again = run_recalld(["hook", "pre-tool"], pre_tool)
    assert again.returncode == 0 and b"docker compose up -d db" not in again.stdout
    delivered = conn.execute("SELECT count(*) FROM queue_delivered WHERE session = ?", (SHORT_SESSION,)).fetchone()[0]
    assert delivered == len(rows)


def test_judge_unavailable_pass_says_why(home, tmp_path):
    configure(models={"judge": str(tmp_path / "missing.gguf")})
    conn = db.connect()
    memories.remember(conn, "mix phx.server needs Postgres running", scope.Scope(SPOTTER, "main"))
    d = daemon.Daemon(cfg=settings.load(), roots=[])
    from recalld.daemon.needs import Need

    need = Need(session="s1", agent="main", project=SPOTTER, cwd=SPOTTER,
                query="why does mix phx.server not start", triggers=["intent"], first_at=0, due=0, events=3)
    r = d.run_pass(conn, need)
    assert r["outcome"] == "skipped" and "judge_unavailable" in r["error"]
    assert receipts.read(conn, source="daemon")[0]["uid"] == r["uid"]
    assert conn.execute("SELECT count(*) FROM queue").fetchone()[0] == 0


def test_pass_time_limit(home, tmp_path):
    """A judge that does not answer in time: the pass records a timeout; the next pass is
    refused while the abandoned call still holds the worker."""
    configure(judge={"timeout_s": 0.2})
    release = threading.Event()

    def slow_judge(text, sc, cfg):
        release.wait(10)
        raise RuntimeError("too late")

    d = daemon.Daemon(cfg=settings.load(), roots=[], judge_fn=slow_judge)
    d.judge_status["loaded"] = True
    d.judge_worker = passes.JudgeWorker()
    conn = db.connect()
    from recalld.daemon.needs import Need

    need = Need(session="s1", agent="main", project=SPOTTER, cwd=SPOTTER, query="why", triggers=["intent"],
                first_at=0, due=0, events=1)
    try:
        r = d.run_pass(conn, need)
        assert r["outcome"] == "timeout" and r["error"].startswith("judge_timeout")
        r2 = d.run_pass(conn, need)
        assert r2["outcome"] == "timeout" and r2["error"].startswith("judge_busy")
    finally:
        release.set()
        assert d.judge_worker.stop(10)
    assert [x["outcome"] for x in receipts.read(conn, source="daemon")] == ["timeout", "timeout"]


# --- delivery ----------------------------------------------------------------------------------


def test_queued_row_is_delivered_once_at_the_next_pre_tool_hook(home, project):
    conn = db.connect()
    mid = memories.remember(conn, "Run the migrations with `make migrate`, never by hand", scope.resolve(str(project))).memory["id"]
    conn.execute("INSERT INTO queue (time, session, memory_id, score, receipt_uid, expires_at) VALUES (?,?,?,?,?,?)",
                 (receipts.now_iso(), "sess-1", mid, 0.5, "r1", "2999-01-01T00:00:00+00:00"))
    pre = payload(session_id="sess-1", cwd=str(project), hook_event_name="PreToolUse", tool_name="Read",
                  tool_input={"file_path": str(project / "README")}, tool_use_id="t1")
    first = run_recalld(["hook", "pre-tool"], pre)
    assert first.returncode == 0 and b"make migrate" in first.stdout
    second = run_recalld(["hook", "pre-tool"], pre)
    assert second.returncode == 0 and b"make migrate" not in second.stdout
    other = run_recalld(["hook", "pre-tool"], payload(session_id="sess-2", cwd=str(project),
                                                      hook_event_name="PreToolUse", tool_name="Read",
                                                      tool_input={"file_path": "x"}))
    assert b"make migrate" not in other.stdout


# --- lifecycle (real processes) ----------------------------------------------------------------


def test_start_status_single_instance_kill_and_hooks_still_answer(home, project):
    configure()
    st = run_recalld(["daemon", "status"])
    assert st.returncode == 0 and b"not running" in st.stdout
    up = run_recalld(["daemon", "start"])
    assert up.returncode == 0 and b"started" in up.stdout, up.stderr
    try:
        info = json.loads(run_recalld(["daemon", "status", "--json"]).stdout)
        assert info["running"] and info["pid"] > 0
        for key in ("uptime_s", "roots", "files", "offsets", "sessions", "queue_depth", "judge", "passes", "last_error"):
            assert key in info
        assert info["judge"]["available"] is False and "disabled" in info["judge"]["reason"]
        text = run_recalld(["daemon", "status"]).stdout.decode()
        assert "running: pid" in text and "judge: unavailable" in text and "queue depth" in text
        again = run_recalld(["daemon", "start"])
        assert b"already running" in again.stdout
        second = run_recalld(["daemon", "run"], timeout=30)
        assert second.returncode == 3 and b"already running" in second.stderr
        # kill -9: no clean shutdown at all
        os.kill(info["pid"], signal.SIGKILL)
        assert wait_for(lambda: autostart.running_pid() is None, timeout=10)
    finally:
        pid = autostart.running_pid()
        if pid and pid > 0:
            os.kill(pid, signal.SIGKILL)
    conn = db.connect()
    memories.remember(conn, "alembic downgrade fails with OperationalError when the sqlite file is read-only",
                   scope.resolve(str(project)))
    for event, body in (
            ("prompt-submit", payload(session_id="k1", cwd=str(project), hook_event_name="UserPromptSubmit",
                                      prompt="alembic downgrade fails with OperationalError")),
            ("pre-tool", payload(session_id="k1", cwd=str(project), hook_event_name="PreToolUse", tool_name="Bash",
                                 tool_input={"command": "alembic downgrade -1"}))):
        res = run_recalld(["hook", event], body)
        assert res.returncode == 0
        rec = receipts.read(conn, hook=event)[0]
        assert rec["outcome"] in ("injected", "nothing"), rec
    assert b"read-only" in run_recalld(["hook", "prompt-submit"], payload(  # a new session: k1 has it already
        session_id="k2", cwd=str(project), hook_event_name="UserPromptSubmit",
        prompt="alembic downgrade fails with OperationalError")).stdout
    st = json.loads(run_recalld(["daemon", "status", "--json"]).stdout)
    assert st["running"] is False
    # the kernel released the dead daemon's lock: a new one starts and stops cleanly
    assert b"started" in run_recalld(["daemon", "start"]).stdout
    stop = run_recalld(["daemon", "stop"])
    assert stop.returncode == 0 and b"stopped" in stop.stdout
    assert autostart.running_pid() is None
    log = [json.loads(line) for line in (home / "logs" / "daemon.log").read_text().splitlines()]
    stopped = [e for e in log if e["event"] == "daemon_stopped"]
    assert stopped and stopped[-1]["threads_left"] == [] and stopped[-1]["reason"] == "signal 15"


def test_session_start_hook_autostarts_the_daemon(home, project):
    configure(daemon=dict(FAST, autostart=True))
    body = payload(session_id="a1", cwd=str(project), hook_event_name="SessionStart", source="startup")
    try:
        res = run_recalld(["hook", "session-start"], body)
        assert res.returncode == 0
        conn = db.connect()
        assert receipts.read(conn, hook="session-start")[0]["detail"]["daemon"] == "started"
        assert wait_for(lambda: autostart.running_pid() is not None, timeout=20)
        run_recalld(["hook", "session-start"], body)
        # the daemon serves this one, and its hook process may exit before the receipt's commit
        second = wait_for(lambda: receipts.read(conn, hook="session-start")[1:] and
                          receipts.read(conn, hook="session-start"), timeout=5)
        assert second and second[0]["detail"]["daemon"] == "running", second
    finally:
        stop = run_recalld(["daemon", "stop"])
        assert stop.returncode == 0
    assert autostart.running_pid() is None


def test_autostart_off_by_default(home, project):
    settings.save({})
    res = run_recalld(["hook", "session-start"], payload(session_id="a2", cwd=str(project),
                                                          hook_event_name="SessionStart", source="startup"))
    assert res.returncode == 0
    assert receipts.read(db.connect(), hook="session-start")[0]["detail"]["daemon"] == "disabled"
    assert autostart.running_pid() is None


# --- the store deleted under a running daemon (issue 14, part 5) ---------------------------------


def _prompt_line(session, i):
    return (json.dumps({"type": "user", "sessionId": session, "cwd": "/tmp/p", "uuid": f"u-{session}-{i}",
                        "timestamp": "2026-11-30T10:00:00Z", "message": {"role": "user", "content": f"word{i} here"}})
            + "\n").encode()


def test_store_deleted_under_the_daemon_is_reopened_and_counted(home, tmp_path):
    configure()
    root = tmp_path / "projects"
    p = root / "-tmp-p" / "s1.jsonl"
    p.parent.mkdir(parents=True)
    with open(p, "ab") as f:
        for i in range(3):
            f.write(_prompt_line("s1", i))
    dbp = home / "recalld.db"

    def texts():
        if not dbp.exists():
            return []
        c = db.connect(readonly=True)
        try:
            return [r[0] for r in c.execute("SELECT text FROM transcript_events WHERE kind = 'prompt' ORDER BY id")]
        except sqlite3.Error:  # the new store, still being created
            return []
        finally:
            c.close()

    with Running(root) as d:
        assert wait_for(lambda: len(texts()) == 3)
        ino = os.stat(dbp).st_ino
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{dbp}{suffix}")
            except FileNotFoundError:
                pass
        with open(p, "ab") as f:
            for i in range(3, 6):
                f.write(_prompt_line("s1", i))
        # the lines written after the deletion are in the new store, each once, none lost
        assert wait_for(lambda: texts() == [f"word{i} here" for i in range(3, 6)]), texts()
        assert os.stat(dbp).st_ino != ino
        assert d.store["reopened"] == 1 and d.store["last_reopen"]["why"] == "deleted"
        assert d.tailer.stats["store_failed"] == 0
        # status (the file the daemon writes, read the way `recalld daemon status` reads it)
        assert wait_for(lambda: json.loads((home / "daemon" / "status.json").read_text()).get("store_reopened") == 1)
        # an idle daemon notices too: delete again with nothing appended
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{dbp}{suffix}")
            except FileNotFoundError:
                pass
        assert wait_for(lambda: d.store["reopened"] == 2, timeout=10)
        with open(p, "ab") as f:
            f.write(_prompt_line("s1", 6))
        assert wait_for(lambda: texts() == ["word6 here"])
    c = db.connect()
    ev = [json.loads(r[0]) for r in c.execute("SELECT detail FROM daemon_events WHERE kind = 'store_reopened'")]
    assert ev and ev[0]["why"] == "deleted"
    log = [json.loads(line) for line in (home / "logs" / "daemon.log").read_text().splitlines()]
    assert sum(e["event"] == "store_reopened" for e in log) == 2


def test_store_recreated_by_another_thread_first_still_counts_as_deleted(home, tmp_path):
    # Any thread of the daemon's process may open the store first after it was deleted (a hook
    # thread starting, an event written): the one that notices later finds a file there, made
    # here, which is still a deletion, not a store put in its place.
    configure()
    root = tmp_path / "projects"
    root.mkdir()
    dbp = home / "recalld.db"
    with Running(root) as d:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{dbp}{suffix}")
            except FileNotFoundError:
                pass
        db.connect().close()  # this process's other thread, first
        assert db.created_here((os.stat(dbp).st_dev, os.stat(dbp).st_ino))
        assert wait_for(lambda: d.store["reopened"] == 1, timeout=10)
        assert d.store["last_reopen"]["why"] == "deleted"
        # a store put in its place by someone else is "replaced"
        other = tmp_path / "other.db"
        c = sqlite3.connect(other)  # not db.connect: not a store this process created
        db.ensure_schema(c)
        c.close()
        os.replace(other, dbp)
        assert wait_for(lambda: d.store["reopened"] == 2, timeout=10)
        assert d.store["last_reopen"]["why"] == "replaced"


def test_store_that_cannot_be_reopened_stops_the_daemon_with_a_clear_status(home, tmp_path):
    configure()
    root = tmp_path / "projects"
    root.mkdir()
    d = daemon.Daemon(cfg=settings.load(), roots=[(root, "claude")])
    th = threading.Thread(target=lambda: setattr(d, "code", d.run(install_signals=False)))
    th.start()
    try:
        assert d.ready.wait(30)
        dbp = home / "recalld.db"
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{dbp}{suffix}")
            except FileNotFoundError:
                pass
        dbp.mkdir()  # a directory where the store was: nothing can open it
        th.join(20)
        assert not th.is_alive(), "the daemon kept running on a store it cannot open"
    finally:
        d.stop("test")
        th.join(30)
    assert d.code == 0
    assert "cannot be reopened" in d.store["error"] and str(dbp) in d.store["error"]
    snap = json.loads((home / "daemon" / "status.json").read_text())
    assert snap["running"] is False and "cannot be reopened" in snap["store"]["error"]

"""The tailer: real transcripts appended piece by piece (mid-line cuts included), restarts,
truncation, replacement, first-start window, malformed lines, .zst, the watcher."""

import json
import os
import random
import shutil
import sqlite3
import time

import pytest

from tests.helpers import TRANSCRIPTS
from recalld.core import db
from recalld.daemon import tailer
from recalld.daemon import transcripts as T
from recalld.core.redact import redact

REAL = sorted(TRANSCRIPTS.glob("*.jsonl"))


def layout(root):
    """Where each real transcript goes under a Claude Code projects root (subagent files in
    <session>/subagents/, as Claude Code lays them out)."""
    out = {}
    for src in REAL:
        name = src.name
        if name.startswith("viewer-agent-"):
            dst = root / "-path-to-Demo" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7" / "subagents" / name[len("viewer-"):]
        elif name.startswith("viewer-"):
            dst = root / "-path-to-Demo" / name[len("viewer-"):]
        else:
            dst = root / "-home-marco-projects-spotter" / name
        out[src] = dst
    return out


def copied(root):
    """The real transcripts copied whole into their layout under root."""
    files = layout(root)
    for src, dst in files.items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    return files


def expected_keys(paths):
    keys = []
    for p in paths:
        seqs = {}
        for ev in T.parse_file(p):
            seq = seqs.get(ev.line_no, 0)
            seqs[ev.line_no] = seq + 1
            # stored text is redacted (tailer policy), so compare with the redacted parse
            text = redact(ev.text)[0] if ev.text else ev.text
            inp = None if ev.tool_input is None else redact(json.dumps(ev.tool_input, ensure_ascii=False, default=str))[0]
            keys.append((str(p), 0, ev.line_no, seq, ev.kind, text, ev.tool, ev.agent, ev.session,
                         int(ev.is_error), inp))
    return sorted(keys)


def stored_keys(conn):
    return sorted(tuple(r) for r in conn.execute(
        "SELECT source, generation, line_no, seq, kind, text, tool, agent, session, is_error, tool_input "
        "FROM transcript_events"))


def appender(files, rng):
    """Yield after appending one random-sized piece (often cutting a line) to one file."""
    data = {dst: src.read_bytes() for src, dst in files.items()}
    pos = {dst: 0 for dst in data}
    for dst in data:
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(b"")
    while any(pos[d] < len(data[d]) for d in data):
        d = rng.choice([d for d in data if pos[d] < len(data[d])])
        n = rng.randint(1, 20_000)
        with open(d, "ab") as f:
            f.write(data[d][pos[d]:pos[d] + n])
        pos[d] += n
        yield d


def test_progressive_replay_exactly_once_across_restarts(home, tmp_path, shared_transcripts):
    root = tmp_path / "projects"
    files = layout(root)
    rng = random.Random(7)
    conn = db.connect()
    t = tailer.Tailer(conn, [(root, "claude")])
    restarts = 0
    for i, _ in enumerate(appender(files, rng)):
        if i % 3 == 0:
            t.rescan()
        if i % 17 == 16:
            # a daemon restart: a new tailer and a new connection resume from the stored offsets
            conn.close()
            conn = db.connect()
            t = tailer.Tailer(conn, [(root, "claude")])
            restarts += 1
    t.rescan()
    assert restarts >= 3
    assert stored_keys(conn) == expected_keys(files.values())
    # the latest offset of every file is its full length, its line count the file's
    for dst in files.values():
        row = conn.execute("SELECT * FROM tail_offsets WHERE path = ? ORDER BY id DESC LIMIT 1", (str(dst),)).fetchone()
        assert row["offset"] == dst.stat().st_size
        assert row["lines"] == dst.read_bytes().count(b"\n")
        assert row["malformed"] == 0 and row["generation"] == 0
    # nothing more to read, and a further restart reads nothing again
    assert tailer.Tailer(db.connect(), [(root, "claude")]).rescan() == []


def test_partial_line_waits_for_its_newline(home, tmp_path, shared_transcripts):
    src = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes().splitlines(keepends=True)
    p = tmp_path / "r" / "p" / "s.jsonl"
    p.parent.mkdir(parents=True)
    p.write_bytes(b"".join(src[:5]) + src[5][:100])
    conn = db.connect()
    t = tailer.Tailer(conn, [(tmp_path / "r", "claude")])
    r = t.poll(str(p))
    assert [e.line_no for e in r.events] == [4]  # line 5 is an empty "\n\n" text block
    again = t.poll(str(p))
    assert again is None or again.events == []
    with open(p, "ab") as f:
        f.write(src[5][100:])
    r = t.poll(str(p))
    assert [(e.line_no, e.kind) for e in r.events] == [(6, "reasoning")]
    assert r.events[0].text.startswith("The user is having trouble starting their Phoenix server")


def test_truncation_and_replacement_start_a_new_generation(home, tmp_path, shared_transcripts):
    root = tmp_path / "r"
    p = root / "p" / "s.jsonl"
    p.parent.mkdir(parents=True)
    short = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes()
    heavy = (TRANSCRIPTS / "spotter-tool_heavy.jsonl").read_bytes()
    p.write_bytes(heavy)
    conn = db.connect()
    t = tailer.Tailer(conn, [(root, "claude")])
    n_heavy = len(t.poll(str(p)).events)
    # truncated in place (same inode) to something shorter
    with open(p, "r+b") as f:
        f.truncate(0)
        f.write(short)
    r = t.poll(str(p))
    assert r.reset == "truncated"
    n_short = len(r.events)
    assert n_short == len(list(T.parse_file(TRANSCRIPTS / "spotter-short.jsonl")))
    # replaced by another file (new inode) at the same path
    tmp = p.with_suffix(".new")
    tmp.write_bytes(heavy)
    os.replace(tmp, p)
    r = t.poll(str(p))
    assert r.reset == "replaced" and len(r.events) == n_heavy
    reasons = [row["reason"] for row in conn.execute("SELECT reason FROM tail_offsets WHERE path = ? ORDER BY id", (str(p),))]
    assert "truncated" in reasons and "replaced" in reasons
    gens = conn.execute("SELECT generation, count(*) FROM transcript_events WHERE source = ? GROUP BY generation",
                        (str(p),)).fetchall()
    assert [tuple(g) for g in gens] == [(0, n_heavy), (1, n_short), (2, n_heavy)]


def test_truncated_and_regrown_while_down_is_detected(home, tmp_path, shared_transcripts):
    """Cut and rewritten past the old offset while no tailer ran: the old offset no longer
    ends a line, so the file starts over instead of being read from the middle of a line."""
    root = tmp_path / "r"
    p = root / "p" / "s.jsonl"
    p.parent.mkdir(parents=True)
    p.write_bytes((TRANSCRIPTS / "spotter-short.jsonl").read_bytes())
    conn = db.connect()
    tailer.Tailer(conn, [(root, "claude")]).rescan()
    with open(p, "r+b") as f:
        f.truncate(0)
        f.write((TRANSCRIPTS / "spotter-tool_heavy.jsonl").read_bytes())
    r = tailer.Tailer(db.connect(), [(root, "claude")]).poll(str(p))
    assert r.reset == "truncated"
    assert len(r.events) == len(list(T.parse_file(TRANSCRIPTS / "spotter-tool_heavy.jsonl")))


def test_first_start_ingests_only_recent_files(home, tmp_path, shared_transcripts):
    root = tmp_path / "r"
    old = root / "p" / "old.jsonl"
    new = root / "p" / "new.jsonl"
    old.parent.mkdir(parents=True)
    shutil.copy(TRANSCRIPTS / "spotter-short.jsonl", old)
    shutil.copy(TRANSCRIPTS / "spotter-tool_heavy.jsonl", new)
    ten_days = time.time() - 10 * 86400
    os.utime(old, (ten_days, ten_days))
    conn = db.connect()
    t = tailer.Tailer(conn, [(root, "claude")], recent_days=2)
    got = {os.path.basename(r.path) for r in t.rescan()}
    assert got == {"new.jsonl"}
    # the old session resumes: now it is recent, and it is read
    with open(old, "ab") as f:
        f.write(b"\n")
    got = {os.path.basename(r.path) for r in t.rescan()}
    assert got == {"old.jsonl"}


def test_malformed_lines_are_counted_in_offsets(home, tmp_path, shared_transcripts):
    root = tmp_path / "r"
    p = root / "p" / "s.jsonl"
    p.parent.mkdir(parents=True)
    lines = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:3] + [b"{broken\n", b"42\n"] + lines[3:]))
    conn = db.connect()
    r = tailer.Tailer(conn, [(root, "claude")]).poll(str(p))
    assert r.malformed == 2
    row = tailer.offsets(conn)[0]
    assert row["malformed"] == 2 and row["lines"] == len(lines) + 2
    assert len(r.events) == len(list(T.parse_file(TRANSCRIPTS / "spotter-short.jsonl")))


def test_zst_rollout_is_read(home, tmp_path):
    zstandard = pytest.importorskip("zstandard")
    root = tmp_path / "sessions"
    p = root / "2026" / "11" / "29" / "rollout-2026-11-29T10-00-00-0199a213-81c0-7800-8aa1-bbab2a035a53.jsonl.zst"
    p.parent.mkdir(parents=True)
    from test_transcripts import codex_rollout
    import json

    data = "".join(json.dumps(o) + "\n" for o in codex_rollout(str(tmp_path))).encode()
    p.write_bytes(zstandard.ZstdCompressor().compress(data))
    conn = db.connect()
    t = tailer.Tailer(conn, [(root, "codex")])
    r = t.poll(str(p))
    assert [e.kind for e in r.events][-1] == "turn_end" and len(r.events) == 8
    assert t.poll(str(p)) is None
    # a restart does not read it again
    assert tailer.Tailer(db.connect(), [(root, "codex")]).rescan() == []


def test_offsets_and_events_are_append_only(home, tmp_path, shared_transcripts):
    root = tmp_path / "r"
    p = root / "p" / "s.jsonl"
    p.parent.mkdir(parents=True)
    shutil.copy(TRANSCRIPTS / "spotter-short.jsonl", p)
    conn = db.connect()
    tailer.Tailer(conn, [(root, "claude")]).rescan()
    for sql in ("UPDATE tail_offsets SET offset = 0", "DELETE FROM tail_offsets",
                "UPDATE transcript_events SET text = ''", "DELETE FROM transcript_events"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(sql)


def test_default_roots_honour_env(monkeypatch, tmp_path):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "gh"))
    roots = tailer.default_roots({"daemon": {"roots": [str(tmp_path / "extra")]}})
    assert roots == [(tmp_path / "cc" / "projects", "claude"), (tmp_path / "cx" / "sessions", "codex"),
                     (tmp_path / "gh" / ".gemini" / "tmp", "gemini"), (tmp_path / "extra", "custom")]


def test_watcher_marks_appended_and_new_files(home, tmp_path, shared_transcripts):
    pytest.importorskip("watchdog")
    root = tmp_path / "r"
    (root / "p").mkdir(parents=True)
    conn = db.connect()
    t = tailer.Tailer(conn, [(root, "claude")])
    w = tailer.Watcher(t)
    w.start()
    try:
        assert w.mode == "watchdog" and str(root) in w.watched
        p = root / "p" / "sub" / "new.jsonl"
        p.parent.mkdir()
        p.write_bytes((TRANSCRIPTS / "spotter-short.jsonl").read_bytes())
        end = time.monotonic() + 10
        while str(p) not in t.dirty and time.monotonic() < end:
            t.wake.wait(0.2)
        assert str(p) in t.take_dirty()
    finally:
        w.stop()


def test_secrets_in_transcripts_are_redacted_before_storage(home, tmp_path, shared_transcripts):
    """Transcripts carry whatever the agent saw; nothing secret may reach the store."""
    import json as _json

    from recalld.core import db as _db

    src = TRANSCRIPTS / "spotter-short.jsonl"
    lines = src.read_text().splitlines()
    secret_key = "sk-ant-api03-" + "A" * 40
    gh = "ghp_" + "b" * 36
    rec = {"type": "user", "sessionId": "sec-1", "cwd": str(tmp_path), "uuid": "u-sec",
           "timestamp": "2026-11-29T10:00:00Z",
           "message": {"role": "user", "content": f"deploy with ANTHROPIC_API_KEY={secret_key} and token {gh}"}}
    tool = {"type": "assistant", "sessionId": "sec-1", "cwd": str(tmp_path), "uuid": "a-sec",
            "timestamp": "2026-11-29T10:00:01Z",
            "message": {"id": "msg-sec", "role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_sec", "name": "Bash",
                 "input": {"command": f"curl -H 'Authorization: Bearer {gh}' https://user:hunter2pass@example.com"}}]}}
    root = tmp_path / "projects" / "-tmp-x"
    root.mkdir(parents=True)
    f = root / "sec-1.jsonl"
    f.write_text("\n".join(lines[:3] + [_json.dumps(rec), _json.dumps(tool)]) + "\n")
    conn = _db.connect()
    t = tailer.Tailer(conn, [(tmp_path / "projects", "claude")])
    t.rescan()
    dump = "\n".join(str(tuple(r)) for r in conn.execute("SELECT * FROM transcript_events"))
    assert "sec-1" in dump
    for secret in (secret_key, gh, "hunter2pass"):
        assert secret not in dump


def test_a_file_that_fails_in_a_batch_rolls_back_alone(home, tmp_path, monkeypatch, shared_transcripts):
    # rescan stores many files in one transaction; a failure storing one of them must not take
    # the others' rows with it, nor leave that file's events without their offset row
    root = tmp_path / "projects"
    files = copied(root)
    conn = db.connect()
    t = tailer.Tailer(conn, [(root, "claude")])
    bad = t.discover()[2]
    real = t._insert

    def failing(rows, offset_row):
        if offset_row[1] == bad:
            raise sqlite3.OperationalError("disk I/O error (injected)")
        real(rows, offset_row)

    monkeypatch.setattr(t, "_insert", failing)
    results = t.rescan()
    assert not conn.in_transaction
    assert bad not in {r.path for r in results} and len(results) == len(files) - 1
    assert t.stats["store_failed"] == 1
    assert conn.execute("SELECT count(*) FROM transcript_events WHERE source = ?", (bad,)).fetchone()[0] == 0
    done = {r[0] for r in conn.execute("SELECT DISTINCT path FROM tail_offsets")}
    assert bad not in done and len(done) == len(files) - 1
    # once the failure is gone, the next rescan reads that file again; everything once
    monkeypatch.setattr(t, "_insert", real)
    assert [r.path for r in t.rescan()] == [bad]
    assert stored_keys(conn) == expected_keys(files.values())


def test_a_batch_holds_the_write_lock_only_to_store(home, tmp_path, monkeypatch, shared_transcripts):
    # a hook writes its receipt while the daemon reads: parsing and redaction must happen
    # outside any transaction, or the hook would wait for the whole batch
    root = tmp_path / "projects"
    files = copied(root)
    conn = db.connect()
    t = tailer.Tailer(conn, [(root, "claude")])
    seen = []
    real = T.parse_line

    def watching(line, st):
        seen.append(conn.in_transaction)
        return real(line, st)

    monkeypatch.setattr(T, "parse_line", watching)
    monkeypatch.setattr(tailer, "BATCH_S", 0.0)  # a flush after every file: transactions come and go
    t.rescan()
    assert seen and not any(seen)
    assert stored_keys(conn) == expected_keys(files.values())

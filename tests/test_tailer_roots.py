"""A transcript root that does not exist when the daemon starts (issue 13.7: on a first install
`~/.claude/projects` appears with the first session): the watcher waits on its nearest
existing parent, attaches when the root appears, and the file the session is writing is read
at once, live, so its events can still raise a need."""

import json
import time

import pytest

from recalld.core import db
from recalld.daemon import needs, tailer


def line(**rec) -> bytes:
    return (json.dumps(rec) + "\n").encode()


def wait_dirty(t, path, timeout=10.0) -> bool:
    end = time.monotonic() + timeout
    while str(path) not in t.dirty and time.monotonic() < end:
        t.wake.wait(0.1)
    return str(path) in t.dirty


def test_a_root_that_appears_later_is_watched_and_read_live(home, tmp_path):
    pytest.importorskip("watchdog")
    user = tmp_path / "user-home"
    user.mkdir()
    root = user / ".claude" / "projects"  # neither .claude nor projects exists yet
    t = tailer.Tailer(db.connect(), [(root, "claude")])
    w = tailer.Watcher(t)
    w.start()
    try:
        assert w.mode == "watchdog" and str(root) not in w.watched and set(w.waiting) == {str(user)}
        (user / ".claude").mkdir()
        history = user / ".claude" / "history.jsonl"  # Claude Code's own, beside the root: not a transcript
        history.write_text('{"display": "fix the build"}\n')
        session = root / "-work-proj" / "s1.jsonl"
        session.parent.mkdir(parents=True)
        common = {"sessionId": "s1", "cwd": str(tmp_path), "timestamp": "2026-12-01T10:00:00Z"}
        session.write_bytes(line(type="user", uuid="u1", message={"role": "user", "content": "fix the build"}, **common)
                            + line(type="assistant", uuid="a1", message={"role": "assistant", "content": [
                                {"type": "text", "text": "Let me check why the migration fails on sqlite."}]}, **common))
        # Read because the watch attached and caught up, not because of a rescan.
        assert wait_dirty(t, session), (w.watched, w.waiting, w.error)
        assert str(root) in w.watched and w.waiting == {} and w.attached == 1
        assert str(history) not in t.dirty
        (r,) = t.poll_many(sorted(t.take_dirty()))
        assert r.live and [e.kind for e in r.events] == ["prompt", "text"]
        # ...and a live catch-up read still raises the need.
        det = needs.NeedDetector()
        assert det.observe(r.events, live=r.live) >= 1 and det.sessions[("s1", "main")].pending is not None
        # The new watch is recursive: what the session appends next is marked too.
        with open(session, "ab") as f:
            f.write(line(type="assistant", uuid="a2", message={"role": "assistant", "content": [
                {"type": "text", "text": "Found it."}]}, **common))
        assert wait_dirty(t, session)
    finally:
        w.stop()


def test_the_parent_watch_follows_directories_as_they_appear(home, tmp_path):
    pytest.importorskip("watchdog")
    root = tmp_path / "a" / "b" / "c"
    t = tailer.Tailer(db.connect(), [(root, "codex")])
    w = tailer.Watcher(t)
    w.start()
    try:
        assert set(w.waiting) == {str(tmp_path)}
        (tmp_path / "a").mkdir()
        end = time.monotonic() + 10
        while str(tmp_path / "a") not in w.waiting and time.monotonic() < end:
            time.sleep(0.1)
        assert set(w.waiting) == {str(tmp_path / "a")}
        root.mkdir(parents=True)
        end = time.monotonic() + 10
        while str(root) not in w.watched and time.monotonic() < end:
            time.sleep(0.1)
        assert str(root) in w.watched and not w.waiting
    finally:
        w.stop()

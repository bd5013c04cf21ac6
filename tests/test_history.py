"""`recalld propose --history`: past Claude Code and Codex sessions of a project, found where the
agent adapters say transcripts live, mined into proposals with a progress bar, resumably."""

import json
import os
import shutil
import time

from recalld.capture import history
from recalld.core import proposal_db
from tests.helpers import TRANSCRIPTS, run_recalld
from tests.test_proposer import Session


def _codex_rollout(path, cwd: str) -> None:
    ts = "2026-11-29T10:00:0{}.000Z"
    recs = [
        {"timestamp": ts.format(0), "type": "session_meta",
         "payload": {"id": "0199a213-81c0-7800-8aa1-bbab2a035a99", "timestamp": ts.format(0), "cwd": cwd}},
        {"timestamp": ts.format(1), "type": "event_msg",
         "payload": {"type": "user_message", "message": "which queue do we use for the mailer?"}},
        {"timestamp": ts.format(2), "type": "response_item",
         "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text":
                     "We decided to send mail through the Redis queue instead of SQS because the worker already "
                     "depends on Redis."}]}},
        {"timestamp": ts.format(3), "type": "event_msg", "payload": {"type": "task_complete"}},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _old(path, days: float = 3) -> None:
    t = time.time() - days * 86400
    os.utime(path, (t, t))


def _world(tmp_path, project):
    """A user's home with a Claude Code session and a Codex rollout of `project`, and the shared
    transcripts of other projects."""
    user = tmp_path / "user"
    claude = user / ".claude" / "projects" / ("-" + str(project).strip("/").replace("/", "-"))
    claude.mkdir(parents=True)
    t = Session(claude / "c1.jsonl", str(project), session="c1")
    t.user("why does the deploy skip migrations?")
    t.agent("The deploy has no migration step, so we decided to run migrations at container start instead of "
            "in CI.", end=True)
    _codex_rollout(user / ".codex" / "sessions" / "2026" / "11" / "29" /
                   "rollout-2026-11-29T10-00-00-0199a213-81c0-7800-8aa1-bbab2a035a99.jsonl", str(project))
    other = user / ".claude" / "projects" / "-home-marco-projects-spotter"
    other.mkdir(parents=True)
    for name in ("spotter-subagent.jsonl", "spotter-short.jsonl"):
        shutil.copy(TRANSCRIPTS / name, other / name)
    for p in (user / ".claude").rglob("*.jsonl"):
        _old(p)
    for p in (user / ".codex").rglob("*.jsonl"):
        _old(p)
    return user, t


def _env(home, user):
    (home).mkdir(parents=True, exist_ok=True)
    # The model is off: these tests are model-free (ranking by cues), like a machine without one;
    # their sessions are a few short turns, which the session's budget would hold to one draft.
    (home / "settings.json").write_text(json.dumps({"models": {"proposer": "off"}, "proposals": {"per_20_turns": 0}}))
    return {"HOME": str(user), "RECALLD_HOME": str(home), "CODEX_HOME": "", "CLAUDE_CONFIG_DIR": ""}


def test_history_mines_claude_and_codex_sessions_of_the_project(home, project, tmp_path, shared_transcripts):
    user, t = _world(tmp_path, project)
    env = _env(home, user)
    res = run_recalld(["propose", "--history", "--project", str(project), "--json"], env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["sessions"] == 2 and out["sessions_read"] == 2 and out["failed_passes"] == 0
    assert out["proposals"] == 2 and out["sessions_per_minute"] > 0
    assert "mining 2 sessions" in res.stderr.decode()  # the progress bar (on stderr)
    conn = proposal_db.connect()
    texts = [r["text"] for r in conn.execute("SELECT text FROM proposals ORDER BY id")]
    assert any("Redis queue instead of SQS" in x for x in texts) and any("container start" in x for x in texts)
    # Resumable: nothing is read twice; a new turn in a session is.
    again = json.loads(run_recalld(["propose", "--history", "--project", str(project), "--json"], env=env,
                                   timeout=300).stdout)
    assert (again["passes"], again["proposals"]) == (0, 0)
    t.user("and the cache?")
    said = t.agent("The cache must be flushed after each deploy because keys embed the schema version.", end=True)
    _old(t.path)
    third = json.loads(run_recalld(["propose", "--history", "--project", str(project), "--json"], env=env,
                                   timeout=300).stdout)
    assert (third["passes"], third["proposals"]) == (1, 1)
    row = conn.execute("SELECT * FROM proposals ORDER BY id DESC LIMIT 1").fetchone()
    assert row["window_from"] == said and "flushed after each deploy" in row["text"]
    conn.close()


def test_history_filters_by_project_and_date(home, project, tmp_path, shared_transcripts):
    user, _ = _world(tmp_path, project)
    env = _env(home, user)
    res = run_recalld(["propose", "--history", "--all-projects", "--since", "2d", "--json"], env=env, timeout=300)
    assert json.loads(res.stdout)["sessions"] == 0  # every file is three days old
    res = run_recalld(["propose", "--history", "--all-projects", "--since", "5d", "--json"], env=env, timeout=300)
    out = json.loads(res.stdout)
    assert out["sessions"] == 4 and {os.path.basename(f["path"]) for f in out["files"]} >= {
        "spotter-subagent.jsonl", "c1.jsonl"}
    res = run_recalld(["propose", "--history", "--since", "yesterday"], env=env)
    assert res.returncode != 0 and "not a date or an age" in res.stderr.decode()
    res = run_recalld(["propose"], env=env)
    assert res.returncode != 0 and "either --transcript FILE or --history" in res.stderr.decode()


def test_a_live_sessions_open_turn_is_left_to_the_daemon(home, project, tmp_path):
    t = Session(tmp_path / "live.jsonl", str(project), session="live")
    t.user("what port?")
    t.agent("The API must listen on port 8443 because the load balancer only forwards TLS there.")  # no turn end yet
    s = history.Session(path=str(t.path), agent="claude", project=None, mtime=time.time(), size=0)
    assert history.mine_session(s, runtime=False).passes == 0
    s.mtime = time.time() - history.IDLE_S - 1  # idle: a finished session whose last turn has no end record
    got = history.mine_session(s, runtime=False)
    assert (got.passes, got.proposals) == (1, 1)

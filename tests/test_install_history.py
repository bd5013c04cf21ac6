"""The offer at the end of `recalld install`: in a terminal, the count of the project's past
sessions and a question (default no) whether to draft proposals from them; in a script or CI no
question at all; `--history/--no-history` decides without asking."""

import json
import os
import subprocess
import sys

from recalld.core import proposal_db
from tests.helpers import REPO
from tests.test_history import _env as history_env, _world
from tests.test_review import Terminal

QUESTION = "Draft proposals from them now?"


def _env(home, user) -> dict:
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.update(history_env(home, user))
    return e


def _install(project, *extra) -> list:
    return ["install", "claude-code", "--user", "--no-daemon", "--no-model-probe", "--cwd", str(project), *extra]


def _proposals(home) -> list:
    conn = proposal_db.connect()
    try:
        return [r["text"] for r in conn.execute("SELECT text FROM proposals ORDER BY id")]
    finally:
        conn.close()


def _run(args, project, env, stdin=subprocess.DEVNULL):
    return subprocess.run([sys.executable, "-m", "recalld", *args], cwd=str(project), env=env, stdin=stdin,
                          capture_output=True, timeout=300)


def test_in_a_terminal_install_counts_the_past_sessions_and_asks(home, project, tmp_path, shared_transcripts):
    user, _ = _world(tmp_path, project)
    env = _env(home, user)
    t = Terminal(_install(project), str(project), env)
    t.expect("wired into claude-code")
    t.expect("past sessions of")
    t.expect("2 (Claude Code 1, Codex 1)")  # counted before the question
    t.expect("[y/N]")
    t.send("y\n")
    t.expect("2 proposals")
    t.expect("recalld proposals review")
    assert t.close() == 0
    texts = _proposals(home)
    assert len(texts) == 2 and any("Redis queue instead of SQS" in x for x in texts)
    # The hooks are in, whatever was answered.
    assert "recalld" in (user / ".claude" / "settings.json").read_text()


def test_the_question_defaults_to_no(home, project, tmp_path, shared_transcripts):
    user, _ = _world(tmp_path, project)
    t = Terminal(_install(project), str(project), _env(home, user))
    t.expect("[y/N]")
    t.send("\n")
    t.expect("recalld propose --history --project")
    assert t.close() == 0
    assert _proposals(home) == []
    # The end of input (Ctrl-D) is a no too, and the install still exits 0.
    t = Terminal(_install(project), str(project), _env(home, user))
    t.expect("[y/N]")
    t.send("\x04")
    t.expect("does it later")
    assert t.close() == 0
    assert _proposals(home) == []


def test_a_script_is_never_asked_and_the_flag_decides(home, project, tmp_path, shared_transcripts):
    user, _ = _world(tmp_path, project)
    env = _env(home, user)
    # stdin is not a terminal: no question, nothing mined, one line saying how to do it later.
    res = _run(_install(project), project, env)
    out = res.stdout.decode()
    assert res.returncode == 0, res.stderr
    assert QUESTION not in out and "recalld propose --history --project" in out and _proposals(home) == []
    # Even with a question's answer waiting on stdin, --no-history neither asks nor mines.
    res = _run(_install(project, "--no-history"), project, env, stdin=None)
    assert res.returncode == 0 and QUESTION not in res.stdout.decode() and _proposals(home) == []
    # --history mines without asking, and says how many sessions it found.
    res = _run(_install(project, "--history"), project, env)
    out = res.stdout.decode()
    assert res.returncode == 0, res.stderr
    assert QUESTION not in out and "past sessions of" in out and "2 proposals" in out
    assert len(_proposals(home)) == 2
    # Resumable, and --json reports the run instead of printing it.
    res = _run(_install(project, "--history", "--json"), project, env)
    got = json.loads(res.stdout)
    assert res.returncode == 0 and got["history"]["sessions"] == 2 and got["history"]["proposals"] == 0

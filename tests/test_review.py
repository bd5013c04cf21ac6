"""`recalld proposals review` in a real terminal (a pty: raw single keys, $EDITOR, a prompt for the
reason), resumable; piped input; and `recalld proposals bulk` by kind and age."""

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from recalld.capture import policies
from recalld.capture import decide
from recalld.core import db, proposal_db, receipts, scope
from recalld.cli.review import PROMPT
from tests.helpers import REPO, run_recalld

TEXTS = [("decision", "We pin sqlite to 3.45 because 3.46 changed the FTS5 tokenizer defaults."),
         ("fact", "The staging database lives on port 5433, not the default 5432, on the CI runner."),
         ("constraint", "Never run the migration script twice: migration 7 is not idempotent at all."),
         ("fact", "The export job writes each file under a dated key instead of overwriting latest.csv."),
         ("preference", "The user wants commit messages in the imperative mood, with the issue number.")]


@pytest.fixture
def seeded(home, project):
    sc = scope.resolve(str(project))
    conn = proposal_db.connect()
    ds = []
    for i, (kind, text) in enumerate(TEXTS):
        d = policies.Draft(kind=kind, text=text, why="a test draft", confidence=0.9)
        d.line, d.role = 10 + i, "agent"
        ds.append(d)
    ids = proposal_db.store_pass(conn, receipts.new("proposer", "test"), session="s-review", source="/x/session.jsonl",
                            from_line=1, to_line=20, boundary_id=None, window_chars=100, drafts=ds,
                            project=sc.project, agent=sc.agent, model="test")
    conn.close()
    return ids


def _env(home, **extra):
    e = dict(os.environ, RECALLD_HOME=str(home), PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.update(extra)
    return e


class Terminal:
    """The CLI under a pseudo-terminal, driven like a person at the keyboard."""

    def __init__(self, args, cwd, env):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "recalld", *args], stdin=slave, stdout=slave,
                                     stderr=slave, cwd=cwd, env=env, start_new_session=True)
        os.close(slave)
        self.out = b""

    def expect(self, text: str, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while text.encode() not in self.out:
            left = end - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and not select.select([self.master], [], [], 0)[0]:
                raise AssertionError(f"{text!r} not seen; got:\n{self.out.decode(errors='replace')}")
            if select.select([self.master], [], [], min(left, 0.2))[0]:
                try:
                    self.out += os.read(self.master, 4096)
                except OSError:
                    pass

    def key(self, k: str) -> None:
        """One key at the prompt (waiting for it, as a person does: the walk reads it raw)."""
        self.expect(PROMPT, 30.0)
        self.out = self.out[self.out.rindex(PROMPT.encode()) + len(PROMPT):]
        os.write(self.master, k.encode())

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> int:
        rc = self.proc.wait(timeout=30)
        try:
            while select.select([self.master], [], [], 0.1)[0]:
                self.out += os.read(self.master, 4096)
        except OSError:
            pass
        os.close(self.master)
        return rc


def _states(ids) -> dict:
    conn = db.connect()
    try:
        return {i: decide.get(conn, i)["state"] for i in ids}
    finally:
        conn.close()


def test_review_in_a_terminal_with_single_keys_an_editor_and_a_reason(home, project, seeded, tmp_path):
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\np = sys.argv[1]\nt = open(p).read()\n"
                      "open(p, 'w').write(t.replace('not idempotent at all', 'not idempotent'))\n")
    env = _env(home, EDITOR=f"{sys.executable} {editor}", VISUAL="")
    t = Terminal(["proposals", "review"], str(project), env)
    t.expect(f"[1/5] p{seeded[0]} decision")
    t.expect("line 10")  # where it was said
    t.key("a")
    t.expect(f"approved p{seeded[0]} as m")
    t.expect(f"[2/5] p{seeded[1]} fact")
    t.key("s")
    t.expect(f"[3/5] p{seeded[2]} constraint")
    t.key("e")
    t.expect(f"p{seeded[2]} constraint (edited)")  # the same draft again, as edited
    t.expect("migration 7 is not idempotent.")
    t.key("a")
    t.expect(f"[4/5] p{seeded[3]}")
    t.key("r")
    t.expect("reason")
    t.send("already in the README\n")
    t.expect(f"rejected p{seeded[3]}")
    t.expect(f"[5/5] p{seeded[4]}")
    t.key("q")
    t.expect("pending")
    assert t.close() == 0
    assert _states(seeded) == {seeded[0]: "approved", seeded[1]: "pending", seeded[2]: "approved",
                               seeded[3]: "rejected", seeded[4]: "pending"}
    conn = db.connect()
    assert decide.get(conn, seeded[2])["effective"]["text"].endswith("migration 7 is not idempotent.")
    assert decide.get(conn, seeded[3])["events"][-1]["reason"] == "already in the README"
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 2
    conn.close()
    # Resumable: the next review starts where this one stopped (p5), then the skipped p2.
    t = Terminal(["proposals", "review"], str(project), env)
    t.expect(f"[1/2] p{seeded[4]}")
    t.key("s")
    t.expect(f"[2/2] p{seeded[1]}")
    t.key("q")
    assert t.close() == 0


def test_review_reads_plain_lines_when_stdin_is_not_a_terminal(home, project, seeded):
    res = run_recalld(["proposals", "review", "--kind", "fact", "--cwd", str(project)],
                      stdin="r\nwrong port\na\n")
    assert res.returncode == 0, res.stderr
    out = res.stdout.decode()
    assert "[1/2]" in out and "[2/2]" in out and "approved 1, edited 0, rejected 1, skipped 0; 0 pending" in out
    assert _states(seeded)[seeded[1]] == "rejected" and _states(seeded)[seeded[3]] == "approved"
    # End of input is quit: nothing more is decided.
    res = run_recalld(["proposals", "review", "--cwd", str(project)], stdin="")
    assert res.returncode == 0 and "3 pending" in res.stdout.decode()


def test_bulk_decisions_by_kind_and_age(home, project, seeded):
    res = run_recalld(["proposals", "bulk", "reject", "--kind", "fact", "--cwd", str(project), "--yes"])
    assert res.returncode != 0 and "needs --reason" in res.stderr.decode()
    res = run_recalld(["proposals", "bulk", "reject", "--kind", "fact", "--cwd", str(project), "--dry-run", "--json"])
    assert json.loads(res.stdout)["matched"] == [seeded[1], seeded[3]] and _states(seeded)[seeded[1]] == "pending"
    # Nothing is older than a day yet.
    res = run_recalld(["proposals", "bulk", "approve", "--older-than", "1d", "--cwd", str(project), "--yes", "--json"])
    assert json.loads(res.stdout)["matched"] == []
    res = run_recalld(["proposals", "bulk", "reject", "--kind", "fact", "--reason", "stale", "--cwd", str(project),
                       "--yes", "--json"])
    assert res.returncode == 0, res.stderr
    assert [d["proposal"]["id"] for d in json.loads(res.stdout)["decided"]] == [seeded[1], seeded[3]]
    res = run_recalld(["proposals", "bulk", "approve", "--older-than", "0m", "--cwd", str(project), "--yes"])
    assert res.returncode == 0 and "approved 3 of 3" in res.stdout.decode()
    assert set(_states(seeded).values()) == {"approved", "rejected"}
    # Without --yes and without a terminal to confirm on, nothing changes.
    res = run_recalld(["proposals", "bulk", "approve", "--cwd", str(project)])
    assert "nothing to do" in res.stdout.decode()

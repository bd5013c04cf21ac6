"""The warm daemon runs hook processes' hooks (recalld/hook/served.py, recalld/daemon/hookserver.py):
what the agent reads and what the receipt says are the same as when the process runs the hook
itself; the scope is the hook process's (its directory and RECALLD_* environment), a held act's
retry finds its hold, and every way the exchange can break leaves exactly one receipt: the
daemon's when the hook process confirmed the output, else the in-process run's, saying why."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from recalld import memories
from recalld.core import db, receipts, scope, settings
from recalld.daemon import hookserver
from recalld.hook import served
from recalld.install import entries
from test_crystals import cdir, put  # noqa: F401 (fixtures)

LAUNCHER = [sys.executable, "-I", "-S", entries.LAUNCHER, "hook"]


def _count(session):
    from recalld.core import paths

    if not session or not os.path.exists(paths.db_path()):
        return 0
    return len(receipts.read(db.connect(readonly=True), session=session))


def hook(event, data, env=None, agent="claude", cwd="/"):
    """Run the launcher; return its output once the run's receipt is in (a served prompt's
    hook process may exit before the daemon's commit, served.py's "L")."""
    argv = [*LAUNCHER, event, *(["--agent", agent] if agent else [])]
    session = data.get("session_id") if isinstance(data, dict) else None
    before = _count(session)
    p = subprocess.run(argv, input=json.dumps(data).encode(), capture_output=True, timeout=60, cwd=cwd,
                       env=dict(os.environ, **(env or {})))
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    for _ in range(500):
        if not session or _count(session) > before:
            break
        time.sleep(0.01)
    return p.stdout.decode()


def last(session):
    recs = receipts.read(db.connect(readonly=True), session=session)
    return recs[0], len(recs)


@contextlib.contextmanager
def serving(threads=2):
    """A HookServer on its threads in this process, as the daemon runs it; stopped on exit."""
    srv = hookserver.HookServer(threads)
    stop = threading.Event()
    t = threading.Thread(target=srv.serve, args=(stop, lambda: (db.connect(), None), lambda c, i, w: (c, i)),
                         daemon=True)
    t.start()
    try:
        for _ in range(300):
            if srv.state["listening"] or srv.state["reason"]:
                break
            time.sleep(0.01)
        assert srv.state["listening"], srv.state
        yield srv
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert not os.path.exists(served.socket_path())  # its own socket file goes with it


@pytest.fixture
def server(home):
    settings.save({})
    with serving() as srv:
        yield srv


def prompt(project, session, text):
    return {"session_id": session, "cwd": str(project), "hook_event_name": "UserPromptSubmit", "prompt": text}


SAME = ("hook", "act", "outcome", "agent", "project", "delivered", "delivered_ids", "cut", "withheld",
        "candidates", "above_floor", "error")


def test_served_and_in_process_runs_read_and_write_the_same(home, project, cdir):  # noqa: F811
    conn = db.connect()
    memories.remember(conn, "Ledgerly invoices live in PostgreSQL 16 through psycopg 3.", scope.resolve(str(project)))
    put(cdir, "deploy", on="bash", match="deploy.sh", essence="DEPLOY-ESSENCE: staging first",
        extra="deliver: context\n")
    acts = [
        ("session-start", {"hook_event_name": "SessionStart", "source": "startup"}),
        ("prompt-submit", {"hook_event_name": "UserPromptSubmit",
                           "prompt": "Which database holds the invoices in ledgerly?"}),
        ("pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Bash",
                      "tool_input": {"command": "./deploy.sh prod"}, "tool_use_id": "t1"}),
        ("post-tool", {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                       "tool_response": {"stdout": "a\n", "stderr": ""}, "tool_use_id": "t2"}),
        ("stop", {"hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "Done."}),
        ("prompt-submit", {"hook_event_name": "UserPromptSubmit", "prompt": ""}),  # skipped: empty
    ]
    alone = [(hook(ev, dict(body, session_id="alone", cwd=str(project))), last("alone")[0]) for ev, body in acts]
    with serving() as srv:
        both = [(hook(ev, dict(body, session_id="served", cwd=str(project))), last("served")[0]) for ev, body in acts]
    assert srv.state["served"] == len(acts)
    assert [out for out, _ in both] == [out for out, _ in alone]
    assert "psycopg 3" in both[1][0] and "DEPLOY-ESSENCE" in both[2][0]
    for (_, a), (_, b) in zip(alone, both):
        assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}
        assert b["detail"]["served"] == "daemon" and "served" not in a["detail"]
    assert len(receipts.read(db.connect(readonly=True), session="served")) == len(acts)  # one receipt a run


def test_the_scope_is_the_hook_process_s_own(server, project):
    conn = db.connect()
    memories.remember(conn, "bob's private note: the flaky test is test_refunds_retry.",
                   scope.resolve(str(project), env={"RECALLD_AGENT": "bob"}), kind="fact", scope="agent")
    ask = "Which test is the flaky one, test_refunds_retry?"
    assert "test_refunds_retry" in hook("prompt-submit", prompt(project, "b1", ask), env={"RECALLD_AGENT": "bob"})
    r, _ = last("b1")
    assert r["agent"] == "bob" and r["detail"]["served"] == "daemon"
    assert "bob's private" not in hook("prompt-submit", prompt(project, "m1", ask))  # main: not its note
    assert last("m1")[0]["agent"] == "main"


def test_a_held_act_is_held_once_and_its_retry_runs(server, project, cdir):  # noqa: F811
    put(cdir, "reset", on="bash", match="git reset --hard", essence="RESET-ESSENCE")
    body = {"session_id": "g1", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "git reset --hard HEAD~1"}, "tool_use_id": "t1"}
    first = json.loads(hook("pre-tool", body))
    assert first["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "RESET-ESSENCE" in first["hookSpecificOutput"]["permissionDecisionReason"]
    assert hook("pre-tool", body) == ""  # the hold was written before the first process exited
    r, n = last("g1")
    assert n == 2 and r["detail"]["served"] == "daemon" and r["detail"]["crystals"]["passed"] == ["reset"]


def _raw(head_over=None, data=b"", stop_after=None, answer=b"K\n"):
    """Speak the protocol by hand; stop after the daemon's A or O line when asked."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(served.socket_path())
    head = {"v": served.PROTOCOL, "version": served.__version__, "uid": os.urandom(16).hex(),
            "argv": ["prompt-submit", "--agent", "claude"],
            "cwd": "/", "home": os.environ["RECALLD_HOME"], "env": {}, "n": len(data), **(head_over or {})}
    s.sendall(json.dumps(head).encode() + b"\n" + data)
    f = s.makefile("rb")
    took = f.readline()
    if stop_after == "A" or not took.startswith(b"A"):
        s.close()
        return took
    line = f.readline()
    f.read(int(line.split()[1]))
    if stop_after == "O":
        s.close()
        return line
    s.sendall(answer)
    done = f.readline()
    s.close()
    return done


def test_a_hook_process_that_leaves_before_confirming_gets_no_receipt_from_the_daemon(server, project):
    data = json.dumps(prompt(project, "gone", "anything")).encode()
    for stop_after in ("A", "O"):
        _raw(data=data, stop_after=stop_after)
    time.sleep(0.3)
    assert receipts.read(db.connect(readonly=True), session="gone") == []  # its own run writes the receipt
    assert server.state["dropped"] >= 2 and server.state["served"] == 0
    assert _raw(data=data, answer=b"F\n") == b"D\n"  # the write to the agent failed: said, nothing claimed
    r, n = last("gone")
    assert n == 1 and r["outcome"] == "error" and r["error"] == "stdout" and r["delivered"] == 0


def test_a_request_without_its_uid_is_refused(server, project):
    assert _raw({"uid": None}) == b"R bad request\n"
    assert _raw({"uid": "../../etc"}) == b"R bad request\n"


@contextlib.contextmanager
def dying_daemon(write_receipt=False, leave=False, hold_d=None):
    """A daemon that takes the run, sends its output and dies before saying the receipt is in:
    with `write_receipt` it had committed it first (only the D was lost). `leave`: its output
    line lets the hook process go before D; `hold_d`: an Event it waits for, then says D."""
    path = served.socket_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    seen = {}

    def answer():
        c, _ = srv.accept()
        f = c.makefile("rb")
        head = json.loads(f.readline())
        f.read(head["n"])
        seen.update(head)
        body = b'{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "m1 fact"}}'
        c.sendall(b"A 300\n" + b"O %d%s\n" % (len(body), b" L" if leave else b"") + body)
        seen["ack"] = f.readline()
        if write_receipt:
            r = receipts.new("hook", "prompt-submit")
            r.update(uid=head["uid"], outcome="delivered", delivered=1, session="lost", detail={"served": "daemon"})
            receipts.record(db.connect(), r, lambda conn: None)
        if hold_d is not None and hold_d.wait(20):
            c.sendall(b"D\n")
        c.close()  # no D

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        yield seen
    finally:
        t.join(10)
        srv.close()
        os.unlink(path)


def test_a_daemon_that_dies_before_confirming_leaves_the_hook_process_s_receipt(home, project):
    settings.save({})
    with dying_daemon() as seen:
        out = hook("prompt-submit", prompt(project, "lost", "anything at all"))
    assert seen["ack"] == b"K\n" and "m1 fact" in out  # the agent got the daemon's output, once
    r, n = last("lost")
    assert n == 1 and r["uid"] == seen["uid"] and r["outcome"] == "error" and r["error"] == "served: unconfirmed"
    assert r["detail"]["served"] == "unconfirmed: EOFError" and r["detail"]["output_bytes"] > 0
    assert r["delivered"] == 0 and r["act"] == "prompt" and r["project"] == scope.resolve(str(project)).project
    assert receipts.read_fallback() == []


def test_when_only_the_confirmation_was_lost_the_daemon_s_receipt_is_the_one(home, project):
    settings.save({})
    with dying_daemon(write_receipt=True) as seen:
        hook("prompt-submit", prompt(project, "lost", "anything at all"))
    r, n = last("lost")
    assert n == 1 and r["uid"] == seen["uid"] and r["outcome"] == "delivered" and r["detail"] == {"served": "daemon"}
    assert receipts.read_fallback() == []  # the second writer found the uid taken: nothing anywhere


def test_a_receipt_uid_is_stored_once(home):
    conn = db.connect()
    r = receipts.new("hook", "stop")
    assert receipts.record(conn, dict(r, outcome="nothing")) == "db"
    assert receipts.record(conn, dict(r, outcome="error"), lambda c: None) == "duplicate"
    assert receipts.record(conn, dict(r, outcome="error")) == "duplicate"
    assert [x["outcome"] for x in receipts.read(conn) if x["uid"] == r["uid"]] == ["nothing"]
    assert receipts.read_fallback() == []


def test_another_version_or_home_is_refused_and_the_hook_runs_itself(server, project):
    assert _raw({"version": "0.0.0-other"}).startswith(b"R daemon runs recalld")
    assert _raw({"home": "/elsewhere"}) == b"R another RECALLD_HOME\n"
    assert _raw({"v": 99}) == b"R protocol\n"
    assert server.state["refused"] == 3
    real = served.__version__
    try:  # the hook side of a refusal: one receipt, in-process, saying why
        with open(served.__file__, encoding="utf-8") as f:
            assert "__version__" in f.read()
        served.__version__ = "0.0.0-other"
        why = served.serve(["prompt-submit"], json.dumps(prompt(project, "v1", "hi")).encode(), lambda b: None)
    finally:
        served.__version__ = real
    assert why.startswith("refused: daemon runs recalld")


def test_no_daemon_a_dead_one_and_a_stuck_one_leave_one_in_process_receipt(home, project):
    settings.save({})
    assert hook("prompt-submit", prompt(project, "n1", "hi")) == ""
    r, n = last("n1")
    assert n == 1 and "served" not in r["detail"]  # no socket: the ordinary case, nothing to say
    path = served.socket_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)
    dead.close()  # the file of a daemon killed with -9: nobody listens
    hook("prompt-submit", prompt(project, "n2", "hi"))
    r, n = last("n2")
    assert n == 1 and r["detail"]["served"] == "down"
    os.unlink(path)
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.bind(path)
    stuck.listen(8)  # accepts (the kernel's backlog) but never answers
    try:
        t = time.perf_counter()
        hook("prompt-submit", prompt(project, "n3", "hi"))
        took = time.perf_counter() - t
    finally:
        stuck.close()
    r, n = last("n3")
    assert n == 1 and r["detail"]["served"] == "timeout" and r["outcome"] == "nothing"
    assert took < 10  # bounded by CONNECT_S and the deadline, not by the daemon


def test_a_commit_is_never_sent_to_the_daemon(server, project):
    assert served.main(["commit"], lambda: b"{}")[:2] == (False, None)
    assert server.state["served"] == 0


def test_the_daemon_sees_a_crystal_edited_or_trusted_between_two_acts(server, project, cdir):  # noqa: F811
    from recalld.crystals import admin

    p = put(cdir, "deploy", on="bash", match="deploy.sh", essence="FIRST-ESSENCE", extra="deliver: context\n")
    body = {"cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "./deploy.sh prod"}, "tool_use_id": "t1"}
    assert "FIRST-ESSENCE" in hook("pre-tool", dict(body, session_id="e1"))
    text = p.read_text().replace("FIRST-ESSENCE", "SECOND-ESSENCE")
    p.write_text(text)  # changed since trusted: withheld until trusted again
    assert hook("pre-tool", dict(body, session_id="e2")) == ""
    assert last("e2")[0]["detail"]["crystals"]["untrusted"] == 1
    admin.trust_project(str(project))
    assert "SECOND-ESSENCE" in hook("pre-tool", dict(body, session_id="e3"))
    assert all(last(s)[0]["detail"]["served"] == "daemon" for s in ("e1", "e2", "e3"))


def test_a_daemon_whose_code_changed_on_disk_refuses(server, project, monkeypatch):
    """An upgrade (or an edit of an editable install) while the daemon runs: it still runs what
    it imported, so it sends the hook process back to its own code."""
    monkeypatch.setattr(hookserver, "_code_sig", lambda: ("upgraded",))
    assert _raw().startswith(b"R daemon runs recalld") and b"restart it" in _raw()
    hook("prompt-submit", prompt(project, "u1", "hi"))
    r, n = last("u1")
    assert n == 1 and r["detail"]["served"].startswith("refused: daemon runs recalld")


def test_bad_input_gets_the_same_receipt_served_as_alone(home, project):
    def run_raw(data):
        p = subprocess.run([*LAUNCHER, "prompt-submit"], input=data, capture_output=True, timeout=60, cwd="/")
        assert p.returncode == 0 and p.stdout == b"" and p.stderr == b""
        return receipts.read(db.connect(readonly=True))[0]

    settings.save({})
    cases = (b"{not json", b"", b"[1, 2]", b"\xff\xfe")
    alone = [run_raw(d) for d in cases]
    with serving(1):
        both = [run_raw(d) for d in cases]
    assert [(r["outcome"], r["error"]) for r in both] == [(r["outcome"], r["error"]) for r in alone]
    assert all(r["detail"].get("served") == "daemon" for r in both)
    assert ("error", "bad_json") in [(r["outcome"], r["error"]) for r in both]


def test_daemon_status_says_whether_it_serves_the_hooks():
    from recalld.cli.daemon import _format

    base = {"running": True, "pid": 1, "uptime_s": 5, "watch_mode": "watchdog", "roots": [], "judge": {}}
    assert "hooks: served (12 runs; 1 left to run themselves, 0 refused)" in _format(
        dict(base, hooks={"listening": True, "served": 12, "dropped": 1, "refused": 0}))
    assert "hooks: each runs itself (daemon.serve_hooks is 0)" in _format(dict(base, hooks={"listening": False}))


def test_doctor_says_who_ran_its_hook(server, project):
    from tests.helpers import run_recalld  # noqa: E402

    res = run_recalld(["doctor", "--json", "--no-model-probe", "--cwd", str(project)])
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["hook_run"]["receipt"]["served"] == "daemon", rep["hook_run"]


@pytest.mark.parametrize("env", [
    {"RECALLD_HOME": "/srv/recall"}, {"RECALLD_HOME": "/srv/recall/"}, {"RECALLD_HOME": "~"},
    {"RECALLD_HOME": "~/r", "HOME": "/home/ann/"}, {"RECALLD_HOME": "~/r", "HOME": "/"},
    {"RECALLD_HOME": "~/r", "HOME": ""}, {"RECALLD_HOME": "relative/dir"},
    {"XDG_DATA_HOME": "/x/data"}, {"XDG_DATA_HOME": "/x/data/"}, {"XDG_DATA_HOME": "rel"},
    {"XDG_DATA_HOME": "", "HOME": "/home/ann"}, {"HOME": "/home/ann//"}, {"HOME": "/"}, {"HOME": ""},
    {"RECALLD_HOME": "", "HOME": "/h"}, {"RECALLD_HOME": "/caf\u00e9/r\u00e9", "HOME": "/h"},
])
def test_the_launcher_finds_the_home_as_recalld_does(monkeypatch, env):
    """The launcher works the home out without `os` (served.py): the same directory, or it does
    not guess (a ~user home, no HOME) and the process runs the hook."""
    from recalld.core import paths

    for k in ("RECALLD_HOME", "XDG_DATA_HOME", "HOME"):
        monkeypatch.delenv(k, raising=False)
    env = dict({"HOME": "/home/default"}, **env)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert served._env() == dict(os.environ)
    assert served._home(served._env()) == paths.home()
    assert served.socket_path() == os.path.join(paths.home(), "run", served.SOCKET_NAME)


def test_a_home_only_os_can_work_out_is_not_guessed(monkeypatch):
    monkeypatch.setenv("RECALLD_HOME", "~root/r")
    with pytest.raises(served.Unsure):
        served._home(served._env())
    monkeypatch.delenv("RECALLD_HOME")
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("HOME")
    with pytest.raises(served.Unsure):
        served._home(served._env())
    reader = lambda: b"{}"  # noqa: E731
    assert served.main(["prompt-submit"], reader) == (False, None, reader)  # it runs here, input unread


@pytest.mark.parametrize("text", ["plain", 'quo"te \\ back', "tab\tnew\nline\x00\x1f\x7f", "caf\u00e9 \u2603 \U0001f600",
                                  "lone \udcff surrogate", ""])
def test_the_request_line_is_what_json_writes(text):
    from recalld.core import jsonio

    head = {"v": served.PROTOCOL, "version": "0.1.0", "uid": "ab" * 16, "argv": ["prompt-submit", text],
            "cwd": "/w/" + text, "home": "/h", "env": {"RECALLD_X": text, "RECALLD_" + text: "1"}, "n": 12}
    assert served._request(head) == jsonio.dumps(head, ensure_ascii=True).encode("ascii")
    assert json.loads(served._request(head)) == head


def test_a_served_run_loads_no_module_beyond_its_client(server, project):
    """Until the daemon has answered, the launcher imports only its own package's three modules
    and `_socket` beyond a bare `python -I -S` start (no os, no recalld.core, no JSON module)."""
    probe = ("import posix, sys\n_exit = posix._exit\n"
             "def report(code):\n"
             "    sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
             "    _exit(code)\n"
             "posix._exit = report\n"
             "sys.argv = [sys.argv[1], 'hook', *sys.argv[2:]]\n"
             "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'),\n"
             "     {'__name__': '__main__', '__file__': sys.argv[0], '__package__': None})\n")
    bare = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; print(' '.join(sys.modules))"],
                          capture_output=True, text=True).stdout.split()
    res = subprocess.run([sys.executable, "-I", "-S", "-c", probe, entries.LAUNCHER, "prompt-submit"],
                         input=json.dumps(prompt(project, "mods", "anything")).encode(), capture_output=True,
                         cwd="/", env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    lines = [x for x in res.stderr.decode().splitlines() if x.startswith("MODULES ")]
    assert res.returncode == 0 and len(lines) == 1, res.stderr.decode()
    extra = set(lines[0].split()[1:]) - set(bare)
    assert extra == {"gc", "posix", "_socket", "recalld", "recalld.hook", "recalld.hook.served"} - set(bare), extra
    for _ in range(500):  # the daemon answers first and writes the receipt after (as `run` waits)
        if _count("mods"):
            break
        time.sleep(0.01)
    assert last("mods")[0]["detail"]["served"] == "daemon"


def test_a_prompt_s_hook_process_leaves_before_the_receipt_and_a_tool_s_waits(server, project):
    assert _raw(data=json.dumps(prompt(project, "lv", "anything")).encode(), stop_after="O").endswith(b" L\n")
    pre = {"session_id": "lv", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
           "tool_input": {"command": "ls"}, "tool_use_id": "t1"}
    line = _raw({"argv": ["pre-tool", "--agent", "claude"]}, data=json.dumps(pre).encode(), stop_after="O")
    assert line.startswith(b"O ") and len(line.split()) == 2  # no L: the agent's next act may follow at once


def test_a_hook_process_let_go_exits_before_d_and_its_child_waits_for_it(home, project):
    settings.save({})
    release = threading.Event()
    with dying_daemon(write_receipt=True, leave=True, hold_d=release) as seen:
        # D is withheld until the launcher has exited: a launcher that waited for it would time out
        out = subprocess.run([*LAUNCHER, "prompt-submit", "--agent", "claude"], capture_output=True, timeout=15,
                             input=json.dumps(prompt(project, "lost", "anything at all")).encode())
        release.set()
    assert out.returncode == 0 and out.stdout.count(b"m1 fact") == 1 and seen["ack"] == b"K\n"
    time.sleep(0.5)
    r, n = last("lost")  # the daemon's receipt; the child got its D and wrote nothing
    assert n == 1 and r["uid"] == seen["uid"] and r["outcome"] == "delivered" and receipts.read_fallback() == []


def test_a_hook_process_let_go_whose_daemon_dies_still_leaves_one_receipt(home, project):
    settings.save({})
    with dying_daemon(leave=True) as seen:
        out = hook("prompt-submit", prompt(project, "lost", "anything at all"))
    assert seen["ack"] == b"K\n" and out.count("m1 fact") == 1
    r, n = last("lost")  # written by the hook process's child, under the run's uid
    assert n == 1 and r["uid"] == seen["uid"] and r["error"] == "served: unconfirmed" and r["delivered"] == 0
    assert r["detail"]["served"] == "unconfirmed: EOFError"


def test_an_idle_daemon_freezes_what_it_keeps_at_most_once_a_minute():
    """(hookserver.settle: full collections then walk only what was made since.)"""
    import gc

    srv = hookserver.HookServer(1)
    try:
        gc.unfreeze()
        keep = [[i] for i in range(1000)]  # noqa: F841 (kept alive: frozen with the rest)
        t = time.monotonic()
        assert not srv.settle(t)  # a run may be on its way: not while hooks keep coming
        assert srv.settle(t + hookserver.IDLE_S) and gc.get_freeze_count() > 1000
        assert not srv.settle(t + hookserver.IDLE_S + hookserver.FREEZE_EVERY_S / 2)  # too soon
        assert srv.settle(time.monotonic() + hookserver.IDLE_S + hookserver.FREEZE_EVERY_S)
    finally:
        gc.unfreeze()


def test_without_posix_the_hook_runs_itself(monkeypatch):
    monkeypatch.setattr(served, "posix", None)
    reader = lambda: b"{}"  # noqa: E731
    assert served.main(["prompt-submit"], reader) == (False, None, reader)
    assert served.serve(["prompt-submit"], b"{}", lambda b: None, {}) == "error: not POSIX"

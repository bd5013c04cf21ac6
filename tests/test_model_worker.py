"""Model work in a child process: a model that crashes (SIGILL, SIGSEGV, SIGKILL), hangs, or
answers garbage, and a truncated GGUF, cost one pass, never the daemon. The fake runtime
(recalld/model/fake.py) is what the worker runs when RECALLD_TEST_FAKE_MODEL names a file."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers import TRANSCRIPTS, payload, run_recalld, wait_for
from recalld import memories
from recalld.core import db, receipts, scope, settings
from recalld.daemon import models as dm
from recalld.hook import autostart
from recalld.model.errors import ModelCrashed, ModelGarbage, ModelTimedOut, Unavailable

SPOTTER = "/home/marco/projects/spotter"
SHORT_SESSION = "55604662-cf2a-4331-851a-ec234028f8ca"
FAST = {"rescan_s": 0.5, "poll_s": 0.5, "debounce_s": 0.2, "max_wait_s": 1.0, "min_pass_interval_s": 0,
        "max_passes_per_minute": 10_000, "model_crash_limit": 2}
FAILURES = {
    "sigill": (ModelCrashed, "model crashed (SIGILL)", "error"),
    "sigsegv": (ModelCrashed, "model crashed (SIGSEGV)", "error"),
    "sigkill": (ModelCrashed, "model crashed (SIGKILL)", "error"),
    "hang": (ModelTimedOut, "model timed out", "timeout"),
    "garbage": (ModelGarbage, "model returned garbage", "error"),
}


@pytest.fixture
def fake(home, tmp_path, monkeypatch):
    """A GGUF-looking file for the judge and a mode file the fake runtime reads."""
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    mode = tmp_path / "mode"
    mode.write_text("ok")
    monkeypatch.setenv("RECALLD_TEST_FAKE_MODEL", str(mode))
    return model, mode


# --- the worker, driven directly ----------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(FAILURES))
def test_each_failure_fails_the_call_restarts_the_worker_and_goes_off_at_the_limit(fake, mode):
    model, mode_file = fake
    cls, message, _ = FAILURES[mode]
    settings.save({"models": {"judge": str(model)}, "daemon": {"model_crash_limit": 2}})
    m = dm.Models(settings.load())
    try:
        rt = m.runtime("judge")
        assert rt.token_logprobs("a b", " b c", timeout_s=1) == [-0.5, -4.0]
        first_pid = rt.pid
        mode_file.write_text(mode)
        t0 = time.monotonic()
        with pytest.raises(cls) as e:
            rt.token_logprobs("a b", " b c", timeout_s=1)
        assert str(e.value).startswith(message)
        assert time.monotonic() - t0 < 5  # a hang is killed at its deadline plus the grace
        if mode == "sigill":
            assert "GGML_NATIVE=OFF" in e.value.detail["fix"]
            assert "Fatal Python error: Illegal instruction" in e.value.detail["stderr"]
        # the worker comes back by itself after the backoff (1 s), a new process
        mode_file.write_text("ok")
        snap = wait_for(lambda: m.snapshot()["judge"]["state"] == "running" and m.snapshot(), timeout=10)
        assert snap and snap["judge"]["pid"] != first_pid and snap["judge"]["crashes_in_a_row"] == 1
        rt = m.runtime("judge")
        assert rt.token_logprobs("x", " x", timeout_s=1) == [-0.5]  # a good call: the count starts again
        assert m.snapshot()["judge"]["crashes_in_a_row"] == 0
        for _ in range(2):  # two failures in a row switch the file's roles off
            mode_file.write_text(mode)
            rt = wait_for(lambda: _live(m), timeout=10)
            with pytest.raises(cls):
                rt.token_logprobs("a", " a", timeout_s=1)
        with pytest.raises(Unavailable) as off:
            m.runtime("judge")
        assert "switched off after 2 model failures in a row" in str(off.value)
        assert "comes back when the model file or the llama-cpp-python build changes" in str(off.value)
        assert m.snapshot()["judge"]["state"] == "off"
    finally:
        m.shutdown()
    # a new daemon does not walk into the same crash: the health file holds the switch
    again = dm.Models(settings.load())
    with pytest.raises(Unavailable):
        again.runtime("judge")
    # until the model file changes
    mode_file.write_text("ok")
    os.utime(model, ns=(time.time_ns(), time.time_ns() + 10**9))
    try:
        assert again.runtime("judge").token_logprobs("a", " a", timeout_s=1) == [-0.5]
    finally:
        again.shutdown()


def _live(m):
    try:
        return m.runtime("judge")
    except Unavailable:
        return None


def test_a_load_that_crashes_or_hangs_is_a_failure(fake):
    model, mode_file = fake
    settings.save({"models": {"judge": str(model)}, "daemon": {"model_crash_limit": 3, "load_allowance_s": 1}})
    m = dm.Models(settings.load())
    try:
        mode_file.write_text("sigsegv:load")
        with pytest.raises(ModelCrashed, match=r"SIGSEGV"):
            m.runtime("judge")
        assert m.snapshot()["judge"]["state"] == "restarting"
        mode_file.write_text("hang:load")  # the restart after the backoff hangs in its load: killed
        last = wait_for(lambda: "while loading" in str((m.snapshot()["judge"]["last_failure"] or {}).get("message"))
                        and m.snapshot()["judge"]["last_failure"], timeout=10)
        assert last and last["message"].startswith("model timed out while loading"), m.snapshot()
        assert m.snapshot()["judge"]["crashes_in_a_row"] == 2
    finally:
        m.shutdown()


def test_a_truncated_gguf_does_not_load_and_says_so(home, tmp_path):
    """The real llama.cpp on a cut file (the header and a little more: small enough that the
    tests' model guard lets it through to llama.cpp)."""
    pytest.importorskip("llama_cpp")
    from recalld.model.resolve import resolve

    real = resolve("judge", {"models": {}})
    if not real.available:
        pytest.skip(f"no judge model: {real.reason}")
    cut = tmp_path / "cut.gguf"
    with open(real.path, "rb") as f:
        cut.write_bytes(f.read(300_000))
    settings.save({"models": {"judge": str(cut), "proposer": "off"}})
    m = dm.Models(settings.load())
    try:
        with pytest.raises(Unavailable, match="failed to load"):
            m.runtime("judge")
        with pytest.raises(Unavailable, match="failed to load"):  # not loaded again every pass
            m.runtime("judge")
        assert m.snapshot()["judge"]["state"] == "does not load"
    finally:
        m.shutdown()
    rep = json.loads(run_recalld(["doctor", "--json", "--no-hook-run"]).stdout)
    said = rep["model_probe"]["status"]["judge"]["said"]
    assert said.startswith("fails:") and "truncated or corrupt" in said


def test_the_daemon_process_never_loads_a_model_itself(home):
    """With the worker as the provider, a load in this process is refused outright."""
    from recalld.model import runtime
    from recalld.model.errors import LLMError

    runtime.use_provider(dm.Models(settings.load()))
    try:
        with pytest.raises(LLMError, match="never loads one itself"):
            runtime.Runtime("/nonexistent.gguf")
    finally:
        runtime.use_provider(None)


# --- the real daemon, a real transcript -----------------------------------------------------


def _daemon_home(model, limit=2):
    settings.save({"models": {"judge": str(model)}, "proposals": {"enabled": False},
                   "daemon": dict(FAST, model_crash_limit=limit), "judge": {"threshold": 0.0, "timeout_s": 2}})
    conn = db.connect()
    sc = scope.Scope(SPOTTER, "main")
    memories.remember(conn, "mix phx.server does not start when Postgres is down: run docker compose up -d db first",
                   sc, kind="procedure")
    memories.remember(conn, "The Phoenix server listens on port 4000; set PORT to change it", sc, kind="fact")
    root = Path(os.environ["HOME"]) / ".claude" / "projects" / "-home-marco-projects-spotter"
    root.mkdir(parents=True)
    return conn, root


def _round(root, i: int) -> str:
    """A fresh session: the short session's first 12 lines at once (a need with candidates)."""
    sid = f"w{i:07d}-cf2a-4331-851a-ec234028f8ca"
    lines = (TRANSCRIPTS / "spotter-short.jsonl").read_bytes().splitlines(keepends=True)
    with open(root / f"{sid}.jsonl", "ab") as f:
        f.write(b"".join(ln.replace(SHORT_SESSION.encode(), sid.encode()) for ln in lines[:12]))
    return sid


def _pass(conn, sid):
    return wait_for(lambda: next(iter(conn.execute(
        "SELECT uid FROM receipts WHERE source = 'daemon' AND session = ?", (sid,)).fetchall()), None), timeout=40)


def _status():
    return json.loads(run_recalld(["daemon", "status", "--json"]).stdout)


def _new_worker(than):
    """The daemon's status once its judge's worker runs as a process other than `than`."""
    st = _status()
    j = (st.get("models") or {}).get("judge") or {}
    return st if j.get("state") == "running" and j.get("pid") != than else None


@pytest.mark.parametrize("mode", sorted(FAILURES))
def test_the_daemon_survives_a_model_that_fails(fake, shared_transcripts, project, mode):
    model, mode_file = fake
    _, message, outcome = FAILURES[mode]
    conn, root = _daemon_home(model)
    up = run_recalld(["daemon", "start"])
    assert up.returncode == 0, up.stderr
    try:
        st = wait_for(lambda: _new_worker(None), timeout=20)
        assert st, _status()
        worker = st["models"]["judge"]["pid"]
        daemon_pid = st["pid"]
        mode_file.write_text(mode)
        sid = _round(root, 1)
        assert _pass(conn, sid)
        r = receipts.read(conn, source="daemon", session=sid)[0]
        assert r["outcome"] == outcome and r["error"].startswith(message), r
        assert r["detail"]["model_failure"]["need"].startswith("not retried")
        assert conn.execute("SELECT count(*) FROM queue WHERE session = ?", (sid,)).fetchone()[0] == 0
        # the daemon still serves the hook right after the crash, and still tails
        res = run_recalld(["hook", "prompt-submit"], payload(
            session_id="h1", cwd=str(project), hook_event_name="UserPromptSubmit", prompt="why does mix phx.server fail"))
        assert res.returncode == 0
        # a served prompt's hook process may exit before the daemon commits its receipt
        served = wait_for(lambda: receipts.read(conn, session="h1", hook="prompt-submit"), timeout=5)
        assert served[0]["detail"]["served"] == "daemon"
        assert _status()["pid"] == daemon_pid and autostart.running_pid() == daemon_pid
        before = conn.execute("SELECT count(*) FROM transcript_events").fetchone()[0]
        mode_file.write_text("ok")
        # the worker is restarted (a new process) after its backoff
        st = wait_for(lambda: _new_worker(worker), timeout=15)
        assert st, json.dumps(_status()["models"]["judge"])
        sid2 = _round(root, 2)
        assert wait_for(lambda: conn.execute("SELECT count(*) FROM transcript_events").fetchone()[0] > before)
        assert _pass(conn, sid2)
        assert receipts.read(conn, source="daemon", session=sid2)[0]["outcome"] == "injected"
        # two failures in a row switch the judge off, and status, the receipts and doctor say why
        mode_file.write_text(mode)
        assert _pass(conn, _round(root, 3))
        worker = st["models"]["judge"]["pid"]
        st = wait_for(lambda: _new_worker(worker), timeout=15)
        assert st, _status()
        assert _pass(conn, _round(root, 4))
        st = wait_for(lambda: _status()["models"]["judge"]["state"] == "off" and _status(), timeout=10)
        assert st, _status()["models"]
        assert "switched off after 2" in st["models"]["judge"]["reason"]
        sid5 = _round(root, 5)
        assert _pass(conn, sid5)
        r5 = receipts.read(conn, source="daemon", session=sid5)[0]
        assert r5["outcome"] == "skipped" and "switched off after 2" in r5["error"]
        text = run_recalld(["daemon", "status"]).stdout.decode()
        assert "model worker (judge): OFF: switched off after 2 model failures" in text
        if mode == "sigill":
            assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in text
        doc = run_recalld(["doctor", "--no-hook-run"], timeout=120).stdout.decode()
        assert "model worker (judge): OFF" in doc
        said = {"sigill": "crashes with SIGILL", "sigsegv": "crashes with SIGSEGV", "sigkill": "crashes with SIGKILL",
                "hang": "hangs", "garbage": "fails"}[mode]
        if mode != "hang":  # the probe's own time limit is 30 s; test_doctor_names_a_hang has it
            assert f"model probe judge: {said}" in doc, doc
        assert _status()["pid"] == daemon_pid
    finally:
        stop = run_recalld(["daemon", "stop"])
        assert stop.returncode == 0, stop.stderr
    # a clean stop leaves no worker behind
    assert not _children_named("recalld.model.worker")


def _children_named(word: str) -> list:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                env_home = os.environ["RECALLD_HOME"]
                if word in cmd and Path(f"/proc/{pid}/environ").read_bytes().find(env_home.encode()) >= 0:
                    out.append(int(pid))
            except OSError:
                pass
    return out


def test_doctor_names_a_hang(fake):
    model, mode_file = fake
    settings.save({"models": {"judge": str(model), "proposer": "off"}})
    mode_file.write_text("hang")
    from recalld.model import faults

    r = faults.probe(str(model), timeout_s=2)
    assert not r["works"] and r["said"].startswith("hangs: no answer within 2 s")


# --- the daemon's own death ------------------------------------------------------------------


def test_a_dead_daemon_is_visible_and_autostart_backs_off(home, project):
    settings.save({"models": {"judge": "off"}, "proposals": {"enabled": False},
                   "daemon": dict(FAST, autostart=True)})
    body = payload(session_id="a1", cwd=str(project), hook_event_name="SessionStart", source="startup")
    conn = db.connect()
    try:
        for i in range(autostart.MAX_RESTARTS_AFTER_DEATH):
            res = run_recalld(["hook", "session-start"], body)
            assert res.returncode == 0
            assert receipts.read(conn, hook="session-start")[0]["detail"]["daemon"] == "started"
            pid = wait_for(lambda: (autostart.running_pid() or 0) > 0 and autostart.running_pid(), timeout=20)
            assert pid
            wait_for(lambda: Path(autostart.status_path()).exists() and
                     json.loads(Path(autostart.status_path()).read_text()).get("pid") == pid, timeout=20)
            os.kill(pid, signal.SIGSEGV if i == 0 else signal.SIGKILL)
            assert wait_for(lambda: autostart.running_pid() is None, timeout=10)
            os.utime(autostart.spawn_stamp_path(), (0, 0))  # past the spawn grace
            st = _status()
            assert st["running"] is False and st["died"]["pid"] == pid
            if i == 0:
                assert st["died"]["how"] == "died of SIGSEGV", st["died"]
                text = run_recalld(["daemon", "status"]).stdout.decode()
                assert f"the last run DIED: pid {pid}, died of SIGSEGV" in text
                assert "last log line" in text
            else:
                assert st["died"]["how"].startswith("died without a fault record")
        res = run_recalld(["hook", "session-start"], body)
        assert res.returncode == 0
        said = receipts.read(conn, hook="session-start")[0]["detail"]["daemon"]
        assert said.startswith("not restarted: the daemon died"), said
        assert autostart.running_pid() is None
        doc = run_recalld(["doctor", "--no-hook-run", "--no-model-probe"]).stdout.decode()
        assert "the daemon's last run DIED" in doc
        # a person may still start it; its status then says the run before it died
        assert b"started" in run_recalld(["daemon", "start"]).stdout
        assert "the run before this one died" in run_recalld(["daemon", "status"]).stdout.decode()
    finally:
        run_recalld(["daemon", "stop"])


@pytest.mark.model
def test_the_real_daemon_maps_no_llama_library_and_its_worker_does(home, shared_transcripts, project):
    """With the real embedded judge loaded and a pass judged, llama.cpp's libraries are in the
    worker's memory map and not in the daemon's; the worker is the OOM killer's first pick."""
    pytest.importorskip("llama_cpp")
    from recalld.model.resolve import resolve

    real = resolve("judge", {"models": {}})
    if not real.available:
        pytest.skip(f"no judge model: {real.reason}")
    settings.save({"proposals": {"enabled": False}, "daemon": dict(FAST), "judge": {"threshold": 0.0}})
    conn = db.connect()
    memories.remember(conn, "mix phx.server does not start when Postgres is down: run docker compose up -d db first",
                   scope.Scope(SPOTTER, "main"), kind="procedure")
    root = Path(os.environ["HOME"]) / ".claude" / "projects" / "-home-marco-projects-spotter"
    root.mkdir(parents=True)
    assert run_recalld(["daemon", "start"]).returncode == 0
    try:
        sid = _round(root, 1)
        assert _pass(conn, sid)
        assert receipts.read(conn, source="daemon", session=sid)[0]["outcome"] == "injected"
        st = wait_for(lambda: _new_worker(None), timeout=10)
        daemon_pid, worker_pid = st["pid"], st["models"]["judge"]["pid"]
        maps = lambda pid: Path(f"/proc/{pid}/maps").read_text()  # noqa: E731
        assert "libllama" not in maps(daemon_pid) and "libggml" not in maps(daemon_pid)
        assert "libllama" in maps(worker_pid) and "libggml-cpu" in maps(worker_pid)
        assert Path(f"/proc/{worker_pid}/oom_score_adj").read_text().strip() == "1000"
    finally:
        run_recalld(["daemon", "stop"])


def test_recalld_judge_says_the_model_crashed_and_the_fix(fake, project):
    """The foreground `recalld judge` runs the model in a worker too: exit 1 with one line, not
    exit 132 (the command itself dying of SIGILL)."""
    model, mode_file = fake
    settings.save({"models": {"judge": str(model)}})
    memories.remember(db.connect(), "mix phx.server needs Postgres running first", scope.resolve(str(project)))
    mode_file.write_text("sigill")
    r = run_recalld(["judge", "why does mix phx.server not start", "--cwd", str(project)])
    assert r.returncode == 1, (r.returncode, r.stderr)
    err = r.stderr.decode()
    assert "model crashed (SIGILL)" in err and 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in err, err

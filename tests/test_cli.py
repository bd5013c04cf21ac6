"""The CLI as users and agents call it: one clear error line and a non-zero exit on bad input,
JSON that scripts can rely on, receipts readable from the database and the fallback file."""

import json

from tests.helpers import run_recalld


def ok(args, **kw):
    p = run_recalld(args, **kw)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def test_search_json_contract(home, project):
    ok(["remember", "Use ruff, not flake8, for linting the monorepo.", "--kind", "decision", "--cwd", str(project)])
    hits = json.loads(ok(["search", "which linter: ruff or flake8?", "--cwd", str(project), "--json"]))
    assert len(hits) == 1
    assert {"id", "text", "score", "scope", "kind"} <= set(hits[0])
    assert 0 < hits[0]["score"] <= 1


def test_errors_are_one_line_and_nonzero(home, project, tmp_path):
    cases = [
        ["remember", "", "--cwd", str(project)],
        ["remember", "x", "--supersedes", "m999", "--cwd", str(project)],
        ["history", "nope"],
        ["retract", "5", "--why", "gone"],
        ["import", str(tmp_path / "missing.jsonl")],
    ]
    for args in cases:
        p = run_recalld(args)
        assert p.returncode != 0, args
        err = p.stderr.decode().strip()
        assert err and "Traceback" not in err, (args, err)


def test_import_bad_line_writes_nothing(home, project, tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"text": "first good line"}\n{"text": "second", "scope": "galaxy"}\n')
    p = run_recalld(["import", str(f), "--cwd", str(project)])
    assert p.returncode != 0 and b"line 2" in p.stderr
    assert json.loads(ok(["search", "first good line", "--cwd", str(project), "--json"])) == []
    f.write_text('{"text": "first good line"}\n{"text": "second good line", "kind": "procedure"}\n')
    assert "imported 2" in ok(["import", str(f), "--cwd", str(project)])


def test_history_and_retract(home, project):
    a = json.loads(ok(["remember", "CI runs on Jenkins.", "--cwd", str(project), "--json"]))["id"]
    b = json.loads(ok(["remember", "CI runs on GitHub Actions.", "--supersedes", str(a), "--cwd", str(project), "--json"]))["id"]
    c = json.loads(ok(["remember", "CI caches wheels.", "--thread", "ci", "--cwd", str(project), "--json"]))
    d = json.loads(ok(["remember", "CI wheels expire weekly.", "--thread", "ci", "--cwd", str(project), "--json"]))
    assert d["changed"][0]["thread"] == "ci" and d["changed"][0]["follows"] == c["id"]
    out = ok(["history", f"m{a}", "--cwd", str(project)])
    assert f"m{a}" in out and f"superseded by m{b}" in out and "created" in out
    ok(["retract", str(b), "--why", "CI moved again", "--cwd", str(project)])
    chain = json.loads(ok(["history", str(b), "--cwd", str(project), "--json"]))
    assert chain[-1]["invalid_reason"] == "CI moved again"


def test_receipts_table_json_summary_and_filters(home, project):
    payload = json.dumps({"session_id": "s-1", "transcript_path": "/t", "cwd": str(project),
                          "hook_event_name": "UserPromptSubmit", "prompt": "hello there"}).encode()
    for _ in range(3):
        run_recalld(["hook", "prompt-submit"], payload)
    run_recalld(["hook", "pre-tool"], b"garbage")
    recs = json.loads(ok(["receipts", "--json"]))
    assert len(recs) == 4
    assert {r["outcome"] for r in recs} == {"nothing", "error"}
    assert all("hello" not in json.dumps(r) for r in recs)
    assert len(json.loads(ok(["receipts", "--json", "--session", "s-1"]))) == 3
    assert len(json.loads(ok(["receipts", "--json", "--hook", "pre-tool"]))) == 1
    assert len(json.loads(ok(["receipts", "--json", "--limit", "2"]))) == 2
    summary = {(s["hook"]): s for s in json.loads(ok(["receipts", "--summary", "--json"]))}
    assert summary["prompt-submit"]["runs"] == 3 and summary["prompt-submit"]["outcomes"] == {"nothing": 1.0}
    assert summary["prompt-submit"]["p50_ms"] is not None
    table = ok(["receipts"])
    assert "prompt-submit" in table and "bad_json" in table
    assert "p50 ms" in ok(["receipts", "--summary"])


def test_receipts_reads_fallback_when_db_is_broken(home, project):
    home.mkdir(parents=True, exist_ok=True)
    (home / "recalld.db").write_bytes(b"garbage" * 1000)
    run_recalld(["hook", "prompt-submit"], json.dumps({"prompt": "x", "cwd": str(project)}).encode())
    p = run_recalld(["receipts", "--json"])
    assert p.returncode == 0
    recs = json.loads(p.stdout)
    assert len(recs) == 1 and recs[0]["stored"] == "fallback" and recs[0]["outcome"] == "error"


def test_config_set_and_show(home):
    ok(["config", "set", "floor", "0.4"])
    assert json.loads(ok(["config", "show"]))["floor"] == 0.4
    p = run_recalld(["config", "set", "no.such.key", "1"])
    assert p.returncode != 0 and b"unknown setting" in p.stderr


def test_config_keys_lists_every_setting_with_its_default_and_meaning(home):
    from recalld.core import settings

    ok(["config", "set", "floor", "0.4"])  # the table shows defaults, not what is set
    rows = json.loads(ok(["config", "keys", "--json"]))
    by = {r["key"]: r for r in rows}
    assert by["floor"] == {"key": "floor", "type": "a number 0..1", "default": settings.DEFAULTS["floor"],
                           "meaning": by["floor"]["meaning"]}
    assert by["judge.threshold"]["default"] == settings.DEFAULTS["judge"]["threshold"]
    assert all(r["meaning"] for r in rows) and "daemon.serve_hooks" in by
    text = ok(["config", "keys"])
    assert "judge.threshold = 0.6  (a number 0..1)" in text


def test_receipts_says_when_a_filter_matches_nothing(home, project):
    assert ok(["receipts"]).strip() == "no receipts yet"
    run_recalld(["hook", "prompt-submit"], json.dumps({"prompt": "x", "cwd": str(project), "session_id": "s1"}).encode())
    assert ok(["receipts", "--session", "other"]).strip() == "no receipts match --session other"
    assert "prompt-submit" in ok(["receipts", "--session", "s1"])

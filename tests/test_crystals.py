"""Crystals: files, cache, matching, every act through the real hook with documented payload
shapes (Claude Code, Codex, Gemini CLI, git), replay of the real transcripts, lint and stats."""

import json
import os
import subprocess
import sys

import pytest

from recalld import crystals
from recalld.hook import run as hook
from recalld.cli import crystals as crystal_cmds
from tests.helpers import REPO, TRANSCRIPTS, payload, run_recalld

EXAMPLE = REPO / "contrib" / "crystals" / "destructive-git.md"


def crystal_text(on="bash", match="deploy", tell="one line", essence="⛔ the claim", stale=None, extra=""):
    head = f"crystal:\non: {on}\n"
    if match is not None:
        head += f"match: {match}\n"
    if tell is not None:
        head += f"tell: {tell}\n"
    if stale:
        head += f"stale_after: {stale}\n"
    return head + extra + f"\n# History\nnever delivered HISTORY-TEXT\n\n<!-- crystal:essence -->\n{essence}\n<!-- /crystal:essence -->\nRATIONALE-TEXT\n"


@pytest.fixture
def cdir(project):
    d = project / ".recalld" / "crystals"
    d.mkdir(parents=True)
    return d


def trusted(d):
    """Trust a project crystal folder as it is now, as `recalld crystals trust` does: these
    tests are about what trusted crystals do (tests/security/ covers untrusted ones)."""
    if d.name == "crystals" and d.parent.name == ".recalld":
        crystal_cmds.trust_folder(str(d.parent.parent))


def put(d, name, **kw):
    p = d / f"{name}.md"
    p.write_text(crystal_text(**kw), encoding="utf-8")
    trusted(d)
    return p


# --- the file format ------------------------------------------------------------------------


def test_the_example_crystal_parses_and_only_its_essence_is_delivered():
    c = crystals.parse_file(str(EXAMPLE))
    assert c.id == "destructive-git" and c.on == ("bash",) and c.stale_after == "2027-03-25"
    assert "git reset --hard" in c.match and c.tell.startswith("Destructive verb")
    assert c.essence.startswith("⛔ A DESTRUCTIVE VERB") and c.claims == 1
    assert "Why it exists" not in c.essence and "History" not in c.essence


@pytest.mark.parametrize("text,reason", [
    ("no block here\n<!-- crystal:essence -->x<!-- /crystal:essence -->", "no binding block"),
    ("crystal:\nmatch: x\n<!-- crystal:essence -->x<!-- /crystal:essence -->", "`on:` is missing"),
    ("crystal:\non: bsh\nmatch: x\n<!-- crystal:essence -->x<!-- /crystal:essence -->", "unknown act 'bsh'"),
    ("crystal:\non: bash\n<!-- crystal:essence -->x<!-- /crystal:essence -->", "`match:` is missing"),
    ("crystal:\non: bash\nmatch: x\nstale_after: next year\n<!-- crystal:essence -->x<!-- /crystal:essence -->",
     "not a date"),
    ("crystal:\non: bash\nmatch: x\n", "no essence"),
    ("crystal:\non: bash\nmatch: x\n<!-- crystal:essence -->\n \n<!-- /crystal:essence -->", "essence is empty"),
    ("crystal:\non: bash\nmatch: x\n<!-- crystal:essence -->a<!-- /crystal:essence -->"
     "<!-- crystal:essence -->b<!-- /crystal:essence -->", "more than one essence"),
    ("crystal:\non: bash\non: write\nmatch: x\n<!-- crystal:essence -->x<!-- /crystal:essence -->", "twice"),
    ("crystal:\non: bash\nmatch: x\ndeliver: email\n<!-- crystal:essence -->x<!-- /crystal:essence -->",
     "not supported"),
])
def test_files_that_do_not_parse_say_why(tmp_path, text, reason):
    p = tmp_path / "bad.md"
    p.write_text(text)
    with pytest.raises(crystals.ParseError, match=reason.replace("(", r"\(")):
        crystals.parse_file(str(p))


def test_binding_comments_boot_without_match_and_unknown_fields(tmp_path):
    p = tmp_path / "b.md"
    p.write_text("\n\ncrystal:   # the block\non: boot  # session start\nTell: House style in one line.\n"
                 "owner: ops\n\n<!-- crystal:essence -->\nWrite commit messages in the imperative.\n"
                 "<!-- /crystal:essence -->\n")
    c = crystals.parse_file(str(p))
    assert c.on == ("boot",) and c.match == () and c.tell == "House style in one line." and c.unknown == ("owner",)


def test_not_utf8_is_a_failure(tmp_path):
    p = tmp_path / "latin.md"
    p.write_bytes(crystal_text().encode() + b"\xff\xfe")
    with pytest.raises(crystals.ParseError, match="UTF-8"):
        crystals.parse_file(str(p))


# --- the cache ------------------------------------------------------------------------------


def test_cache_skips_parsing_and_refreshes_on_change(home, project, cdir, monkeypatch):
    a = put(cdir, "a", match="deploy")
    put(cdir, "b", match="migrate")
    first = crystals.load_for(str(project))
    assert first.cache == "refreshed" and [c.id for c in first.crystals] == ["a", "b"]
    calls = []
    real = crystals.read_file
    monkeypatch.setattr(crystals, "read_file", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    second = crystals.load_for(str(project))
    assert second.cache == "hit" and calls == [] and second.crystals[0].match == ("deploy",)
    # Same size, new content and mtime: re-parsed (and so untrusted until trusted again).
    a.write_text(crystal_text(match="dep1oy"))
    st = os.stat(a)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000))
    third = crystals.load_for(str(project), check_trust=False)
    assert third.cache == "refreshed" and calls == [str(a)] and third.get("a").match == ("dep1oy",)
    # A removed file leaves the index; a broken one is skipped and counted.
    (cdir / "b.md").unlink()
    (cdir / "broken.md").write_text("just notes")
    fourth = crystals.load_for(str(project), check_trust=False)
    assert [c.id for c in fourth.crystals] == ["a"] and [f.id for f in fourth.failures] == ["broken"]
    assert "no binding block" in fourth.failures[0].reason


def test_an_interrupted_first_parse_keeps_its_progress(home, project, cdir, monkeypatch):
    for i in range(6):
        put(cdir, f"c{i}", match=f"key{i}")
    real, calls = crystals.read_file, []

    def slow(path):
        calls.append(path)
        if len(calls) == 4:
            raise hook.Deadline()  # what SIGALRM raises in the hook
        return real(path)

    monkeypatch.setattr(crystals, "read_file", slow)
    with pytest.raises(hook.Deadline):
        crystals.load_for(str(project))
    calls.clear()
    monkeypatch.setattr(crystals, "read_file", lambda p: calls.append(p) or real(p))
    idx = crystals.load_for(str(project))
    assert len(idx.crystals) == 6 and len(calls) == 3  # the three parsed before the deadline are kept
    assert idx.trust == {str(cdir): "trusted"}  # and hashed: the folder is still the one trusted


def test_project_crystal_shadows_the_user_wide_one(home, project, cdir):
    put(cdir, "same", match="deploy", essence="project version")
    (home / "crystals").mkdir(parents=True)
    put(home / "crystals", "same", match="deploy", essence="user version")
    put(home / "crystals", "mine", match="deploy", essence="user-wide only")
    idx = crystals.load_for(str(project))
    assert [(c.id, c.origin) for c in idx.crystals] == [("same", "project"), ("mine", "user")]
    assert [c.origin for c in idx.shadowed] == ["user"]


# --- matching -------------------------------------------------------------------------------


def test_matching_is_plain_case_insensitive_substrings():
    mk = lambda keys, on=("bash",): crystals.Crystal(id="x", path="x.md", origin="project", on=on, match=keys)
    assert crystals.match([mk(("Git Reset --HARD",))], "bash", "git reset --hard HEAD~1")
    assert not crystals.match([mk(("a.b",))], "bash", "axb")  # no regex
    assert crystals.match([mk(("reset",))], "bash", "npm run preset")  # no word boundaries
    assert not crystals.match([mk(("deploy",))], "write", "deploy")  # not bound to write
    assert [(c.id, k) for c, k in crystals.match([mk(("deploy",), on=("boot",))], "boot", "")] == [("x", [])]
    hit = crystals.match([mk(("rm -rf", "git clean"))], "bash", "git clean -fd && rm -rf build")
    assert hit[0][1] == ["rm -rf", "git clean"]


# --- every act, through the real hook, with documented payload shapes ------------------------


def claude(project, event, **kw):
    base = {"session_id": "sess-claude", "transcript_path": "/home/u/.claude/projects/x/sess.jsonl",
            "cwd": str(project), "permission_mode": "default", "hook_event_name": event}
    base.update(kw)
    return base


def pre_tool(project, tool, tool_input, **kw):
    return claude(project, "PreToolUse", tool_name=tool, tool_input=tool_input, tool_use_id="toolu_01ABC", **kw)


@pytest.fixture
def acts(home, project, cdir):
    put(cdir, "reset", on="bash", match="git reset --hard", essence="⛔ RESET-ESSENCE")
    put(cdir, "pricing", on="write", match="per month, pricing", essence="⛔ PRICING-ESSENCE")
    put(cdir, "brief", on="delegate", match="migration", essence="⛔ BRIEF-ESSENCE")
    put(cdir, "ask", on="prompt", match="release", essence="⛔ PROMPT-ESSENCE")
    put(cdir, "style", on="boot", match=None, essence="⛔ BOOT-ESSENCE")
    put(cdir, "schema", on="commit", match="migrations/", essence="⛔ COMMIT-ESSENCE")
    put(cdir, "oom", on="tool-result", match="killed: 9", essence="⛔ RESULT-ESSENCE")
    return project


def delivered(out: str) -> str:
    """What reached the agent, whichever channel carried it: additionalContext, a held call's
    reason (Claude Code / Codex permissionDecisionReason, Gemini CLI reason), git's plain text."""
    if not out:
        return ""
    if not out.startswith("{"):
        return out
    o = json.loads(out)
    h = o.get("hookSpecificOutput") or {}
    return h.get("additionalContext") or h.get("permissionDecisionReason") or o.get("reason") or ""


CASES = [
    # (event, payload builder, act, essence expected)
    ("pre-tool", lambda p: pre_tool(p, "Bash", {"command": "git reset --hard origin/main", "description": "reset"}),
     "bash", "RESET-ESSENCE"),
    ("pre-tool", lambda p: pre_tool(p, "Write", {"file_path": str(p / "pricing.md"), "content": "Pro: $20 per month"}),
     "write", "PRICING-ESSENCE"),
    ("pre-tool", lambda p: pre_tool(p, "Edit", {"file_path": str(p / "README.md"), "old_string": "free",
                                               "new_string": "$5 per month"}), "write", "PRICING-ESSENCE"),
    ("pre-tool", lambda p: pre_tool(p, "MultiEdit", {"file_path": str(p / "site.html"), "edits": [
        {"old_string": "a", "new_string": "b"}, {"old_string": "c", "new_string": "new Pricing table"}]}),
     "write", "PRICING-ESSENCE"),
    ("pre-tool", lambda p: pre_tool(p, "Task", {"description": "Write the migration", "subagent_type": "general-purpose",
                                               "prompt": "Add a migration for the users table"}),
     "delegate", "BRIEF-ESSENCE"),
    ("pre-tool", lambda p: {"session_id": "019a-codex", "transcript_path": None, "cwd": str(p),
                            "hook_event_name": "PreToolUse", "model": "gpt-5-codex", "turn_id": "turn-3",
                            "tool_name": "shell", "tool_input": {"command": ["bash", "-lc", "git reset --hard HEAD"]},
                            "tool_use_id": "call_1"}, "bash", "RESET-ESSENCE"),
    ("pre-tool", lambda p: {"session_id": "gem-1", "transcript_path": "/t.json", "cwd": str(p),
                            "hook_event_name": "BeforeTool", "timestamp": "2026-11-01T10:00:00Z",
                            "tool_name": "run_shell_command", "tool_input": {"command": "git reset --hard"}},
     "bash", "RESET-ESSENCE"),
    ("pre-tool", lambda p: {"session_id": "gem-1", "transcript_path": "/t.json", "cwd": str(p),
                            "hook_event_name": "BeforeTool", "timestamp": "2026-11-01T10:00:00Z",
                            "tool_name": "write_file", "tool_input": {"file_path": "docs/pricing.md", "content": "x"}},
     "write", "PRICING-ESSENCE"),
    ("prompt-submit", lambda p: claude(p, "UserPromptSubmit", prompt="Cut the Release branch today"),
     "prompt", "PROMPT-ESSENCE"),
    ("prompt-submit", lambda p: {"session_id": "gem-2", "transcript_path": "/t.json", "cwd": str(p),
                                 "hook_event_name": "BeforeAgent", "timestamp": "2026-11-01T10:00:00Z",
                                 "prompt": "prepare the release notes"}, "prompt", "PROMPT-ESSENCE"),
    ("session-start", lambda p: claude(p, "SessionStart", source="startup", model="claude-sonnet-4"),
     "boot", "BOOT-ESSENCE"),
    ("post-tool", lambda p: claude(p, "PostToolUse", tool_name="Bash", tool_input={"command": "make test"},
                                   tool_use_id="toolu_02", duration_ms=9000,
                                   tool_response={"stdout": "", "stderr": "make: *** [test] Killed: 9",
                                                  "interrupted": False}), "tool-result", "RESULT-ESSENCE"),
]


@pytest.mark.parametrize("event,build,act,essence", CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_each_act_and_agent_fires_its_crystal_and_only_that(acts, conn, event, build, act, essence):
    out, r = hook.run([event], json.dumps(build(acts)).encode())
    ctx = delivered(out)
    assert r["act"] == act and r["outcome"] == "injected", r
    assert essence in ctx
    others = {"RESET", "PRICING", "BRIEF", "PROMPT", "BOOT", "COMMIT", "RESULT"} - {essence.split("-")[0]}
    assert not any(f"{o}-ESSENCE" in ctx for o in others)
    assert "HISTORY-TEXT" not in ctx and "RATIONALE-TEXT" not in ctx
    det = r["detail"]["crystals"]
    assert det["matched"] == 1 and det["failed"] == 0 and det["indexed"] == 7
    assert r["detail"]["packed"]["by_source"]["crystal"]["whole"] == 1


def test_non_matching_act_runs_and_says_nothing(acts, conn):
    out, r = hook.run(["pre-tool"], json.dumps(pre_tool(acts, "Bash", {"command": "ls -la"})).encode())
    assert out == "" and r["outcome"] == "nothing" and r["detail"]["crystals"]["matched"] == 0


def test_crystals_are_found_from_a_subdirectory_of_the_repository(acts, conn):
    sub = acts / "src" / "deep"
    sub.mkdir(parents=True)
    p = pre_tool(acts, "Bash", {"command": "git reset --hard"})
    p["cwd"] = str(sub)
    out, r = hook.run(["pre-tool"], json.dumps(p).encode())
    assert "RESET-ESSENCE" in delivered(out)


def _git(repo, *args, env=None):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env)


def test_git_commit_matches_the_staged_file_list_end_to_end(acts, home):
    from recalld.agents import git as git_agent
    from recalld.install.githook import git_hook_script

    _git(acts, "config", "user.email", "t@example.com")
    _git(acts, "config", "user.name", "T")
    (acts / "migrations").mkdir()
    (acts / "migrations" / "0004_users.sql").write_text("ALTER TABLE users ADD c int;\n")
    (acts / "notes.txt").write_text("unrelated\n")
    _git(acts, "add", "notes.txt")
    e = dict(os.environ, RECALLD_HOME=str(home), PYTHONPATH=str(REPO))
    # Staged list without a migration: nothing fires.
    p = subprocess.run([sys.executable, "-m", "recalld", "hook", "commit"], cwd=acts, capture_output=True, env=e)
    assert p.returncode == 0 and p.stdout == b""
    # Through a real `git commit` with the pre-commit hook `recalld install git-hook` writes: the
    # first commit with a migration is held once, before it exists, with the essence; the same
    # commit again goes through; the next commit with a migration is held again.
    hookfile = acts / ".git" / "hooks" / "pre-commit"
    hookfile.write_text(git_hook_script([sys.executable, "-m", "recalld"]))
    hookfile.chmod(0o755)
    _git(acts, "add", "migrations")
    head = _git(acts, "rev-parse", "-q", "--verify", "HEAD").stdout  # none yet: the first commit
    c = _git(acts, "commit", "-q", "-m", "add users column", env=e)
    out = c.stdout + c.stderr
    assert c.returncode != 0 and b"COMMIT-ESSENCE" in out and git_agent.GATE_MARK.encode() in out, out
    assert _git(acts, "rev-parse", "-q", "--verify", "HEAD").stdout == head  # no commit was made
    c = _git(acts, "commit", "-q", "-m", "add users column, named in the message", env=e)
    assert c.returncode == 0 and b"COMMIT-ESSENCE" not in c.stdout + c.stderr, c.stderr
    (acts / "migrations" / "0005_more.sql").write_text("ALTER TABLE users ADD d int;\n")
    _git(acts, "add", "migrations")
    c = _git(acts, "commit", "-q", "-m", "more", env=e)
    assert c.returncode != 0 and b"COMMIT-ESSENCE" in c.stdout + c.stderr
    from recalld.core import db

    cn = db.connect()
    rows = cn.execute("SELECT act, outcome, delivered_ids, json_extract(detail, '$.gated') FROM receipts "
                      "WHERE hook = 'commit' ORDER BY id").fetchall()
    assert [tuple(r) for r in rows] == [("commit", "nothing", "[]", None), ("commit", "injected", '["c:schema"]', '["schema"]'),
                                        ("commit", "nothing", "[]", None), ("commit", "injected", '["c:schema"]', '["schema"]')]
    # A commit has no agent session: it rotates per project, and a hold is remembered per HEAD.
    sessions = {r[0] for r in cn.execute("SELECT session FROM served WHERE item NOT LIKE 'gate:%'")}
    assert sessions == {f"git:{acts.resolve()}"}
    holds = [r[0] for r in cn.execute("SELECT session FROM served WHERE item = 'gate:c:schema' ORDER BY id")]
    assert len(holds) == 2 and holds[0] == f"git:{acts.resolve()}@{head.decode().strip()}" and holds[0] != holds[1]
    cn.close()


def test_a_context_crystal_never_holds_a_commit(home, project, cdir):
    from recalld.install.githook import git_hook_script

    put(cdir, "ctx", on="commit", match="schema.sql", essence="⛔ CONTEXT-ESSENCE", extra="deliver: context\n")
    _git(project, "config", "user.email", "t@example.com")
    _git(project, "config", "user.name", "T")
    (project / "schema.sql").write_text("create table t (a int);\n")
    _git(project, "add", "schema.sql")
    hookfile = project / ".git" / "hooks" / "pre-commit"
    hookfile.write_text(git_hook_script([sys.executable, "-m", "recalld"]))
    hookfile.chmod(0o755)
    c = _git(project, "commit", "-q", "-m", "schema", env=dict(os.environ, RECALLD_HOME=str(home), PYTHONPATH=str(REPO)))
    assert c.returncode == 0 and b"CONTEXT-ESSENCE" in c.stdout + c.stderr, c.stderr


def test_stale_crystal_is_withheld_and_counted(home, project, cdir, conn):
    put(cdir, "old", match="deploy", essence="⛔ OLD-ESSENCE", stale="2020-01-01")
    put(cdir, "new", match="deploy", essence="⛔ NEW-ESSENCE", stale="2999-01-01")
    out, r = hook.run(["pre-tool"], json.dumps(pre_tool(project, "Bash", {"command": "deploy"})).encode())
    assert "NEW-ESSENCE" in delivered(out) and "OLD-ESSENCE" not in delivered(out)
    assert r["detail"]["crystals"]["stale"] == 1 and r["detail"]["packed"]["stale"] == 1
    assert r["withheld"] == 1 and r["withheld_chars"] > 0


def test_unparseable_file_is_skipped_counted_and_explained(home, project, cdir, conn):
    put(cdir, "good", match="deploy", essence="⛔ GOOD")
    (cdir / "typo.md").write_text("crystal:\non: bsah\nmatch: deploy\n<!-- crystal:essence -->x<!-- /crystal:essence -->")
    trusted(cdir)
    out, r = hook.run(["pre-tool"], json.dumps(pre_tool(project, "Bash", {"command": "deploy"})).encode())
    assert "GOOD" in delivered(out)
    assert r["detail"]["crystals"]["failed"] == 1 and r["detail"]["crystals"]["failed_files"] == ["typo.md"]
    probs = crystal_cmds.lint(crystals.load_for(str(project)), {"item_cap_chars": 2000})
    assert any(p["code"] == "unparseable" and p["id"] == "typo" and "bsah" in p["message"] for p in probs)


def test_present_correctly_selected_and_cut_is_visible(home, project, cdir, conn):
    long = "⛔ FIRST CLAIM leads\n" + "evidence line\n" * 200 + "⛔ SECOND CLAIM in the tail\n"
    put(cdir, "long", match="deploy", essence=long)
    put(cdir, "short", match="deploy", essence="⛔ SHORT")
    out, r = hook.run(["pre-tool"], json.dumps(pre_tool(project, "Bash", {"command": "deploy"})).encode())
    ctx = delivered(out)
    assert "FIRST CLAIM" in ctx and "SECOND CLAIM" not in ctx
    acc = r["detail"]["packed"]
    item = {it[0]: it for it in acc["items"]}["c:long"]
    assert item[1] == "cut" and item[3] > 0 and item[4] == 1  # cut chars, marked claims in the tail
    assert r["cut"] == 1 and r["cut_chars"] == item[3] and acc["cut_claims"] == 1


def test_crystals_and_the_judge_queue_share_the_budget(home, project, cdir, conn):
    from recalld.core import scope
    from recalld import memories

    for i in range(5):  # context crystals: a gate would hold the call with the crystals alone
        put(cdir, f"c{i}", match="deploy", essence="⛔ crystal " + "x" * 1900, extra="deliver: context\n")
    m = memories.remember(conn, "The staging database is restored nightly at 02:00 UTC.", scope.resolve(str(project)),
                       check_similar=False).memory
    conn.execute("INSERT INTO queue (time, session, memory_id, score) VALUES ('2000-01-01T00:00:00+00:00', ?, ?, 0.9)",
                 ("sess-claude", m["id"]))
    out, r = hook.run(["pre-tool"], json.dumps(pre_tool(project, "Bash", {"command": "deploy"})).encode())
    ctx = delivered(out)
    assert "restored nightly" in ctx
    src = r["detail"]["packed"]["by_source"]
    assert src["queue"]["whole"] == 1 and src["crystal"]["matched"] == 5
    assert r["detail"]["packed"]["delivered_chars"] <= 4000


# --- the real transcripts -------------------------------------------------------------------

KEYS = ["npm run", "npx ", "types/", "usetodos", "'use client'", "mix phx", "general-purpose", "bd create",
        "ls -la", "todo", "tsc --noemit"]


def _raw_act_text(name: str, inp: dict) -> "tuple[str, str] | None":
    """The issue's definition of each act's text, read straight from the transcript's tool input."""
    if name == "Bash":
        return "bash", inp.get("command", "")
    if name in ("Write", "Edit", "MultiEdit"):
        parts = [inp.get("file_path", ""), inp.get("content", ""), inp.get("new_string", "")]
        parts += [e.get("new_string", "") for e in inp.get("edits") or []]
        return "write", "\n".join(p for p in parts if p)
    if name == "Task":
        return "delegate", "\n".join(inp.get(k, "") for k in ("description", "prompt", "subagent_type"))
    return None


def test_replaying_every_real_tool_call_fires_exactly_the_expected_crystals(home, project, cdir, conn, shared_transcripts):
    for i, k in enumerate(KEYS):
        # context: a gate crystal passes silently once held in the session (tests below)
        put(cdir, f"k{i:02d}", on="bash, write, delegate", match=k, essence=f"⛔ ESSENCE-{i:02d}", tell=f"tell {i}",
            extra="deliver: context\n")
    calls = 0
    for path in sorted(TRANSCRIPTS.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            content = (rec.get("message") or {}).get("content")
            if not isinstance(content, list):
                continue
            for b in content:
                if not (isinstance(b, dict) and b.get("type") == "tool_use"):
                    continue
                raw = _raw_act_text(b["name"], b["input"])
                if raw is None or len(raw[1]) > 20_000:
                    continue
                p = pre_tool(project, b["name"], b["input"], session_id=rec["sessionId"])
                out, r = hook.run(["pre-tool"], json.dumps(p).encode())
                want = {f"c:k{i:02d}" for i, k in enumerate(KEYS) if k in raw[1].lower()}
                got = {it[0] for it in (r["detail"].get("packed") or {}).get("items", [])}
                assert r["act"] == raw[0] and got == want, (b["name"], raw[1][:200])
                calls += 1
    assert calls >= 100


# --- commands -------------------------------------------------------------------------------


def test_crystals_test_shows_what_would_fire_and_records_nothing(acts, home):
    env = {"RECALLD_HOME": str(home)}
    hook.run(["pre-tool"], json.dumps(pre_tool(acts, "Bash", {"command": "git reset --hard"})).encode())
    from recalld.core import db

    cn = db.connect()
    before = (cn.execute("SELECT count(*) FROM receipts").fetchone()[0], cn.execute("SELECT count(*) FROM served").fetchone()[0])
    p = run_recalld(["crystals", "test", "--act", "bash", "GIT RESET --HARD origin/main", "--cwd", str(acts), "--json"], env=env)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert [x["id"] for x in res["placed"]] == ["reset"] and res["placed"][0]["outcome"] == "whole"
    assert "RESET-ESSENCE" in res["text"] and res["budget"] == 4000
    p = run_recalld(["crystals", "test", "--act", "write", "nothing here", "--cwd", str(acts)], env=env)
    assert p.returncode == 0 and b"0 crystal(s) match" in p.stdout
    after = (cn.execute("SELECT count(*) FROM receipts").fetchone()[0], cn.execute("SELECT count(*) FROM served").fetchone()[0])
    assert after == before
    cn.close()


def test_list_and_show(acts, home):
    env = {"RECALLD_HOME": str(home)}
    p = run_recalld(["crystals", "list", "--cwd", str(acts), "--json"], env=env)
    assert sorted(c["id"] for c in json.loads(p.stdout)["crystals"]) == sorted(
        ["reset", "pricing", "brief", "ask", "style", "schema", "oom"])
    p = run_recalld(["crystals", "show", "reset", "--cwd", str(acts)], env=env)
    assert p.returncode == 0 and b"RESET-ESSENCE" in p.stdout and b"HISTORY-TEXT" not in p.stdout
    p = run_recalld(["crystals", "show", "nope", "--cwd", str(acts)], env=env)
    assert p.returncode != 0 and p.stderr.decode().count("\n") == 1 and b"no crystal 'nope'" in p.stderr


def test_lint_finds_each_problem(home, project, cdir):
    put(cdir, "ok", match="kubectl apply", tell="t")
    put(cdir, "short", match="pt, terraform", tell="t")
    put(cdir, "two", match="helm upgrade", tell="t", essence="⛔ one\n⛔ two")
    put(cdir, "notell", match="psql", tell=None)
    put(cdir, "old", match="ansible", tell="t", stale="2020-01-01")
    put(cdir, "big", match="docker push", tell="t", essence="⛔ head\n" + "y" * 2100 + "\n⛔ lost")
    put(cdir, "dup", match="KUBECTL APPLY", tell="t")
    put(cdir, "odd", match="vault", tell="t", extra="owner: ops\n")
    (cdir / "broken.md").write_text("notes")
    trusted(cdir)
    (home / "crystals").mkdir(parents=True)
    put(home / "crystals", "ok", match="x-user", tell="t")
    probs = crystal_cmds.lint(crystals.load_for(str(project)), {"item_cap_chars": 2000})
    got = {(p["code"], p["id"]) for p in probs}
    assert got == {("unparseable", "broken"), ("short_key", "short"), ("many_claims", "two"),
                   ("no_tell", "notell"), ("stale", "old"), ("over_cap", "big"), ("many_claims", "big"),
                   ("duplicate_key", "dup,ok"),
                   ("unknown_field", "odd"), ("shadowed", "ok")}
    big = next(p for p in probs if p["code"] == "over_cap")
    assert "1 marked claim" in big["message"]
    p = run_recalld(["crystals", "lint", "--cwd", str(project)], env={"RECALLD_HOME": str(home)})
    assert p.returncode == 1 and b"short_key" in p.stdout


def test_lint_flags_a_key_that_matches_most_recent_acts(home, project, cdir, conn):
    put(cdir, "loose", match="src, kubectl drain", tell="t")
    put(cdir, "tight", match="kubectl drain", tell="t")
    for i in range(24):
        cmd = "kubectl drain node-1" if i == 0 else f"cat src/file{i}.py"
        hook.run(["pre-tool"], json.dumps(pre_tool(project, "Bash", {"command": cmd})).encode())
    recs = crystal_cmds._hook_receipts(str(project.resolve()))
    probs = crystal_cmds.lint(crystals.load_for(str(project)), {"item_cap_chars": 2000}, recs)
    common = [p for p in probs if p["code"] == "common_key"]
    assert [(p["id"], "'src'" in p["message"]) for p in common] == [("loose", True)]
    assert "23 of the last 24" in common[0]["message"]
    # Too few acts: no verdict.
    assert not [p for p in crystal_cmds.lint(crystals.load_for(str(project)), {"item_cap_chars": 2000}, recs[:5])
                if p["code"] == "common_key"]


def test_stats_from_receipts(home, project, cdir, conn):
    for i in range(4):
        put(cdir, f"w{i}", match="deploy", essence="⛔ " + "z" * 1800, tell=f"tell {i}", extra="deliver: context\n")
    put(cdir, "never", match="nothing-matches-this", essence="⛔ never")
    for _ in range(3):
        hook.run(["pre-tool"], json.dumps(pre_tool(project, "Bash", {"command": "deploy"})).encode())
    hook.run(["pre-tool"], json.dumps(pre_tool(project, "Bash", {"command": "ls"})).encode())
    s = crystal_cmds.stats(crystals.load_for(str(project)), crystal_cmds._hook_receipts(str(project.resolve())))
    assert s["acts"] == 4 and s["matches_per_act"]["max"] == 4 and s["matches_per_act"]["median"] == 4
    assert s["budget"] == 4000 and s["share_over_budget"] == 0.75
    assert s["wanted_chars"]["max"] > 4000
    assert s["never_matched"] == ["never"] and s["never_delivered"] == ["never"]
    o = s["outcomes"]
    assert o["whole"] + o["cut"] + o["tell"] + o["withheld"] == 12
    p = run_recalld(["crystals", "stats", "--cwd", str(project)], env={"RECALLD_HOME": str(home)})
    assert p.returncode == 0 and b"acts over budget: 75%" in p.stdout

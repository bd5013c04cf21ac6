"""The proposer pass: candidates mined from what a turn said (decisions, corrections, errors and
their fixes), each with its transcript line; the structural no-write guarantees; the REAL
embedded model on the REAL transcripts; and planted secrets that must reach neither the
database, the logs nor the receipts."""

import ast
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from recalld.core import proposal_db, receipts, scope
from recalld.hook import run as hook
from recalld.capture import mine, proposer
from recalld.bench.planted import PLANTED, leaks, plant, secret_text  # one copy, shared with the benchmark
from recalld import memories
from recalld.daemon import transcripts
from tests.helpers import REPO, TRANSCRIPTS, run_recalld

PKG = REPO / "recalld"
# Modules that write memories (or reach code that does); the proposer must reach none of them.
WRITERS = {"recalld.memories", "recalld.capture.decide", "recalld.cli.main", "recalld.mcp.tools"}


def _imports(module: str) -> set:
    """Every recalld module `module` imports, anywhere in its body (functions included)."""
    path = PKG.joinpath(*module.split(".")[1:]).with_suffix(".py")
    if not path.exists():
        path = PKG.joinpath(*module.split(".")[1:], "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("recalld"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("recalld"):
            out.add(node.module)
            for a in node.names:  # `from recalld import memories` imports the module recalld.memories
                sub = f"{node.module}.{a.name}"
                if PKG.joinpath(*sub.split(".")[1:]).with_suffix(".py").exists():
                    out.add(sub)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            out.add("<dynamic import>")
    return out


def import_closure(root: str) -> dict:
    """module -> the module that first imported it, over the whole reachable graph."""
    seen, todo = {root: None}, [root]
    while todo:
        mod = todo.pop()
        if mod == "<dynamic import>" or mod == "recalld":
            continue
        for dep in _imports(mod):
            if dep not in seen:
                seen[dep] = mod
                todo.append(dep)
    return seen


def test_the_proposer_has_no_import_path_to_memory_writes():
    closure = import_closure("recalld.capture.proposer")
    assert "recalld.core.proposal_db" in closure and "recalld.capture.policies" in closure and "recalld.model.runtime" in closure
    reached = WRITERS & set(closure)
    assert not reached, {m: closure[m] for m in reached}
    assert "<dynamic import>" not in closure  # nothing the walk cannot see


def test_the_walk_would_notice_a_writer():
    # The same walk from the approvals module does reach the store: the check can fail.
    assert "recalld.memories" in import_closure("recalld.capture.decide")


def test_the_proposer_handle_cannot_write_memories(home, project):
    sc = scope.resolve(str(project))
    c = proposal_db.connect()
    with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
        memories.remember(c, "The proposer tried to write this memory directly.", sc, check_similar=False)
    for sql in ("INSERT INTO memories (text, kind, scope, project, agent, created_at, valid_from) "
                "VALUES ('x', 'fact', 'project', 'p', 'a', 't', 't')",
                "UPDATE memories SET invalid_at = 't'", "DELETE FROM memories",
                "INSERT INTO memory_changes (time, memory_id, action) VALUES ('t', 1, 'created')",
                "INSERT INTO memories_fts(rowid, text, tell, aux) VALUES (1, 'x', '', '')",
                "DELETE FROM memories_fts_data", "DROP TRIGGER memories_no_delete", "PRAGMA writable_schema = 1"):
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            c.execute(sql)
    # It can still read memories and write drafts and receipts.
    assert c.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    r = receipts.new("proposer", "test")
    assert proposal_db.store_pass(c, r, session="s", source="x", from_line=1, to_line=2, boundary_id=None,
                             window_chars=0, drafts=[], project=sc.project, agent="main", model=None) == []
    c.close()
    plain = __import__("recalld.core.db", fromlist=["connect"]).connect()
    assert plain.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    assert plain.execute("SELECT count(*) FROM receipts WHERE source = 'proposer'").fetchone()[0] == 1
    plain.close()


# --- transcripts written for the cases -------------------------------------------------------


class Session:
    """A Claude Code transcript, one record per line, as the agent writes it."""

    def __init__(self, path: Path, cwd: str, session: str = "s-test"):
        self.path, self.cwd, self.session, self.n, self.lines = path, cwd, session, 0, []

    def _add(self, rec: dict) -> int:
        self.n += 1
        rec.update(sessionId=self.session, cwd=self.cwd, uuid=f"u{self.n:04d}-0000", timestamp="2026-11-30T10:00:00Z")
        self.lines.append(json.dumps(rec))
        self.path.write_text("\n".join(self.lines) + "\n")
        return self.n

    def user(self, text: str) -> int:
        return self._add({"type": "user", "message": {"role": "user", "content": text}})

    def agent(self, text: str, end: bool = False) -> int:
        return self._add({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                                                          "stop_reason": "end_turn" if end else None}})

    def run(self, command: str, output: str, error: bool = False) -> int:
        tid = f"t{self.n}"
        self._add({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": command}}]}})
        return self._add({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": output, "is_error": error}]}})


# The model ranks only when proposals.model_weight > 0 (off by default): the tests of that path ask.
RANKS = {"proposals": {"model_weight": 1.0}}


def _pass(path, **kw) -> "proposer.PassResult":
    kw.setdefault("runtime", False)
    return proposer.run_pass(str(path), origin="cli", **kw)


def test_a_decision_with_its_reason_is_drafted_where_it_was_said(home, project, tmp_path):
    # The case: the agent says one short, clear decision and its cause.
    t = Session(tmp_path / "s1.jsonl", str(project))
    t.user("the nightly export job keeps failing, can you look?")
    t.agent("Let me look at the export logs first.")
    said = t.agent("The nightly export fails because the bucket has object lock; we decided to write each export "
                   "under a dated key instead of overwriting latest.csv.", end=True)
    res = _pass(t.path)
    assert res.outcome == "stored", res.as_dict()
    d = next(d for d in res.kept if "dated key" in d.text)
    assert d.kind == "decision" and d.role == "agent" and d.line == said
    assert "object lock" in d.text  # the reason stays with the decision
    assert f"line {said}" in d.why and "uuid u" in d.why
    assert not any("Let me look" in x.text for x in res.kept)
    c = proposal_db.connect()
    row = c.execute("SELECT * FROM proposals WHERE text = ?", (d.text,)).fetchone()
    assert (row["window_from"], row["window_to"], row["source"]) == (said, said, str(t.path.resolve()))
    # The block the agent sees at its next step says where each draft came from.
    shown = proposal_db.pending_for_session(c, "s-test")
    from recalld.hook import proposal_source

    body = proposal_source._item("pb:1", shown).body
    assert f"(said in s1.jsonl line {said})" in body
    c.close()


def test_a_user_correction_is_drafted_as_a_preference(home, project, tmp_path):
    t = Session(tmp_path / "s2.jsonl", str(project))
    said = t.user("No, we don't use yarn in this repo: always use pnpm, the lockfile is pnpm-lock.yaml.")
    t.agent("Understood.", end=True)
    res = _pass(t.path)
    d = next(d for d in res.kept if "pnpm" in d.text)
    # Repeating the user is the point here: not rejected as an echo of the request.
    assert (d.kind, d.role, d.line) == ("preference", "user", said)


def test_a_decision_the_user_states_is_a_decision_and_keeps_its_note_marker(home, project, tmp_path):
    # Two bugs of one sentence (the e2e's): the user's words also carry the preference cue
    # ("instead"), which outweighed the decision, and the filler cut took "Note" off the front.
    t = Session(tmp_path / "s2d.jsonl", str(project))
    said = t.user("Note for later: we decided to write each nightly export under a dated key instead of "
                  "overwriting latest.csv, because the reports bucket has object lock enabled.")
    t.agent("Understood.", end=True)
    res = _pass(t.path)
    d = next(d for d in res.kept if "dated key" in d.text)
    assert (d.kind, d.role, d.line) == ("decision", "user", said)
    assert d.text.startswith("Note for later: we decided")
    # What the user prefers is still a preference, and plain filler still goes.
    assert mine.score("No, we don't use yarn here: always use pnpm.", "user")[1] == "preference"
    assert mine.tighten("Note that the staging database is reset every night at 02:00 UTC.") \
        == "The staging database is reset every night at 02:00 UTC."


def test_an_answer_to_what_to_do_is_a_decision_and_to_anything_else_a_preference():
    assert mine.score("Which tools should we set up?=Credo + Dialyxir + mix_audit", "answer")[1] == "decision"
    assert mine.score("How should we name the branches?=feature/<issue>-<slug>", "answer")[1] == "decision"
    assert mine.score("Which rig do these beads belong to?=No rig", "answer")[1] == "preference"
    assert mine.score("What tone do you like in commit messages?=Short and imperative", "answer")[1] == "preference"


def test_cues_for_memory_markers_and_a_rule_with_its_reason_and_size():
    marked = mine.score("Keep in mind the staging database is reset every night by a cron job.", "agent")
    assert "remember" in marked[2] and marked[0] >= mine.FLOOR
    bare = mine.score("Dialyzer PLT building is slow on first run", "agent")[0]
    full = mine.score("Dialyzer PLT building is slow on first run (2+ minutes) — just document, don't optimize",
                      "agent")
    assert {"constraint", "reason", "quantity"} <= set(full[2]) and full[0] >= bare + 1.6


def test_a_candidate_between_the_floor_and_the_gate_is_ranked_but_not_drafted(home, project, tmp_path):
    # One cue and one name clears the miner's floor; the pass drafts only what it is surest of
    # (the gate), so this stays a ranked candidate, left out as low_confidence, and a statement
    # saying why is drafted.
    t = Session(tmp_path / "s2f.jsonl", str(project))
    t.user("what does the project depend on?")
    said = t.agent("The project already has `igniter` as a dependency.", end=True)
    res = _pass(t.path)
    assert [sp.text for sp in res.ranked] == ["The project already has `igniter` as a dependency."]
    assert res.kept == [] and [r for _, r in res.rejected] == ["low_confidence"]
    assert proposer.GATE > mine.FLOOR
    t.user("and why igniter?")
    said = t.agent("The project already has `igniter` as a dependency because the installers need it.", end=True)
    res = _pass(t.path)
    d = next(d for d in res.kept if "igniter" in d.text)
    assert d.line == said and d.confidence >= 0.5


RULES = [
    "We decided to keep the export job on Redis because SQS costs more than the whole cluster.",
    "Never run `ruff --fix` in CI because it rewrites files the reviewers already approved.",
    "The release branch must be cut from `main` only after the nightly `e2e` job is green.",
    "Signing keys live in `ops/keys/`, never in the repository root or in `.env` files.",
    "We decided to pin `node` 20 in CI because the 18 image lacks the `fetch` global we use.",
    "Docs are built with `mkdocs build --strict` so that a broken link fails the pipeline.",
    "Version numbers are set by `hatch version`, not by editing `pyproject.toml` by hand.",
    "The PyPI upload token expires every 90 days; rotate it before the quarterly release.",
    "Do not tag a release on Fridays, because the on-call rota has nobody on Saturdays.",
    "Benchmarks run on the dedicated `bench-1` runner because shared runners vary by 30%.",
]


def test_a_session_drafts_at_the_budgets_rate_best_first_and_says_what_it_withheld(home, project, tmp_path):
    # Five substantive turns, two rules each: n * 12 / 20 drafts after n turns, rounded down,
    # and one at least, so 1, 1, 1, 2, 3 in all; each pass keeps its best, and the receipt
    # counts what it withheld.
    t = Session(tmp_path / "budget.jsonl", str(project))
    allowed, stored = [1, 1, 1, 2, 3], []
    for n in range(5):
        t.user(f"next part of the release checklist, part {n}")
        t.agent("I read the workflow files. I compared them with the notes. I checked the runners. "
                "I looked at the tags.")
        t.agent(f"{RULES[2 * n]}\n{RULES[2 * n + 1]}", end=True)
        res = _pass(t.path, complete_turns=True)
        assert res.substantive == 1, res.as_dict()
        stored += res.stored_ids
        assert len(stored) == allowed[n], (n, res.rejections)
        if res.rejections.get("over_budget"):
            assert all(d.confidence >= w.confidence for d in res.kept for w, r in res.rejected if r == "over_budget")
    c = proposal_db.connect()
    assert proposal_db.session_use(c, "s-test") == (5, 3)  # read back from the passes: a restart keeps it
    recs = receipts.read(c, source="proposer")
    assert sum(r["detail"]["rejections"].get("over_budget", 0) for r in recs) == 10 - 3
    assert all(r["detail"]["substantive"] == 1 for r in recs)
    c.close()


def test_the_budget_never_exceeds_its_rate_after_the_sessions_first_draft(monkeypatch):
    pc = {"per_20_turns": 12}
    for n in range(0, 61):
        monkeypatch.setattr(proposal_db, "session_use", lambda conn, session, n=n: (n, 0))
        room = proposer._room(None, proposer.PassResult(source="t", session="s"), pc)
        assert room == max(1, 12 * n // 20), n
        assert room <= 1 or room * 20 <= 12 * n, n  # at most 12 per 20, once past the first draft
    assert proposer._room(None, proposer.PassResult(source="t", session="s"), {"per_20_turns": 0}) is None


def test_two_passes_over_one_session_at_once_cannot_both_spend_its_room(home, project, tmp_path, monkeypatch):
    import threading

    # Both passes have read and ranked their turn before either stores: the budget must be
    # read where it is spent, or each sees the session's one draft still free.
    ready = threading.Barrier(2, timeout=10)
    rank = proposer._rank

    def both_ranked(*a, **kw):
        out = rank(*a, **kw)
        ready.wait()
        return out

    monkeypatch.setattr(proposer, "_rank", both_ranked)
    results = []
    for n in range(2):
        t = Session(tmp_path / f"race{n}.jsonl", str(project), session="s-race")
        t.user(f"the release checklist, part {n}")
        t.agent("I read the workflow files. I compared them with the notes. I checked the runners. "
                "I looked at the tags.")
        t.agent(f"{RULES[2 * n]}\n{RULES[2 * n + 1]}", end=True)
        results.append(t.path)
    got = []
    threads = [threading.Thread(target=lambda p=p: got.append(_pass(p, complete_turns=True))) for p in results]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)
    assert len(got) == 2 and all(r.outcome in ("stored", "nothing") for r in got), [r.as_dict() for r in got]
    # Two substantive turns: floor(2 * 12 / 20) = 1 draft for the session, not one each.
    assert sum(len(r.stored_ids) for r in got) == 1
    assert sorted(r.rejections.get("over_budget", 0) for r in got) == [1, 2]
    c = proposal_db.connect()
    assert proposal_db.session_use(c, "s-race") == (2, 1)
    recs = receipts.read(c, source="proposer")
    assert sorted(r["detail"]["rejections"].get("over_budget", 0) for r in recs) == [1, 2]
    c.close()


def test_what_the_agent_only_thought_is_never_drafted(home, project, tmp_path):
    t = Session(tmp_path / "thought.jsonl", str(project))
    t.user("why does the export job keep failing?")
    # The thought is the stronger statement by its cues (a decision, its reason, names).
    thought = ("We decided to pin `node` 20 in `ci.yml` because the 18 image lacks the `fetch` global, "
               "and we must never use the `latest` tag.")
    t._add({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "thinking", "thinking": thought}]}})
    t.agent("The export job writes under a dated key in `exports/`, so it never overwrites the last good file.",
            end=True)
    res = _pass(t.path)
    assert [d.role for d in res.drafts] == ["agent"]
    assert [d.role for d in res.kept] == ["agent"]


def test_without_a_budget_a_turn_drafts_what_its_slots_allow(home, project, tmp_path):
    t = Session(tmp_path / "nobudget.jsonl", str(project))
    t.user("the release checklist")
    t.agent("\n".join(RULES[:4]), end=True)
    assert len(_pass(t.path).stored_ids) == 1  # a short turn: the session's one draft
    t2 = Session(tmp_path / "nobudget2.jsonl", str(project), session="s-other")
    t2.user("the release checklist")
    t2.agent("\n".join(RULES[4:8]), end=True)
    assert len(_pass(t2.path, cfg={"proposals": {"per_20_turns": 0}}).stored_ids) == 3  # max_drafts


def test_by_default_no_model_is_loaded_and_the_receipt_says_the_cues_ranked(home, project, tmp_path, monkeypatch):
    from recalld.model import runtime as llm

    def refuse(*a, **k):
        raise AssertionError("the default pass must not load a model")

    monkeypatch.setattr(llm, "require_runtime", refuse)
    t = Session(tmp_path / "nomodel.jsonl", str(project))
    t.user("why is the build red?")
    t.agent(RULES[4], end=True)
    res = proposer.run_pass(str(t.path), origin="cli")
    assert res.outcome == "stored" and res.judged == 0 and res.model is None
    assert res.model_error == "off: proposals.model_weight is 0 (cue ranking only)"


def test_a_dense_long_turn_gets_slots_for_what_it_says(home, project, tmp_path):
    # A planning turn of ~8,000 characters with ten distinct rules: 3 slots per 5,000 characters
    # kept 6 of them; the slots now follow every 2,500 characters (at most 12).
    t = Session(tmp_path / "s2l.jsonl", str(project))
    t.user("plan the release work")
    rules = ["Never run `ruff --fix` in CI because it rewrites files the reviewers already approved.",
             "The release branch must be cut from `main` only after the nightly `e2e` job is green.",
             "We decided to publish wheels for Python 3.10 to 3.12 only, since 3.9 lacks `match` statements.",
             "Signing keys live in `ops/keys/`, never in the repository root or in `.env` files.",
             "The changelog requires one entry per merged pull request, because the release notes are built from it.",
             "Docs are built with `mkdocs build --strict` so that a broken link fails the pipeline.",
             "Version numbers are set by `hatch version`, not by editing `pyproject.toml` by hand.",
             "The PyPI upload token expires every 90 days; rotate it before the quarterly release.",
             "Do not tag a release on Fridays: the on-call rota has nobody on Saturdays.",
             "Benchmarks run on the dedicated `bench-1` runner because shared runners vary by 30%."]
    for i in range(75):
        t.agent(f"Part {i} of the notes reads the module layout and the old plan again, line by line and slowly.")
    t.agent("\n".join(f"- {r}" for r in rules), end=True)
    res = _pass(t.path, cfg={"proposals": {"per_20_turns": 0}})  # the slots, without the session's budget
    assert res.window_chars > 7500
    kept = [d for d in res.kept if any(d.text == r for r in rules)]
    assert len(kept) == 10, [(d.text[:40], r) for d, r in res.rejected]


def test_an_error_then_what_fixed_it_is_one_draft(home, project, tmp_path):
    t = Session(tmp_path / "s3.jsonl", str(project))
    t.user("run the tests")
    err = t.run("pytest -q tests", "ImportError while importing test module\nE   ModuleNotFoundError: No module "
                "named 'yaml'\nExit code 2", error=True)
    t.agent("The tests import yaml but nothing installs it. Let me add pyyaml to the test extras in pyproject.toml:")
    t.run("pip install -e '.[test]'", "Successfully installed pyyaml-6.0.2")
    ok = t.run("pytest -q tests", "12 passed in 0.41s")
    t.agent("All 12 tests pass now.", end=True)
    res = _pass(t.path)
    d = next(d for d in res.kept if d.role == "error")
    assert d.text.startswith("`pytest -q tests`: ") and "No module named 'yaml'" in d.text and " → " in d.text
    assert (d.line, d.line_to) == (err, ok)
    assert "an error and what fixed it" in d.why


def test_the_command_that_brought_the_app_up_is_one_draft(home, project, tmp_path):
    t = Session(tmp_path / "s3r.jsonl", str(project))
    t.user("start the app so I can look at it")
    t.run("ls web", "package.json src")
    t.agent("The app is running in the web folder, I think.")  # after a look around: not how it is run
    call = t.run("cd web && pnpm dev --port 3001", "ready - started server on 0.0.0.0:3001")
    said = t.agent("Great! The development server is running on localhost:3001.", end=True)
    res = _pass(t.path)
    runs = [d for d in res.kept if d.kind == "procedure"]
    assert [d.text for d in runs] == ["`pnpm dev --port 3001` → The development server is running on localhost:3001."]
    assert (runs[0].line, runs[0].line_to) == (call - 1, said)


def test_progress_and_praise_are_not_drafted(home, project, tmp_path):
    t = Session(tmp_path / "s4.jsonl", str(project))
    t.user("make the page nicer")
    t.agent("I'll update the styles now. Let me check the remaining components first.")
    t.agent("Perfect! The page now provides a modern, clean and seamless experience for users.")
    t.agent("I've successfully updated all the components.", end=True)
    res = _pass(t.path)
    assert res.outcome == "nothing" and not res.drafts and res.statements >= 4


def test_a_pass_reads_its_whole_turn_however_long(home, project, tmp_path):
    # The old window kept 2,000 characters; a decision at the end of a long turn was never read.
    t = Session(tmp_path / "s5.jsonl", str(project))
    t.user("refactor the parser")
    for i in range(60):
        t.agent(f"Step {i} of the refactor touched another part of the parser module and its callers as planned.")
    said = t.agent("We decided to keep the old tokenizer because the new one breaks escaped quotes in "
                   "`config.toml`.", end=True)
    res = _pass(t.path)
    assert res.window_chars > 5000 and res.chunks >= 2 and res.statements >= 61
    assert any(d.line == said and d.kind == "decision" for d in res.kept), res.as_dict()
    assert res.to_line == said


class BrokenModel:
    """A runtime whose judgement fails: the pass must fall back to the cues, not fail."""

    name, calls = "broken-test-model", 0

    def logliks(self, context, continuations, timeout_s=None):
        self.calls += 1
        raise RuntimeError("model exploded halfway")


def test_no_model_output_can_fail_a_pass(home, project, tmp_path):
    t = Session(tmp_path / "s6.jsonl", str(project))
    t.user("why is the build red?")
    t.agent("The build is red because the CI image pins node 18; we decided to move CI to node 20 instead of "
            "pinning the old image.", end=True)
    model = BrokenModel()
    res = _pass(t.path, runtime=model, cfg=RANKS)
    assert res.outcome == "stored" and res.error is None and model.calls == 1
    assert res.model_error.startswith("RuntimeError") and res.judged == 0
    rec = receipts.read(proposal_db.connect(), source="proposer")[0]
    assert rec["outcome"] == "stored" and rec["detail"]["model_error"] == res.model_error


def test_near_duplicates_of_memories_and_pending_drafts_are_dropped(home, project, tmp_path):
    sc = scope.resolve(str(project))
    conn = __import__("recalld.core.db", fromlist=["connect"]).connect()
    memories.remember(conn, "The dev server listens on port 4100 because 3000 is taken by the docs site.", sc,
                   check_similar=False)
    conn.close()
    t = Session(tmp_path / "s7.jsonl", str(project))
    t.user("start the app")
    t.agent("The dev server listens on port 4100 because port 3000 is taken by the docs site.")
    t.agent("We decided to run migrations at startup because the deploy has no separate migration step.", end=True)
    res = _pass(t.path)
    assert res.rejections.get("duplicate_memory") == 1
    assert [d.text for d in res.kept] == ["We decided to run migrations at startup because the deploy has no "
                                          "separate migration step."]
    t2 = Session(tmp_path / "s8.jsonl", str(project), session="s-other")
    t2.user("deploy it")
    t2.agent("We decided to run migrations at startup because the deploy has no separate migration step!", end=True)
    assert _pass(t2.path).rejections == {"duplicate_proposal": 1}


def test_a_claim_said_again_in_a_later_pass_keeps_both_provenances_and_the_better_wording(home, project, tmp_path):
    t = Session(tmp_path / "s9.jsonl", str(project))
    t.user("why does the deploy fail?")
    first = t.agent("It runs `alembic upgrade` at startup because the deploy has no separate migration step.", end=True)
    res1 = _pass(t.path)
    (pid,) = res1.stored_ids
    t.user("and the second deploy?")
    again = t.agent("We decided to run `alembic upgrade` at startup because the deploy of `api/` has no separate "
                    "migration step.", end=True)
    res2 = _pass(t.path)
    assert res2.stored_ids == [] and res2.rejections == {"duplicate_proposal": 1}
    c = proposal_db.connect()
    (seen,) = proposal_db.sightings(c, pid)
    assert (seen["window_from"], seen["uuid"], seen["reworded"]) == (again, f"u{again:04d}-0000", 1)
    assert seen["pass_id"] > c.execute("SELECT pass_id FROM proposals WHERE id = ?", (pid,)).fetchone()[0]
    # The draft row keeps its own provenance and words; the better wording (a name, a decision
    # said as one) is an edit by the proposer, which is what approval would write.
    row = c.execute("SELECT window_from, text FROM proposals WHERE id = ?", (pid,)).fetchone()
    assert row["window_from"] == first and row["text"].startswith("It runs `alembic upgrade`")
    (ev,) = c.execute("SELECT * FROM proposal_events WHERE proposal_id = ?", (pid,)).fetchall()
    assert (ev["actor"], ev["to_state"], ev["kind"]) == ("proposer", "edited", "decision")
    assert ev["text"].startswith("We decided") and f"line {again}" in ev["reason"]
    # Append-only, and the proposer's handle still cannot touch memories.
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        c.execute("DELETE FROM proposal_sightings")
    c.close()
    # Said a third time in worse words: one more sighting, no second rewording.
    t.user("once more?")
    t.agent("It runs `alembic upgrade` at startup because the deploy has no separate migration step!", end=True)
    assert _pass(t.path).rejections == {"duplicate_proposal": 1}
    c = proposal_db.connect()
    assert [s["reworded"] for s in proposal_db.sightings(c, pid)] == [1, 0]
    assert c.execute("SELECT count(*) FROM proposal_events WHERE proposal_id = ?", (pid,)).fetchone()[0] == 1
    c.close()


def test_a_person_edit_is_never_reworded_by_a_later_pass(home, project, tmp_path):
    from recalld.capture import decide

    t = Session(tmp_path / "s10.jsonl", str(project))
    t.user("why does the deploy fail?")
    t.agent("It runs `alembic upgrade` at startup because the deploy has no separate migration step.", end=True)
    (pid,) = _pass(t.path).stored_ids
    plain = __import__("recalld.core.db", fromlist=["connect"]).connect()
    decide.edit(plain, pid, text="`alembic upgrade` runs at container start: no deploy step migrates.", actor="cli")
    plain.close()
    t.user("and again?")
    t.agent("We decided to run `alembic upgrade` at startup because the deploy of `api/` has no separate "
            "migration step.", end=True)
    assert _pass(t.path).rejections == {"duplicate_proposal": 1}
    c = proposal_db.connect()
    assert [s["reworded"] for s in proposal_db.sightings(c, pid)] == [0]
    assert [e["actor"] for e in c.execute("SELECT actor FROM proposal_events WHERE proposal_id = ?", (pid,))] == ["cli"]
    c.close()


def test_the_receipt_says_what_the_pass_read_drafted_and_rejected(home, project, tmp_path):
    t = Session(tmp_path / "s9.jsonl", str(project))
    t.user("set up the linter")
    t.agent("We use ruff instead of flake8 because it is one tool for lint and format.")
    t.agent("Short.", end=True)
    res = _pass(t.path)
    c = proposal_db.connect()
    rec = receipts.read(c, source="proposer")[0]
    d = rec["detail"]
    assert (d["from_line"], d["to_line"], d["statements"], d["mined"], d["drafts"]) == (
        1, 3, res.statements, res.candidates, len(res.drafts))
    assert d["draft_lines"] == [x.line for x in res.drafts] and d["rejections"] == res.rejections
    # What was read and not made a candidate, counted by why: "set up the linter" and "Short." say
    # too little to be a memory.
    assert d["passed_over"] == res.passed_over and res.passed_over == {"too_short": 2}
    assert "passed over: " in proposer.format_result(res)
    assert rec["delivered"] == len(res.stored_ids) and rec["withheld"] == len(res.rejected)
    assert all(x.text not in json.dumps(rec) for x in res.drafts)  # counts and lines, never text
    # The next pass reads only what is new: nothing.
    again = _pass(t.path)
    assert again.outcome == "nothing" and again.window_events == 0 and again.from_line == 4
    c.close()


def test_the_miner_reads_answers_reports_and_skips_the_harness(shared_transcripts):
    events = list(transcripts.parse_file(str(TRANSCRIPTS / "spotter-subagent.jsonl")))
    m = mine.mine([e for e in events if e.line_no <= 68])
    roles = {sp.role for sp in m.spans}
    assert "answer" in roles  # the user's answers to AskUserQuestion
    assert not any("<command-" in sp.text or "Phase 1" in sp.text for sp in m.spans)  # slash-command body
    assert all(sp.score >= mine.FLOOR for sp in m.spans)


def test_without_a_model_the_pass_ranks_by_cues_and_says_why(home, shared_transcripts):
    (home).mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"models": {"proposer": "off"},
                                                    "proposals": {"model_weight": 1.0}}))
    path = TRANSCRIPTS / "spotter-tool_heavy.jsonl"
    res = proposer.run_pass(str(path), origin="cli")
    assert res.outcome in ("stored", "nothing") and "disabled" in res.model_error and res.judged == 0
    c = proposal_db.connect()
    assert proposal_db.cursor(c, str(path.resolve())) == res.to_line  # read: the cues drafted from it
    rec = receipts.read(c, source="proposer")
    assert "disabled" in rec[0]["detail"]["model_error"]
    c.close()


# --- the real model on the real transcripts ---------------------------------------------------


@pytest.fixture(scope="module")
def runtime():
    from recalld.model import runtime as llm
    from recalld.model.errors import Unavailable

    try:
        return llm.require_runtime("proposer", {"models": {}})
    except Unavailable as e:
        pytest.fail(f"the embedded model must be available for these tests: {e}")


def _words(text: str) -> set:
    from recalld.capture import policies

    return set(policies._WORD.findall(text.lower()))


@pytest.mark.model
def test_a_pass_over_a_real_transcript(home, runtime, shared_transcripts):
    path = TRANSCRIPTS / "spotter-subagent.jsonl"
    res = proposer.run_pass(str(path), origin="cli", runtime=runtime, cfg=RANKS)
    assert res.outcome == "stored", res.error
    assert res.model == runtime.name and res.model_ms > 0 and res.judged > 0 and res.model_error is None
    assert res.to_line == 96 and res.turns >= 1 and res.window_chars > 30_000  # all of it, not a window
    assert len(res.drafts) == len(res.stored_ids) + len(res.rejected)
    events = list(transcripts.parse_file(str(path)))
    said = _words(mine.mine(events).text)
    from recalld.capture import policies

    for d in res.kept:
        assert not [w for w in policies._content_words(d.text) if w not in said], d.text  # every word was said
        # ... on the line it names: the draft is in that record's text.
        on_line = policies._norm(" ".join(e.text for e in events if e.line_no == d.line))
        assert policies._norm(d.text if d.role != "error" else d.text.split(" → ")[0].split("`: ", 1)[-1]) \
            in on_line, (d.line, d.text)
    c = proposal_db.connect()
    rows = [dict(r) for r in c.execute("SELECT * FROM proposals ORDER BY id")]
    assert [r["id"] for r in rows] == res.stored_ids
    assert all(r["session"] == res.session and r["model"] == runtime.name for r in rows)
    rec = receipts.read(c, source="proposer")
    assert len(rec) == 1 and rec[0]["uid"] == res.receipt_uid and rec[0]["detail"]["judged"] == res.judged
    calls = runtime.calls
    again = proposer.run_pass(str(path), origin="cli", runtime=runtime, cfg=RANKS)
    assert again.outcome == "nothing" and again.window_events == 0 and runtime.calls == calls
    c.close()


@pytest.mark.model
def test_the_daemon_turn_end_hook_runs_the_same_pass(home, runtime, shared_transcripts):
    path = TRANSCRIPTS / "viewer-fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    events = list(transcripts.parse_file(str(path)))
    ends = [i for i, e in enumerate(events) if e.kind == "turn_end"]
    turn = events[ends[2] + 1: ends[3] + 1]  # the turn whose type check failed and was fixed
    res = proposer.run_pass(str(path), session=events[0].session, events=turn, origin="daemon", runtime=runtime)
    assert res.outcome == "stored", res.error
    assert any(d.role == "error" and "TS2307" in d.text for d in res.kept), [d.text for d in res.kept]
    assert res.window_events == len(turn) and res.to_line == max(e.line_no for e in turn)
    c = proposal_db.connect()
    assert proposal_db.cursor(c, str(path.resolve())) == res.to_line
    assert receipts.read(c, source="proposer")[0]["hook"] == "daemon"
    c.close()

    from recalld.cli import daemon as daemon_cmds

    assert daemon_cmds.turn_end_hooks() == (proposer.on_turn_end,)


# --- planted secrets --------------------------------------------------------------------------


@pytest.mark.model
def test_planted_secrets_reach_neither_db_nor_logs_nor_receipts(home, tmp_path, runtime, shared_transcripts):
    src = TRANSCRIPTS / "spotter-tool_heavy.jsonl"
    copy = tmp_path / "session.jsonl"
    plant(src, copy)
    raw = copy.read_text()
    assert all(v in raw for v in PLANTED.values())
    session = next(transcripts.parse_file(str(copy))).session
    # The stop hook sees the agent's last message (with secrets) first.
    payload = {"session_id": session, "transcript_path": str(copy), "cwd": "/home/marco/projects/spotter",
               "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": False,
               "last_assistant_message": "We decided to keep Phoenix on port 4000 because " + secret_text()}
    out, r = hook.run(["stop"], json.dumps(payload).encode())
    assert r["outcome"] in ("nothing", "injected")
    # The CLI pass, the way a user runs it: the real model judges what was mined.
    res = run_recalld(["propose", "--transcript", str(copy), "--json"], timeout=600)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["boundaries"] == 1 and data["window_chars"] > 0
    assert sum(data["redactions"].values()) >= len(PLANTED)
    assert not [k for k, v in PLANTED.items() if v in res.stdout.decode() + res.stderr.decode()]

    # A judge that fails with secrets in its message: the receipt must not carry them.
    class Leaky:
        name, calls = "leaky-test-model", 0

        def logliks(self, *a, **k):
            raise RuntimeError("bad input: " + PLANTED["openai"] + " " + PLANTED["aws"])

    copy3 = tmp_path / "session3.jsonl"
    plant(TRANSCRIPTS / "spotter-subagent.jsonl", copy3)
    failed = proposer.run_pass(str(copy3), origin="cli", runtime=Leaky(), cfg=RANKS)
    assert failed.outcome in ("stored", "nothing") and "REDACTED" in failed.model_error
    assert all(v not in d.text + d.why for d in failed.drafts for v in PLANTED.values())

    # And a receipt that had to go to the fallback file (the database refused it).
    rfb = receipts.new("proposer", "test")
    rfb["error"] = failed.model_error
    receipts.append_fallback(rfb, "test")

    conn = sqlite3.connect(str(home / "recalld.db"))
    try:
        assert conn.execute("SELECT count(*) FROM receipts WHERE source = 'proposer'").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM proposal_boundaries").fetchone()[0] == 1
        assert leaks(home, conn) == []
    finally:
        conn.close()
    # the check itself can see a leak
    shutil.copy(copy, home / "logs-copy.txt")
    conn = sqlite3.connect(str(home / "recalld.db"))
    try:
        assert leaks(home, conn)
    finally:
        conn.close()

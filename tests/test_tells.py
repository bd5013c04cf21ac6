"""Two tiers of delivery: whole text where the evidence is strong, a one-line tell for the next
few candidates, opened through `recalld show` / the MCP tool `show`, and receipted both ways."""

import json
import types

from recalld import memories
from recalld.cli.main import cli
from recalld.core import packer, receipts, scope, settings, tiers
from recalld.daemon import passes
from recalld.hook import run as hook
from tests.helpers import run_recalld

PORT = "Integration tests need the Postgres container: run docker compose up -d db first. It listens on localhost:5433, not 5432."
CENTS = "Money is integer cents (BIGINT) plus an ISO currency code everywhere; never floats."


def _prompt(project, text, session="s1"):
    return json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": text, "cwd": str(project),
                       "session_id": session}).encode()


def _cand(i, cov, cos=None):
    return tiers.Cand(i, "fact", f"memory {i}", None, cov, cos, "lexical")


# --- the decision -------------------------------------------------------------------------------


def test_choose_whole_above_the_floor_tells_for_the_next_few_above_the_gate():
    tc = {"floor": 0.6, "whole": True, "max": 2, "tell_floor": 0.2, "min_cos": 0.4, "max_whole": 5}
    cands = [_cand(1, 0.8), _cand(2, 0.1, 0.5), _cand(3, 0.25), _cand(4, 0.3, 0.9), _cand(5, 0.05, 0.1)]
    whole, told = tiers.choose(cands, tc)
    assert [c.id for c in whole] == [1]
    assert [c.id for c in told] == [4, 2]  # at most two, by cosine; 5 is under both gates
    _, told = tiers.choose(cands, tc, not_told={4})
    assert [c.id for c in told] == [2, 3]  # then what has no cosine, in the given order
    whole, told = tiers.choose(cands, dict(tc, whole=False))
    assert whole == [] and [c.id for c in told] == [4, 2]
    assert tiers.choose(cands, dict(tc, max=0))[1] == []
    # semantic off (no cosine anywhere): the lexical order stands
    lexical = [_cand(1, 0.8), _cand(2, 0.3), _cand(3, 0.05), _cand(4, 0.25)]
    assert [c.id for c in tiers.choose(lexical, tc)[1]] == [2, 4]


def test_a_tell_line_is_one_clause_cut_on_a_word_with_its_id_the_first_says_how_to_open_it():
    long = "word " * 80 + "end."
    for chars in (44, 120):
        for text, tell in ((PORT, None), (long, None), (CENTS, "Money: integer cents, never floats.")):
            first = f"[m123 tell] {tiers.tell_body(123, 'm123 tell', text, tell, chars)}"
            assert first.endswith(" (open: recalld show 123)")
            assert len(first) <= chars + len(tiers.OPEN_HINT.format(id=123))
            line = f"[m123 tell] {tiers.tell_body(123, 'm123 tell', text, tell, chars, hint=False)}"
            assert len(line) <= chars and "recalld show" not in line
    assert "first." in tiers.tell_body(1, "m1 tell", PORT, None, 120)  # the first clause, not the port
    assert "5433" not in tiers.tell_body(1, "m1 tell", PORT, None, 120)
    assert "never floats" in tiers.tell_body(1, "m1 tell", CENTS, "Money: integer cents, never floats.", 120)
    cut = tiers.tell_body(1, "m1 tell", long, None, 120)
    assert "…" in cut and "wor…" not in cut  # on a word


def test_the_packer_places_a_tell_whole_or_not_at_all_and_counts_it_apart():
    told = packer.Item("m:2", "memory", "m2 tell", "x" * 100, meta={"tier": "tell", "memory_id": 2})
    whole = packer.Item("m:1", "memory", "m1 fact", "y" * 300)
    p = packer.pack([whole, told], 1000)
    assert [x.outcome for x in p.placed] == ["whole", "told"]
    assert [x.item.key for x in p.delivered] == ["m:1"] and [x.item.key for x in p.told] == ["m:2"]
    c = p.counts()
    assert c["told"] == 1 and c["told_chars"] == len(told.render()) + 1
    assert c["delivered_chars"] == len(whole.render()) + 1
    p = packer.pack([whole, told], 350)  # no room left for the line: withheld, never cut
    assert [x.outcome for x in p.placed] == ["whole", "withheld"]


# --- through the hook ---------------------------------------------------------------------------


def test_a_weak_match_is_told_once_per_session_opened_with_show_and_receipted(home, project, conn):
    sc = scope.resolve(str(project))
    mid = memories.remember(conn, CENTS, sc, kind="decision", check_similar=False).memory["id"]
    settings.save({"floor": 0.95, "tells": {"floor": 0.1}})  # what clears 0.1 but not 0.95 is told
    out, r = hook.run(["prompt-submit", "--agent", "claude"], _prompt(project, "How do I store a currency amount in cents?"))
    ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert f"[m{mid} tell] Money is integer cents" in ctx and "never floats" not in ctx  # one line, in the fence
    assert ctx.startswith("<recalld>") and ctx.endswith("</recalld>")
    assert r["outcome"] == "injected" and r["delivered"] == 0 and r["delivered_ids"] == []
    assert r["detail"]["told"] == [f"m:{mid}"] and r["detail"]["told_chars"] > 0
    served = conn.execute("SELECT item, outcome FROM served").fetchall()
    assert [tuple(s) for s in served] == [(f"m:{mid}", "told")]
    # never a tell twice in a session; another session is told again
    out, r = hook.run(["prompt-submit", "--agent", "claude"], _prompt(project, "How do I store a currency amount in cents?"))
    assert out == "" and r["detail"]["in_context"] == [f"m:{mid}"]
    out, _ = hook.run(["prompt-submit", "--agent", "claude"], _prompt(project, "Currency amount in cents?", "s2"))
    assert f"[m{mid} tell]" in out
    # the agent opens it: the whole text, and a receipt that `recalld receipts` joins to the tell
    res = run_recalld(["show", str(mid), "--cwd", str(project), "--json"], env={"RECALLD_HOME": str(home)})
    assert res.returncode == 0 and json.loads(res.stdout)["text"] == CENTS
    recs = receipts.read(conn)
    receipts.mark_opened(conn, recs)
    told = [x for x in recs if (x["detail"] or {}).get("told")]
    assert len(told) == 2 and all(x["opened"] == [f"m:{mid}"] for x in told)
    shown = [x for x in recs if x["hook"] == "show"]
    assert shown[0]["source"] == "cli" and shown[0]["act"] == "open" and shown[0]["delivered_ids"] == [f"m:{mid}"]
    text = run_recalld(["receipts"], env={"RECALLD_HOME": str(home)}).stdout.decode()
    assert f"told m:{mid} (opened)" in text
    summary = run_recalld(["receipts", "--summary"], env={"RECALLD_HOME": str(home)}).stdout.decode()
    assert "told 2, opened 2" in summary


def test_a_block_of_tells_says_how_to_open_one_once_each_line_within_tells_chars(home, project, conn):
    sc = scope.resolve(str(project))
    texts = ["Currency amounts are integer cents in every table and every API payload we ship.",
             "Invoices print currency amounts with the tenant's locale; never hard-code a symbol.",
             "Refunds carry the currency of the original charge, checked before the call goes out."]
    ids = [memories.remember(conn, t, sc, kind="fact", check_similar=False).memory["id"] for t in texts]
    settings.save({"floor": 0.95, "tells": {"floor": 0.05, "max": 4, "chars": 44}})
    out, r = hook.run(["prompt-submit", "--agent", "claude"], _prompt(project, "How are currency amounts handled?"))
    ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    lines = [x for x in ctx.splitlines() if " tell] " in x]
    assert sorted(r["detail"]["told"]) == sorted(f"m:{i}" for i in ids) and len(lines) == 3
    assert ctx.count("(open: recalld show ") == 1 and lines[0].endswith(")")  # said once, on the first
    first_id = lines[0][2:lines[0].index(" ")]
    assert lines[0].endswith(f"(open: recalld show {first_id})")
    assert all(len(x) <= 44 for x in lines[1:]) and len(lines[0]) <= 44 + len(tiers.OPEN_HINT.format(id=first_id))


def test_show_answers_does_not_exist_for_another_projects_memory_and_says_so_in_a_receipt(home, project, conn, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    mid = memories.remember(conn, CENTS, scope.resolve(str(other)), check_similar=False).memory["id"]
    res = run_recalld(["show", str(mid), "--cwd", str(project)], env={"RECALLD_HOME": str(home)})
    assert res.returncode != 0 and f"m{mid} does not exist" in res.stderr.decode()
    [r] = [x for x in receipts.read(conn) if x["hook"] == "show"]
    assert r["outcome"] == "error" and r["delivered_ids"] == [] and "does not exist" in r["error"]
    assert CENTS not in json.dumps(r)


def test_the_judges_middle_band_is_queued_as_tells_and_shown_as_one_line(home, project, conn):
    sc = scope.resolve(str(project))
    a = memories.remember(conn, PORT, sc, kind="procedure", check_similar=False).memory["id"]
    b = memories.remember(conn, CENTS, sc, kind="decision", check_similar=False).memory["id"]
    v = lambda mid, p, ok: types.SimpleNamespace(memory_id=mid, judge_score=p, passed=ok)  # noqa: E731
    res = types.SimpleNamespace(threshold=0.6, candidates=[v(a, 0.7, True), v(b, 0.45, False), v(99, 0.1, False)],
                                passed=[v(a, 0.7, True)])
    cfg = settings.DEFAULTS
    band = passes.middle_band(res, dict(cfg, tells=dict(cfg["tells"], judge_floor=0.3)))
    assert [x.memory_id for x in band] == [b]
    assert passes.middle_band(res, dict(cfg, tells=dict(cfg["tells"], max=0))) == []
    r = receipts.new("daemon", "need")
    r.update(session="s1", project=sc.project, outcome="injected")
    assert passes.commit_pass(conn, r, res.passed + band, cfg) == "db"
    assert [q["tier"] for q in r["detail"]["queued"]] == ["whole", "tell"]
    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                          "cwd": str(project), "session_id": "s1"}).encode()
    settings.save({"tells": {"chars": 40}})  # the user's length holds for the queue's tells too
    out, rr = hook.run(["pre-tool", "--agent", "claude"], payload)
    ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert PORT in ctx and f"[m{b} tell] Money is integer cents" in ctx and "never floats" not in ctx
    line = next(ln for ln in ctx.splitlines() if f"[m{b} tell]" in ln)
    assert line.endswith(f" (open: recalld show {b})") and ctx.count("(open: recalld show ") == 1
    assert len(line[line.index("[m"):].split(" (open:")[0]) <= 40
    assert rr["detail"]["told"] == [f"m:{b}"] and len(rr["delivered_ids"]) == 1
    # what the queue told this session is not told again by the pre-step
    settings.save({"floor": 0.95, "tells": {"floor": 0.1}})
    out, rp = hook.run(["prompt-submit", "--agent", "claude"], _prompt(project, "How do I store a currency amount in cents?"))
    assert f"[m{b} tell]" not in out and f"m:{b}" in rp["detail"]["in_context"]
    out, _ = hook.run(["prompt-submit", "--agent", "claude"], _prompt(project, "How do I store a currency amount in cents?", "s2"))
    assert f"[m{b} tell]" in out  # another session is told


def test_cli_show_is_listed():
    assert "show" in cli.commands


def test_mcp_show_opens_a_memory_of_its_project_only(home, project, conn, tmp_path):
    from tests.test_mcp import _call, _payload

    other = tmp_path / "other"
    other.mkdir()
    mine = memories.remember(conn, CENTS, scope.resolve(str(project)), check_similar=False).memory["id"]
    theirs = memories.remember(conn, PORT, scope.resolve(str(other)), check_similar=False).memory["id"]
    tools, (ok, refused) = _call(home, project, [("show", {"memory_id": mine, "session": "s9"}),
                                                 ("show", {"memory_id": theirs})])
    assert "show" in tools
    assert _payload(ok)["text"] == CENTS
    assert refused.is_error and f"m{theirs} does not exist" in refused.content[0].text and PORT not in str(refused.content)
    opened = [r for r in receipts.read(conn) if r["hook"] == "show"]
    assert sorted((r["source"], r["outcome"], r["session"]) for r in opened) == [("mcp", "error", None),
                                                                               ("mcp", "injected", "s9")]


def test_the_tells_benchmark_counts_reach_whole_and_told_and_the_characters_placed():
    from recalld.bench import tells as bench

    # candidates: (id, coverage, cosine, whole chars, project, text, tell)
    para = bench.Row("g", "paraphrased", {2, 4}, on=[(1, 0.5, 0.3, 200, "p", PORT, None), (2, 0.0, 0.5, 150, "p", CENTS, None),
                                                  (4, 0.0, 0.6, 150, "p", CENTS, None)],
                     off=[(1, 0.5, None, 200, "p", PORT, None)], text="", project="p")
    quiet = bench.Row("g", "unanswerable", set(), on=[(3, 0.05, 0.1, 120, "q", PORT, None)], off=[], text="", project="p")
    p = {"floor": 0.4, "tell_floor": 0.1, "min_cos": 0.2, "max": 2, "chars": 44}
    on = bench.measure([para, quiet], p, "on")
    assert on["paraphrased"]["reached_told"] == 1.0 and on["paraphrased"]["reached_whole"] == 0.0
    # m1 whole; m4 then m2 told by cosine, the first saying how to open it
    first = len(packer.Item("m:4", "memory", "m4 tell", tiers.tell_body(4, "m4 tell", CENTS, None, 44)).render()) + 1
    second = len(packer.Item("m:2", "memory", "m2 tell", tiers.tell_body(2, "m2 tell", CENTS, None, 44, False)).render()) + 1
    assert on["paraphrased"]["chars_per_prompt"] == 200 + first + second and second < first <= 44 + 1 + 24
    assert on["unanswerable"]["chars_per_prompt"] == 0 and on["no_answer_chars"] == 0
    off = bench.measure([para, quiet], p, "off")
    assert off["paraphrased"]["reached"] == 0.0 and off["paraphrased"]["chars_per_prompt"] == 200
    loose = dict(p, min_cos=0.0, tell_floor=0.0)
    assert bench.measure([quiet], loose, "on")["unanswerable"]["other_project"] == 1  # would be counted
    assert not bench.admissible(bench.measure([para], p, "off") | {"lexical": {"reached": 0.9}}, on)

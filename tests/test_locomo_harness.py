"""The LoCoMo harness on a tiny conversation file built here, whose answers are known: the
loader, the indexer (real store writes), both rankers, the summaries, the budget curve, and
`recalld bench locomo --data PATH --json`."""

import json
from types import SimpleNamespace

import pytest

from recalld.bench import locomo
from tests.helpers import run_recalld


def _conv(sample_id, a, b, sessions, qa):
    c = {"speaker_a": a, "speaker_b": b}
    for i, (date, turns) in enumerate(sessions, 1):
        c[f"session_{i}_date_time"] = date
        c[f"session_{i}"] = [{"speaker": s, "dia_id": f"D{i}:{j}", "text": t} for j, (s, t) in enumerate(turns, 1)]
    return {"sample_id": sample_id, "conversation": c, "qa": qa}


@pytest.fixture
def data(tmp_path):
    convs = [
        _conv("conv-a", "Ada", "Bo", [
            ("1:00 pm on 3 May, 2023", [
                ("Ada", "Hi Bo! I adopted a greyhound named Pixel last week."),
                ("Bo", "Congrats Ada! I started learning the cello in April."),
                ("Ada", "My sister moved to Lisbon for her new job at the aquarium."),
            ]),
            ("9:30 am on 20 June, 2023", [
                ("Bo", "Ada, my cello teacher says my vibrato is improving."),
                ("Ada", "Pixel won second prize at the county dog show!"),
            ]),
        ], [
            {"question": "What is the name of Ada's greyhound?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "Which instrument is Bo learning?", "answer": "cello", "evidence": ["D1:2; D2:1"], "category": 1},
            {"question": "Where did Ada's sister move?", "answer": "Lisbon", "evidence": ["D:1:3"], "category": 4},
            {"question": "When did Pixel win a prize at the dog show?", "answer": "June 2023", "evidence": ["D2:2"], "category": 2},
            {"question": "Is Bo likely to join an orchestra?", "answer": "maybe", "evidence": [], "category": 3},
            {"question": "What submarine did Ada buy?", "adversarial_answer": "a yellow one", "evidence": ["D1:1"], "category": 5},
        ]),
        _conv("conv-b", "Cy", "Di", [
            ("8:00 pm on 1 January, 2024", [
                ("Cy", "Di, I finally fixed the leaking roof of the greenhouse."),
                ("Di", "Great! My greyhound Pixel says hi too."),
            ]),
        ], [
            {"question": "What did Cy fix?", "answer": "the greenhouse roof", "evidence": ["D1:1"], "category": 4},
        ]),
    ]
    p = tmp_path / "mini-locomo.json"
    p.write_text(json.dumps(convs))
    return p


def test_load_normalizes_evidence_and_drops_unanswerable(data):
    convs = locomo.load(data)
    a = convs[0]
    assert [t.dia_id for t in a.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert a.turns[3].date == "9:30 am on 20 June, 2023"
    assert [q.evidence for q in a.questions] == [["D1:1"], ["D1:2", "D2:1"], ["D1:3"], ["D2:2"], ["D1:1"]]
    assert a.dropped == 1
    assert a.questions[-1].category == 5 and a.questions[-1].answer == "a yellow one"


def test_memory_styles():
    t = locomo.Turn("D1:1", "Ada", "Hello.", "1:00 pm on 3 May, 2023")
    assert locomo.memory_text(t, "text") == "Hello."
    assert locomo.memory_text(t, "speaker") == "Ada: Hello."
    assert locomo.memory_text(t, "speaker+date") == "[1:00 pm on 3 May, 2023] Ada: Hello."
    with pytest.raises(ValueError):
        locomo.memory_text(t, "nope")


def test_each_conversation_is_its_own_project_written_through_the_store(data):
    asked, info = locomo.ask_all(data, keep_store=True)
    try:
        conn = info["conn"]
        rows = conn.execute("SELECT project, count(*), min(source) FROM memories GROUP BY project ORDER BY project").fetchall()
        assert [(r[0], r[1]) for r in rows] == [("/locomo/conv-a", 5), ("/locomo/conv-b", 2)]
        assert conn.execute("SELECT count(*) FROM memory_changes WHERE action = 'imported'").fetchone()[0] == 7
        # each session is a thread: a turn follows the one before it, never across sessions
        dia = {i: d for m in info["maps"].values() for i, d in m.items()}
        rows = conn.execute("SELECT id, thread, follows FROM memories WHERE project = '/locomo/conv-a' ORDER BY id")
        assert [(dia[i], t, dia.get(f)) for i, t, f in rows] == [
            ("D1:1", "D1", None), ("D1:2", "D1", "D1:1"), ("D1:3", "D1", "D1:2"),
            ("D2:1", "D2", None), ("D2:2", "D2", "D2:1")]
        # the other conversation's greyhound never answers this one's question
        q = next(a for a in asked if a.question.startswith("What is the name"))
        assert {d for d, _, _ in q.recalld} <= {"D1:1", "D1:2", "D1:3", "D2:1", "D2:2"}
        assert [d for d, _, _ in q.recalld][0] == "D1:1"
    finally:
        info["conn"].close()
        info["tmp"].cleanup()


def test_known_answers_score_and_summaries(data):
    asked, info = locomo.ask_all(data)
    assert info["questions"] == 6 and info["dropped_no_evidence"] == 1 and info["memories"] == 7
    q = locomo.quality(asked)
    # every answerable question here has a distinctive word in its evidence turn
    assert q["recalld"]["overall"] == {"n": 5, "hit@1": 1.0, "recall@5": 1.0}
    assert q["recalld"]["single-hop"]["n"] == 3 and q["recalld"]["temporal"]["n"] == 1
    assert q["recalld"]["open-domain"] == {"n": 0, "hit@1": None, "recall@5": None}
    assert q["baseline"]["overall"]["n"] == 5 and q["baseline"]["overall"]["recall@5"] == 1.0


def test_hit_at():
    assert locomo.hit_at(["D1:2", "D1:1"], ["D1:1"], 1) is False
    assert locomo.hit_at(["D1:2", "D1:1"], ["D1:1"], 2) is True
    assert locomo.hit_at([], ["D1:1"], 5) is False


def test_abstention_counts_the_adversarial_question(data):
    asked, _ = locomo.ask_all(data)
    curve = locomo.abstention(asked, floors=(0.0, 0.99))
    # "submarine" is nowhere; "Ada" and "buy" only partly cover it, so a high floor silences it
    assert curve["0.99"]["adversarial_silent"] == 1.0
    assert curve["0.00"]["adversarial_silent"] == 0.0
    assert curve["0.00"]["answerable_injected"] == 1.0


def test_budget_curve_packs_with_the_hook(data):
    asked, info = locomo.ask_all(data, keep_store=True)
    try:
        curve = locomo.budget_curve(info["conn"], info["maps"], info["convs"], budgets=(20, 4000),
                                    max_results=(None,))
    finally:
        info["conn"].close()
        info["tmp"].cleanup()
    (series,) = curve.values()
    assert series["20"] == 0.0  # nothing fits in 20 characters
    assert series["4000"] == 1.0


def test_cli_prints_one_json_object(data, tmp_path):
    r = run_recalld(["bench", "locomo", "--data", str(data), "--json", "--quick"],
                    env={"RECALLD_HOME": str(tmp_path / "home")}, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    fig = json.loads(r.stdout)
    for system in ("recalld", "baseline"):
        assert set(fig[system]) == {"multi-hop", "temporal", "open-domain", "single-hop", "overall"}
        assert set(fig[system]["overall"]) == {"n", "hit@1", "recall@5"}
    assert fig["recalld"]["overall"]["hit@1"] == 1.0
    assert fig["questions"] == 6


def test_cli_bad_data_path_is_one_clear_error(tmp_path):
    r = run_recalld(["bench", "locomo", "--data", str(tmp_path / "missing.json"), "--json"],
                    env={"RECALLD_HOME": str(tmp_path / "home")})
    assert r.returncode != 0
    assert r.stderr.decode().strip().count("\n") == 0 and "missing.json" in r.stderr.decode()


def test_runner_writes_report_figures_and_marks_failures(data, tmp_path):
    from recalld.bench import run as bench
    from recalld.bench.common import Unavailable

    def ok(quick=False):
        return {"ours": {"a": 1.5}, "baseline": {"a": 2.0}, "notes": ["hello"],
                "plots": [{"file": "ok.png", "kind": "line", "x": [1, 2], "series": {"s": [1, 2]}}]}

    def broken(quick=False):
        raise RuntimeError("boom")

    def no_data(quick=False):
        raise Unavailable("LoCoMo data not found (looked at /nowhere)")

    registry = {"ok": SimpleNamespace(run=ok), "broken": SimpleNamespace(run=broken),
                "no_data": SimpleNamespace(run=no_data)}
    result = bench.run_all(quick=True, registry=registry)
    b = result["benchmarks"]
    assert b["ok"]["ok"] and not b["broken"]["ok"] and not b["no_data"]["ok"]
    assert b["no_data"]["skipped"].startswith("LoCoMo data not found") and "error" not in b["no_data"]
    assert bench.not_run(result) == ["broken (failed)", "no_data (skipped: LoCoMo data not found (looked at /nowhere))"]
    w = bench.write_report(result, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## ok" in md and "**FAILED**" in md and "RuntimeError: boom" in md and "**SKIPPED**: LoCoMo" in md
    assert "SQLite" in md and "Python" in md
    figs = json.loads((tmp_path / "out" / "figures.json").read_text())
    assert figs["benchmarks"]["ok"]["figures"]["ours"] == {"a": 1.5}
    assert "plots" not in figs["benchmarks"]["ok"]["figures"]
    assert (w["plots"] and (tmp_path / "out" / "ok.png").exists()) or "matplotlib" in (w["plot_note"] or "")
    with pytest.raises(ValueError):
        bench.run_all(["nope"], registry=registry)


def test_every_listed_benchmark_is_a_module_with_run():
    import inspect

    from recalld.bench import run as bench

    for name in bench.BENCHMARKS:
        mod = bench.load(name)
        assert "quick" in inspect.signature(mod.run).parameters, name
        assert (mod.__doc__ or "").strip(), name


def test_missing_locomo_data_is_reported_as_skipped(tmp_path, monkeypatch):
    from recalld.bench import common

    monkeypatch.setattr(common, "shared_dirs", lambda: [tmp_path / "shared"])
    with pytest.raises(common.Unavailable, match="LoCoMo data not found.*pass --data PATH"):
        locomo.load()
    with pytest.raises(common.Unavailable, match="missing.json"):
        locomo.load(tmp_path / "missing.json")


def test_without_threads_the_turns_stand_alone(data):
    asked, info = locomo.ask_all(data, keep_store=True, threads=False)
    try:
        assert info["threads"] is False
        assert info["conn"].execute("SELECT count(*) FROM memories WHERE thread IS NOT NULL OR follows IS NOT NULL"
                                    ).fetchone()[0] == 0
    finally:
        info["conn"].close()
        info["tmp"].cleanup()

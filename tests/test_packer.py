"""The packer and crystal rotation: properties over generated items and sessions, then the same
through the real hook (in process and as concurrent `python -m recalld hook pre-tool` processes)."""

import json
import math
import sqlite3
import threading

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from recalld.hook import crystal_source, run as hook
from recalld import crystals
from recalld.core import packer
from tests.helpers import run_recalld

SOURCES = ("crystal", "queue", "memory", "proposal")

body_st = st.builds(
    lambda parts: "\n".join(parts),
    st.lists(st.one_of(st.text(min_size=0, max_size=300), st.builds(lambda s: "⛔ " + s, st.text(max_size=200)),
                       st.builds(lambda n: "x" * n, st.integers(0, 3000))), min_size=1, max_size=6))
item_st = st.builds(
    lambda i, source, body, tell, stale: packer.Item(key=f"{source[0]}:{i}", source=source, label=f"{source} {i}",
                                                   body=body, tell=tell, stale=stale),
    st.integers(0, 10_000), st.sampled_from(SOURCES), body_st,
    st.one_of(st.none(), st.text(min_size=1, max_size=200)), st.booleans())


@given(st.lists(item_st, max_size=25), st.integers(0, 12_000), st.integers(1, 5000), st.integers(0, 3000))
@settings(max_examples=200, deadline=None)
def test_output_never_exceeds_budget_and_each_item_is_accounted_once(items, budget, cap, min_cut):
    packed = packer.pack(items, budget, cap, min_cut=min_cut)
    assert packed.chars <= budget
    assert len(packed.text()) <= max(budget - 1, 0)
    # Exactly one bucket per matched item, in the order given.
    assert [p.item for p in packed.placed] == items
    acc = packed.accounting()
    assert acc["matched"] == len(items)
    assert sum(acc[o] for o in packer.OUTCOMES) == len(items)
    assert acc["delivered_chars"] == packed.chars
    for s, a in acc["by_source"].items():
        assert sum(a[o] for o in packer.OUTCOMES) == a["matched"] == sum(1 for i in items if i.source == s)
    for p in packed.placed:
        full = p.item.render()
        assert p.wanted_chars == len(full) + 1
        if p.item.stale:
            assert p.outcome == "stale" and p.text == "" and p.withheld_chars == len(full)
        elif p.outcome == "whole":
            assert p.text == full and p.cut_chars == 0
        elif p.outcome == "cut":
            head = p.text[:-len(packer.ELLIPSIS)]
            assert p.text.endswith(packer.ELLIPSIS) and full.startswith(head)
            assert p.cut_chars == len(full) - len(head) > 0
            assert p.cut_claims == packer.claims_from(full, len(head))
            assert len(p.text) <= min(cap, budget - 1)
        elif p.outcome == "tell":
            assert p.item.tell and p.text == p.item.render(tell=True) and p.withheld_chars == len(full)
        else:
            assert p.outcome == "withheld" and p.text == "" and p.withheld_chars == len(full)


def test_cut_claims_count_markers_that_start_in_the_tail():
    full = "⛔ first claim\n" + "support " * 40 + "\n  ⛔ second claim\nmid ⛔ not a line start"
    text, cut_chars, claims = packer.cut(full, 30)
    assert len(text) == 30 and claims == 1 and cut_chars == len(full) - 29
    # A cut that lands inside the second claim's line keeps its marker: it is not counted as lost.
    pos = full.index("⛔ second") + 3
    assert packer.claims_from(full, pos) == 0
    assert packer.claims_from(full, pos - 4) == 1


def test_the_seed_rules_one_by_one():
    big = packer.Item("c:a", "crystal", "crystal a", "⛔ head\n" + "y" * 3000 + "\n⛔ tail claim", tell="a in one line")
    # Wins outright: the only candidate and it fits the budget, so no cap.
    assert packer.pack([big], 4000, 2000).placed[0].outcome == "whole"
    # Over the cap with company: cut head-first at the cap, the tail claim counted.
    small = packer.Item("c:b", "crystal", "crystal b", "short")
    p = packer.pack([big, small], 4000, 2000)
    assert [x.outcome for x in p.placed] == ["cut", "whole"]
    assert len(p.placed[0].text) == 2000 and p.placed[0].cut_claims == 1
    # Does not fit and too little is left for a meaningful cut: degrade to the tell.
    mid = packer.Item("c:c", "crystal", "crystal c", "z" * 1500, tell="c in one line")
    p = packer.pack([mid, mid, mid], 3500, 2000)
    assert [x.outcome for x in p.placed] == ["whole", "whole", "tell"]
    # And when even the tell does not fit: withheld, its chars counted.
    p = packer.pack([mid, mid, mid], 3030, 2000)
    assert [x.outcome for x in p.placed] == ["whole", "whole", "withheld"]
    assert p.accounting()["withheld_chars"] == len(mid.render())
    # Enough left for a meaningful head: cut to what is left.
    p = packer.pack([mid, mid, mid], 4000, 2000)
    assert [x.outcome for x in p.placed] == ["whole", "whole", "cut"] and p.chars == 4000
    # Stale: withheld whatever the space.
    assert packer.pack([packer.Item("c:s", "crystal", "s", "x", stale=True)], 4000).placed[0].outcome == "stale"


def test_later_sources_keep_their_reserve_against_an_oversubscribed_crystal_corpus():
    crys = [packer.Item(f"c:{i}", "crystal", f"crystal {i}", "c" * 1900, tell=f"tell {i}") for i in range(6)]
    queued = packer.Item("q:1", "queue", "m1 fact · judged", "the judged memory " * 20)
    p = packer.pack(crys + [queued], 4000, 2000)
    assert p.placed[-1].outcome == "whole" and p.chars <= 4000
    # Without the queue entry the crystals may take the whole act.
    p2 = packer.pack(crys, 4000, 2000)
    assert p2.chars > p.chars - len(queued.render())


# --- rotation: no matched crystal starves --------------------------------------------------


def _crystal(i: int, essence: str, tell) -> crystals.Crystal:
    return crystals.Crystal(id=f"k{i:03d}", path=f"/nonexistent/k{i:03d}.md", origin="project", on=("bash",),
                            match=("deploy",), tell=tell, essence_chars=len(essence), essence=essence)


def _simulate(cs: list, budget: int, cap: int, acts: int) -> dict:
    """Repeated matching acts in one session, through crystal_source's order and the packer.
    Returns {id: first act (1-based) where it was delivered whole or cut}."""
    stats, first = {}, {}
    for act in range(1, acts + 1):
        ordered = crystal_source.order([(c, ["deploy"]) for c in cs], stats)
        items, lost = crystal_source.to_items(ordered)
        assert not lost
        packed = packer.pack(items, budget, cap)
        assert packed.chars <= budget
        for p in packed.placed:
            if p.outcome in ("whole", "cut"):
                n, _ = stats.get(p.item.key, (0, ""))
                stats[p.item.key] = (n + 1, f"{act:08d}")
                first.setdefault(p.item.key[2:], act)
    return first


session_st = st.tuples(
    st.lists(st.tuples(st.integers(1, 6000), st.one_of(st.none(), st.text(min_size=1, max_size=120))),
             min_size=1, max_size=12),
    st.integers(1000, 10_000), st.integers(100, 4000))


@given(session_st)
@settings(max_examples=300, deadline=None)
def test_no_matched_crystal_starves_within_a_bound(session):
    """Up to 12 crystals matching every act (the median act matches 5): each is delivered whole
    or cut within ceil(total wanted / budget) + 1 acts, or, where items are lumpy against the
    budget (an act that cannot place the next one whole and has under MIN_CUT left wastes the
    rest; see the documented counterexample below), within what is provable: while one crystal
    waits, every act serves others worth at least budget - min(MIN_CUT, the largest item)."""
    specs, budget, cap = session
    cs = [_crystal(i, "⛔ claim\n" + "e" * n, tell) for i, (n, tell) in enumerate(specs)]
    wanted = [len(f"[crystal {c.id}] {c.essence}") + 1 for c in cs]
    held = [min(w, cap + 1) for w in wanted]  # what one placement can take of the budget
    provable = (sum(held) - min(held)) // (budget - min(packer.MIN_CUT, max(held))) + 1
    bound = max(math.ceil(sum(wanted) / budget) + 1, provable)
    first = _simulate(cs, budget, cap, bound)
    assert sorted(first) == sorted(c.id for c in cs), (bound, first)


@given(st.lists(st.integers(1, 4000), min_size=1, max_size=60), st.integers(2000, 10_000))
@settings(max_examples=150, deadline=None)
def test_no_matched_crystal_starves_at_any_corpus_size(lengths, budget):
    """For any number of matching crystals the wait is bounded by what is provable when the
    packer refuses heads shorter than MIN_CUT: while one crystal waits, every act serves
    others whose wanted chars sum to at least budget - MIN_CUT, each at most once."""
    assume(budget > packer.MIN_CUT)
    cs = [_crystal(i, "e" * n, "a tell") for i, n in enumerate(lengths)]
    wanted = [len(f"[crystal {c.id}] {c.essence}") + 1 for c in cs]
    bound = (sum(wanted) - min(wanted)) // (budget - packer.MIN_CUT) + 1
    first = _simulate(cs, budget, 2000, bound)
    assert len(first) == len(cs)


def test_the_issue_bound_fails_for_many_mid_sized_crystals_and_why():
    """Documented limit (docs/crystals.md): 17 crystals of 1,626 rendered chars fit two a
    4,000-char act with 746 left, under MIN_CUT, so serving all takes 9 acts while
    ceil(17 * 1627 / 4000) + 1 = 8. Any packer that refuses meaningless heads has such cases."""
    cs = [_crystal(i, "e" * (1626 - len(f"[crystal k{i:03d}] ")), "a tell") for i in range(17)]
    first = _simulate(cs, 4000, 2000, 20)
    wanted = sum(len(f"[crystal {c.id}] {c.essence}") + 1 for c in cs)
    assert max(first.values()) == 9 and math.ceil(wanted / 4000) + 1 == 8


# --- served counts through the real hook --------------------------------------------------


def _write_crystals(project, n: int, key: str = "deploy", size: int = 1400):
    d = project / ".recalld" / "crystals"
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (d / f"k{i:02d}.md").write_text(
            # context: rotation is what these show; a gate crystal is held once, then passes
            f"crystal:\non: bash\nmatch: {key}, k{i:02d}-only\ntell: tell of k{i:02d}\ndeliver: context\n\n"
            f"<!-- crystal:essence -->\n⛔ claim k{i:02d}\n{'w' * (size + 37 * i)}\n<!-- /crystal:essence -->\n")
    from recalld.cli.crystals import trust_folder

    trust_folder(str(project))  # project crystals are delivered from a trusted folder only


def _bash(project, command: str, session: str = "sess-1") -> bytes:
    return json.dumps({"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                       "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": command}, "tool_use_id": "toolu_01"}).encode()


def _served_counts(conn) -> dict:
    return {r[0]: r[1] for r in conn.execute(
        "SELECT item, count(*) FROM served WHERE outcome IN ('whole','cut') GROUP BY item")}


@given(st.lists(st.sets(st.integers(0, 7), max_size=8), min_size=1, max_size=8))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_served_counts_never_decrease_through_the_hook(home, project, acts):
    _write_crystals(project, 8)
    conn = sqlite3.connect(str(home / "recalld.db")) if (home / "recalld.db").exists() else None
    before = _served_counts(conn) if conn else {}
    for ks in acts:
        cmd = "echo " + " ".join(f"k{i:02d}-only" for i in sorted(ks))
        out, r = hook.run(["pre-tool"], _bash(project, cmd))
        assert r["outcome"] in ("injected", "nothing"), r
        conn = conn or sqlite3.connect(str(home / "recalld.db"))
        now = _served_counts(conn)
        assert all(now.get(k, 0) >= v for k, v in before.items())
        before = now
    conn.close()


def test_rotation_through_the_hook_reaches_every_crystal(home, project, conn):
    _write_crystals(project, 8)  # 8 crystals of ~1.4-1.7k: about 2 whole + 1 cut per act
    wanted = 0
    for p in (project / ".recalld" / "crystals").iterdir():
        c = crystals.parse_file(str(p))
        wanted += len(f"[crystal {c.id}] {c.essence}") + 1
    bound = math.ceil(wanted / 4000) + 1
    seen = set()
    for _ in range(bound):
        out, r = hook.run(["pre-tool"], _bash(project, "./deploy.sh --prod"))
        acc = r["detail"]["packed"]
        assert acc["matched"] == 8 and acc["over_budget"]
        assert acc["whole"] + acc["cut"] + acc["tell"] + acc["withheld"] + acc["stale"] == 8
        seen |= {k for k, o, *_ in acc["items"] if o in ("whole", "cut")}
    assert seen == {f"c:k{i:02d}" for i in range(8)}
    # The counts the order reads cannot be rewritten or dropped.
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute("UPDATE served SET outcome = 'x'")
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute("DELETE FROM served")


def test_served_counts_never_decrease_with_concurrent_hook_processes(home, project, conn):
    _write_crystals(project, 6)
    env = {"RECALLD_HOME": str(home), "RECALLD_DEADLINE_MS": "5000"}
    results, snapshots, stop = [], [], threading.Event()

    def worker(w):
        for j in range(4):
            p = run_recalld(["hook", "pre-tool"], _bash(project, f"deploy step {j}", session=f"s{w % 2}"), env=env)
            results.append(p)

    def watcher():
        while not stop.is_set():
            snapshots.append(_served_counts(conn))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    watch = threading.Thread(target=watcher)
    watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watch.join()
    snapshots.append(_served_counts(conn))
    assert all(p.returncode == 0 for p in results)
    for a, b in zip(snapshots, snapshots[1:]):
        assert all(b.get(k, 0) >= v for k, v in a.items())
    # Every delivered crystal of every receipt is in `served` exactly once, and nothing else is.
    recs = [json.loads(d) for (d,) in conn.execute("SELECT detail FROM receipts WHERE hook = 'pre-tool'")]
    assert len(recs) == 16
    delivered = sum(1 for d in recs for it in d["packed"]["items"] if it[1] in ("whole", "cut", "tell"))
    assert conn.execute("SELECT count(*) FROM served").fetchone()[0] == delivered

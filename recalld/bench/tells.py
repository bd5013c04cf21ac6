"""Two tiers of delivery: what reaches the agent whole, what as a one-line tell, and what a
prompt costs, with the semantic channel on and off; the tier constants fitted and validated
leaving one coding project out.

    python3 -m recalld.bench.tells [--json]

The sets: the six coding projects of recalld/bench/data/ (coding_needs.json with
semantic_needs.json's prompts over the same three projects, and tells_needs.json's three), each
its own scope. Styles: `paraphrased`, `lexical`, `unanswerable`, `judge-set` (coding_needs.json's
answerable mid-task needs), and `unrelated` (every answerable need asked in the next project's
scope, where nothing answers it).

Per need, the candidates are those the hook weighs: the lexical search's (floor 0, three times
max_results) and, semantic on, the daemon's fused order (recalld.daemon.query.fuse at floor
None, the whole order with its cosines, as the daemon answers it). recalld.core.tiers.choose,
the hook's own function, sorts them into whole and told; the figures count what the packer
would place (a whole memory's rendered line and the tell lines, the first with how to open
one, with their separators: the receipt's delivered_chars plus told_chars, the frame not
counted). With the semantic channel off the same decision runs on the lexical candidates
alone, and is checked against the hook's own memory_items on every need.

The fit: a grid over tells.max, tells.chars, tells.min_cos and tells.floor; the floor for
whole text stays at its setting (what is strong evidence is not a budget question). The
targets hold per project, so a setting is admissible only when on each project it is fitted
on, semantic on and off alike, every lexical need reaches the agent (whole or told) and a
prompt with no answer (unanswerable, unrelated: each on its own) costs at most
NO_ANSWER_CHARS on average. Of those: the best paraphrased reach of the worst project
(semantic on), then pooled, then semantic off pooled, then the longest lines, then lexical
needs delivered whole, then paraphrased and judge-set needs delivered whole, then the fewest
characters on prompts without an answer. Validated leave-one-project-out: each project's
needs are scored by the setting fitted on the other five, and the shipped setting is reported
beside. `curve`: tells.max against tells.chars at the shipped gates, each project on its own
(not a fit: what the choice trades). `fusion_weights_change_nothing`: every need decided on the
fused order and on the same candidates with the fusion's weight at 0 (the tells take the
cosine order, the whole text the coverage).

The judge's middle band (tells.judge_floor) is fitted by `judge_band` on rows of
recalld.bench.fit_judge's `collect` (not run here: it needs the judge model for minutes):
    python3 -m recalld.bench.tells --judge-rows ROWS.json [ROWS2.json ...]
"""

import functools
import itertools
import json
import shutil
import sys
import tempfile
from pathlib import Path

from recalld.bench.common import Unavailable

NO_ANSWER_CHARS = 200
MAX_WHOLE = 5
GRID = {"tell_floor": (0.1, 0.2, 0.3, 1.01),
        "min_cos": (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 1.01),
        "max": (1, 2, 3, 4, 5, 6),
        "chars": (36, 40, 44, 48, 52, 56, 64, 80, 120)}
QUIET = ("unanswerable", "unrelated")


def shipped() -> dict:
    from recalld.core import settings

    t = settings.DEFAULTS["tells"]
    return {"floor": settings.DEFAULTS["floor"], "tell_floor": t["floor"], "min_cos": t["min_cos"], "max": t["max"],
            "chars": t["chars"]}


def tier_config(p: dict) -> dict:
    return {"floor": p["floor"], "whole": True, "max": p["max"], "tell_floor": p["tell_floor"],
            "min_cos": p["min_cos"], "max_whole": MAX_WHOLE, "chars": p["chars"]}


@functools.lru_cache(maxsize=None)
def _tell_chars(mid: int, text: str, tell, chars: int, hint: bool) -> int:
    """One tell line as the packer places it, with its separator."""
    from recalld.core import packer, tiers

    label = f"m{mid} tell"
    return len(packer.Item(f"m:{mid}", "memory", label, tiers.tell_body(mid, label, text, tell, chars, hint)).render()) + 1


# --- collecting the candidates ---------------------------------------------------------------


class Row:
    """One need in one scope: its candidates semantic on and off, each (id, coverage, cosine,
    whole chars, project, text, tell)."""

    __slots__ = ("group", "style", "expected", "on", "off", "text", "project", "plain")

    def __init__(self, group, style, expected, on, off, text, project, plain=None):
        self.group, self.style, self.expected, self.on, self.off = group, style, expected, on, off
        self.text, self.project, self.plain = text, project, plain


def collect(enc, tmp: Path) -> tuple:
    """(rows, the store, the projects): every need of every project, asked in its own scope
    and, when answerable, in the next project's (`unrelated`)."""
    from recalld import memories
    from recalld.bench.semantic import Lex, coding_sets
    from recalld.core import db, packer
    from recalld.core.scope import Scope
    from recalld.core.search import search
    from recalld.daemon.query import DENSE_K, fuse
    from recalld.model import vectors

    sets = coding_sets()
    conn = db.connect(tmp / "tells.db")
    conn.execute("PRAGMA synchronous = OFF")
    projs = {}
    for p, needs in sets:
        sc = Scope(p["project"], "main")
        lines = [json.dumps({"text": m["text"], "kind": m["kind"], **({"tell": m["tell"]} if m.get("tell") else {})})
                 for m in p["memories"]]
        res = memories.import_jsonl(conn, lines, sc, source="bench")
        projs[p["name"]] = (sc, {m["key"]: r.memory["id"] for m, r in zip(p["memories"], res)}, needs)
    vectors.embed_pending(conn, enc)
    mems = {r[0]: (r[1], r[2], r[3], r[4]) for r in conn.execute("SELECT id, kind, text, tell, project FROM memories")}

    def about(mid):
        kind, text, tell, project = mems[mid]
        whole = packer.Item(f"m:{mid}", "memory", f"m{mid} {kind}", text, tell).render()
        return min(len(whole), 2000) + 1, project, text, tell

    def cands(text, sc, q):
        hits = search(conn, text, sc, limit=MAX_WHOLE * 3, floor=0.0)
        lex = [Lex(h.id, h.score, h.rank) for h in hits]
        dense = vectors.dense_search(conn, q, sc, DENSE_K, model=enc.model)
        got = {i for i, _ in dense}
        cos = vectors.cosines(conn, q, [h.id for h in lex if h.id not in got], model=enc.model)
        known = {**cos, **dict(dense)}
        cov = {h.id: h.score for h in hits}
        on = [(i, cov.get(i, 0.0), known.get(i), *about(i))
              for i, _, _ in fuse(lex, dense, None, MAX_WHOLE * 3 + DENSE_K, cos=cos)]
        # the same candidates with no fitted weight (the lexical order, then the dense)
        plain = [(i, cov.get(i, 0.0), known.get(i), *about(i))
                 for i, _, _ in fuse(lex, dense, None, MAX_WHOLE * 3 + DENSE_K, cos=cos, weight=0.0)]
        off = [(h.id, h.score, None, *about(h.id)) for h in hits]
        return on, off, plain

    names = list(projs)
    rows = []
    for g, (sc, key2id, needs) in projs.items():
        other = projs[names[(names.index(g) + 1) % len(names)]][0]
        for style, text, exp in needs:
            q = enc.embed_one(text)
            on, off, plain = cands(text, sc, q)
            rows.append(Row(g, style, {key2id[k] for k in exp}, on, off, text, sc.project, plain))
            if exp:
                on, off, plain = cands(text, other, q)
                rows.append(Row(g, "unrelated", set(), on, off, text, other.project, plain))
    return rows, conn, projs


# --- scoring ---------------------------------------------------------------------------------


def decide(cs: list, p: dict) -> tuple:
    """(whole ids, told ids, characters) for one need's candidates: recalld.core.tiers.choose."""
    from recalld.core import tiers

    objs = [tiers.Cand(c[0], "", "", None, c[1], c[2], "") for c in cs]
    whole, told = tiers.choose(objs, tier_config(p))
    by = {c[0]: c for c in cs}
    chars = sum(by[c.id][3] for c in whole) + sum(
        _tell_chars(c.id, by[c.id][5], by[c.id][6], p["chars"], k == 0) for k, c in enumerate(told))
    return [c.id for c in whole], [c.id for c in told], chars


def measure(rows: list, p: dict, mode: str = "on") -> dict:
    """{style: figures} for `mode` ("on": semantic channel on, "off": lexical only), and the
    characters per prompt with an answer and without one."""
    acc: dict = {}
    for r in rows:
        cs = getattr(r, mode)
        whole, told, chars = decide(cs, p)
        proj = {x[0]: x[4] for x in cs}
        a = acc.setdefault(r.style, [0, 0, 0, 0, 0])  # n, whole, told, chars, other project
        a[0] += 1
        a[3] += chars
        a[4] += sum(proj[i] != r.project for i in whole + told)
        if r.expected & set(whole):
            a[1] += 1
        elif r.expected & set(told):
            a[2] += 1
    out = {}
    for st, (n, w, t, chars, others) in sorted(acc.items()):
        fig = {"n": n, "chars_per_prompt": round(chars / n, 1), "other_project": others}
        if st not in QUIET:
            fig.update({"reached": round((w + t) / n, 3), "reached_whole": round(w / n, 3),
                        "reached_told": round(t / n, 3)})
        out[st] = fig
    for name, sts in (("with_answer_chars", [s for s in acc if s not in QUIET]), ("no_answer_chars", [s for s in acc if s in QUIET])):
        n = sum(acc[s][0] for s in sts)
        if n:
            out[name] = round(sum(acc[s][3] for s in sts) / n, 1)
    return out


def admissible(m_on: dict, m_off: dict) -> bool:
    for m in (m_on, m_off):
        if "lexical" in m and m["lexical"]["reached"] < 1.0:
            return False
        if any(st in m and m[st]["chars_per_prompt"] > NO_ANSWER_CHARS for st in QUIET):
            return False
    return True


def table(rows: list) -> dict:
    """{grid values: {project: (figures semantic on, off)}}: every fold reads the same."""
    floor = shipped()["floor"]
    by: dict = {}
    for r in rows:
        by.setdefault(r.group, []).append(r)
    out = {}
    for vals in itertools.product(*GRID.values()):
        p = dict(zip(GRID, vals), floor=floor)
        out[vals] = {g: (measure(rs, p, "on"), measure(rs, p, "off")) for g, rs in by.items()}
    return out


def fit(tab: dict, groups: list) -> "tuple[dict | None, dict | None]":
    """The admissible setting on `groups` (every one of them on its own) that ranks best."""
    best, best_key = None, None
    for vals, per in tab.items():
        if not all(admissible(*per[g]) for g in groups):
            continue
        on = [per[g][0] for g in groups]
        para = [m["paraphrased"] for m in on if "paraphrased" in m]
        n = sum(x["n"] for x in para) or 1
        off_para = [per[g][1]["paraphrased"] for g in groups if "paraphrased" in per[g][1]]
        whole = sum(m[st]["reached_whole"] * m[st]["n"] for m in on for st in ("judge-set", "paraphrased") if st in m)
        key = (min((x["reached"] for x in para), default=0), round(sum(x["reached"] * x["n"] for x in para) / n, 3),
               round(sum(x["reached"] * x["n"] for x in off_para) / n, 3), dict(zip(GRID, vals))["chars"],
               sum(m["lexical"]["reached_whole"] for m in on if "lexical" in m), round(whole, 3),
               -sum(m.get("unanswerable", {}).get("chars_per_prompt", 0) for m in on))
        if best_key is None or key > best_key:
            best, best_key = (dict(zip(GRID, vals), floor=shipped()["floor"]), per), key
    return best if best else (None, None)


def curve(tab: dict, groups: list) -> list:
    """Per tells.max and tells.chars at the shipped gates: the worst project's paraphrased reach
    (semantic on) and the most a project's prompts with no answer cost on average."""
    sh = shipped()
    out = []
    for vals, per in tab.items():
        p = dict(zip(GRID, vals))
        if (p["tell_floor"], p["min_cos"]) != (sh["tell_floor"], sh["min_cos"]):
            continue
        on = [per[g][0] for g in groups]
        out.append({"max": p["max"], "chars": p["chars"],
                    "worst_paraphrased": min(m["paraphrased"]["reached"] for m in on if "paraphrased" in m),
                    "worst_unanswerable_chars": max(m["unanswerable"]["chars_per_prompt"] for m in on if "unanswerable" in m),
                    "worst_unrelated_chars": max(m["unrelated"]["chars_per_prompt"] for m in on if "unrelated" in m),
                    "lexical_reached": min(m["lexical"]["reached"] for m in on if "lexical" in m)})
    return out


def validate(rows: list, tab: dict) -> dict:
    """Leave one project out: each project's needs decided by the setting fitted on the rest;
    the pooled held-out figures count every need once, by the fold that left it out."""
    groups = sorted({r.group for r in rows})
    folds, held = [], {"on": [], "off": []}
    for g in groups:
        p, _ = fit(tab, [x for x in groups if x != g])
        test = [r for r in rows if r.group == g]
        folds.append({"held_out": g, "fitted": p,
                      "fitted_figures": {m: measure([r for r in rows if r.group != g], p, m) for m in ("on", "off")}
                      if p else None,
                      "held_out_figures": {m: measure(test, p, m) for m in ("on", "off")} if p else None,
                      "shipped_on_held_out": {m: measure(test, shipped(), m) for m in ("on", "off")}})
        if p:
            for m in ("on", "off"):
                held[m] += [(r, p) for r in test]
    pooled = {}
    for m in ("on", "off"):
        pooled[m] = _pooled(held[m], m)
    return {"folds": folds, "pooled_held_out": pooled}


def _pooled(pairs: list, mode: str) -> dict:
    """measure() over needs each decided by its own fold's setting."""
    out = {}
    for st in sorted({r.style for r, _ in pairs}):
        ps = [(r, p) for r, p in pairs if r.style == st]
        parts = [measure([r], p, mode)[st] for r, p in ps]
        n = len(ps)
        fig = {"n": n, "chars_per_prompt": round(sum(x["chars_per_prompt"] for x in parts) / n, 1),
               "other_project": sum(x["other_project"] for x in parts)}
        if st not in QUIET:
            for k in ("reached", "reached_whole", "reached_told"):
                fig[k] = round(sum(x[k] for x in parts) / n, 3)
        out[st] = fig
    for name, quiet in (("with_answer_chars", False), ("no_answer_chars", True)):
        sts = [st for st, v in out.items() if isinstance(v, dict) and (st in QUIET) == quiet]
        n = sum(out[st]["n"] for st in sts)
        if n:
            out[name] = round(sum(out[st]["chars_per_prompt"] * out[st]["n"] for st in sts) / n, 1)
    return out


def fusion_free(rows: list) -> dict:
    """Whether the fusion's fitted weights change what reaches the agent: every need decided
    (shipped settings) on the fused order and on the same candidates unweighted."""
    same = sum(decide(r.on, shipped()) == decide(r.plain, shipped()) for r in rows)
    return {"same": same, "differ": len(rows) - same}


def hook_agrees(rows: list, conn, projs: dict) -> dict:
    """The semantic-off decision here against the hook's own memory_items (shipped settings,
    through a hook context on the same store), need by need."""
    from recalld.bench import locomo
    from recalld.core import settings

    cfg = {**settings.DEFAULTS, "semantic_wait_ms": 0}
    scopes = {sc.project: sc for sc, _, _ in projs.values()}
    same = differ = 0
    for r in rows:
        items = locomo.prestep_items(conn, r.text, scopes[r.project], cfg)
        got = ([int(i.key[2:]) for i in items if i.meta.get("tier") != "tell"],
               [int(i.key[2:]) for i in items if i.meta.get("tier") == "tell"])
        whole, told, _ = decide(r.off, shipped())
        if got == (whole, told):
            same += 1
        else:
            differ += 1
    return {"same": same, "differ": differ}


# --- the judge's middle band --------------------------------------------------------------------


def judge_band(rows: list, threshold: "float | None" = None) -> dict:
    """tells.judge_floor, leave-one-project-out on fit_judge rows: every need is scored by the
    judge models fitted without its group (fit_judge.logo); up to tells.max candidates below the
    threshold and at or above the band's floor are told. The band's floor is the lowest of the
    grid at which, on the groups fitted on, a need nothing answers costs at most what a prompt
    without an answer may (NO_ANSWER_CHARS, in tell lines of tells.chars)."""
    from recalld.bench import fit_judge
    from recalld.core import settings
    from recalld.judge import calibrated

    threshold = float(settings.DEFAULTS["judge"]["threshold"] if threshold is None else threshold)
    n_tells = int(settings.DEFAULTS["tells"]["max"])
    per_group = fit_judge.logo(rows)
    scored = []
    for r in rows:
        models = per_group[r["group"]]
        cands = fit_judge._described(r, True, True, calibrated.LM_TOP, models)
        ps = calibrated.probabilities(cands, True, True, models, r.get("need", ""))
        scored.append((r, [(p, c["good"]) for p, c in zip(ps, cands) if p is not None]))
    floors = [round(0.05 * i, 2) for i in range(1, int(threshold / 0.05) + 1)] + [1.01]

    def figs(sub, low):
        ans = [x for x in sub if x[0]["answerable"]]
        quiet = [x for x in sub if not x[0]["answerable"]]
        passed = told = tells_quiet = lines = right = 0
        for r, ps in ans:
            top = max(ps, key=lambda t: t[0], default=None)
            band = sorted([t for t in ps if low <= t[0] < threshold], key=lambda t: -t[0])[:n_tells]
            lines += len(band)
            right += sum(1 for _, g in band if g)
            if top is not None and top[0] >= threshold and top[1]:
                passed += 1
            elif any(g for _, g in band):
                told += 1
        for r, ps in quiet:
            n = len([t for t in ps if low <= t[0] < threshold][:n_tells])
            tells_quiet += n
            lines += n
        return {"answerable": len(ans), "passed": passed, "told": told,
                "reached": round((passed + told) / len(ans), 3) if ans else None,
                "quiet": len(quiet), "tells_per_quiet_need": round(tells_quiet / len(quiet), 3) if quiet else None,
                "tells": lines, "right_tells": right}

    # a queued tell is one line of tells.chars with how to open it: the band may cost a need
    # nothing answers at most what a prompt without an answer may, that many lines on average
    from recalld.core import tiers

    limit = NO_ANSWER_CHARS / (int(settings.DEFAULTS["tells"]["chars"]) + len(tiers.OPEN_HINT.format(id=100)) + 1)

    def choose(sub):
        ok = [f for f in floors if (figs(sub, f)["tells_per_quiet_need"] or 0) <= limit]
        return min(ok) if ok else 1.01

    groups = sorted({r["group"] for r, _ in scored})
    folds = []
    for g in groups:
        low = choose([x for x in scored if x[0]["group"] != g])
        folds.append({"held_out": g, "fitted": low, "held_out_figures": figs([x for x in scored if x[0]["group"] == g], low)})
    return {"threshold": threshold, "fitted_on_all": choose(scored), "all_at_fit": figs(scored, choose(scored)),
            "folds": folds, "curve": {f: figs(scored, f) for f in floors}}


def run(quick: bool = False) -> dict:
    from recalld.bench.semantic import Cached
    from recalld.model import embed
    from recalld.model.errors import LLMError

    try:
        enc = embed.require()
    except LLMError as e:
        raise Unavailable(f"no embedder: {e}") from None
    tmp = Path(tempfile.mkdtemp(prefix="recalld-bench-tells-"))
    try:
        rows, conn, projs = collect(Cached(enc), tmp)
        out = {"model": enc.model, "shipped": shipped(), "needs": len(rows),
               "groups": sorted({r.group for r in rows}),
               "shipped_figures": {m: measure(rows, shipped(), m) for m in ("on", "off")},
               "hook_agrees_semantic_off": hook_agrees(rows, conn, projs),
               "fusion_weights_change_nothing": fusion_free(rows)}
        conn.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tab = table(rows)
    groups = sorted({r.group for r in rows})
    p, _ = fit(tab, groups)
    out["fitted_on_all"] = {"params": p, "figures": {m: measure(rows, p, m) for m in ("on", "off")} if p else None,
                            "by_project": {g: {m: measure([r for r in rows if r.group == g], p, m)
                                               for m in ("on", "off")} for g in groups} if p else None}
    out["shipped_by_project"] = {g: {m: measure([r for r in rows if r.group == g], shipped(), m) for m in ("on", "off")}
                                 for g in groups}
    out["validation"] = validate(rows, tab)
    out["curve"] = curve(tab, groups)
    out["notes"] = ["characters: what the packer places (items and their separators; the <recalld> frame "
                    "is not counted); a need reached whole is not counted as told",
                    "semantic on: the daemon's fused order (recalld.daemon.query.fuse) with its cosines; "
                    "off: the lexical search alone, checked against the hook's memory_items"]
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--judge-rows":
        from recalld.bench import fit_judge

        print(json.dumps(judge_band(fit_judge.read_rows(argv[1:])), indent=1))
        return 0
    from recalld.bench.run import main_one

    return main_one("tells", argv=argv)


if __name__ == "__main__":
    sys.exit(main())

"""Judge quality: can it say "nothing", and does it pass the right memory? Side by side, in one run.

Two sets (recalld.bench.fit_judge collects both with the real signals: the scoped search's top
judge.max_candidates, the embedder's cosines, the small model's query likelihood and
re-ranking gain on every candidate):

- coding: recalld/bench/data/coding_needs.json, memories and mid-task needs of three projects,
  a third of the needs answered by nothing in the store;
- locomo: a sample of LoCoMo's development split, answerable questions (categories 1-4)
  against adversarial ones (category 5), each conversation its own project.

On the same candidates of the same run, each rule decides what passes:

- the pre-step floor alone (coverage >= settings floor): its first candidate, and everything
  above the floor (what the pre-step injects);
- the judge before this one: query likelihood >= 1.3, the first in re-ranked order, every
  candidate read by the model;
- the calibrated judge without its subject group (calibrated.SUBJECT_FEATURES; the judge
  before the group), held out, without its set features (calibrated.SET_FEATURES; the judge
  before them), held out, and without its dialogue models (a conversation's turns scored as
  notes; the judge before them), held out;
- the calibrated judge (recalld.judge.calibrated, the rule recalld.judge.judge.decide applies,
  the model reading only calibrated.LM_TOP candidates), with and without the embedding signal:
  with the shipped constants (fitted on these sets: in-sample), and leave-one-group-out (each
  project's or conversation's needs judged by a model fitted without them: the held-out figure).

Per rule and set: the expected memory passed (answerable needs), silent (unanswerable),
precision, wrong passes per need, each share with its 95% Wilson interval. The judge's
targets (coding: silent >= 0.8, expected >= 0.75, wrong passes <= 0.1 per need; LoCoMo: silent
>= 0.6 on adversarial questions, precision >= 0.6) are checked on the held-out figures.

    recalld bench judge [--quick] [--data PATH] [--json]
    python3 -m recalld.bench.judge [--quick] [--n N] [--seed S] [--rows FILE] [--from-rows FILE ...]

The LoCoMo data is read where it lies (CC BY-NC 4.0), never copied into the repository.
"""

import json
import statistics
import sys
import time
from pathlib import Path

from recalld.bench import fit_judge as fj
from recalld.bench.common import Unavailable
from recalld.core import settings
from recalld.judge import calibrated

QUICK_N = 12  # LoCoMo questions in --quick (the coding set is always whole)
DEFAULT_N = 150
TARGETS = {"coding": {"silent_unanswerable": 0.8, "expected_passed": 0.75, "wrong_per_need": 0.1},
           "locomo": {"silent_unanswerable": 0.6, "precision": 0.6}}


def met(o: dict, targets: dict) -> dict:
    """{figure: (value, target, met)} for one set's outcomes."""
    out = {}
    for k, t in targets.items():
        v = o[k] if k == "wrong_per_need" else (o[k] or {}).get("share")
        out[k] = {"value": v, "target": t, "met": None if v is None else (v <= t if k == "wrong_per_need" else v >= t)}
    return out


def rules(rows: list, threshold: float, floor: float) -> dict:
    """{name: passes(row)} for every rule compared, the held-out ones fitted here."""
    per_group = fj.logo(rows)
    without = fj.logo(rows, subject=False, dialogue=False)
    before = fj.logo(rows, without=calibrated.SET_FEATURES, dialogue=False)
    notes_only = fj.logo(rows, dialogue=False)
    return {
        "floor (top-1 >= floor)": fj.floor_top1(floor),
        "floor (all >= floor, the pre-step)": fj.floor_all(floor),
        "judge before (ql >= 1.3, re-ranked first)": fj.old_judge(),
        "calibrated without the subject group, embedder, held out": fj.held_out(without, True, threshold),
        "calibrated without the set features, embedder, held out": fj.held_out(before, True, threshold),
        "calibrated without the dialogue models, embedder, held out": fj.held_out(notes_only, True, threshold),
        "calibrated, embedder, held out": fj.held_out(per_group, True, threshold),
        "calibrated, no embedder, held out": fj.held_out(per_group, False, threshold),
        "calibrated, embedder, shipped": fj.new_judge(True, threshold),
        "calibrated, no embedder, shipped": fj.new_judge(False, threshold),
    }


def model_time(rows: list) -> dict:
    """Decodes per need: the judge before read every candidate plus the no-memory baseline; this
    one reads calibrated.LM_TOP of them."""
    n = [len(r["cands"]) for r in rows if r["cands"]]
    return {"decodes_per_need_before": round(statistics.mean(x + 1 for x in n), 2) if n else None,
            "decodes_per_need_now": round(statistics.mean(min(x, calibrated.LM_TOP) + 1 for x in n), 2) if n else None}


def run(quick: bool = False, data=None, n: "int | None" = None, seed: int = 0,
        rows_file: "str | None" = None, from_rows: "list | None" = None) -> dict:
    cfg = settings.load()
    threshold = float(settings.DEFAULTS["judge"]["threshold"])
    floor = float(settings.DEFAULTS["floor"])
    t0 = time.perf_counter()
    timing = {}
    if from_rows:
        rows = fj.read_rows(from_rows)
        source = f"rows read from {', '.join(from_rows)} (collected by recalld.bench.fit_judge)"
    else:
        rt, enc, why = fj.load_models(cfg)
        if enc is None:
            raise Unavailable(f"no embedder ({why}): the comparison needs the embedding signal")
        try:
            t1 = time.perf_counter()
            rows = fj.collect_coding(rt, enc)
            timing["coding_s"] = round(time.perf_counter() - t1, 1)
            t1 = time.perf_counter()
            try:
                rows += fj.collect_locomo(rt, enc, n or (QUICK_N if quick else DEFAULT_N), seed, data)
            except Unavailable as e:
                timing["locomo"] = f"skipped: {e}"
            timing["locomo_s"] = round(time.perf_counter() - t1, 1)
        finally:
            rt.close()
        source = "collected in this run"
        if rows_file:
            Path(rows_file).write_text(json.dumps(rows), encoding="utf-8")
    sets = sorted({r["dataset"] for r in rows})
    compared = {}
    for name, passes in rules(rows, threshold, floor).items():
        compared[name] = fj.by_set(rows, passes)
    held = {s: met(compared["calibrated, embedder, held out"][s], TARGETS[s]) for s in sets if s in TARGETS}
    held_no = {s: met(compared["calibrated, no embedder, held out"][s], TARGETS[s]) for s in sets if s in TARGETS}
    curve = {}
    per_group = fj.logo(rows)
    for t in fj.THRESHOLDS:
        curve[f"{t:.2f}"] = fj.by_set(rows, fj.held_out(per_group, True, t))
    return {
        "source": source,
        "threshold": threshold,
        "floor": floor,
        "lm_top": calibrated.LM_TOP,
        "sets": {s: {"needs": sum(r["dataset"] == s for r in rows),
                     "answerable": sum(r["dataset"] == s and r["answerable"] for r in rows),
                     "groups": sorted({r["group"] for r in rows if r["dataset"] == s}),
                     "expected_in_candidates": round(
                         sum(any(c["good"] for c in r["cands"]) for r in rows if r["dataset"] == s and r["answerable"])
                         / max(1, sum(r["dataset"] == s and r["answerable"] for r in rows)), 3)} for s in sets},
        "compared": compared,
        "targets_held_out_embedder": held,
        "targets_held_out_no_embedder": held_no,
        "held_out_curve_embedder": curve,
        **model_time(rows),
        "wall_s": round(time.perf_counter() - t0, 1),
        **timing,
        "table": table(compared, sets),
    }


def table(compared: dict, sets: list) -> list:
    """Markdown rows: rule | set | expected passed [CI] | silent [CI] | precision [CI] | wrong/need."""
    def f(x):
        if not x or x.get("share") is None:
            return "-"
        lo, hi = x["ci95"]
        return f"{x['share']:.3f} [{lo:.2f}, {hi:.2f}]"
    out = ["| rule | set | expected memory passed | silent on unanswerable | precision | wrong passes / need |",
           "|---|---|---|---|---|---|"]
    for name, per in compared.items():
        for s in sets:
            o = per[s]
            out.append(f"| {name} | {s} | {f(o['expected_passed'])} | {f(o['silent_unanswerable'])} | "
                       f"{f(o['precision'])} | {o['wrong_per_need']} |")
    return out


OPTIONS = (
    ("--n", {"type": int, "dest": "n", "help": f"LoCoMo questions to sample (default {DEFAULT_N}; --quick: {QUICK_N})"}),
    ("--seed", {"type": int, "default": 0, "dest": "seed"}),
    ("--rows", {"metavar": "FILE", "dest": "rows_file", "help": "also write the collected rows as JSON here"}),
    ("--from-rows", {"metavar": "FILE", "dest": "from_rows", "nargs": "+",
                     "help": "judge rows collected before (recalld.bench.fit_judge collect) instead of running the models"}),
)

if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("judge", OPTIONS))

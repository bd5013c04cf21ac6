"""Capture against labels: how many of the proposer's drafts a person would approve, and what they miss.

    recalld bench capture [--data DIR] [--json]
    python -m recalld.bench.capture [--data DIR] [--labels FILE] [--json] [--curve]

The proposer runs the way the daemon runs it, one pass per turn (the events since the previous
turn end; a finished session's last turn too, as `propose --history` reads it), with the
settings' defaults, in a fresh RECALLD_HOME, over two labelled sets: the shared Claude Code
transcripts (the shared data folder's data/transcripts/claude-code with benchmarks/capture_labels.json) and the
real sessions of other projects committed in benchmarks/capture/ (labels.json, SOURCES.md);
`--data/--labels` name one set instead (Claude Code, Codex or Gemini CLI transcripts with a
labels file of the same shape). A label is {file, line, uuid, also: [other lines saying the
same], statement, strength 0-3, keep}; the older file's labels are all strength 2, keep.

A stored proposal matches a label of its transcript when it quotes the statement (rapidfuzz
similarity of the two, word order ignored, >= MATCH) and was said on one of the label's lines,
or when the two are near-identical (>= MATCH_ANYWHERE) wherever it was said. Figures:

- precision: proposals matching a label marked worth keeping / proposals (target >= 0.6);
- recall: labels of strength >= 2 matched by a proposal / such labels (target >= 0.5), and per
  strength (`recall_by_strength`); where the rest went (`strong_labels_by_fate`): a draft of it
  rejected (the reason), a candidate outranked in its chunk, a statement the miner passed over
  (why: a document, reasoning, of the moment, trivia, below the cue floor, no claim...), or
  not among the statements read (a command, a tool's output, a code block, a table, or a
  statement cut so differently that it no longer matches);
- proposals per 20 substantive turns (a turn the user's prompt opened, a slash command's body
  too, with at least mine.SUBSTANTIVE statements; target <= 12);
- duplicates: pairs of one session's proposals that match the same label or are >= DUPLICATE
  alike (target 0);
- kinds_agree: of the proposals matching a label that names a kind, how many have its kind;
- ungrounded words: content words of stored proposals that their turn never says (must be 0);
- failed passes: outcome error or timeout (must be 0);
- every figure per source project (`groups`), over the projects outside FIT_PROJECTS
  (`held_out`: the figures that count, no rule was read off those transcripts), over each
  round of sessions labelled blind after a change to capture (`fresh`, `fresh2`, ...: held out
  too, and no decision saw their figures before they were first measured) and over the
  projects in it (`development`), with proposals and good ones per source (`by_role`: the
  user, the agent's text, a subagent's report, a failing command...);
- seconds per pass, model seconds, sessions per minute; the model's separation (AUC of its
  log-odds, and of the cue score, for candidates matching a label worth keeping against the rest);
- the default (cue ranking) and, when the embedded model is there, the same passes with its
  surprise in the rank (`with_model`, `proposals.model_weight` 1), with the separations per split
  and per project (`auc_by_split`, `auc_by_project`);
- with `--curve`, the proposer rerun at each CURVE setting (per-turn cap, score gate): the
  development projects' figures beside the held-out ones, the trade-off the default was
  chosen on (development side only).

Every stored proposal is listed (file, line, kind, matched label) so a reader can judge
precision by reading, not only by the labels (docs/evaluation.md, "Capture", reports such a
reading).
"""

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from recalld.bench.common import Unavailable, pct, restore_home, source_root, transcripts_dir

MATCH = 60
MATCH_ANYWHERE = 85


def labels_path(labels=None) -> Path:
    if labels:
        return Path(labels)
    root = source_root()
    p = root / "benchmarks" / "capture_labels.json" if root else None
    if p is None or not p.exists():
        raise Unavailable("no capture labels (benchmarks/capture_labels.json in a source checkout; pass --labels)")
    return p


def committed_set() -> "tuple[Path, Path] | None":
    """The labelled transcripts committed with the source (benchmarks/capture/): other
    projects and agents, set aside before any rule was changed, so they are outside every fit."""
    root = source_root()
    d = root / "benchmarks" / "capture" if root else None
    return (d, d / "labels.json") if d is not None and (d / "labels.json").exists() else None


def datasets(data=None, labels=None) -> list:
    """[(directory, spec)]: the shared transcripts with their labels (when the shared data folder is there),
    and the committed set. `--data/--labels` name one set instead."""
    if data or labels:
        return [(Path(data) if data else transcripts_dir(), _spec(labels_path(labels)))]
    out = []
    try:
        out.append((transcripts_dir(), _spec(labels_path())))
    except Unavailable:
        pass
    got = committed_set()
    if got:
        out.append((got[0], _spec(got[1])))
    if not out:
        raise Unavailable("no labelled transcripts (the shared data folder or benchmarks/capture/)")
    return out


def _spec(path: Path) -> dict:
    """A labels file, each label completed: the older file marks only statements worth
    remembering (strength 2, keep), and its source project is the name before the first '-'."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    projects = {t["file"]: t.get("project") or group_of(t["file"]) for t in spec.get("transcripts") or []}
    files = [t["file"] for t in spec.get("transcripts") or []] or list(spec.get("read") or [])
    spec["files"] = files
    spec["projects"] = {f: projects.get(f) or group_of(f) for f in files}
    # Sessions labelled blind after a change to capture ("split": "fresh", then "fresh2", ... one
    # name per round): held out too, and each round reported on its own, since no decision was
    # taken with its figures in sight until it was first measured.
    spec["fresh"] = {t["file"]: t["split"] for t in spec.get("transcripts") or []
                     if str(t.get("split") or "").startswith("fresh")}
    for lab in spec["labels"]:
        lab.setdefault("strength", 2)
        lab.setdefault("keep", True)
    return spec


def turns_of(path: Path) -> list:
    """The file's turns, its last one too: these are finished sessions, whose last turn often
    has no turn-end record (the daemon waits for one; `propose --history` does not)."""
    from recalld.daemon import transcripts

    return transcripts.file_turns(str(path), unfinished=True)


def similarity(a: str, b: str) -> float:
    from rapidfuzz import fuzz

    from recalld.capture.policies import _norm

    na, nb = _norm(a), _norm(b)
    if not na or not nb:
        return 0.0
    short, long_ = sorted((na, nb), key=len)
    # A proposal may quote part of a labelled statement or hold it inside an error -> fix span.
    return float(max(fuzz.token_sort_ratio(na, nb), fuzz.partial_ratio(short, long_) if len(short) >= 30 else 0))


def match(text: str, lines: set, labels: list) -> "int | None":
    """The index of the label a proposal says, else None. A label said on the proposal's own
    lines goes first: two statements alike in words (the same sentence after two commands)
    are told apart by where they were said."""
    best, best_i = (False, 0.0), None
    for i, lab in enumerate(labels):
        sim = similarity(text, lab["statement"])
        on_line = bool(lines & ({lab["line"]} | set(lab.get("also") or [])))
        if (on_line and sim >= MATCH) or sim >= MATCH_ANYWHERE:
            if (on_line, sim) > best:
                best, best_i = (on_line, sim), i
    return best_i


def auc(pos: list, neg: list) -> "float | None":
    """P(a random positive scores above a random negative), ties counted half."""
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return round(wins / (len(pos) * len(neg)), 3)


# The projects rules, thresholds and weights were read off: the shared spotter and viewer, then
# sungather (the committed set was split before its proposals were read) and charmanalysis (its
# proposals read after a first held-out measurement; docs/evaluation.md, "Capture", gives both), and of
# the whole sessions of other authors added later, per agent the project whose name sorts first (random,
# coda; a rule fixed before any of their proposals was seen), speakfree and parkinglot (their
# proposals read after a first held-out measurement, which docs/evaluation.md gives), then the
# projects of the seven blind rounds (cpolar; entire; shannon and graphmonitor; ohmyposh,
# contexteval and agentv; napolimatcha, medgemma and chkit), their drafts read after each
# round's first run, which docs/evaluation.md gives. The rest are held out.
FIT_PROJECTS = ("spotter", "viewer", "sungather", "charmanalysis", "random", "coda", "speakfree", "parkinglot",
                "cpolar", "entire", "shannon", "graphmonitor", "ohmyposh", "contexteval", "agentv",
                "napolimatcha", "medgemma", "chkit")
DUPLICATE = 88  # rapidfuzz similarity at which two proposals of one session say the same thing


# The settings of the trade-off curve (`--curve`): (MAX_PER_TURN, GATE) of the proposer, from
# loose to tight; each is a whole run with the model, reported on the development projects and
# held out, so the choice of the default is visible and made on the development side alone.
CURVE = ((12, 1.5), (12, 2.0), (12, 2.5), (12, 3.0), (12, 3.5), (4, 1.5), (2, 1.5), (1, 1.5), (4, 2.5), (2, 2.5),
         (1, 2.5))


def trade_off(files: list, by_file: dict, projects: dict, runtime) -> list:
    from recalld.capture import proposer

    keep = proposer.MAX_PER_TURN, proposer.GATE
    dev = [f for f in files if (projects.get(f.name) or group_of(f.name)) in FIT_PROJECTS]
    rows = []
    try:
        for cap, gate in CURVE:
            proposer.MAX_PER_TURN, proposer.GATE = cap, gate
            got = _variant(files, by_file, projects, runtime)
            listed = got["listed"]
            fit = _figures(dev, by_file, [x for x in listed if x["project"] in FIT_PROJECTS], got["matched"],
                           got["turns_by"], got["subst_by"])
            rows.append({"max_per_turn": cap, "gate": gate,
                         "development": {k: fit[k] for k in ("proposals", "precision", "recall", "per_20_substantive_turns", "duplicates")},
                         "held_out": {k: got["figures"]["held_out"][k] for k in ("proposals", "precision", "recall",
                                                                                 "per_20_substantive_turns", "duplicates")}
                         if got["figures"]["held_out"] else None})
    finally:
        proposer.MAX_PER_TURN, proposer.GATE = keep
    return rows


def run(quick: bool = False, data=None, labels=None, curve: bool = False) -> dict:
    files, by_file, projects, fresh = [], {}, {}, {}
    for tdir, spec in datasets(data, labels):
        names = spec["files"] or sorted(p.name for p in tdir.glob("*.jsonl"))
        missing = [n for n in names if not (tdir / n).exists()]
        if missing:
            raise Unavailable(f"labelled transcripts not found in {tdir}: {', '.join(missing[:3])}")
        files.extend(tdir / n for n in names)
        projects.update({n: spec["projects"].get(n) or group_of(n) for n in names})
        fresh.update(spec.get("fresh") or {})
        for lab in spec["labels"]:
            by_file.setdefault(lab["file"], []).append(lab)
    from recalld.model import runtime as llm
    from recalld.model.errors import Unavailable as NoModel

    if quick:
        files = files[:3]
    # The product's default ranks by cues (proposals.model_weight 0); the embedded model's
    # ranking (weight 1) is run beside it when a model is there, to show what it would change.
    default = _variant(files, by_file, projects, False, fresh=fresh)
    try:
        rt = llm.require_runtime("proposer", {"models": {}})
    except NoModel as e:
        rt, with_model = None, {"error": f"no proposer model: {e}"}
    if rt is not None:
        got = _variant(files, by_file, projects, rt, model_weight=1.0, fresh=fresh)
        keys = ("proposals", "precision", "recall", "per_20_substantive_turns", "duplicates", "pass_s",
                "model_s_per_judged_pass", "sessions_per_minute", "held_out", *sorted(set(fresh.values())),
                "development", "groups",
                "auc_by_split", "auc_by_project", "model_auc")
        with_model = {"model": rt.name, "machine": f"{os.cpu_count()} CPUs, llama.cpp threads={rt.n_threads}",
                      **{k: got["figures"][k] for k in keys}}
    out = {"machine": f"{os.cpu_count()} CPUs",
           "labels": sum(len(by_file.get(f.name, [])) for f in files), "transcripts": len(files),
           "fit_on": list(FIT_PROJECTS),
           **default["figures"],
           "with_model": with_model,
           "proposals_listed": default["listed"],
           "targets": {"held_out precision": ">= 0.6", "held_out recall (strength >= 2)": ">= 0.5",
                       "per_20_substantive_turns": "<= 12", "duplicates": "0",
                       "ungrounded_words": "0", "failed_passes": "0", "pass_s_p50": "<= 10"}}
    if curve:
        out["curve"] = trade_off(files, by_file, projects, False)
    out["notes"] = [
        "One pass per turn, as the daemon runs it (a finished session's last turn too, as --history "
        "reads it); a fresh RECALLD_HOME per variant, so a proposal already pending suppresses a "
        "near-duplicate in a later turn, as it would live.",
        "precision: proposals matching a label marked worth keeping / proposals; recall: labels of "
        "strength >= 2 matched / such labels; duplicates: pairs of proposals of one session that match "
        f"the same label or are >= {DUPLICATE} alike.",
        f"held_out: the projects outside {', '.join(FIT_PROJECTS)} (no rule was read off them).",
        "The figures are the default's (cue ranking, proposals.model_weight 0); with_model: the same "
        "passes with the embedded model's surprise added to the rank (weight 1), and its separations.",
    ]
    return out


def _variant(files: list, by_file: dict, projects: dict, runtime, model_weight: float = 0.0,
             fresh: "dict | None" = None) -> dict:
    from recalld.capture import mine, policies, proposer

    import time

    old_home = os.environ.get("RECALLD_HOME")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RECALLD_HOME"] = str(Path(tmp) / "home")
        try:
            results, listed, matched_labels, rejected_labels = [], [], set(), {}
            lost: dict = {}  # (file, label) -> where a label worth keeping fell out, when no draft said it
            judged_pos, judged_neg, cue_pos, cue_neg = [], [], [], []
            scored = []  # (held out, matches a label worth keeping, cue score, model term, final)
            ungrounded, model_s = 0, []
            turns_by, subst_by = {}, {}
            for f in files:
                labels = by_file.get(f.name, [])
                for turn in turns_of(f):
                    if not turn:
                        continue
                    turns_by[f.name] = turns_by.get(f.name, 0) + 1
                    mined = mine.mine(turn)
                    subst_by[f.name] = subst_by.get(f.name, 0) + min(1, mine.substantive_turns(mined))
                    res = proposer.run_pass(str(f), session=turn[0].session, events=turn, origin="bench",
                                            cfg={"proposals": {"model_weight": model_weight}},
                                            runtime=runtime)
                    results.append(res)
                    if res.judged:
                        model_s.append(res.model_ms / 1000)
                    held = (projects.get(f.name) or group_of(f.name)) not in FIT_PROJECTS
                    for sp in res.ranked:
                        lab = match(sp.text, {sp.line, sp.line_to or sp.line}, labels)
                        hit = lab is not None and labels[lab]["keep"]
                        (cue_pos if hit else cue_neg).append(sp.score)
                        if sp.model is not None:
                            (judged_pos if hit else judged_neg).append(sp.model)
                        scored.append((held, hit, sp.score, sp.model, sp.final, projects.get(f.name) or group_of(f.name)))
                    for d, reason in res.rejected:
                        lab = match(d.text, {d.line, d.line_to or d.line}, labels)
                        if lab is not None:
                            rejected_labels.setdefault((f.name, lab), reason)
                    # Earlier stages: a candidate not among the best of its chunk, a statement
                    # read and passed over (why), as the miner says.
                    ranked = {(sp.line, sp.text) for sp in res.ranked}
                    for why, line, text in [("outranked", sp.line, sp.text) for sp in mined.spans
                                            if (sp.line, sp.text) not in ranked] + mined.passed:
                        lab = match(text, {line}, labels)
                        if lab is not None:
                            lost.setdefault((f.name, lab), why)
                    for pid, d in zip(res.stored_ids, res.kept):
                        lab = match(d.text, {d.line, d.line_to or d.line}, labels)
                        if lab is not None:
                            matched_labels.add((f.name, lab))
                        words = [w for w in policies._content_words(d.text)
                                 if w not in set(policies._WORD.findall(mined.text.lower()))]
                        ungrounded += len(words)
                        listed.append({"file": f.name, "project": projects.get(f.name) or group_of(f.name),
                                       "session": turn[0].session, "line": d.line, "line_to": d.line_to,
                                       "kind": d.kind, "role": d.role, "text": d.text, "confidence": d.confidence,
                                       "label": None if lab is None else lab,
                                       "good": lab is not None and labels[lab]["keep"],
                                       "ungrounded": words})
        finally:
            restore_home(old_home)
    wall = time.perf_counter() - t0
    for x in listed:
        lab = x["label"]
        x["label"] = None if lab is None else by_file[x["file"]][lab]["statement"][:80]
        x["label_index"] = lab
    # Where each label worth remembering went: proposed, or the first stage that let it go.
    fates = {(f.name, i): ("proposed" if (f.name, i) in matched_labels else
                           f"rejected: {rejected_labels[(f.name, i)]}" if (f.name, i) in rejected_labels else
                           f"passed over: {lost[(f.name, i)]}" if (f.name, i) in lost else "not among the statements read")
             for f in files for i, lab in enumerate(by_file.get(f.name, [])) if lab["strength"] >= 2}
    secs = [r.duration_ms / 1000 for r in results]
    failed = [r.error for r in results if r.outcome in ("error", "timeout")]
    figures = {
        "turns": sum(turns_by.values()), "substantive_turns": sum(subst_by.values()), "passes": len(results),
        **_figures(files, by_file, listed, matched_labels, turns_by, subst_by, fates),
        "ungrounded_words": ungrounded,
        "failed_passes": len(failed), "failures": failed[:5],
        # Every turn of every session read, parsed and passed, as `propose --history` does.
        "sessions_per_minute": round(len(files) / (wall / 60), 1) if wall else None,
        "megabytes": round(sum(f.stat().st_size for f in files) / 1e6, 2),
        "pass_s": {"p50": _r(pct(secs, 0.5)), "p90": _r(pct(secs, 0.9)), "max": _r(max(secs) if secs else None),
                   "mean": _r(statistics.mean(secs) if secs else None)},
        "model_s_per_judged_pass": {"p50": _r(pct(model_s, 0.5)), "max": _r(max(model_s) if model_s else None)},
        "judged_candidates": len(judged_pos) + len(judged_neg),
        "model_auc": auc(judged_pos, judged_neg), "cue_auc": auc(cue_pos, cue_neg),
        # The same separations per split, over the candidates the model judged, and of the final
        # score (cue + the model's term) the pass ranks by: does the model's term earn its place?
        "auc_by_split": {name: _aucs([x for x in scored if x[0] == want])
                         for name, want in (("development", False), ("held_out", True))},
        "auc_by_project": {g: _aucs([x for x in scored if x[5] == g]) for g in sorted({x[5] for x in scored})},
        "rejections_by_reason": _count(r.rejections for r in results),
    }
    groups = {}
    for g in sorted({projects.get(f.name) or group_of(f.name) for f in files}):
        gf = [f for f in files if (projects.get(f.name) or group_of(f.name)) == g]
        groups[g] = _figures(gf, by_file, [x for x in listed if x["project"] == g], matched_labels, turns_by, subst_by, fates)
    figures["groups"] = groups
    held = [f for f in files if (projects.get(f.name) or group_of(f.name)) not in FIT_PROJECTS]
    figures["held_out"] = _figures(held, by_file, [x for x in listed if x["project"] not in FIT_PROJECTS],
                                   matched_labels, turns_by, subst_by, fates) if held else None
    fresh = fresh or {}
    for split in sorted(set(fresh.values())):
        new = {f.name for f in files if fresh.get(f.name) == split}
        figures[split] = _figures([f for f in files if f.name in new], by_file,
                                  [x for x in listed if x["file"] in new], matched_labels,
                                  turns_by, subst_by, fates) if new else None
    dev = [f for f in files if (projects.get(f.name) or group_of(f.name)) in FIT_PROJECTS]
    figures["development"] = _figures(dev, by_file, [x for x in listed if x["project"] in FIT_PROJECTS],
                                      matched_labels, turns_by, subst_by, fates) if dev else None
    figures["labels_missed"] = [
        {"file": f.name, "line": lab["line"], "strength": lab["strength"], "statement": lab["statement"][:100],
         "why": fates[(f.name, i)]}
        for f in files for i, lab in enumerate(by_file.get(f.name, []))
        if (f.name, i) not in matched_labels and lab["strength"] >= 2]
    return {"figures": figures, "listed": listed, "matched": matched_labels, "turns_by": turns_by, "subst_by": subst_by}


def _aucs(scored: list) -> dict:
    judged = [x for x in scored if x[3] is not None]
    def sep(i, xs):
        return auc([x[i] for x in xs if x[1]], [x[i] for x in xs if not x[1]])
    return {"candidates": len(scored), "judged": len(judged), "cue": sep(2, scored),
            "cue_judged": sep(2, judged), "model_judged": sep(3, judged), "final_judged": sep(4, judged)}


def _figures(files: list, by_file: dict, listed: list, matched_labels: set, turns_by: dict, subst_by: dict,
             fates: "dict | None" = None) -> dict:
    names = {f.name for f in files}
    strong = [(n, i) for n in names for i, lab in enumerate(by_file.get(n, [])) if lab["strength"] >= 2]
    by_strength = {s: [sum(1 for n, i in strong if by_file[n][i]["strength"] == s and (n, i) in matched_labels),
                       sum(1 for n, i in strong if by_file[n][i]["strength"] == s)] for s in (2, 3)}
    good = sum(1 for x in listed if x["good"])
    subst = sum(subst_by.get(n, 0) for n in names)
    # The draft's kind against its label's, where the label names one.
    kinds = [x["kind"] == by_file[x["file"]][x["label_index"]].get("kind") for x in listed
             if x.get("label_index") is not None and by_file[x["file"]][x["label_index"]].get("kind")]
    n = len(listed)
    return {"transcripts": len(names), "turns": sum(turns_by.get(n_, 0) for n_ in names), "substantive_turns": subst,
            "proposals": n, "good_proposals": good,
            "precision": round(good / n, 3) if n else None,
            "labels_strong": len(strong), "labels_matched": sum(1 for k in strong if k in matched_labels),
            "recall": round(sum(1 for k in strong if k in matched_labels) / len(strong), 3) if strong else None,
            # [matched, labels] of strength 2 and of strength 3 ("a later session clearly needs it")
            "recall_by_strength": {str(k): v for k, v in by_strength.items()},
            # the labels of strength >= 2 by where they went (a label is said once, wherever it fell out)
            **({"strong_labels_by_fate": _count([{fates[k]: 1} for k in strong if k in fates])} if fates else {}),
            "per_20_substantive_turns": round(20 * n / subst, 2) if subst else None,
            "duplicates": duplicates(listed),
            "kinds_agree": [sum(kinds), len(kinds)],
            # who said what was drafted (the user, the agent's text or reasoning, an error...):
            # proposals and how many match a label worth keeping, a total per source, no text
            "by_role": {r: [sum(1 for x in listed if x.get("role") == r),
                            sum(1 for x in listed if x.get("role") == r and x["good"])]
                        for r in sorted({x.get("role") or "?" for x in listed})}}


def duplicates(listed: list) -> int:
    """Pairs of proposals of one session that say the same thing: the same label, or alike."""
    from recalld.capture import policies

    n = 0
    by_session: dict = {}
    for x in listed:
        by_session.setdefault((x["file"], x["session"]), []).append(x)
    for xs in by_session.values():
        for i, a in enumerate(xs):
            for b in xs[i + 1:]:
                same_label = a["label_index"] is not None and a["label_index"] == b["label_index"]
                n += same_label or policies.similarity(a["text"], b["text"]) >= DUPLICATE
    return n


def group_of(name: str) -> str:
    """The source project of a shared transcript: the name before its first '-'."""
    return name.split("-", 1)[0]


def _r(x):
    return None if x is None else round(x, 2)


def _count(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    from recalld.bench.run import main_one

    sys.exit(main_one("capture", options=((("--labels",), {"dest": "labels", "help": "labels JSON file"}),
                                          (("--curve",), {"dest": "curve", "action": "store_true",
                                                          "help": "also run the proposer at the CURVE settings"}))))

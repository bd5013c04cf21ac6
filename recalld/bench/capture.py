"""Capture against labels: do the proposer's drafts say what a person marked worth remembering?

    recalld bench capture [--data DIR] [--labels FILE] [--json]

The proposer runs the way the daemon runs it, one pass per turn (the events since the previous
turn end; a finished session's last turn too, as `propose --history` reads it), with the real embedded model, in a fresh RECALLD_HOME, over every
transcript the labels say were read (default: the shared data folder's data/transcripts/claude-code with
benchmarks/capture_labels.json; any other directory of Claude Code or Codex transcripts with a
labels file of the same shape works). A labels file lists, per transcript, the statements a
reader marked worth remembering: {file, line, uuid, also: [other lines saying the same],
statement}.

A stored proposal matches a label of its transcript when it quotes the statement (rapidfuzz
similarity of the two, word order ignored, >= MATCH) and was said on one of the label's lines,
or when the two are near-identical (>= MATCH_ANYWHERE) wherever it was said. Figures:

- proposals per turn and per substantive turn (a turn with a request and at least
  SUBSTANTIVE statements), good (label-matched) proposals per substantive turn (target >= 1/3);
- precision: matched proposals / proposals (target >= 0.6); recall: labels matched by at least
  one proposal / labels (target >= 0.5); both also for cue ranking without the model;
- ungrounded words: content words of stored proposals that their turn never says (must be 0);
- failed passes: outcome error or timeout (must be 0);
- seconds per pass (p50 target <= 10 on 2 cores) and model seconds per pass; sessions per
  minute over the whole set (parse, mine, judge, store: what `propose --history` does);
- the same precision and recall per group of transcripts (the source project, spotter-* vs
  viewer-*): the held-out check, a change derived from one group is judged on the other;
- the model's separation: AUC of its log-odds, and of the cue score, for judged candidates that
  match a label against those that do not.

Every stored proposal is listed (file, line, matched label) so a reader can judge precision
by reading, not only by the labels (docs/capture.md reports such a reading).
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
SUBSTANTIVE = 5


def labels_path(labels=None) -> Path:
    if labels:
        return Path(labels)
    root = source_root()
    p = root / "benchmarks" / "capture_labels.json" if root else None
    if p is None or not p.exists():
        raise Unavailable("no capture labels (benchmarks/capture_labels.json in a source checkout; pass --labels)")
    return p


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


def run(quick: bool = False, data=None, labels=None) -> dict:
    spec = json.loads(labels_path(labels).read_text(encoding="utf-8"))
    tdir = Path(data) if data else transcripts_dir()
    files = [tdir / n for n in spec.get("read") or []] or sorted(tdir.glob("*.jsonl"))
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise Unavailable(f"labelled transcripts not found: {', '.join(missing[:3])}")
    by_file: dict = {}
    for lab in spec["labels"]:
        by_file.setdefault(lab["file"], []).append(lab)
    from recalld.model import runtime as llm
    from recalld.model.errors import Unavailable as NoModel

    try:
        rt = llm.require_runtime("proposer", {"models": {}})
    except NoModel as e:
        raise Unavailable(f"no proposer model: {e}") from None
    if quick:
        files = files[:3]
    with_model = _variant(files, by_file, rt)
    cues_only = _variant(files, by_file, False)
    out = {"model": rt.name, "machine": f"{os.cpu_count()} CPUs, llama.cpp threads={rt.n_threads}",
           "labels": sum(len(by_file.get(f.name, [])) for f in files), "transcripts": len(files),
           **with_model["figures"],
           "cues_only": {k: cues_only["figures"][k] for k in ("proposals", "precision", "recall",
                                                              "good_per_substantive_turn", "pass_s",
                                                              "sessions_per_minute", "groups")},
           "proposals_listed": with_model["listed"],
           "targets": {"good_per_substantive_turn": ">= 0.333", "precision": ">= 0.6", "recall": ">= 0.5",
                       "ungrounded_words": "0", "failed_passes": "0", "pass_s_p50": "<= 10"}}
    out["notes"] = [
        "One pass per turn, as the daemon runs it (a finished session's last turn too, as --history "
        "reads it); a fresh RECALLD_HOME per variant, so a proposal already pending suppresses a "
        "near-duplicate in a later turn, as it would live.",
        "cues_only: the same passes ranked without the model (runtime=False).",
    ]
    return out


def _variant(files: list, by_file: dict, runtime) -> dict:
    from recalld.capture import mine, policies, proposer

    import time

    old_home = os.environ.get("RECALLD_HOME")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RECALLD_HOME"] = str(Path(tmp) / "home")
        try:
            turns = substantive = 0
            results, listed, matched_labels, rejected_labels = [], [], set(), {}
            judged_pos, judged_neg, cue_pos, cue_neg = [], [], [], []
            ungrounded, model_s = 0, []
            for f in files:
                labels = by_file.get(f.name, [])
                for turn in turns_of(f):
                    if not turn:
                        continue
                    turns += 1
                    mined = mine.mine(turn)
                    if mined.requests or any(e.kind == "prompt" for e in turn):
                        substantive += mined.statements >= SUBSTANTIVE
                    res = proposer.run_pass(str(f), session=turn[0].session, events=turn, origin="bench",
                                            runtime=runtime)
                    results.append(res)
                    if res.judged:
                        model_s.append(res.model_ms / 1000)
                    for sp in res.ranked:
                        hit = match(sp.text, {sp.line, sp.line_to or sp.line}, labels) is not None
                        (cue_pos if hit else cue_neg).append(sp.score)
                        if sp.model is not None:
                            (judged_pos if hit else judged_neg).append(sp.model)
                    for d, reason in res.rejected:
                        lab = match(d.text, {d.line, d.line_to or d.line}, labels)
                        if lab is not None:
                            rejected_labels.setdefault((f.name, lab), reason)
                    for pid, d in zip(res.stored_ids, res.kept):
                        lab = match(d.text, {d.line, d.line_to or d.line}, labels)
                        if lab is not None:
                            matched_labels.add((f.name, lab))
                        words = [w for w in policies._content_words(d.text)
                                 if w not in set(policies._WORD.findall(mined.text.lower()))]
                        ungrounded += len(words)
                        listed.append({"file": f.name, "group": group_of(f.name), "line": d.line, "line_to": d.line_to, "kind": d.kind,
                                       "text": d.text, "confidence": d.confidence,
                                       "label": None if lab is None else labels[lab]["statement"][:80],
                                       "ungrounded": words})
        finally:
            restore_home(old_home)
    wall = time.perf_counter() - t0
    n_labels = sum(len(by_file.get(f.name, [])) for f in files)
    proposals = len(listed)
    good = sum(1 for x in listed if x["label"] is not None)
    secs = [r.duration_ms / 1000 for r in results]
    failed = [r.error for r in results if r.outcome in ("error", "timeout")]
    figures = {
        "turns": turns, "substantive_turns": substantive, "passes": len(results),
        "proposals": proposals, "good_proposals": good,
        "proposals_per_turn": round(proposals / turns, 3) if turns else None,
        "good_per_substantive_turn": round(good / substantive, 3) if substantive else None,
        "precision": round(good / proposals, 3) if proposals else None,
        "recall": round(len(matched_labels) / n_labels, 3) if n_labels else None,
        "labels_matched": len(matched_labels),
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
        "rejections_by_reason": _count(r.rejections for r in results),
    }
    figures["groups"] = _groups(files, by_file, listed, matched_labels)
    # Why each missed label was missed: a draft of it was rejected (the reason), or it was never
    # a draft (not mined as a candidate, or not among the best of its chunk).
    figures["labels_missed"] = [
        {"file": f.name, "line": lab["line"], "statement": lab["statement"][:100],
         "why": rejected_labels.get((f.name, i), "not drafted")}
        for f in files for i, lab in enumerate(by_file.get(f.name, [])) if (f.name, i) not in matched_labels]
    return {"figures": figures, "listed": listed}


def group_of(name: str) -> str:
    """The held-out unit: transcripts of one source project (the name before its first '-',
    spotter-* vs viewer-*). Every threshold was read off both groups together; a change derived
    from one group is checked on the other (docs/capture.md says which helped where)."""
    return name.split("-", 1)[0]


def _groups(files: list, by_file: dict, listed: list, matched_labels: set) -> dict:
    out: dict = {}
    for f in files:
        g = out.setdefault(group_of(f.name), {"transcripts": 0, "labels": 0, "labels_matched": 0,
                                              "proposals": 0, "good_proposals": 0})
        g["transcripts"] += 1
        g["labels"] += len(by_file.get(f.name, []))
        g["labels_matched"] += sum(1 for name, _ in matched_labels if name == f.name)
    for x in listed:
        g = out[x["group"]]
        g["proposals"] += 1
        g["good_proposals"] += x["label"] is not None
    for g in out.values():
        g["precision"] = round(g["good_proposals"] / g["proposals"], 3) if g["proposals"] else None
        g["recall"] = round(g["labels_matched"] / g["labels"], 3) if g["labels"] else None
    return dict(sorted(out.items()))


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

    sys.exit(main_one("capture", options=((("--labels",), {"dest": "labels", "help": "labels JSON file"}),)))
